#!/usr/bin/env bash
# Set-up: install what is missing from Debian's packages, then configure and build into build/.
# Idempotent and quick when nothing is missing. Usage: tools/setup.sh [extra Debian packages...]
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(cmake gcc make pkg-config ocl-icd-opencl-dev opencl-c-headers pocl-opencl-icd libclblast-dev libyaml-dev libjansson-dev clinfo
          bible-kjv clblast-utils libopenblas0 mesa-opencl-icd oclgrind libopenmpi-dev openmpi-bin libpcre2-dev diatheke sword-text-kjv sword-text-sparv "$@")
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -eq 0 ]]; then
    echo "setup: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "setup: missing Debian packages: ${missing[*]}" >&2
    echo "setup: install them with:  sudo apt-get install ${missing[*]}" >&2
    exit 1
  fi
fi

werror=${CLFORMER_WERROR:-OFF}
if [[ ! -f build/CMakeCache.txt ]] || ! grep -q "CLFORMER_WERROR:BOOL=$werror" build/CMakeCache.txt; then
  cmake -S . -B build -DCLFORMER_WERROR="$werror" >/dev/null
fi
cmake --build build -j"$(nproc)" 2>&1 | grep -Ev '^\[ *[0-9]+%\]|^Consolidate|^-- ' || true
[[ -x build/clformer ]] || { echo "setup: build failed" >&2; exit 1; }
# Re-run to surface a failing build's exit status (the filter above swallows it).
cmake --build build -j"$(nproc)" >/dev/null
# The default corpus: the King James Bible from Debian's bible-kjv (public domain), one verse a line.
if [[ ! -s build/data/kjv.txt ]]; then
  mkdir -p build/data
  bible -l1000 gen1:1-rev22:21 | sed 's/^ *//' > build/data/kjv.txt.tmp
  mv build/data/kjv.txt.tmp build/data/kjv.txt
fi
# The translation pairs: Spanish (Reina-Valera 1909) -> English (KJV) verses from Debian's SWORD modules, split by book.
# About a minute, once; the language model does not need them, so a failure is a note.
pairs="translation pairs build/data/bible"
if [[ ! -s build/data/bible/test.en ]]; then
  if python3 tools/bible_pairs.py build/data/bible.tmp >/dev/null; then
    rm -rf build/data/bible && mv build/data/bible.tmp build/data/bible
  else
    pairs="no translation pairs (tools/bible_pairs.py failed: see above)"
  fi
fi
echo "setup: built build/clformer; corpus build/data/kjv.txt ($(wc -c < build/data/kjv.txt) bytes); $pairs"
