#!/usr/bin/env bash
# ctest oclgrind_selftest: our kernels under Oclgrind, an OpenCL simulator that checks every memory
# access. Under `oclgrind --data-races --check-api`: `clformer selftest` with the GPU shapes and
# CLBlast's GEMM, again with the CPU shapes (the kernels PoCL runs) and our own GEMM, then test_ops
# (every op-table row at its larger, off-grid case) with the CPU shapes. Oclgrind reports every
# device type (CPU, GPU, accelerator), so clformer's auto choice there is the CPU shapes: each run
# names its shapes (CLFORMER_KERNEL_SHAPES) and GEMM (CLFORMER_GEMM). Oclgrind prints what it finds
# and still exits with the program's status, so its messages go to a log (--log) that must stay
# empty: any invalid read or write, data race on local or global memory, or OpenCL API error fails
# the test, as does the program failing.
#
# Each op-case tensor has its own buffer ending where the tensor ends (src/check/op_case.c), so a
# kernel reading or writing past a tensor is past a buffer for Oclgrind.
#
# Left out, for time: test_ops with the GPU shapes (207 s of CPU here, against about 45 s with the
# CPU shapes: Oclgrind runs every item of the 256-item groups, attention alone 77 s); OCLGRIND_FULL=1
# adds it. The family tests (test_layernorm: over 5 minutes under Oclgrind).
# Not used: --uninitialized. Debian's Oclgrind 21.10 aborts on LLVM's `freeze` instruction (in
# gemm_an_strips, first); with -cl-opt-disable it reports uses of uninitialised values in code that
# reads only host-written data (layernorm_forward's sqrt of a sum of its input) and then crashes.
#
# The check must be able to fail: first, a copy of cl/ with two planted bugs (CLFORMER_KERNEL_DIR):
# `scale` touching one float past its tensor, and the work-group sum (cl/reduce.clh, GPU shapes)
# without the barrier between its stores and its reads. Oclgrind must report the invalid write and
# a data race.
# Usage: oclgrind_selftest.sh CLFORMER_BINARY SOURCE_DIR TEST_OPS_BINARY
bin=$1; src=$2; test_ops=$3
source "$src/tests/lib/cli.sh"
command -v oclgrind >/dev/null || { echo "SKIP: oclgrind not installed (Debian package oclgrind)"; exit 77; }
unset CLFORMER_DEVICE  # under the wrapper Oclgrind is the only platform; a spec for another would match nothing
oclgrind "$bin" devices > "$tmp/devices.out" 2>&1 || { cat "$tmp/devices.out"; bad "clformer devices fails under oclgrind"; exit 1; }
export CLFORMER_CACHE_DIR="${CLFORMER_CACHE_DIR:-$tmp/cache}-oclgrind"

# NAME CMD...: CMD under Oclgrind, its output in $tmp/NAME.out and Oclgrind's messages in $tmp/NAME.log
grind() {
  local name=$1; shift
  local start=$SECONDS
  oclgrind --data-races --check-api --max-errors "${max_errors:-1000}" --log "$tmp/$name.log" "$@" > "$tmp/$name.out" 2>&1
  rc=$?
  secs=$((SECONDS - start))
}

# The planted bugs, each checked to apply (the sources may have moved on).
plant() {
  mkdir -p "$tmp/planted" && cp "$src"/cl/*.cl "$src"/cl/*.clh "$tmp/planted/"
  sed -i 's/if (i < n) x\[x_off + i\] \*= alpha;/if (i <= n) x[x_off + i] *= alpha;/' "$tmp/planted/elementwise.cl"
  sed -i '/red\[lid\] = v; *\\/{n;s/barrier(CLK_LOCAL_MEM_FENCE);/                             /}' "$tmp/planted/reduce.clh"
  ! cmp -s "$src/cl/elementwise.cl" "$tmp/planted/elementwise.cl" && ! cmp -s "$src/cl/reduce.clh" "$tmp/planted/reduce.clh"
}
if ! plant; then
  bad "the planted bugs no longer apply to cl/elementwise.cl (scale) or cl/reduce.clh (CF_GROUP_SUM): update plant()"
else
  # every error reported: the race's first 1000 (layernorm runs first) would hide scale's
  max_errors=100000 CLFORMER_KERNEL_DIR="$tmp/planted" CLFORMER_CACHE=off CLFORMER_KERNEL_SHAPES=gpu \
    CLFORMER_GEMM=clblast grind planted "$bin" selftest
  if grep -q "Invalid write of size 4" "$tmp/planted.log" && grep -q "Kernel: scale" "$tmp/planted.log" &&
     grep -q "data race" "$tmp/planted.log"; then
    ok "planted bugs found: scale's write past its tensor and the unguarded work-group sum's data race ($secs s)"
  else
    head -40 "$tmp/planted.log"; tail -20 "$tmp/planted.out"; bad "Oclgrind did not report the planted bugs"
  fi
fi

# NAME WHAT CMD...: a run that must pass with Oclgrind silent
clean() {
  local name=$1 what=$2; shift 2
  grind "$name" "$@"
  if [[ $rc -eq 0 && ! -s "$tmp/$name.log" ]]; then
    ok "$what under oclgrind --data-races --check-api: passes, no Oclgrind error ($secs s; $(tail -1 "$tmp/$name.out"))"
  else
    head -60 "$tmp/$name.log"; tail -30 "$tmp/$name.out"
    bad "$what under Oclgrind: exit $rc, $(grep -c '^[A-Z]' "$tmp/$name.log") Oclgrind messages (above)"
  fi
}
CLFORMER_KERNEL_SHAPES=gpu CLFORMER_GEMM=clblast clean selftest_gpu "selftest, GPU shapes, CLBlast GEMM" "$bin" selftest
CLFORMER_KERNEL_SHAPES=cpu CLFORMER_GEMM=own clean selftest_cpu "selftest, CPU shapes, own GEMM" "$bin" selftest
CLFORMER_KERNEL_SHAPES=cpu CLFORMER_GEMM=own clean test_ops_cpu "test_ops, CPU shapes" "$test_ops"
if [[ "${OCLGRIND_FULL:-0}" == 1 ]]; then
  CLFORMER_KERNEL_SHAPES=gpu CLFORMER_GEMM=clblast clean test_ops_gpu "test_ops, GPU shapes" "$test_ops"
fi
exit $fail
