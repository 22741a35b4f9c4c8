#!/usr/bin/env bash
# `clformer translate` and `clformer eval-bleu` on a tiny encoder-decoder trained here to copy
# sentences over a 16-word vocabulary (1 + 1 blocks, d_model 32, 1,000 steps: a few seconds): the
# translations come a line an input line in order, greedy decoding copies most test sentences, BLEU is
# high after training and near 0 after one step, the JSON report parses and agrees with `clformer
# bleu`, and the refusals (exit 2): a language model's run, no bpe.merges beside the checkpoint, bad
# options, a beam the model cannot hold, a config without data.test. And a resumed run equals a straight one.
bin=$1
source "$(dirname "${BASH_SOURCE[0]}")/../lib/cli.sh"
require_opencl
cd "$tmp"

# The corpus: 3 to 6 words a sentence, the target the source (copying learns in a few hundred steps).
toy_pairs copy train=600 valid=50 test=100
cat > copy.yaml <<'YAML'
seed: 3
data: {train: train, valid: valid, test: test, source_lang: src, target_lang: tgt, tokenizer: bpe, vocab_size: 300,
       max_tokens: 512, max_len: 16}
model: {arch: encoder_decoder, norm: pre, encoder_layers: 1, layers: 1, d_model: 32, heads: 2, d_ff: 64, dropout: 0.0,
        tie_embeddings: true}
optim: {lr: 3e-3}
schedule: {warmup: 0, decay: constant}
train: {steps: 1000, eval_every: 500, eval_batches: 2, log_every: 100, checkpoint_every: 1000, out: run}
YAML
# the config by its full path: data prefixes (train, test: no such files) are resolved against its directory
out=$("$bin" train "$tmp/copy.yaml" --quiet 2>&1); rc=$?
[[ $rc -eq 0 && -s run/checkpoint.safetensors && -s run/bpe.merges ]] && ok "trained the copy model" \
  || { bad "train: rc=$rc $out"; exit 1; }
# one step, and no data.test: the untrained baseline (scored on valid) and the missing test set
"$bin" train "$tmp/copy.yaml" --set train.steps=1 --set train.checkpoint_every=1 --set train.eval_every=1 \
  --set data.test= --set train.out=step1 --quiet >/dev/null 2>&1 || bad "train step1"

# translate: a line each, in order (batches are sorted by length inside), copies of the sources
"$bin" translate run --beam 1 < test.src > greedy.txt 2> err.txt; rc=$?
same=$(paste -d '\t' greedy.txt test.tgt | awk -F '\t' '$1 == $2' | wc -l)
[[ $rc -eq 0 && $(wc -l < greedy.txt) -eq 100 ]] && ok "translate: 100 lines in, 100 out" \
  || bad "translate: rc=$rc, $(wc -l < greedy.txt) lines: $(cat err.txt)"
[[ $same -ge 70 ]] && ok "greedy decoding copies $same of 100 test sentences exactly" || bad "greedy copies only $same of 100"
[[ "$(cat err.txt)" == *"100 sentences in "*" a second), beam 1"* ]] && ok "speed on stderr: $(cat err.txt)" \
  || bad "stderr: $(cat err.txt)"
"$bin" translate run < test.src > beam5.txt 2>/dev/null
same5=$(paste -d '\t' beam5.txt test.tgt | awk -F '\t' '$1 == $2' | wc -l)
[[ $(wc -l < beam5.txt) -eq 100 && $same5 -ge 70 ]] && ok "beam 5 (the default) copies $same5 of 100" \
  || bad "beam 5: $(wc -l < beam5.txt) lines, $same5 copied"
# a sentence alone gets what it got among the others; an empty line, a CRLF line and one cut to max_len keep their places
head -7 test.src | tail -1 > one.txt
[[ "$("$bin" translate run --beam 1 < one.txt 2>/dev/null)" == "$(sed -n 7p greedy.txt)" ]] \
  && ok "a sentence alone: the same translation" || bad "alone: '$("$bin" translate run --beam 1 < one.txt 2>&1)'"
long=$(for i in $(seq 20); do printf 'red cat '; done)
{ sed -n 1p test.src; echo; sed -n 2p test.src | sed 's/$/\r/'; echo "$long"; sed -n 3p test.src; } > mixed.txt
"$bin" translate run/checkpoint.safetensors --beam 1 < mixed.txt > mixed.out 2> err.txt; rc=$?
[[ $rc -eq 0 && $(wc -l < mixed.out) -eq 5 && "$(sed -n '1p;3p;5p' mixed.out)" == "$(head -3 greedy.txt)" ]] \
  && ok "a checkpoint path; between an empty, a long and a CRLF line, sentences get what they got before" \
  || bad "mixed: rc=$rc $(cat mixed.out) $(cat err.txt)"
[[ "$(cat err.txt)" == *"1 of 5 sentences were longer than 15 tokens (data.max_len - 1) and were cut"* ]] \
  && ok "the cut sentence counted on stderr" || bad "no note of the cut: $(cat err.txt)"
out=$("$bin" translate run < /dev/null 2>&1); rc=$?
[[ $rc -eq 0 && -z "$out" ]] && ok "empty input: nothing, exit 0" || bad "empty input: rc=$rc '$out'"

# eval-bleu: trained against one step, the JSON report, and the score `clformer bleu` gives the same text
line=$("$bin" eval-bleu run --beam 1 2>/dev/null); rc=$?
after=$(sed -n 's/^BLEU|nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp = \([0-9.]*\) .*/\1/p' <<< "$line")
[[ $rc -eq 0 && -n "$after" && "$line" == *"test: 100 sentences, beam 1, lenpen 1, in "* ]] \
  && ok "eval-bleu: $(tr '\n' ' ' <<< "$line")" || bad "eval-bleu: rc=$rc '$line'"
before=$("$bin" eval-bleu step1 --split valid --beam 1 2>/dev/null | sed -n 's/^BLEU|[^=]* = \([0-9.]*\) .*/\1/p')
awk -v a="${after:-0}" -v b="${before:-100}" 'BEGIN { exit !(a > 50 && b < 10) }' \
  && ok "BLEU $after after 1,000 steps (> 50), $before after one (< 10)" || bad "BLEU after '$after', before '$before'"
json=$("$bin" eval-bleu run --beam 1 --limit 40 --json 2>/dev/null); rc=$?
want=$(head -40 greedy.txt | "$bin" bleu <(head -40 test.tgt) -b)
python3 -c '
import json, sys
j = json.loads(sys.argv[1])
assert j["sentences"] == 40 and j["beam"] == 1 and j["split"] == "test" and j["step"] == 1000, j
assert j["signature"] == "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp" and len(j["precisions"]) == 4, j
assert abs(j["bleu"] - float(sys.argv[2])) < 1e-3, (j["bleu"], sys.argv[2])
assert j["seconds"] > 0 and j["hyp_len"] > 0' "$json" "$want" 2>&1 && [[ $rc -eq 0 ]] \
  && ok "eval-bleu --limit 40 --json parses; its BLEU is clformer bleu's of translate's output ($want)" \
  || bad "eval-bleu --json: rc=$rc '$json' (clformer bleu: $want)"
(cd / && "$bin" eval-bleu "$tmp/run" --split valid --beam 2 >/dev/null 2>&1) \
  && ok "eval-bleu --split valid from another directory" || bad "eval-bleu from /"

# refusals
refuse() {  # WHAT NEEDLE CMD...: exit 2, nothing on stdout, and a message containing NEEDLE
  local what=$1 needle=$2; shift 2
  local err; err=$("$@" 2>&1 >out.txt < test.src); local rc=$?
  [[ $rc -eq 2 && ! -s out.txt && "$err" == *"$needle"* ]] && ok "$what: exit 2, ${err%%$'\n'*}" \
    || bad "$what: rc=$rc '$err' $(head -c 200 out.txt)"
}
printf 'seed: 1\ndata: {train: train.src, seq_len: 16, batch_size: 2}\nmodel: {layers: 1, d_model: 16, heads: 2, d_ff: 32}\n'\
'train: {steps: 2, eval_every: 2, eval_batches: 1, checkpoint_every: 2, out: lm}\n' > lm.yaml
"$bin" train "$tmp/lm.yaml" --quiet >/dev/null 2>&1 || bad "train lm"
refuse "a language model's run" "is a language model's checkpoint (model.arch decoder)" "$bin" translate lm
refuse "eval-bleu of a language model" "is a language model's checkpoint" "$bin" eval-bleu lm
mkdir alone && cp run/checkpoint.safetensors alone/
refuse "no bpe.merges beside the checkpoint" "no bpe.merges beside alone/checkpoint.safetensors" \
  "$bin" translate alone/checkpoint.safetensors
refuse "a run directory without bpe.merges" "no bpe.merges beside" "$bin" eval-bleu alone
# another vocabulary beside the checkpoint: translate, eval-bleu and a resume refuse it (its checksum is recorded)
mkdir other && cp run/checkpoint.safetensors run/config.yaml other/
"$bin" bpe learn --vocab 280 --out other/bpe.merges train.src >/dev/null 2>&1 || bad "bpe learn"
refuse "another run's vocabulary" "is not the vocabulary other/checkpoint.safetensors was trained with" \
  "$bin" translate other
refuse "eval-bleu with another vocabulary" "is not the vocabulary" "$bin" eval-bleu other
err=$("$bin" train "$tmp/copy.yaml" --resume other --set train.steps=1100 2>&1 >/dev/null); rc=$?
[[ $rc -eq 2 && "$err" == *"is not the vocabulary"*"put the run's own bpe.merges back"* ]] \
  && ok "a resume with another vocabulary: exit 2" || bad "resume with another vocabulary: rc=$rc $err"
refuse "not a run" "has no checkpoint.safetensors" "$bin" translate "$tmp"
refuse "no such path" "nothere: No such file or directory" "$bin" translate nothere
refuse "no run" "RUN_DIR_OR_CHECKPOINT is required" "$bin" translate
refuse "beam 0" "--beam '0' is not valid" "$bin" translate run --beam 0
refuse "a beam the model cannot hold" "a beam of 33 x 16 tokens is more than the 512 tokens the model holds" \
  "$bin" translate run --beam 33
refuse "a bad --lenpen" "--lenpen 'x' is not valid" "$bin" translate run --lenpen x
refuse "--beam without a value" "option --beam needs a value" "$bin" translate run --beam
refuse "eval-bleu's options are not translate's" "unexpected argument '--json'" "$bin" translate run --json
refuse "an unknown split" "--split 'train' is not a split: test or valid" "$bin" eval-bleu run --split train
refuse "a config without data.test" "config has no data.test" "$bin" eval-bleu step1
refuse "a bad --limit" "--limit '-1' is not valid" "$bin" eval-bleu run --limit -1
# a resumed encoder-decoder run is the run it continues: 2 x 30 steps equal 60 (dropout on, across an
# epoch of 11 batches, so five epochs), the metrics rows and the final weights and moments, bit for bit
common=(--set model.dropout=0.1 --set model.attn_dropout=0.1 --set train.eval_every=30 --set train.log_every=10
        --set train.checkpoint_every=30 --set data.test= --quiet)
"$bin" train "$tmp/copy.yaml" "${common[@]}" --set train.steps=60 --set train.out=straight >/dev/null 2>&1
"$bin" train "$tmp/copy.yaml" "${common[@]}" --set train.steps=30 --set train.out=halves >/dev/null 2>&1
"$bin" train "$tmp/copy.yaml" "${common[@]}" --set train.steps=60 --resume halves >/dev/null 2>&1
python3 - "$tmp" <<'PY' && ok "a resumed run (30 + 30 steps, dropout on) equals a straight one of 60" || bad "resume differs"
import json, struct, sys
def tensors(p):
    b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n]); h.pop("__metadata__", None)
    return {k: b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]] for k, v in h.items()}
rows = lambda d: [l.split(",")[:5] for l in open(f"{sys.argv[1]}/{d}/metrics.csv").read().split("\n")[1:] if l]
a, b = tensors(f"{sys.argv[1]}/straight/checkpoint.safetensors"), tensors(f"{sys.argv[1]}/halves/checkpoint.safetensors")
sys.exit(not (a == b and rows("straight") == rows("halves") and len(rows("straight")) == 6))
PY
"$bin" --help | grep -q '^  translate ' && "$bin" --help | grep -q '^  eval-bleu ' \
  && ok "clformer --help lists translate and eval-bleu" || bad "--help: $("$bin" --help)"
exit $fail
