#!/usr/bin/env bash
# `clformer selftest` passes on a working device, and on one whose kernels allow fewer work-items than
# CF_WG; a device that computes wrong (simulated by kernels with a skewed exp, via CLFORMER_KERNEL_DIR)
# fails it, and `train` refuses that device; a pass is recorded, so `train` does not run the self-test
# again.
bin=$1; src=$2
source "$(dirname "${BASH_SOURCE[0]}")/../lib/cli.sh"
require_opencl
out=$("$bin" selftest 2>&1); rc=$?
n=$(grep -c " pass " <<<"$out")
if [[ $rc -eq 0 && $n -ge 30 && "$out" != *FAIL* ]]; then echo "ok   selftest passes ($n ops)"; else echo "FAIL selftest: rc=$rc"; echo "$out"; fail=1; fi

mkdir "$tmp/cl"
for f in "$src"/cl/*.cl "$src"/cl/*.clh; do cp "$f" "$tmp/cl/"; done
# a device whose dropout masks differ from the host's: one Philox multiplier off by two
sed -i 's/0xD2511F53u/0xD2511F55u/g' "$tmp/cl/philox.clh"
grep -q 0xD2511F55u "$tmp/cl/philox.clh" || { echo "FAIL could not skew philox.clh"; exit 1; }
out=$(CLFORMER_KERNEL_DIR="$tmp/cl" CLFORMER_CACHE_DIR="$tmp/cache" "$bin" selftest 2>&1); rc=$?
if [[ $rc -eq 1 && "$out" == *FAIL* ]]; then echo "ok   skewed kernels fail the selftest"; else echo "FAIL skewed kernels: rc=$rc"; echo "$out"; fail=1; fi
# kernels that allow fewer work-items than CF_WG (tests/lib/clfault.c: CL_KERNEL_WORK_GROUP_SIZE says 48 and
# larger launches fail, as on a GPU whose kernel needs many registers), with the GPU kernel shapes: every op
# launches within the kernel's limit (CF_WG lowered to 32, the programs rebuilt) and still passes
fault=$(dirname "$bin")/libclfault.so
out=$(CLFAULT_KERNEL_WG=48 LD_PRELOAD="$fault" CLFORMER_KERNEL_SHAPES=gpu CLFORMER_CACHE_DIR="$tmp/cache-wg" "$bin" selftest 2>&1)
rc=$?
if [[ $rc -eq 0 && "$out" == *" ops pass"* && "$out" != *FAIL* && "$out" != *INVALID_WORK_GROUP_SIZE* ]]
then echo "ok   kernels allowing 48 work-items: every op launches within it and passes (GPU shapes)"
else echo "FAIL kernels allowing 48 work-items: rc=$rc"; echo "$out" | grep -v " pass " | head; fail=1; fi
# kernels that cannot be read: the run stops with the file named, never "0 of 0 ops pass"
out=$(CLFORMER_KERNEL_DIR="$tmp/nosuch" CLFORMER_CACHE_DIR="$tmp/cache" "$bin" selftest 2>&1); rc=$?
if [[ $rc -eq 1 && "$out" == *"cannot open $tmp/nosuch/"* && "$out" == *"stopped after 0 ops"* && "$out" != *"ops pass"* ]]
then echo "ok   unreadable kernels stop the selftest with the file named"; else echo "FAIL unreadable kernels: rc=$rc $out"; fail=1; fi
head -c 100000 "$src/build/data/kjv.txt" > "$tmp/t.txt" 2>/dev/null || echo x > "$tmp/t.txt"
printf 'data: {train: t.txt, seq_len: 16, batch_size: 2}\nmodel: {layers: 1, d_model: 16, heads: 2, d_ff: 16}\ntrain: {steps: 2, out: %s/run}\n' "$tmp" > "$tmp/c.yaml"
err=$(CLFORMER_KERNEL_DIR="$tmp/cl" CLFORMER_CACHE_DIR="$tmp/cache" "$bin" train "$tmp/c.yaml" 2>&1); rc=$?
if [[ $rc -eq 1 && "$err" == *"computes wrong results"* && ! -e "$tmp/run" ]]; then echo "ok   train refuses a failing device, creates nothing"; else echo "FAIL train on failing device: rc=$rc $err"; fail=1; fi
# a passing `selftest` is remembered: `train` on the same device (and a fresh cache) does not run it again
out=$(CLFORMER_CACHE_DIR="$tmp/cache2" "$bin" selftest 2>&1); rc=$?
err=$(CLFORMER_CACHE_DIR="$tmp/cache2" "$bin" train "$tmp/c.yaml" --set train.out="$tmp/run2" 2>&1); rc2=$?
if [[ $rc -eq 0 && $rc2 -eq 0 && "$err" != *"running the kernel self-test"* ]] && ls "$tmp"/cache2/selftest-*.txt >/dev/null 2>&1
then echo "ok   a passing selftest is recorded: train does not run it again"; else echo "FAIL selftest not recorded: rc=$rc/$rc2 $err"; fail=1; fi
exit $fail
