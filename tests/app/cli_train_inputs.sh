#!/usr/bin/env bash
# What `train` and `compare` do with the paths and data they are given (issue 16): a relative data path
# (in --set or in a config) means the same file at --resume as at the start, from any directory; a
# --set train.out that would move a resumed run is refused; data that cannot be used is said before any
# device work (train), and before the first variant trains (compare).
bin=$1; src=$2
source "$(dirname "${BASH_SOURCE[0]}")/../lib/cli.sh"
cd "$tmp"
sha() { sha256sum "$1" | cut -d' ' -f1; }
mkdir cfg other
for i in $(seq 100); do printf 'some training text\n'; done > small.txt
printf 'data: {train: ../small.txt, seq_len: 8}\nmodel: {layers: 1, d_model: 16, heads: 2, d_ff: 32}\n' > cfg/small.yaml

# --- data errors before the device: a device spec that matches nothing is never reached ---
err=$(timeout 10 "$bin" train cfg/small.yaml --set data.train=missing.txt --device no-such-device 2>&1); rc=$?
[[ $rc -eq 2 && "$err" == *"data.train: cannot open 'missing.txt'"* && "$err" != *"no-such-device"* ]] \
  && ok "train: a missing data file is said before the device is opened" || bad "train data first: rc=$rc $err"
err=$(timeout 10 "$bin" train cfg/small.yaml --set data.valid=cfg --device no-such-device 2>&1); rc=$?
[[ $rc -eq 2 && "$err" == *"data.valid: cannot open"*"directory"* && "$err" != *"no-such-device"* ]] \
  && ok "train: an unusable data.valid too" || bad "train valid first: rc=$rc $err"
cat > cmp.yaml <<'YAML'
base:
  data: {train: small.txt, seq_len: 8}
  model: {layers: 1, d_model: 16, heads: 2, d_ff: 32}
  train: {steps: 2, eval_batches: 1}
variants:
  - {name: first, set: {model.norm: pre}}
  - {name: second, set: {data.train: gone.txt}}
YAML
err=$(timeout 10 "$bin" compare cmp.yaml --out cmp-out --device no-such-device 2>&1); rc=$?
[[ $rc -eq 2 && "$err" == *"cannot open"*"gone.txt"* && "$err" != *"no-such-device"* && ! -e cmp-out/first ]] \
  && ok "compare: the last variant's missing data is said before the first variant trains" \
  || bad "compare data first: rc=$rc $(ls cmp-out 2>&1) $err"

# --- a --set data path is the working directory's, even for a comparison file elsewhere ---
mkdir sub && sed 's/train: small.txt/train: nowhere.txt/; s/data.train: gone.txt/model.norm: post/' cmp.yaml > sub/cmp.yaml
out=$(timeout 10 "$bin" check sub/cmp.yaml --set data.train=small.txt 2>&1); rc=$?
[[ $rc -eq 0 && "$out" == *"train: \"$PWD/small.txt\""* ]] \
  && ok "compare/check: --set data.train=RELATIVE is the working directory's for every variant" || bad "check sub/cmp.yaml: rc=$rc $out"

# --- resume: the same data from the run's saved config, from anywhere; train.out stays ---
require_opencl
require_corpus 300000 text.txt
tiny_config cfg/tiny.yaml
out=$("$bin" train cfg/tiny.yaml --set data.train=text.txt --set train.out=r1 --set train.steps=10 --quiet 2>&1); rc=$?
[[ $rc -eq 0 ]] || bad "first 10 steps: rc=$rc $out"
grep -q "train: \"$PWD/text.txt\"" r1/config.yaml && ok "the run's config.yaml holds the data path made absolute" \
  || bad "config.yaml data: $(grep 'train:' r1/config.yaml)"
before=$(sha r1/checkpoint.safetensors)
err=$("$bin" train --resume r1 --set train.steps=20 --set train.out=moved 2>&1); rc=$?
[[ $rc -eq 2 && "$err" == *"--set train.out=moved: train.out cannot be changed on resume"* && ! -e moved \
   && $(sha r1/checkpoint.safetensors) == "$before" && $(grep -c '^' r1/metrics.csv) -eq 3 ]] \
  && ok "--resume with --set train.out elsewhere: refused, exit 2, the run untouched" || bad "train.out on resume: rc=$rc $err"
out=$(cd other && "$bin" train --resume ../r1 --set train.steps=20 --set train.out=../r1/ --quiet 2>&1); rc=$?
[[ $rc -eq 0 && $(tail -1 r1/metrics.csv | cut -d, -f1) == 20 ]] \
  && ok "--resume from another directory finds the data given as --set data.train=RELATIVE (train.out naming the run itself is accepted)" \
  || bad "resume with relative data: rc=$rc $out"
grep -q "out: \"$PWD/r1\"" r1/config.yaml && ok "config.yaml's train.out names the run, absolute, after a resume" \
  || bad "config.yaml out: $(grep 'out:' r1/config.yaml)"
exit $fail
