#!/usr/bin/env bash
# Runs on a borrowed GPU machine, from the repository root, after tools/device_bundle.sh packed
# .device/ here: registers NVIDIA's OpenCL library (or whatever /etc/OpenCL/vendors lists) with the
# carried ICD loader, then lists the devices, runs the self-test, every test executable except
# test_torch and test_data (they read the source tree) and `clformer bench all` on the GPU.
# Exits non-zero when a test or the benchmark failed.
# Results go to $OUT (the device tool brings that folder back): devices.txt, tests.log, bench.txt,
# bench-gpu.json.   usage: bash tools/device_run.sh [DEVICE_SPEC]   (default: gpu)
set -u
spec=${1:-gpu}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
status=0
bundle=$root/.device
out=${OUT:-/tmp/clformer-device-out}
mkdir -p "$out" "$bundle/icd"
export LD_LIBRARY_PATH=$bundle/lib:${LD_LIBRARY_PATH:-}
# The ICD loader reads vendor files from OCL_ICD_VENDORS; the machine may have none registered.
lib=""
for cand in /usr/local/nvidia/lib64/libnvidia-opencl.so.1 /usr/lib/x86_64-linux-gnu/libnvidia-opencl.so.1 \
            $(ldconfig -p 2>/dev/null | awk '/libnvidia-opencl\.so\.1/ {print $NF}'); do
  [[ -e $cand ]] && { lib=$cand; break; }
done
if [[ -n $lib ]]; then echo "$lib" > "$bundle/icd/nvidia.icd"; fi
for f in /etc/OpenCL/vendors/*.icd; do [[ -e $f ]] && cp "$f" "$bundle/icd/"; done
export OCL_ICD_VENDORS=$bundle/icd
export CLFORMER_CACHE_DIR=/tmp/clformer-cache CLFORMER_DEVICE=$spec
echo "vendor OpenCL library: ${lib:-none found}" | tee "$out/devices.txt"
"$bundle/bin/clformer" devices --verbose 2>&1 | tee -a "$out/devices.txt"
"$bundle/bin/clformer" selftest 2>&1 | tee -a "$out/devices.txt"
: > "$out/tests.log"
for t in "$bundle"/bin/test_*; do
  name=$(basename "$t")
  [[ $name == test_torch || $name == test_data ]] && continue  # they read files of the source tree
  start=$(date +%s%N)
  timeout 300 "$t" >> "$out/tests.log" 2>&1
  rc=$?
  ms=$(( ($(date +%s%N) - start) / 1000000 ))
  printf '%-20s rc=%d  %d ms\n' "$name" "$rc" "$ms" | tee -a "$out/tests.log"
  [[ $rc -eq 0 || $rc -eq 77 ]] || status=1
done
"$bundle/bin/clformer" bench all --config configs/kjv-small.yaml --json "$out/bench-gpu.json" > "$out/bench.txt" 2>&1 || status=1
cat "$out/bench.txt"
exit $status
