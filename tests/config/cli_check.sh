#!/usr/bin/env bash
# `clformer check`: a good config resolves; every kind of bad input gives file:line:col, the key,
# exit code 2, and creates nothing.
bin=$1
source "$(dirname "${BASH_SOURCE[0]}")/../lib/cli.sh"
cd "$tmp"
expect_error() {  # name, expected text, command...
  local name=$1 want=$2; shift 2
  local err rc
  err=$("$@" 2>&1 >/dev/null); rc=$?
  if [[ $rc -eq 2 && "$err" == *"$want"* ]]; then echo "ok   $name"; else echo "FAIL $name: rc=$rc, message: $err (wanted: $want)"; fail=1; fi
}
for i in $(seq 100); do printf 'some training text\n'; done > text.txt  # 1900 bytes: both splits hold a sequence
printf 'data:\n  train: text.txt\nmodel:\n  norm: post\n  layers: 2\noptim:\n  betas: [0.9, 0.99]\n' > good.yaml
out=$("$bin" check good.yaml --set model.d_model=64 --set optim.lr=5e-4); rc=$?
if [[ $rc -eq 0 && "$out" == *"norm: post"* && "$out" == *"d_model: 64"* && "$out" == *"lr: 0.0005"* && "$out" == *"betas: [0.9, 0.99]"* && "$out" == *"final_norm: false"* ]]; then
  echo "ok   good config resolves with overrides"; else echo "FAIL good config: $out"; fail=1; fi
# the printed config is itself a valid config
"$bin" check good.yaml | tail -n +2 > resolved.yaml
out2=$("$bin" check resolved.yaml); rc=$?
[[ $rc -eq 0 ]] && echo "ok   resolved config round-trips" || { echo "FAIL round trip: $out2"; fail=1; }

# the memory plan, as YAML comments (the output stays a config); against a device with --device
out=$("$bin" check good.yaml); rc=$?
[[ $rc -eq 0 && "$out" == *"# memory plan, batch 16 x 64 tokens"*"#   activations"*"per micro-batch"*"#   total"*"not compared"* ]] \
  && ok "check prints the memory plan" || bad "plan: rc=$rc $out"
expect_error "train.accumulate below 1" "train.accumulate: value 0 is out of range" "$bin" check good.yaml --set train.accumulate=0
if "$bin" devices --device pocl >/dev/null 2>&1; then
  out=$("$bin" check good.yaml --device pocl --set train.accumulate=4); rc=$?
  [[ $rc -eq 0 && "$out" == *"#   device"*"global memory, at most"*"#   fits"*"the largest batch_size that fits: "* && "$out" == *"train.accumulate 4: 64 sequences per optimizer step"* ]] \
    && ok "check --device compares the plan with the device" || bad "plan against the device: rc=$rc $out"
  # PoCL's own POCL_MEMORY_LIMIT (GiB) makes its CPU device a 1 GiB one (256 MiB in one buffer): too small
  err=$(POCL_MEMORY_LIMIT=1 "$bin" check good.yaml --device pocl --set data.batch_size=8192 2>&1 >/dev/null); rc=$?
  [[ $rc -eq 2 && "$err" == *"does not fit"*"memory plan, batch 8192 x 64"*"activations"*"1024.0 MiB  global memory, at most 256.0 MiB"*"the largest batch_size that fits: "[1-9]* ]] \
    && ok "a run too large for a 1 GiB device: refused with the plan and the largest batch (exit 2)" || bad "too large: rc=$rc $err"
  err=$(POCL_MEMORY_LIMIT=1 "$bin" train good.yaml --device pocl --set data.batch_size=8192 --set train.out=big 2>&1 >/dev/null); rc=$?
  [[ $rc -eq 2 && "$err" == *"does not fit"*"the largest batch_size that fits: "[1-9]* && ! -e big/checkpoint.safetensors ]] \
    && ok "train refuses it the same way before any allocation" || bad "train too large: rc=$rc $err"
fi
printf 'model:\n  layer: 6\n' > unknown.yaml
printf 'data:\n  train: nosuch.txt\n' > nodata.yaml
expect_error "a missing training file" "nodata.yaml:2:10: data.train: cannot open 'nosuch.txt': No such file" "$bin" check nodata.yaml
expect_error "a missing validation file" "--set data.valid: cannot open 'none.txt': No such file" "$bin" check good.yaml --set data.valid=none.txt
expect_error "unknown key with suggestion" "unknown.yaml:2:3: unknown key 'model.layer' (did you mean 'model.layers'?)" "$bin" check unknown.yaml
printf 'modle:\n  layers: 6\n' > section.yaml
expect_error "unknown section" "section.yaml:1:1: unknown key 'modle'" "$bin" check section.yaml
printf 'data:\n  train: t\nmodel:\n  layers: six\n' > type.yaml
expect_error "wrong type" "type.yaml:4:11: model.layers: expected an integer, got 'six'" "$bin" check type.yaml
printf 'data:\n  train: t\nmodel:\n  tie_embeddings: maybe\n' > bool.yaml
expect_error "wrong boolean" "model.tie_embeddings: expected true or false" "$bin" check bool.yaml
printf 'data:\n  train: t\nmodel:\n  norm: middle\n' > enum.yaml
expect_error "bad choice" "model.norm: expected one of post|pre, got 'middle'" "$bin" check enum.yaml
printf 'model:\n  layers: 2\n' > missing.yaml
expect_error "missing required value" "data.train: missing required value" "$bin" check missing.yaml
printf 'data:\n  train: t\nmodel:\n  d_model: 100\n  heads: 3\n' > heads.yaml
expect_error "heads must divide d_model" "heads.yaml:5:10: model.heads: 3 heads do not divide model.d_model = 100" "$bin" check heads.yaml
printf 'data:\n  train: t\noptim:\n  lr: -0.001\n' > lr.yaml
expect_error "negative lr" "lr.yaml:4:7: optim.lr: value -0.001 is out of range" "$bin" check lr.yaml
printf 'data:\n  train: t\nmodel:\n  dropout: 1\n' > dropout.yaml
expect_error "dropout outside [0,1)" "model.dropout: value 1 is out of range: must be >= 0 and < 1" "$bin" check dropout.yaml
printf 'data:\n  train: t\noptim:\n  betas: [0.9]\n' > betas.yaml
expect_error "betas not a pair" "optim.betas: expected a pair" "$bin" check betas.yaml
printf 'data:\n  train: t\nmodel: [1, 2\n' > malformed.yaml
expect_error "malformed YAML" "malformed.yaml:" "$bin" check malformed.yaml
printf 'data:\n  train: t\nmodel:\n  layers:\n    deep: 3\n' > nested.yaml
expect_error "mapping where a value belongs" "model.layers: expected a single value, not a mapping" "$bin" check nested.yaml
expect_error "--set unknown key" "--set optim.lrr=1: unknown key 'optim.lrr' (did you mean 'optim.lr'?)" "$bin" check good.yaml --set optim.lrr=1
expect_error "--set bad value" "--set model.norm=sideways: model.norm: expected one of post|pre" "$bin" check good.yaml --set model.norm=sideways
expect_error "--set without =" "expected KEY=VALUE" "$bin" check good.yaml --set model.norm
expect_error "--set cross-key check" "--set model.heads: 3 heads do not divide" "$bin" check good.yaml --set model.heads=3
expect_error "missing file" "cannot open nope.yaml" "$bin" check nope.yaml
expect_error "no config given" "a CONFIG file is required" "$bin" check
# an option left without its value is named as such, in every command; a stray one is unexpected
expect_error "train --device without value" "clformer train: option --device needs a value" "$bin" train good.yaml --device
expect_error "sample -n without value" "clformer sample: option -n needs a value" "$bin" sample run -n
expect_error "check --set without value" "clformer check: option --set needs a value" "$bin" check good.yaml --set
expect_error "compare --seeds without value" "clformer compare: option --seeds needs a value" "$bin" compare good.yaml --seeds
expect_error "devices -d without value" "clformer devices: option -d needs a value" "$bin" devices -d
# every option that a command's --help shows with a value (--device SPEC, --budget SECONDS, ...), given last
# without it, in every command: one helper says it (devices and tune once said "unknown argument")
n=0
for cmd in train sample check compare gradnorm devices selftest bench tune; do
  for opt in $("$bin" $cmd --help | grep -oE -- '--[a-z-]+ [A-Z][A-Z_=]*' | cut -d' ' -f1 | sort -u); do
    err=$("$bin" $cmd $opt 2>&1 >/dev/null); rc=$?; n=$((n + 1))
    [[ $rc -eq 2 && "$err" == "clformer $cmd: option $opt needs a value"* ]] || bad "$cmd $opt without value: rc=$rc ${err%%$'\n'*}"
  done
done
[[ $n -ge 30 ]] && ok "$n value options of 9 commands, each left without its value, say so" || bad "only $n options found in the --help texts"
expect_error "unknown option" "clformer train: unexpected argument '--bogus'" "$bin" train good.yaml --bogus
left=$(ls | grep -v '\.yaml$' | grep -vx text.txt || true)
[[ -z "$left" ]] && echo "ok   nothing created" || { echo "FAIL files created: $left"; fail=1; }
"$bin" check --keys | grep -q '| `model.norm` | `pre` |' && echo "ok   --keys lists the schema" || { echo "FAIL --keys"; fail=1; }
exit $fail
