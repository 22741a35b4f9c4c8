#!/usr/bin/env bash
# A tuning file written by `clformer tune` is applied by later runs: a per-shape choice of CLBlast
# for the model's shapes shows up as CLBlast kernels in the step's profile, CLFORMER_TUNE=off
# ignores it, and a malformed file is reported without breaking the run.
set -u
bin=$1
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fail=1; }
"$bin" devices >/dev/null 2>&1 || { [[ $? -eq 2 ]] && { echo "SKIP: no OpenCL"; exit 77; }; }
export CLFORMER_CACHE_DIR="$tmp/cache"
unset CLFORMER_GEMM CLFORMER_TUNE
msg=$("$bin" tune --show 2>&1)
path=$(sed -n 's/.*(\(.*gemm-tune-[0-9a-f]*\.txt\)).*/\1/p' <<<"$msg")
[[ -n "$path" ]] && ok "tune --show names the file" || { bad "tune --show: $msg"; exit 1; }
mkdir -p "$(dirname "$path")"
# the small model's forward projections: N = 4*16 = 64 tokens, C = 32, F = 64
args=(--set model.layers=1 --set model.d_model=32 --set model.heads=2 --set model.d_ff=64 --set data.seq_len=16
      --set data.batch_size=4 --steps 10 --warmup 1)
{ echo "# test"; for s in "NT 64 96 32 1" "NT 64 32 32 1" "NT 64 64 32 1" "NT 64 32 64 1" "NT 64 256 32 1"; do
    echo "choice $s clblast 1 2"; done; } > "$path"
profile() { "$bin" bench step "${args[@]}" 2>&1; }
out=$(profile)
grep -q "clblast" <<<"$out" && ok "the file's per-shape choice is applied (CLBlast kernels in the profile)" \
  || bad "choice not applied: $(grep -A12 'per operation' <<<"$out")"
out=$(CLFORMER_TUNE=off profile)
! grep -q "clblast" <<<"$out" && ok "CLFORMER_TUNE=off ignores the file" || bad "CLFORMER_TUNE=off"
echo "choice garbage" >> "$path"
out=$(profile); rc=$?
[[ $rc -eq 0 ]] && ok "a malformed line does not break a run" || bad "malformed file: rc=$rc $out"
exit $fail
