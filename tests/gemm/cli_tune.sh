#!/usr/bin/env bash
# A tuning file written by `clformer tune` is applied by later runs: a per-shape choice of CLBlast
# for the model's shapes shows up as CLBlast kernels in the step's profile, CLFORMER_TUNE=off
# ignores it, tuned parameters of every CLBlast kernel (GEMM and helpers) and the direct/indirect
# switch reach CLBlast, `bench gemm` says CLBlast runs tuned (and times its defaults first), malformed lines are reported
# (file:line) without breaking the run, and a short `tune` (no CLBlast tuners) measures and writes the switch itself.
bin=$1
source "$(dirname "${BASH_SOURCE[0]}")/../lib/cli.sh"
require_opencl
export CLFORMER_CACHE_DIR="$tmp/cache"
unset CLFORMER_GEMM CLFORMER_TUNE
msg=$("$bin" tune --show 2>&1)
path=$(sed -n 's/.*(\(.*gemm-tune-[0-9a-f]*\.txt\)).*/\1/p' <<<"$msg")
[[ -n "$path" ]] && ok "tune --show names the file" || { bad "tune --show: $msg"; exit 1; }
mkdir -p "$(dirname "$path")"
# the small model's forward projections: N = 4*16 = 64 tokens, C = 32, F = 64
args=(--set model.layers=1 --set model.d_model=32 --set model.heads=2 --set model.d_ff=64 --set data.seq_len=16
      --set data.batch_size=4 --steps 10 --warmup 1)
{ echo "# test"; for s in "NT 64 96 32 1" "NT 64 32 32 1" "NT 64 64 32 1" "NT 64 32 64 1" "NT 64 256 32 1"; do
    echo "choice $s clblast 1 2"; done; } > "$path"
profile() { "$bin" bench step "${args[@]}" 2>&1; }
out=$(profile)
grep -q "clblast" <<<"$out" && ok "the file's per-shape choice is applied (CLBlast kernels in the profile)" \
  || bad "choice not applied: $(grep -A12 'per operation' <<<"$out")"
out=$(CLFORMER_TUNE=off profile)
! grep -q "clblast" <<<"$out" && ok "CLFORMER_TUNE=off ignores the file" || bad "CLFORMER_TUNE=off"
# a file of choices alone gives CLBlast nothing to tune: no defaults phase in bench gemm
out=$("$bin" bench gemm --set model.layers=1 --set model.d_model=32 --set model.heads=2 --set model.d_ff=64 \
      --set data.seq_len=16 --set data.batch_size=4 --repeat 1 2>&1); rc=$?
[[ $rc -eq 0 ]] && ! grep -q "default parameters first\|default clblast" <<<"$out" \
  && ok "bench gemm times CLBlast's defaults only when the file has CLBlast parameters" \
  || bad "bench gemm with a choices-only file: rc=$rc $(head -8 <<<"$out")"
echo "choice garbage" >> "$path"  # line 7
out=$(profile); rc=$?
[[ $rc -eq 0 ]] && grep -qF "$path:7: skipped" <<<"$out" \
  && ok "a malformed line is reported with its file and line and does not break a run" \
  || bad "malformed file: rc=$rc $(grep -i 'skipped\|error' <<<"$out" | head -5)"
# tuned parameters for CLBlast's GEMM kernels, its helper kernels and its direct/indirect switch
cat >> "$path" <<'EOF2'
clblast Xgemm GEMMK=0 KREG=1 KWG=16 KWI=2 MDIMA=8 MDIMC=8 MWG=32 NDIMB=8 NDIMC=8 NWG=32 SA=1 SB=1 STRM=0 STRN=0 VWM=2 VWN=2
clblast XgemmDirect KWID=2 MDIMAD=8 MDIMCD=8 NDIMBD=8 NDIMCD=8 PADA=1 PADB=1 VWMD=2 VWND=2 WGD=16
clblast Padtranspose PADTRA_PAD=1 PADTRA_TILE=8 PADTRA_WPT=2
clblast Transpose TRA_DIM=8 TRA_PAD=1 TRA_SHUFFLE=0 TRA_WPT=2
clblast Pad PAD_DIMX=16 PAD_DIMY=8 PAD_WPTX=2 PAD_WPTY=1
clblast Copy COPY_DIMX=16 COPY_DIMY=8 COPY_VW=2 COPY_WPT=2
clblast GemmRoutine XGEMM_MIN_INDIRECT_SIZE=1
EOF2
out=$(CLFORMER_VERBOSE=2 profile); rc=$?
missing=""
for k in Xgemm XgemmDirect Padtranspose Transpose Pad Copy GemmRoutine; do
  grep -q "tuned CLBlast parameters for $k applied" <<<"$out" || missing+=" $k"; done
[[ $rc -eq 0 && -z "$missing" ]] && ok "tuned parameters of every CLBlast kernel and the switch are applied" \
  || bad "tuned CLBlast parameters not applied:$missing (rc=$rc) $(grep -i clblast <<<"$out" | head -5)"
gemm_args=(--set model.layers=1 --set model.d_model=32 --set model.heads=2 --set model.d_ff=64 --set data.seq_len=16
           --set data.batch_size=4)
out=$(CLFORMER_VERBOSE=2 "$bin" bench gemm "${gemm_args[@]}" --repeat 3 --json "$tmp/tuned.json" 2>&1); rc=$?
[[ $rc -eq 0 ]] && grep -q "CLBlast: tuned.*Padtranspose.*XGEMM_MIN_INDIRECT_SIZE=1" <<<"$out" \
  && grep -q "median over .* shapes: tuned clblast" <<<"$out" && ok "bench gemm compares with tuned CLBlast" \
  || bad "bench gemm: rc=$rc $(head -8 <<<"$out")"
# and with CLBlast's defaults, timed before the tuned parameters reach CLBlast (none applied until then)
order=$(sed -n 's/.*\(default parameters first\|tuned CLBlast parameters for\).*/\1/p; s/^\(shape\) .*/\1/p' <<<"$out" | uniq | tr '\n' '|')
miss=$(python3 - "$tmp/tuned.json" <<'EOF2'
import json, statistics, sys
g = json.load(open(sys.argv[1]))["gemm"]
bad = []
for s in g["shapes"]:
    v = s["clblast_default"]
    if not v or not (0 < v["min"] <= v["median"] <= v["max"]): bad.append(s["name"] + " clblast_default")
m = g["median"]
if abs(m["clblast_default"] - statistics.median(s["clblast_default"]["median"] for s in g["shapes"])) > 1e-3 * m["clblast_default"]:
    bad.append("median clblast_default")
r = statistics.median(s["clblast"]["median"] / s["clblast_default"]["median"] for s in g["shapes"])
if abs(m["tuned_vs_default"] - r) > 1e-2 * r: bad.append("tuned_vs_default %r %r" % (m["tuned_vs_default"], r))
ms = sum(s["per_step"] * s["flops"] / (s["clblast_default"]["median"] * 1e9) for s in g["shapes"]) * 1e3
if abs(g["per_step"]["clblast_default_ms"] - ms) > 2e-3 * ms: bad.append("per_step clblast_default_ms")
print(" ".join(bad))
EOF2
)
[[ "$order" == "default parameters first|tuned CLBlast parameters for|shape|" && -z "$miss" ]] && grep -q "^shape .*default clblast.*tuned clblast" <<<"$out" \
  && grep -q "what tuning gave CLBlast: default clblast" <<<"$out" \
  && ok "bench gemm times CLBlast's defaults first, then applies the tuned parameters" \
  || bad "bench gemm default column: order '$order', JSON: $miss"
out=$(CLFORMER_TUNE=off "$bin" bench gemm "${gemm_args[@]}" --repeat 3 2>&1)
grep -q "CLBlast: untuned defaults" <<<"$out" && ! grep -q "default clblast\|default parameters first" <<<"$out" \
  && ok "bench gemm says when CLBlast is untuned (one CLBlast column)" \
  || bad "bench gemm untuned: $(head -6 <<<"$out")"
# lines CLBlast refuses (missing, unknown or misspelled parameters, an unknown kernel) are notes, not failures
cat >> "$path" <<'EOF2'
clblast Padtranspose PADTRA_TILE=8
clblast Nonsense FOO=1 BAR=2
clblast Copy COPY_DIMX=16 COPY_DIMY=8 COPY_VW=2 COPY_WPTT=2
clblast Xgemm
clblast
EOF2
out=$(CLFORMER_GEMM=clblast profile); rc=$?
[[ $rc -eq 0 ]] && grep -q "not applied" <<<"$out" && ok "refused CLBlast lines are reported and the run goes on" \
  || bad "refused CLBlast lines: rc=$rc $(grep -i 'clblast\|error' <<<"$out" | head -5)"
# a short tune without CLBlast's tuners still measures direct vs indirect and writes the switch
export CLFORMER_CACHE_DIR="$tmp/cache2"
out=$("$bin" tune --no-clblast-tuners --budget 30 "${gemm_args[@]}" 2>&1); rc=$?  # 30 s: room on a loaded machine
path2=$(sed -n 's/.*results: \(.*gemm-tune-[0-9a-f]*\.txt\).*/\1/p' <<<"$out")
[[ $rc -eq 0 && -f "$path2" ]] && grep -q "^clblast GemmRoutine XGEMM_MIN_INDIRECT_SIZE=[0-9]" "$path2" \
  && grep -q "^choice " "$path2" && ok "tune writes the measured direct/indirect switch and per-shape choices" \
  || bad "tune: rc=$rc $(tail -5 <<<"$out") $(cat "$path2" 2>/dev/null)"
exit $fail
