# Shared by the tests/cli_*.sh scripts, sourced after `bin=$1` (and `src=$2`): a scratch directory
# removed on exit, ok/bad lines that set $fail, and the skips (exit 77, which CTest reports as
# skipped) for a machine without OpenCL or without the corpus tools/setup.sh writes.
set -u
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fail=1; }
require_opencl() {
  "$bin" devices >/dev/null 2>&1 || { [[ $? -eq 2 ]] && { echo "SKIP: no OpenCL"; exit 77; }; }
}
require_corpus() {  # BYTES FILE: the first BYTES of the corpus into FILE
  head -c "$1" "$src/build/data/kjv.txt" > "$2" 2>/dev/null || { echo "SKIP: corpus missing (run tools/setup.sh)"; exit 77; }
}
