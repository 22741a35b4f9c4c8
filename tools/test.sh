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
# check no timings: the two libFuzzer targets (one process each, FUZZ_TIME seconds of wall clock whatever
# the load), valgrind_train (valgrind runs one thread at a time) and cli_rusticl (most of it rusticl
# compiling kernels, single-threaded). They run last, two at a time: cli_rusticl beside the other three
# in turn. With arguments or $CTEST_JOBS, one ctest run as before.
paired='^(cli_rusticl|fuzz_config|fuzz_safetensors|valgrind_train)$'
if [[ $# -eq 0 && -z "${CTEST_JOBS:-}" ]]; then
  ctest --test-dir build --output-on-failure -j1 -E "$paired" || status=$?
  ctest --test-dir build --output-on-failure -j2 -R "$paired" || status=$?
else
  ctest --test-dir build --output-on-failure -j"${CTEST_JOBS:-1}" "$@" || status=$?
fi
if [[ "${SANITIZE:-1}" != 0 ]]; then
  echo "test: the sanitizer subset (tools/sanitize.sh, build-san/)"
  tools/sanitize.sh || status=1
fi
exit $status
