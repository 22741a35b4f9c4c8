#!/usr/bin/env bash
# ctest valgrind_train: one tiny training run (2 steps, a checkpoint, an evaluation) under valgrind
# memcheck: any invalid read/write, use of uninitialised memory or definite leak fails it.
# tools/valgrind.supp suppresses what lies wholly inside the dynamic loader or an OpenCL platform
# (each entry says why).
#
# Kernel caches: valgrind's CPU has no AVX-512, so PoCL names and compiles for another CPU than
# the same run without valgrind, and a cache warmed natively misses. Compiling every kernel under
# memcheck takes over 17 minutes on 2 cores; so the run is first made under `valgrind --tool=none`
# (the same CPU as memcheck sees, LLVM about 10x faster than under memcheck: about 2.5 minutes
# here) into this test's own caches, and memcheck then finds every kernel built (about 15 s).
# Usage: valgrind_train.sh CLFORMER_BINARY SOURCE_DIR
bin=$1; src=$2
source "$src/tests/lib/cli.sh"
command -v valgrind >/dev/null || { echo "SKIP: valgrind not installed"; exit 77; }
require_opencl
require_corpus 50000 "$tmp/text.txt"
cat > "$tmp/tiny.yaml" <<YAML
seed: 5
data: {train: text.txt, seq_len: 8, batch_size: 2, valid_fraction: 0.1}
model: {norm: pre, layers: 1, d_model: 16, heads: 2, d_ff: 32}
train: {steps: 2, eval_every: 2, eval_batches: 1, log_every: 1, checkpoint_every: 2}
YAML
cd "$tmp"
# both caches beside the test's own (in the build tree), so a second ctest run finds them warm
base="${CLFORMER_CACHE_DIR:-$tmp/cache}-valgrind"
export CLFORMER_CACHE_DIR="$base" POCL_CACHE_DIR="$base-pocl"
# our GEMM, not the measured choice: timing CLBlast against ours compiles CLBlast's kernels too, which
# under valgrind more than doubles the warm-up (281 s against 112 s in all); the choice's host code is
# tested by test_gemm_calib, outside valgrind
export CLFORMER_GEMM=own
start=$SECONDS
valgrind --tool=none -q "$bin" train tiny.yaml --set train.out=warm --quiet > warm.log 2>&1 \
  || { cat warm.log; bad "the tiny run under valgrind --tool=none failed"; exit 1; }
echo "caches warmed under valgrind --tool=none in $((SECONDS - start)) s"
start=$SECONDS
valgrind --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite --show-leak-kinds=definite \
  --suppressions="$src/tools/valgrind.supp" --num-callers=30 \
  "$bin" train tiny.yaml --set train.out=run --quiet > vg.log 2>&1
rc=$?
if [[ $rc -eq 0 && -s run/checkpoint.safetensors ]]; then
  ok "tiny run under valgrind: no errors, no definite leak ($((SECONDS - start)) s; $(grep -E 'ERROR SUMMARY' vg.log | sed 's/^==[0-9]*== //'))"
else
  tail -150 vg.log; bad "tiny run under valgrind: exit $rc"
fi
exit $fail
