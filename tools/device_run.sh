#!/usr/bin/env bash
# Runs on a borrowed GPU machine, from the repository root, after tools/device_bundle.sh packed
# .device/ here: registers NVIDIA's OpenCL library (or whatever /etc/OpenCL/vendors lists) with the
# carried ICD loader, then lists the devices, runs the self-test, the test executables, `clformer
# bench all` and a short warm-up comparison on the device, and writes section.md: one Markdown
# section for the README (device, driver, self-test, tests, benchmark figures, the comparison's
# final losses). Exits non-zero when the self-test, a test, the benchmark or the comparison failed.
# Results go to $OUT (the device tool brings that folder back): devices.txt, selftest.txt, tests.log,
# tests.summary, bench.txt, bench.json, compare.txt, compare/ and section.md (tools/device_section.py).
#   usage: bash tools/device_run.sh [DEVICE_SPEC]   (default: gpu)
#   DEVICE_RUN_QUICK=1: a few tests, a tiny benchmark and comparison (CI runs it so on PoCL: ctest
#   device_run, so the script cannot rot where no GPU is at hand); DEVICE_BUNDLE: another bundle.
set -u
spec=${1:-gpu}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
status=0
bundle=${DEVICE_BUNDLE:-$root/.device}
bin=$bundle/bin
out=${OUT:-/tmp/clformer-device-out}
quick=${DEVICE_RUN_QUICK:-0}
[[ -x $bin/clformer ]] || { echo "device_run: no $bin/clformer (run tools/device_bundle.sh first)" >&2; exit 2; }
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
export CLFORMER_CACHE_DIR=${CLFORMER_CACHE_DIR:-/tmp/clformer-cache} CLFORMER_DEVICE=$spec
# the configs read the corpus from build/data/, which the bundle carries
mkdir -p build/data
[[ -s build/data/kjv.txt ]] || cp "$bundle/data/kjv.txt" build/data/

echo "vendor OpenCL library: ${lib:-none found}" | tee "$out/devices.txt"
"$bin/clformer" devices --verbose 2>&1 | tee -a "$out/devices.txt"
"$bin/clformer" selftest > "$out/selftest.txt" 2>&1 || status=1
tail -1 "$out/selftest.txt"

tests=${DEVICE_RUN_TESTS:-}
[[ -z $tests && $quick == 1 ]] && tests="test_optimizer test_watch"
: > "$out/tests.log"
: > "$out/tests.summary"
for t in "$bin"/test_*; do
  name=$(basename "$t")
  [[ $name == test_torch || $name == test_data ]] && continue  # they read files of the source tree
  [[ -n $tests && " $tests " != *" $name "* ]] && continue
  start=$(date +%s%N)
  timeout 300 "$t" >> "$out/tests.log" 2>&1
  rc=$?
  ms=$(( ($(date +%s%N) - start) / 1000000 ))
  printf '%-20s rc=%d  %d ms\n' "$name" "$rc" "$ms" | tee -a "$out/tests.summary"
  [[ $rc -eq 0 || $rc -eq 77 ]] || status=1
done

bench_args=(all --config configs/kjv-small.yaml)
compare_args=(configs/warmup-quick.yaml)
if [[ $quick == 1 ]]; then
  tiny=(--set model.layers=1 --set model.d_model=32 --set model.heads=2 --set model.d_ff=64 --set data.seq_len=16
        --set data.batch_size=4)
  bench_args=(step --config configs/kjv-small.yaml "${tiny[@]}" --steps 10 --warmup 2)
  compare_args=(configs/warmup-quick.yaml "${tiny[@]}" --set train.steps=8 --set train.eval_every=4
                --set train.log_every=4 --set train.checkpoint_every=8 --set schedule.warmup=4 --only pre-lr1e-3-nowarmup)
fi
"$bin/clformer" bench "${bench_args[@]}" --json "$out/bench.json" > "$out/bench.txt" 2>&1 || status=1
cat "$out/bench.txt"
# the runs (checkpoints: megabytes each) stay here; their summary and curves go back in $OUT
runs=$(mktemp -d)
"$bin/clformer" compare "${compare_args[@]}" --out "$runs" > "$out/compare.txt" 2>&1 || status=1
tail -3 "$out/compare.txt"
mkdir -p "$out/compare"
cp "$runs"/summary.* "$runs"/curves.svg "$out/compare/" 2>/dev/null
rm -rf "$runs"

if python3 "$root/tools/device_section.py" "$out" "$spec" "$status" > "$out/section.md"; then
  echo "device_run: $out/section.md"
else
  echo "device_run: no section.md (python3 failed or is missing); the raw files are in $out"; status=1
fi
exit $status
