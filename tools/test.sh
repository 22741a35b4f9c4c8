#!/usr/bin/env bash
# The test command: set up (install what is missing, build), then run every test with ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
CLFORMER_WERROR=${CLFORMER_WERROR:-$([[ "${CI:-}" == true ]] && echo ON || echo OFF)} tools/setup.sh
ctest --test-dir build --output-on-failure -j"${CTEST_JOBS:-1}" "$@"
