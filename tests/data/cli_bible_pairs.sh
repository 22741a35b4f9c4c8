#!/usr/bin/env bash
# tools/bible_pairs.py builds the Spanish -> English verse pairs from Debian's SWORD modules: the counts
# it prints are the files' lines, a known verse lies on the same line of both languages, no verse is
# in two splits (nor a book), no markup is left, and chapters numbered otherwise are left out.
# Skipped (77) without diatheke and the two modules (tools/setup.sh installs them).
bin=$1; src=$2
source "$(dirname "${BASH_SOURCE[0]}")/../lib/cli.sh"
command -v diatheke >/dev/null || { echo "SKIP: diatheke missing (apt-get install diatheke)"; exit 77; }
mods=$(diatheke -b system -k modulelist 2>/dev/null)
[[ "$mods" == *"Reina Valera 1909"* && "$mods" == *"King James Version"* ]] \
  || { echo "SKIP: SWORD modules missing (apt-get install sword-text-sparv sword-text-kjv)"; exit 77; }

out=$(python3 "$src/tools/bible_pairs.py" "$tmp/bp" 2>&1); rc=$?
[[ $rc -eq 0 ]] && ok "bible_pairs.py: $out" || { bad "bible_pairs.py rc=$rc: $out"; exit 1; }
cd "$tmp/bp"
re='train ([0-9]+), valid ([0-9]+), test ([0-9]+) verse pairs'
if [[ "$out" =~ $re ]]; then
  declare -A want=([train]=${BASH_REMATCH[1]} [valid]=${BASH_REMATCH[2]} [test]=${BASH_REMATCH[3]})
  for s in train valid test; do
    n=(); for ext in es en ref; do n+=("$(wc -l < $s.$ext)"); done
    [[ "${n[*]}" == "${want[$s]} ${want[$s]} ${want[$s]}" ]] && ok "$s: ${want[$s]} lines in .es, .en and .ref" \
      || bad "$s: counts line says ${want[$s]}, files have ${n[*]}"
  done
  total=$((want[train] + want[valid] + want[test]))
  # the Bible has 31,102 verses; a few hundred fall in chapters the RV1909 numbers otherwise
  ((total > 30000 && total <= 31102 && want[valid] > 500 && want[test] > 500)) && ok "$total pairs in all" \
    || bad "implausible counts: $out"
else
  bad "no counts line: $out"
fi

line_of() { grep -n -x -m1 "$2" "$1.ref" | cut -d: -f1; }
check_verse() {  # SPLIT REF SPANISH_START ENGLISH_START
  local n; n=$(line_of "$1" "$2")
  if [[ -z $n ]]; then bad "$2 not in $1"; return; fi
  local es en; es=$(sed -n "${n}p" "$1.es"); en=$(sed -n "${n}p" "$1.en")
  [[ "$es" == "$3"* && "$en" == "$4"* ]] && ok "$2 is line $n of $1.es and $1.en" || bad "$2 (line $n): '$es' | '$en'"
}
check_verse test "John 3:16" "Porque de tal manera amó Dios al mundo" "For God so loved the world"
check_verse train "Genesis 1:1" "EN el principio crió Dios los cielos" "In the beginning God created"
check_verse train "Psalms 3:1" "Salmo de David, cuando huía" "A Psalm of David, when he fled"  # title with verse 1
check_verse train "Psalms 3:2" "Muchos dicen de mi vida" "Many there be which say"          # and only there
check_verse valid "Hebrews 1:1" "DIOS, habiendo hablado muchas veces" "God, who at sundry times"
[[ -z $(line_of test "Jonah 2:1") && -n $(line_of test "Jonah 3:1") ]] \
  && ok "Jonah 1-2 left out (Spanish Jonah 2:1 is KJV 1:17), Jonah 3 kept" || bad "Jonah's chapters"

dups=$(cat train.ref valid.ref test.ref | sort | uniq -d | head -3)
[[ -z $dups ]] && ok "no verse in two splits (or twice in one)" || bad "repeated verses: $dups"
books() { sed -E 's/ [0-9]+:[0-9]+$//' "$1.ref" | sort -u; }
shared=$(cat <(books train) <(books valid) <(books test) | sort | uniq -d)
[[ -z $shared ]] && ok "no book in two splits; held out: $(books valid | paste -sd,) | $(books test | paste -sd,)" \
  || bad "books in two splits: $shared"
markup=$(grep -n -m3 -E '[<>{}¶]|&[a-z]+;|\[|\]' train.* valid.* test.* | head -3)
[[ -z $markup ]] && ok "no markup (Strong's numbers, tags, entities, pilcrows)" || bad "markup left: $markup"
empty=$(grep -c -E '^\s*$' train.es train.en valid.es valid.en test.es test.en | grep -v ':0$')
[[ -z $empty ]] && ok "no empty line" || bad "empty lines: $empty"

err=$(python3 "$src/tools/bible_pairs.py" 2>&1); rc=$?
[[ $rc -eq 2 && "$err" == *"usage"* ]] && ok "no OUT_DIR: exit 2" || bad "no OUT_DIR: rc=$rc $err"
exit $fail
