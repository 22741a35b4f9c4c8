#!/usr/bin/env bash
# The test command: set up (install what is missing, build), then run every test with ctest, then a
# subset of them again under AddressSanitizer + UndefinedBehaviorSanitizer (tools/sanitize.sh, its
# own build in build-san/; SANITIZE=0 leaves it out).
set -euo pipefail
cd "$(dirname "$0")/.."
# python3-torch and python3-yaml: the PyTorch cross-check (tests/test_torch.c, tools/torch_check.py)
# clang: the libFuzzer targets (tests/fuzz/, ctest fuzz_*); valgrind: ctest valgrind_train
CLFORMER_WERROR=${CLFORMER_WERROR:-$([[ "${CI:-}" == true ]] && echo ON || echo OFF)} tools/setup.sh python3-torch python3-yaml clang valgrind
status=0
# One test at a time (PoCL's kernels use every core), but for four that mostly keep one core busy and
# check no timings: valgrind_train (valgrind runs one thread at a time), the two libFuzzer targets (one
# process each, FUZZ_TIME seconds of wall clock whatever the load) and cli_rusticl (most of it rusticl
# compiling kernels on one core, or finding them in Mesa's cache). They run last, two at a time:
# valgrind_train, the longest, beside the other three in turn (its output shown when it ends). With
# arguments or $CTEST_JOBS, one ctest run as before.
paired='^(cli_rusticl|fuzz_config|fuzz_safetensors|valgrind_train)$'
if [[ $# -eq 0 && -z "${CTEST_JOBS:-}" ]]; then
  ctest --test-dir build --output-on-failure -j1 -E "$paired" || status=$?
  vg_log=$(mktemp)
  ctest --test-dir build --output-on-failure -R '^valgrind_train$' > "$vg_log" 2>&1 &
  vg=$!
  ctest --test-dir build --output-on-failure -j1 -R '^(cli_rusticl|fuzz_config|fuzz_safetensors)$' || status=$?
  wait $vg || status=$?
  cat "$vg_log"; rm -f "$vg_log"
else
  ctest --test-dir build --output-on-failure -j"${CTEST_JOBS:-1}" "$@" || status=$?
fi
if [[ "${SANITIZE:-1}" != 0 ]]; then
  echo "test: the sanitizer subset (tools/sanitize.sh, build-san/)"
  tools/sanitize.sh || status=1
fi
exit $status
