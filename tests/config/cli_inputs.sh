#!/usr/bin/env bash
# Hostile inputs, and `check` agreeing with `train`: FIFOs, devices, directories and oversized files
# as a config or as data are refused at once (exit 2 and a reason, never a hang); every data file
# `train` refuses, `check` refuses with the same message; experiment files are checked whole (every
# variant resolved, its data opened); every shipped config passes; messages say what to change.
bin=$1; src=$2
source "$(dirname "${BASH_SOURCE[0]}")/../lib/cli.sh"
cd "$tmp"
# name, expected text, command... : exit 2 within 10 s, the text in stderr
expect2() {
  local name=$1 want=$2; shift 2
  local err rc
  err=$(timeout 10 "$@" 2>&1 >/dev/null); rc=$?
  if [[ $rc -eq 2 && "$err" == *"$want"* ]]; then ok "$name"; else bad "$name: rc=$rc, message: $err (wanted: $want)"; fi
}
# name, unwanted text, command... : the text is not in stderr
expect_not() {
  local name=$1 unwanted=$2; shift 2
  local err
  err=$(timeout 10 "$@" 2>&1 >/dev/null)
  [[ "$err" != *"$unwanted"* ]] && ok "$name" || bad "$name: message: $err (should not say: $unwanted)"
}
head -c 4000 /dev/urandom | base64 > text.txt   # about 5.4 kB, enough for seq_len 64 and its 5% split
mkfifo fifo.yaml fifo.txt
printf 'data:\n  train: text.txt\nmodel: {layers: 2, d_model: 32, heads: 2, d_ff: 64}\n' > good.yaml

# --- 1. non-regular and unbounded inputs: refused, never a hang ---
expect2 "a FIFO as config (check)" "fifo.yaml: it is a FIFO" "$bin" check fifo.yaml
expect2 "a FIFO as config (train)" "fifo.yaml: it is a FIFO" "$bin" train fifo.yaml
expect2 "/dev/zero as config" "/dev/zero: it is a character device" "$bin" check /dev/zero
mkdir adir
expect2 "a directory as config" "adir: it is a directory, not a regular file" "$bin" check adir
{ cat good.yaml; head -c 2097152 /dev/zero | tr '\0' '#' | fold -w 100 | sed 's/^/# /'; } > big.yaml
expect2 "a 2 MiB config" "big.yaml: too large for a config file" "$bin" check big.yaml
expect2 "a 2 MiB comparison file" "big.yaml: too large for a config file" "$bin" compare big.yaml
expect2 "a FIFO as data.train" "data.train: cannot open" "$bin" check good.yaml --set data.train=fifo.txt
expect2 "a FIFO as data.valid" "data.valid: cannot open" "$bin" check good.yaml --set data.valid=fifo.txt

# --- 2. check refuses every data file train refuses, with train's own message ---
have_opencl=0
"$bin" devices >/dev/null 2>&1 && have_opencl=1
[[ $have_opencl -eq 1 ]] || echo "note: no OpenCL device: train's side of the data cases is skipped"
: > empty.txt
printf 'only a few bytes\n' > short.txt
n=0
for set in data.train=adir data.train=/dev/null data.train=/dev/zero data.train=empty.txt data.train=short.txt \
           data.train=fifo.txt data.valid=/tmp data.valid=short.txt; do
  n=$((n + 1))
  cerr=$(timeout 10 "$bin" check good.yaml --set "$set" 2>&1 >/dev/null); crc=$?
  [[ $crc -eq 2 && "$cerr" == *"clformer: error: "* ]] && ok "check refuses $set" || bad "check $set: rc=$crc $cerr"
  [[ $have_opencl -eq 1 ]] || continue
  terr=$(timeout 60 "$bin" train good.yaml --quiet --set "$set" --set train.out=run$n 2>&1 >/dev/null); trc=$?
  tline=$(grep 'clformer: error: ' <<<"$terr" | tail -1)
  [[ $trc -eq 2 && -n "$tline" && "$cerr" == *"$tline"* ]] && ok "train refuses $set with check's message" ||
    bad "train $set: rc=$trc, train said: $terr; check said: $cerr"
  [[ ! -e run$n ]] || bad "train $set created run$n"
done

# --- 3. messages ---
printf 'data:\n  train: text.txt\nmodel: [1, 2]\n' > model-list.yaml
printf 'data:\n  train: text.txt\nmodel: 3\n' > model-scalar.yaml
expect2 "a section holding a list" "model: expected a mapping of model.* keys" "$bin" check model-list.yaml
expect2 "a section holding a value" "model: expected a mapping of model.* keys" "$bin" check model-scalar.yaml
expect_not "no 'did you mean' itself" "did you mean 'model'" "$bin" check model-list.yaml
head -c 40 text.txt > tiny.txt
expect2 "a training split too small says so" "the training split" "$bin" check good.yaml --set data.train=tiny.txt
expect_not "a training split too small: not 'raise valid_fraction'" "raise data.valid_fraction" \
  "$bin" check good.yaml --set data.train=tiny.txt
head -c 400 text.txt > small.txt
expect2 "a validation split too small says what to raise" "raise data.valid_fraction" \
  "$bin" check good.yaml --set data.train=small.txt
printf 'data:\n  train: nosuch.txt\n' > nodata.yaml
expect2 "a missing training file is named with its config line" "nodata.yaml:2:10: data.train: cannot open 'nosuch.txt'" \
  "$bin" check nodata.yaml

cat > gn.yaml <<YAML
base:
  data: {train: text.txt, seq_len: 16, batch_size: 2}
  model: {d_model: 32, heads: 2, d_ff: 64}
depths: [1, 2]
seeds: 1
YAML
cat > cmp.yaml <<YAML
base:
  data: {train: text.txt, seq_len: 16, batch_size: 2}
  model: {layers: 1, d_model: 32, heads: 2, d_ff: 64}
variants:
  - {name: post, set: {model.norm: post}}
  - {name: pre, set: {model.norm: pre}}
YAML
expect2 "train on a gradnorm file names gradnorm" "belongs to a gradnorm file: run it with \`clformer gradnorm\`" \
  "$bin" train gn.yaml
expect2 "train on a comparison file names compare" "belongs to a comparison file: run it with \`clformer compare\`" \
  "$bin" train cmp.yaml

# --- experiment files: checked whole ---
out=$(timeout 10 "$bin" check cmp.yaml 2>&1); rc=$?
[[ $rc -eq 0 && "$out" == *"variant post"* && "$out" == *"variant pre"* && "$out" == *"norm: post"* ]] &&
  ok "check passes a comparison file, every variant resolved" || bad "check cmp.yaml: rc=$rc $out"
out=$(timeout 10 "$bin" check gn.yaml 2>&1); rc=$?
[[ $rc -eq 0 && "$out" == *"gradnorm"* ]] && ok "check passes a gradnorm file" || bad "check gn.yaml: rc=$rc $out"
sed 's/{name: pre, set: {model.norm: pre}}/{name: pre, set: {model.norm: pre, data.train: short.txt}}/' cmp.yaml > cmp-data.yaml
expect2 "a comparison variant's data is opened" "fewer than data.seq_len + 1" "$bin" check cmp-data.yaml
sed 's/{name: pre, set: {model.norm: pre}}/{name: pre, set: {model.heads: 3}}/' cmp.yaml > cmp-heads.yaml
expect2 "a comparison variant is validated" "3 heads do not divide" "$bin" check cmp-heads.yaml
expect2 "--set reaches a comparison's variants" "3 heads do not divide" "$bin" check cmp.yaml --set model.heads=3
sed 's/d_model: 32, heads: 2/d_model: 8192, heads: 2, layers: 1/; s/depths: \[1, 2\]/depths: [1, 4]/' gn.yaml > gn-deep.yaml
expect2 "every gradnorm depth is validated" "too large" "$bin" check gn-deep.yaml
expect2 "a gradnorm file's data is opened" "data.train: cannot open" "$bin" check gn.yaml --set data.train=adir
printf 'base:\n  data: {train: text.txt}\n' > base-only.yaml
expect2 "an experiment file without variants or depths" "base-only.yaml" "$bin" check base-only.yaml

# --- every shipped config passes check ---
if [[ -s "$src/build/data/kjv.txt" ]]; then
  for f in "$src"/configs/*.yaml; do
    out=$(timeout 60 "$bin" check "$f" 2>&1); rc=$?
    [[ $rc -eq 0 ]] && ok "check passes configs/${f##*/}" || bad "check configs/${f##*/}: rc=$rc $out"
  done
else
  echo "note: corpus missing (run tools/setup.sh): the shipped configs are not checked"
fi
left=$(ls | grep -v -e '\.yaml$' -e '\.txt$' -e '^adir$' || true)
[[ -z "$left" ]] && ok "nothing created" || bad "files created: $left"
exit $fail
