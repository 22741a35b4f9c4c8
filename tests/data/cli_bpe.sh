#!/usr/bin/env bash
# clformer bpe: learn writes a merges file (the same one twice, an existing one never replaced without
# --force), encode | decode gives back any input byte for byte, the merges compress text, and bad input
# (a corrupt merges file, a token id outside the vocabulary, bad options) exits 2 naming what is wrong.
# With diatheke and the two SWORD modules (tools/setup.sh installs them), it learns from Bible books in
# both languages (read by tools/bible_pairs.py's own functions) and encodes a held-out book; without
# them, from text it makes.
bin=$1; src=$2
source "$(dirname "${BASH_SOURCE[0]}")/../lib/cli.sh"
cd "$tmp"

bible=0
if command -v diatheke >/dev/null && python3 - "$src/tools" <<'PY' 2>/dev/null
import sys
sys.path.insert(0, sys.argv[1])
import bible_pairs as bp
mods = bp.find_modules()
for name, books in (("train", ["Genesis", "Matthew", "Romans"]), ("heldout", ["John"])):
    for lang in ("es", "en"):
        with open(f"{name}.{lang}", "w", encoding="utf-8") as f:
            for book in books:
                verses = bp.read_book(mods[lang], book, False)
                f.writelines(verses[k] + "\n" for k in sorted(verses))
PY
then bible=1; ok "Bible text: $(wc -l < train.es) Spanish and $(wc -l < train.en) English verses, John held out"
else
  echo "note: diatheke or the SWORD modules missing: learning from made-up text instead"
  python3 - <<'PY'
import random
r = random.Random(1)
words = "el la tierra Dios cielos luz aguas día noche the earth God heaven light waters day night".split()
for name, n in (("train", 3000), ("heldout", 300)):
    for lang in ("es", "en"):
        with open(f"{name}.{lang}", "w", encoding="utf-8") as f:
            for _ in range(n):
                f.write(" ".join(r.choice(words) for _ in range(r.randint(1, 30))) + ".\n")
PY
fi

out=$("$bin" bpe learn --vocab 4000 --out m.bpe train.es train.en 2>&1); rc=$?
re='learned ([0-9]+) merges'
[[ $rc -eq 0 && "$out" =~ $re ]] && n=${BASH_REMATCH[1]} && ok "learn: ${out%%$'\n'*}" || { bad "learn rc=$rc: $out"; exit 1; }
((bible == 0 || n == 3741)) && ok "$n merges" || bad "$n merges from the Bible books, not 4000 - 259"
[[ $(sed -n 1,2p m.bpe | paste -sd' ') == "clformer-bpe 1 merges $n" && $(tail -1 m.bpe) =~ ^end\ [0-9a-f]{16}$ &&
   $(wc -l < m.bpe) -eq $((n + 3)) ]] && ok "m.bpe: header, $n merges, checksum line" || bad "m.bpe: $(head -2 m.bpe)"
"$bin" bpe learn --vocab 4000 --out m2.bpe train.es train.en >/dev/null 2>&1
cmp -s m.bpe m2.bpe && ok "learning twice writes the same file" || bad "two learns differ"
sum=$(md5sum < m2.bpe)
err=$("$bin" bpe learn --vocab 300 --out m2.bpe train.en 2>&1); rc=$?
[[ $rc -eq 2 && "$err" == *"m2.bpe exists"*"--force"* && $(md5sum < m2.bpe) == "$sum" ]] \
  && ok "an existing --out is refused and left as it was" || bad "existing --out: rc=$rc $err"
"$bin" bpe learn --vocab 300 --out m2.bpe --force train.en >/dev/null 2>&1 && [[ $(sed -n 2p m2.bpe) == "merges 41" ]] \
  && ok "--force replaces it" || bad "--force: $(sed -n 2p m2.bpe)"

for f in train.es train.en heldout.es heldout.en; do
  "$bin" bpe encode --merges m.bpe < $f > $f.ids && "$bin" bpe decode --merges m.bpe < $f.ids > $f.back
  cmp -s $f $f.back && ok "$f: encode | decode gives it back, $(wc -l < $f) lines" || bad "$f: the round trip differs"
done
tokens=$(cat heldout.es.ids heldout.en.ids | wc -w); bytes=$(cat heldout.es heldout.en | wc -c); lines=$(wc -l < heldout.es)
((bytes > 3 * tokens)) && ok "held out: $tokens tokens for $bytes bytes ($((tokens / (2 * lines))) tokens a sentence)" \
  || bad "held out: $tokens tokens for $bytes bytes: the merges hardly compress"
head -c 30000 /dev/urandom > random.bin; echo >> random.bin
"$bin" bpe encode --merges m.bpe < random.bin | "$bin" bpe decode --merges m.bpe > random.back
cmp -s random.bin random.back && ok "random bytes (NULs, invalid UTF-8) round-trip" || bad "random bytes changed"
[[ $(printf 'x\ny' | "$bin" bpe encode --merges m.bpe | wc -l) -eq 2 ]] && ok "a last line without newline is encoded" \
  || bad "the last line"

expect() {  # WANT_RC TEXT_IN_STDERR WHAT COMMAND...
  local want=$1 text=$2 what=$3; shift 3
  local err; err=$("$@" 2>&1 >/dev/null); local rc=$?
  [[ $rc -eq $want && "$err" == *"$text"* ]] && ok "$what: exit $rc" || bad "$what: rc=$rc (want $want): $err"
}
head -n 10 m.bpe > truncated.bpe
expect 2 "truncated.bpe: ends after line 10 with 8 of the $n merges" "a truncated merges file" \
  "$bin" bpe encode --merges truncated.bpe < /dev/null
sed '5s/.*/259 5000/' m.bpe > corrupt.bpe
expect 2 "corrupt.bpe:5: merge 3 joins an id not yet defined" "an id not yet defined" \
  "$bin" bpe encode --merges corrupt.bpe < /dev/null
sed "$((n + 2))s/.*/3 3/" m.bpe > flipped.bpe  # the last merge now joins two NUL bytes: well formed, but changed
expect 2 "checksum" "a changed merge (the checksum)" "$bin" bpe decode --merges flipped.bpe < /dev/null
expect 2 "not a clformer BPE merges file" "a file of another kind" "$bin" bpe encode --merges train.en < /dev/null
v=$((n + 259))
expect 2 "standard input, line 2, token 2: id $v is not in the vocabulary (0 .. $((v - 1)))" "an id outside the vocabulary" \
  "$bin" bpe decode --merges m.bpe < <(printf '5 6\n7 %d\n' $v)
expect 2 "line 1: 'x7' is not a token id" "a word that is no id" "$bin" bpe decode --merges m.bpe < <(echo "5 x7")
expect 2 "--merges FILE is required" "encode without --merges" "$bin" bpe encode
expect 2 "--vocab '100' is not valid" "--vocab below 259" "$bin" bpe learn --vocab 100 --out v.bpe train.en
expect 2 "cannot open nonexistent.txt" "a missing text file" "$bin" bpe learn --out v.bpe nonexistent.txt
expect 2 "unknown action 'frob'" "an unknown action" "$bin" bpe frob
[[ ! -e v.bpe ]] && ok "no merges file written by a refused learn" || bad "v.bpe written"
"$bin" bpe --help | grep -q "clformer bpe learn" && ok "bpe --help" || bad "bpe --help"
"$bin" --help | grep -q "^  bpe " && ok "clformer --help lists bpe" || bad "clformer --help lacks bpe"
exit $fail
