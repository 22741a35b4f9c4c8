#!/usr/bin/env bash
# ctest cli_device_run: the GPU-machine scripts against PoCL, so they cannot rot where no GPU is at
# hand: tools/device_bundle.sh packs a bundle, tools/device_run.sh (DEVICE_RUN_QUICK=1: two tests, a
# tiny bench step and comparison) runs from it with only the bundle's libraries, and section.md
# holds the device, a passing self-test, the tests, the step's figures and the comparison's losses.
bin=$1; src=$2
source "$src/tests/lib/cli.sh"
require_opencl
build=$(dirname "$bin")
[[ -s $build/data/kjv.txt ]] || { echo "SKIP: corpus missing (run tools/setup.sh)"; exit 77; }
out=$tmp/out
bash "$src/tools/device_bundle.sh" "$build" "$tmp/bundle" > "$tmp/bundle.log" 2>&1 \
  && ok "device_bundle.sh packs $(ls "$tmp/bundle/bin" | wc -l) executables" || { cat "$tmp/bundle.log"; bad "device_bundle.sh"; exit 1; }
# the run reads the corpus from build/data/ of its tree: here a copy of the configs beside a build/ of its own
mkdir -p "$tmp/tree"
cp -r "$src/configs" "$src/tools" "$tmp/tree/"
(cd "$tmp/tree" && OUT=$out DEVICE_BUNDLE=$tmp/bundle DEVICE_RUN_QUICK=1 bash tools/device_run.sh cpu) > "$tmp/run.log" 2>&1
rc=$?
[[ $rc -eq 0 ]] && ok "device_run.sh cpu (quick) exits 0" || { tail -30 "$tmp/run.log"; bad "device_run.sh: exit $rc"; }
s=$(cat "$out/section.md" 2>/dev/null)
[[ "$s" == *"### \`cpu\`: "* && "$s" == *"(passed)"* && "$s" == *"- Device: "*"driver "* ]] \
  && ok "section.md names the device and driver" || bad "section header: $s"
[[ "$s" =~ Self-test:\ ([0-9]+)\ of\ ([0-9]+)\ ops\ pass && ${BASH_REMATCH[1]} == "${BASH_REMATCH[2]}" ]] \
  && ok "section.md: the self-test passes (${BASH_REMATCH[1]} ops)" || bad "section self-test: $s"
[[ "$s" == *"- Tests: 2 of 2 passed"* && "$s" =~ Training\ step.*median\ [0-9.]+\ ms ]] \
  && ok "section.md: the tests and the step's median time" || bad "section tests/step: $s"
[[ "$s" =~ \|\ pre-lr1e-3-nowarmup\ \|\ [0-9]+\.[0-9]{4}\ \| ]] \
  && ok "section.md: the comparison's final validation loss" || bad "section comparison: $s"
exit $fail
