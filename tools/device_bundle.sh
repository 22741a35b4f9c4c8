#!/usr/bin/env bash
# Packs what a run on a borrowed GPU machine needs into .device/ (ignored by git): the built
# clformer and test executables, the corpus, and the shared libraries of the OpenCL ICD loader,
# CLBlast, libyaml and Jansson as installed here (such a machine has the vendor's driver but none
# of our packages). Then, with the session's device tool: run `bash tools/device_run.sh` with
# carry [".device"].   usage: tools/device_bundle.sh [BUILD_DIR [DEST]]   (default: build .device)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
dest=${2:-$root/.device}
[[ -x $build/clformer ]] || { echo "device_bundle: $build/clformer not built (run tools/setup.sh)" >&2; exit 2; }
[[ -s $build/data/kjv.txt ]] || { echo "device_bundle: $build/data/kjv.txt missing (run tools/setup.sh)" >&2; exit 2; }
rm -rf "$dest"
mkdir -p "$dest/bin" "$dest/lib" "$dest/data"
cp "$build/clformer" "$dest/bin/"
cp "$build/data/kjv.txt" "$dest/data/"
for src in "$root"/tests/*/test_*.c; do  # the suite's tests, not whatever else lies in the build folder
  t=$(basename "$src" .c)
  [[ -x $build/$t ]] || { echo "device_bundle: $build/$t not built" >&2; exit 2; }
  cp "$build/$t" "$dest/bin/"
done
for pkg in ocl-icd-libopencl1 libclblast1 libyaml-0-2 libjansson4; do
  libs=$(dpkg -L "$pkg" | grep -E '\.so(\.[0-9]+)*$' || true)
  [[ -n $libs ]] || { echo "device_bundle: package $pkg is not installed" >&2; exit 2; }
  for f in $libs; do cp -P "$f" "$dest/lib/"; done
done
du -sh "$dest" | awk '{print "device_bundle: " $2 " holds " $1 " (the device tool carries at most 64 MiB)"}'
