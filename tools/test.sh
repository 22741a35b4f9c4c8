#!/usr/bin/env bash
# The test command: set up (install what is missing, build), then run every test with ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
# python3-torch and python3-yaml: the PyTorch cross-check (tests/test_torch.c, tools/torch_check.py)
CLFORMER_WERROR=${CLFORMER_WERROR:-$([[ "${CI:-}" == true ]] && echo ON || echo OFF)} tools/setup.sh python3-torch python3-yaml
ctest --test-dir build --output-on-failure -j"${CTEST_JOBS:-1}" "$@"
