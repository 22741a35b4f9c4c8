#!/usr/bin/env bash
# The installed library, used from outside the tree:
#   cmake --install BUILD --prefix TMP, then tests/install/example.c built against TMP
#   (1) with `cc $(pkg-config --cflags --libs clformer)`, run with LD_LIBRARY_PATH, and
#   (2) with tests/install/CMakeLists.txt (find_package(clformer), clformer::clformer), run as built.
# Also: the SONAME is libclformer.so.0, and both programs load libclformer from TMP.
# Usage: install.sh SOURCE_DIR BUILD_DIR. Exit: 0 all ok, 1 a failure, 77 no OpenCL platform.
set -u
src=${1:?usage: install.sh SOURCE_DIR BUILD_DIR}
build=${2:?usage: install.sh SOURCE_DIR BUILD_DIR}
src=$(cd "$src" && pwd) && build=$(cd "$build" && pwd) || exit 1

failures=0
ok() { echo "ok   $*"; }
fail() { echo "FAIL $*"; failures=$((failures + 1)); }
# The C compiler the build used (cc when the cache does not say).
cc=$(sed -n 's/^CMAKE_C_COMPILER:[A-Z]*=//p' "$build/CMakeCache.txt" 2>/dev/null)
cc=${cc:-cc}
for tool in cmake pkg-config "$cc" readelf ldd; do
  command -v "$tool" >/dev/null 2>&1 || { echo "FAIL $tool is not installed"; exit 1; }
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/clformer-install.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix

# --- install ---
if cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" 2>&1; then
  ok "cmake --install into $prefix"
else
  fail "cmake --install:"; cat "$tmp/install.log"
  exit 1
fi

# The library directory is GNUInstallDirs' CMAKE_INSTALL_LIBDIR (lib, lib64 or lib/<multiarch>):
# take it from where clformer.pc went.
pc=$(find "$prefix" -path '*/pkgconfig/clformer.pc' | head -n 1)
if [ -z "$pc" ]; then
  fail "no pkgconfig/clformer.pc under $prefix"; find "$prefix" -type f | sed 's/^/  /'
  exit 1
fi
libdir=$(dirname "$(dirname "$pc")")
ok "clformer.pc in ${libdir#"$prefix"/}/pkgconfig"

for f in include/clformer/clformer.h include/clformer/runtime.h bin/clformer; do
  if [ -f "$prefix/$f" ]; then ok "installed $f"; else fail "$f is not installed"; fi
done
cmake_dir=$libdir/cmake/clformer
for f in clformerConfig.cmake clformerConfigVersion.cmake clformerTargets.cmake; do
  if [ -f "$cmake_dir/$f" ]; then ok "installed ${cmake_dir#"$prefix"/}/$f"; else fail "$f is not installed in $cmake_dir"; fi
done

so=$libdir/libclformer.so
if [ -e "$so" ] && [ -e "$libdir/libclformer.so.0" ]; then
  soname=$(readelf -d "$so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
  if [ "$soname" = libclformer.so.0 ]; then ok "SONAME $soname ($(basename "$(readlink -f "$so")"))"
  else fail "SONAME of $so is '$soname', want libclformer.so.0"; fi
  undefined=$(LD_LIBRARY_PATH=$libdir ldd -r "$so" 2>&1 | grep -E 'undefined symbol|not found')
  if [ -z "$undefined" ]; then ok "every symbol of libclformer.so resolves through its own DT_NEEDED list"
  else fail "libclformer.so does not resolve by itself:"; echo "$undefined" | head -n 10; fi
else
  fail "libclformer.so / libclformer.so.0 missing in $libdir"
fi

# Run a built example; 77 (no OpenCL platform) ends the test as skipped.
run_example() {
  local what=$1; shift
  "$@" >"$tmp/run.log" 2>&1
  local rc=$?
  sed 's/^/    /' "$tmp/run.log"
  if [ $rc -eq 77 ]; then
    echo "SKIP: no OpenCL platform ($what)"
    exit 77
  elif [ $rc -eq 0 ]; then ok "$what ran and passed its checks"
  else fail "$what exited with $rc"; fi
}

# Where the dynamic loader takes libclformer.so.0 from for a program: check_ldd WHAT LDD-COMMAND...
check_ldd() {
  local what=$1 out line
  shift
  out=$("$@" 2>&1)
  line=$(grep 'libclformer\.so' <<<"$out")
  line=${line#"${line%%[![:space:]]*}"}
  case "$line" in
    *"=> $libdir/libclformer.so.0 "*) ok "$what loads libclformer from the prefix: $line" ;;
    *) fail "$what does not load libclformer from $libdir: ${line:-not linked}"; printf '%s\n' "$out" | sed 's/^/    /' ;;
  esac
}

# --- (1) pkg-config and a plain compiler line ---
export PKG_CONFIG_PATH=$libdir/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
if flags=$(pkg-config --cflags --libs clformer 2>"$tmp/pc.err"); then
  ok "pkg-config --cflags --libs clformer: $flags"
  case " $(pkg-config --cflags clformer) " in
    *" -DCL_TARGET_OPENCL_VERSION=120 "*) ok "pkg-config Cflags define CL_TARGET_OPENCL_VERSION=120" ;;
    *) fail "pkg-config Cflags lack -DCL_TARGET_OPENCL_VERSION=120" ;;
  esac
  v=$(pkg-config --modversion clformer)
  if [ "$v" = 0.1.0 ]; then ok "pkg-config --modversion: $v"; else fail "pkg-config --modversion: '$v', want 0.1.0"; fi
  # shellcheck disable=SC2086 # the flags are words
  if "$cc" -std=c11 -Wall -Wextra -Wshadow -Werror -o "$tmp/example-pc" "$src/tests/install/example.c" $flags -lm \
      >"$tmp/cc.log" 2>&1; then
    ok "$(basename "$cc") example.c \$(pkg-config --cflags --libs clformer) (-Wall -Wextra -Wshadow -Werror)"
    # No RUNPATH from these flags: the loader finds the prefix through LD_LIBRARY_PATH.
    lib_path=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    check_ldd "example (pkg-config, LD_LIBRARY_PATH)" env LD_LIBRARY_PATH="$lib_path" ldd "$tmp/example-pc"
    run_example "example (pkg-config)" env LD_LIBRARY_PATH="$lib_path" "$tmp/example-pc"
  else
    fail "$(basename "$cc") example.c with pkg-config's flags:"; sed 's/^/    /' "$tmp/cc.log"
  fi
else
  fail "pkg-config --cflags --libs clformer:"; sed 's/^/    /' "$tmp/pc.err"
fi

# --- (2) find_package(clformer) from a separate CMake project ---
if cmake -S "$src/tests/install" -B "$tmp/consumer" -DCMAKE_PREFIX_PATH="$prefix" -DEXAMPLE_WERROR=ON \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$tmp/consumer.log" 2>&1 \
    && cmake --build "$tmp/consumer" >>"$tmp/consumer.log" 2>&1; then
  ok "find_package(clformer) project configured and built (-Werror)"
  # CMake gives the build-tree binary a RUNPATH to the imported library: no LD_LIBRARY_PATH.
  check_ldd "example (find_package, RUNPATH)" env -u LD_LIBRARY_PATH ldd "$tmp/consumer/example"
  run_example "example (find_package)" env -u LD_LIBRARY_PATH "$tmp/consumer/example"
else
  fail "configuring or building tests/install/CMakeLists.txt:"; sed 's/^/    /' "$tmp/consumer.log"
fi

if [ $failures -ne 0 ]; then
  echo "install: $failures check(s) FAILED"
  exit 1
fi
echo "install: all checks passed"
