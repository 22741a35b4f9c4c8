#!/usr/bin/env bash
# The layer order of src/README.md holds for every #include under src/ and include/clformer/
# (tools/check_layers.py), and the checker can fail: a planted upward include in fixture/ is caught.
set -u
src=$1
command -v python3 >/dev/null || { echo "SKIP: python3 missing"; exit 77; }
fail=0
if python3 "$src/tools/check_layers.py" "$src"; then echo "ok   the tree keeps its layer order"
else echo "FAIL the tree breaks its layer order (lines above)"; fail=1; fi
out=$(python3 "$src/tools/check_layers.py" "$src/tests/arch/fixture" 2>&1); rc=$?
if [[ $rc -eq 1 && $out == *'src/base/up.c:2: #include "runtime/runtime.h": base (rank 1) includes runtime (rank 2), above'* &&
      $out != *down.c* ]]; then echo "ok   a planted upward include is caught, and only it"
else echo "FAIL the planted upward include was not reported as expected (exit $rc):"; echo "$out"; fail=1; fi
exit $fail
