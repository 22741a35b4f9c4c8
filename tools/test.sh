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
ctest --test-dir build --output-on-failure -j"${CTEST_JOBS:-1}" "$@" || status=$?
if [[ "${SANITIZE:-1}" != 0 ]]; then
  echo "test: the sanitizer subset (tools/sanitize.sh, build-san/)"
  tools/sanitize.sh || status=1
fi
exit $status
