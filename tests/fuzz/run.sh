#!/usr/bin/env bash
# Run one libFuzzer target for a fixed time from its seed corpora (ctest: fuzz_config, fuzz_safetensors).
# Usage: run.sh FUZZER MAX_LEN SEED_DIR...   (FUZZ_TIME seconds, default 60)
# Fails on a crash, an ASan/UBSan report, a leak (libFuzzer's -detect_leaks, on by default with ASan)
# or an input slower than 10 s; the input that did it is kept in $FUZZ_ARTIFACTS (default: the
# build's fuzz/artifacts/) and its path printed. 77 (skipped) when the target was not built: clang
# with libFuzzer absent, or -DCLFORMER_FUZZ=OFF.
set -euo pipefail
bin=$1; max_len=$2; shift 2
if [[ ! -x $bin ]]; then echo "skip: $bin not built (needs clang with libFuzzer; CMake option CLFORMER_FUZZ)"; exit 77; fi
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
artifacts=${FUZZ_ARTIFACTS:-$(dirname "$bin")/artifacts}
mkdir -p "$artifacts"
# The growing corpus lives in a temporary directory; the seeds are only read.
"$bin" -max_total_time="${FUZZ_TIME:-60}" -rss_limit_mb=2048 -max_len="$max_len" -timeout=10 \
  -print_final_stats=1 -artifact_prefix="$artifacts/" "$work" "$@" 2>"$work.log" || {
  rc=$?; tail -60 "$work.log"; rm -f "$work.log"; echo "FAIL: $(basename "$bin") exit $rc"; exit 1; }
grep -E '^(#[0-9]+ *DONE|stat::number_of_executed_units|stat::peak_rss_mb|Done )' "$work.log" || true
rm -f "$work.log"
