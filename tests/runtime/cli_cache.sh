#!/usr/bin/env bash
# The kernel cache trusts only what it made: its directory is created for its owner alone; a cache
# directory that is a symbolic link is not followed (caching off, one note); an entry that is a link
# planted to a file elsewhere is neither read nor written through (the program is rebuilt).
bin=$1 src=$2
source "$(dirname "${BASH_SOURCE[0]}")/../lib/cli.sh"
require_opencl
cd "$tmp"

"$bin" selftest >/dev/null 2>&1  # builds every program, so later runs have entries to look at
CLFORMER_CACHE_DIR="$tmp/fresh/cache" "$bin" selftest >/dev/null 2>&1; rc=$?
mode=$(stat -c %a "$tmp/fresh/cache" 2>/dev/null)
[[ $rc -eq 0 && "$mode" == 700 && -n $(ls "$tmp/fresh/cache"/*.bin 2>/dev/null) ]] && ok "a new cache directory is the owner's alone (700)" \
  || bad "new cache: rc=$rc mode=$mode $(ls "$tmp/fresh/cache" 2>&1 | head -3)"

mkdir elsewhere && ln -s "$tmp/elsewhere" linked
err=$(CLFORMER_CACHE_DIR="$tmp/linked" "$bin" selftest 2>&1 >/dev/null); rc=$?
[[ $rc -eq 0 && "$err" == *"kernel cache off"*"symbolic link"* && -z $(ls elsewhere) ]] \
  && ok "a cache directory that is a symlink is not followed (nothing written through it)" || bad "symlinked cache: rc=$rc $err $(ls elsewhere)"

# an entry replaced by a link to a file of the user's: not read, and the rewrite replaces the link, not the file
entry=$(ls "$tmp/fresh/cache"/layernorm-*.bin | head -1)
echo "precious" > precious.txt
rm "$entry" && ln -s "$tmp/precious.txt" "$entry"
CLFORMER_CACHE_DIR="$tmp/fresh/cache" CLFORMER_VERBOSE=2 "$bin" selftest >out.txt 2>err.txt; rc=$?
[[ $rc -eq 0 && $(cat precious.txt) == precious && ! -L "$entry" && -s "$entry" && "$(cat err.txt)" == *"not a regular file"* ]] \
  && ok "a cache entry that is a symlink is rebuilt, its target untouched" || bad "symlinked entry: rc=$rc $(cat precious.txt) $(ls -l "$entry") $(cat err.txt | head -3)"
exit $fail
