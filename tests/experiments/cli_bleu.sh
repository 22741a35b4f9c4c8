#!/usr/bin/env bash
# `clformer bleu REF... < HYP` on sacreBLEU's README example (two reference files), its three
# published scores, and the refusals (exit 2) of input it cannot score. No device needed.
bin=$1
source "$(dirname "${BASH_SOURCE[0]}")/../lib/cli.sh"
cd "$tmp"
printf '%s\n' 'The dog bit the man.' "It wasn't surprising." 'The man had just bitten him.' > hyp.txt
printf '%s\n' 'The dog bit the man.' 'It was not unexpected.' 'The man bit him first.' > ref1.txt
printf '%s\n' 'The dog had bit the man.' 'No one was surprised.' 'The man had bitten the dog.' > ref2.txt

want='BLEU|nrefs:2|case:mixed|eff:no|tok:13a|smooth:exp = 48.53 82.4/50.0/45.5/37.5 (BP = 0.943 ratio = 0.944 hyp_len = 17 ref_len = 18)'
out=$("$bin" bleu ref1.txt ref2.txt < hyp.txt 2>&1); rc=$?
[[ $rc -eq 0 && "$out" == "$want" ]] && ok "README example: $out" || bad "README example: rc=$rc '$out'"
for case in "13a 48.530827" "none 49.191957" "intl 43.916235"; do
  set -- $case
  out=$("$bin" bleu ref1.txt ref2.txt --tokenize "$1" --score-only < hyp.txt 2>&1)
  [[ "$out" == "$2" ]] && ok "--tokenize $1: $out (sacreBLEU's test: $2)" || bad "--tokenize $1: '$out', want $2"
done
# Windows line ends and a missing final newline change nothing (sacreBLEU strips trailing whitespace).
sed 's/$/\r/' ref1.txt | head -c -1 > ref1crlf.txt
out=$("$bin" bleu ref1crlf.txt ref2.txt -b < hyp.txt 2>&1)
[[ "$out" == 48.530827 ]] && ok "CRLF and no final newline: $out" || bad "CRLF: '$out'"

refuse() {  # WHAT NEEDLE CMD...: exit 2 and a message containing NEEDLE
  local what=$1 needle=$2; shift 2
  local err; err=$("$@" 2>&1 >/dev/null); local rc=$?
  [[ $rc -eq 2 && "$err" == *"$needle"* ]] && ok "$what: exit 2, $err" || bad "$what: rc=$rc '$err'"
}
head -2 ref1.txt > short.txt
refuse "a reference with fewer lines" "short.txt has 2 lines but the hypotheses (standard input) have 3" \
  "$bin" bleu short.txt ref2.txt < hyp.txt
refuse "no reference" "a reference file is required" "$bin" bleu < hyp.txt
refuse "a missing reference" "cannot open nothere.txt" "$bin" bleu nothere.txt < hyp.txt
refuse "a directory as reference" "cannot read $tmp" "$bin" bleu "$tmp" < hyp.txt
refuse "an unknown tokenizer" "--tokenize 'zh' is not a tokenizer" "$bin" bleu ref1.txt --tokenize zh < hyp.txt
refuse "an unknown smoothing" "--smooth 'floor' is not a smoothing" "$bin" bleu ref1.txt --smooth floor < hyp.txt
refuse "--tokenize without a value" "needs a value" "$bin" bleu ref1.txt --tokenize < hyp.txt
refuse "empty input" "no sentences to score" "$bin" bleu /dev/null < /dev/null
printf 'The dog bit the man.\nIt was \xe9 not.\nThe man bit him first.\n' > latin1.txt
refuse "a reference that is not UTF-8" "latin1.txt, line 2: the text is not valid UTF-8 (byte 8)" \
  "$bin" bleu ref1.txt latin1.txt < hyp.txt
refuse "a NUL byte" "standard input, line 1: contains a NUL byte" "$bin" bleu ref1.txt < <(printf 'a\0b\nc\nd\n')
out=$("$bin" bleu --help); rc=$?
[[ $rc -eq 0 && "$out" == *"--tokenize"* ]] && ok "--help" || bad "--help rc=$rc"
"$bin" --help | grep -q "^  bleu " && ok "listed in clformer --help" || bad "bleu missing from clformer --help"
exit $fail
