#!/usr/bin/env bash
# The layer order of src/README.md holds for every #include under src/ and include/clformer/
# (tools/check_layers.py), and the checker can fail: planted upward includes in fixture/ are caught
# in every form the preprocessor accepts, and nothing else there is (system headers, a string).
set -u
src=$1
command -v python3 >/dev/null || { echo "SKIP: python3 missing"; exit 77; }
fail=0
if python3 "$src/tools/check_layers.py" "$src"; then echo "ok   the tree keeps its layer order"
else echo "FAIL the tree breaks its layer order (lines above)"; fail=1; fi
out=$(python3 "$src/tools/check_layers.py" "$src/tests/arch/fixture" 2>&1); rc=$?
up='#include "runtime/runtime.h": base (rank 1) includes runtime (rank 2), above'
want="src/base/hidden.c:2: $up
src/base/hidden.c:3: $up
src/base/up.c:2: $up
check_layers: 3 files, 2 layers, 3 breaks of the order"
if [[ $rc -eq 1 && "$out" == "$want" ]]; then
  echo "ok   planted upward includes are caught (quoted, <...>, behind a comment, continued), and only they"
else echo "FAIL the planted upward includes were not reported as expected (exit $rc):"; echo "$out"; fail=1; fi
exit $fail
