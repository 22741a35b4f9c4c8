#!/usr/bin/env bash
# `clformer devices` as a user meets it: table, JSON, spec selection, exit codes, no-OpenCL message.
set -u
bin=$1
fail=0
check() { if eval "$2"; then echo "ok   $1"; else echo "FAIL $1"; fail=1; fi; }

out=$("$bin" devices 2>&1); rc=$?
if [[ $rc -eq 2 && $out == *"no OpenCL platform"* ]]; then echo "SKIP: no OpenCL platform"; exit 77; fi
check "devices exits 0" "[[ $rc -eq 0 ]]"
check "table has a header and an auto row" '[[ "$out" == *"P:D"* && "$out" == *"auto "* ]]'

json=$("$bin" devices --json); rc=$?
check "--json exits 0" "[[ $rc -eq 0 ]]"
check "--json is valid JSON with one auto device" \
  "python3 -c 'import json,sys; d=json.load(sys.stdin); assert sum(x[\"auto\"] for x in d[\"devices\"])==1' <<<\"\$json\""
# CL_DEVICE_HOST_UNIFIED_MEMORY, the zero-copy choice's input: PoCL's CPU device shares host memory
check "--json gives each device's host_unified_memory (true on PoCL)" \
  "python3 -c 'import json,sys; d=json.load(sys.stdin)[\"devices\"]; assert all(type(x[\"host_unified_memory\"]) is bool for x in d); assert all(x[\"host_unified_memory\"] for x in d if \"Portable\" in x[\"platform\"])' <<<\"\$json\""

out=$("$bin" devices --device 0:0); rc=$?
check "--device 0:0 selects" '[[ $rc -eq 0 && "$out" == *"'"'"'0:0'"'"' selects 0:0"* ]]'
out=$(CLFORMER_DEVICE=cpu "$bin" devices 2>&1); rc=$?
check "CLFORMER_DEVICE is honoured" '[[ $rc -eq 0 && "$out" == *"'"'"'cpu'"'"' selects"* ]]'

err=$("$bin" devices --device no-such-device 2>&1 >/dev/null); rc=$?
check "bad spec: exit 2" "[[ $rc -eq 2 ]]"
check "bad spec: message lists the devices" '[[ "$err" == *"matches no OpenCL device"* && "$err" == *"0:0"* ]]'

err=$(OCL_ICD_VENDORS=/nonexistent-dir OCL_ICD_FILENAMES= "$bin" devices 2>&1); rc=$?
check "no OpenCL platform: exit 2" "[[ $rc -eq 2 ]]"
check "no OpenCL platform: names the packages" '[[ "$err" == *"pocl-opencl-icd"* ]]'

"$bin" --help >/dev/null; check "--help exits 0" "[[ $? -eq 0 ]]"
"$bin" devices --help | grep -q -- "--json"; check "devices --help describes --json" "[[ $? -eq 0 ]]"
"$bin" frobnicate >/dev/null 2>&1; check "unknown command exits 2" "[[ $? -eq 2 ]]"
"$bin" devices --bogus >/dev/null 2>&1; check "unknown option exits 2" "[[ $? -eq 2 ]]"
"$bin" >/dev/null 2>&1; check "no command exits 2" "[[ $? -eq 2 ]]"

exit $fail
