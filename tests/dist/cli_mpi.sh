#!/usr/bin/env bash
# Data-parallel training under mpirun (clformer/dist.h), two ranks on this machine's devices (two
# ranks may share one). Skipped (77) without mpirun, or a clformer built without MPI.
#  - 2 ranks x batch 4 == 1 rank x batch 4 x accumulate 2, dropout on: the same micro-batches with the
#    same masks (keyed by each row's place in the step's global batch), so losses and weights agree to
#    1e-6 (measured: bit for bit, as a + b is the same sum in both);
#  - 3 ranks (oversubscribed) == 1 rank x accumulate 3, bit for bit: with 3 addends the order of a float sum
#    shows ((a + b) + c is not a + (b + c)), so this checks the all-reduce adds in rank order 0, 1, 2 as
#    accumulation adds micro-batches 0, 1, 2 (with 2, a + b == b + a hides any order);
#    with CLFORMER_GRAD_BUCKET=1, a bucket per range the backward finishes (the tiny model's 2 layers
#    would otherwise make one), so a range read before its gradients are final shows too;
#  - 2 ranks x batch 4 == 1 rank x batch 8, dropout on (0.1 everywhere), SGD: the same masks again, and
#    the gradients are the same sums in another order (rank 0's half + rank 1's half vs one GEMM over
#    all 8 rows), float32 rounding: losses and gradient norms to 2e-5 relative (metrics.csv's 6
#    digits), weights to 1e-5 of each tensor's largest value after 20 steps (measured 5.5e-7). SGD, not
#    Adam: Adam divides by sqrt(v), so a gradient that is rounding noise moves its weight by up to lr
#    either way;
#  - only rank 0 writes the run directory; a 2-rank checkpoint resumes on 1 rank (accumulate 2) on
#    the same curve;
#  - kill -9 of one rank: mpirun ends non-zero within 30 s saying so, and the checkpoint resumes;
#  - bench step under mpirun: rank 0 alone, then both ranks data-parallel; one table (rank 0's) with
#    every rank's step time, tokens/s and time in the exchange, the world's tokens/s and the scaling
#    efficiency, and the same in --json (world.tokens_per_s = 2 x 128 / the slower rank's median);
#    bench kernels is refused there, said once;
#  - compare under mpirun runs each variant data-parallel in turn: the same summary.json as one process
#    with train.accumulate=2 (the same micro-batches a step), but for times, speeds and directory names,
#    and the same weights bit for bit; run again, it skips the finished runs, said once;
#  - any other command (devices here) is refused under mpirun, said once.
bin=$1 src=$2
source "$src/tests/lib/cli.sh"
require_opencl
command -v mpirun >/dev/null || { echo "SKIP: no mpirun (apt-get install openmpi-bin libopenmpi-dev)"; exit 77; }
cd "$tmp" && require_corpus 300000 text.txt && tiny_config tiny.yaml
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
mpi() { timeout 300 mpirun --oversubscribe -np 2 "$bin" "$@"; }
out=$(mpi train tiny.yaml --set train.out=w2 --set train.log_every=1 2>&1); rc=$?
[[ $rc -eq 0 ]] || { [[ "$out" == *"built without MPI"* ]] && { echo "SKIP: clformer built without MPI"; exit 77; }; }
[[ $rc -eq 0 && "$out" == *"world: 2 ranks"*"rank 0: "*"device"*"rank 1: "*"device"* ]] \
  && ok "2 ranks train; the header lists each rank's host and device" || bad "2 ranks: rc=$rc $out"
[[ $(grep -c '^step 20/20' <<<"$out") -eq 1 ]] && ok "one rank prints progress" || bad "progress printed $(grep -c '^step 20/20' <<<"$out") times"
files=$(cd w2 && ls -A | tr '\n' ' ')
[[ "$files" == "checkpoint.safetensors config.yaml metrics.csv run.json run.lock " ]] \
  && ok "the run directory holds one writer's files" || bad "run directory: $files"
"$bin" train tiny.yaml --set train.out=a2 --set train.accumulate=2 --set train.log_every=1 --quiet
same() {  # A B TOL: metrics.csv train_loss and grad_norm within TOL relative, all 20 rows
  paste -d, <(cut -d, -f3,5 "$1/metrics.csv") <(cut -d, -f3,5 "$2/metrics.csv") | tail -n +2 | awk -F, -v t="$3" '
    function off(a, b) { d = a - b; if (d < 0) d = -d; return d > t * (a < 0 ? -a : a) }
    NF != 4 || off($1, $3) || off($2, $4) { bad = 1; print "  differs: " $0 } END { exit bad || NR != 20 }'
}
weights() {  # A B TOL: every tensor within TOL of its largest value
  local d; d=$(python3 "$src/tests/dist/stdiff.py" "$1/checkpoint.safetensors" "$2/checkpoint.safetensors") || return 1
  echo "  $1 vs $2: $d"
  awk -v t="$3" '{ exit !($4 <= t) }' <<<"$d"
}
same a2 w2 1e-6 && weights a2 w2 1e-6 && ok "dropout on: 2 ranks x 4 == 1 rank x 4 x accumulate 2 (losses, norms, weights)" \
  || bad "2 ranks vs accumulate 2 differ"
CLFORMER_GRAD_BUCKET=1 timeout 300 mpirun --oversubscribe -np 3 "$bin" train tiny.yaml --set train.out=w3 --set train.log_every=1 --quiet
"$bin" train tiny.yaml --set train.out=a3 --set train.accumulate=3 --set train.log_every=1 --quiet
same a3 w3 0 && weights a3 w3 0 && ok "3 ranks == 1 rank x accumulate 3, bit for bit: the sums in a fixed order" \
  || bad "3 ranks vs accumulate 3 differ"
S=(--set optim.name=sgd --set optim.lr=0.1 --set train.log_every=1 --quiet)
"$bin" train tiny.yaml --set train.out=s8 --set data.batch_size=8 "${S[@]}"
mpi train tiny.yaml --set train.out=s2 "${S[@]}" 2>/dev/null
same s8 s2 2e-5 && weights s8 s2 1e-5 && ok "dropout on: 2 ranks x batch 4 == 1 rank x batch 8 (SGD) to float32 rounding" \
  || bad "2 ranks vs batch 8 differ"
# resume: 10 steps on 2 ranks, 10 more on 1 rank with accumulate 2 (the same 2 micro-batches a step)
mpi train tiny.yaml --set train.out=r2 --set train.steps=10 --set train.log_every=1 --quiet 2>/dev/null
"$bin" train --resume r2 --set train.steps=20 --set train.accumulate=2 --quiet
same a2 r2 1e-6 && weights a2 r2 1e-6 && ok "a 2-rank checkpoint resumes on 1 rank on the same curve" || bad "resume on 1 rank"
err=$("$bin" train --resume r2 --set train.steps=30 --set train.accumulate=1 2>&1); rc=$?
[[ $rc -eq 2 && "$err" == *"train.accumulate"* ]] && ok "a resume with fewer micro-batches a step is refused" \
  || bad "accumulate change: rc=$rc $err"
# kill -9 of rank 1 in the middle: the job ends, non-zero, within 30 s, and the checkpoint resumes
mpi train tiny.yaml --set train.out=k --set train.steps=100000 --set train.checkpoint_every=20 --set train.eval_every=0 \
  --quiet >kill.log 2>&1 &
job=$!
for _ in $(seq 600); do [[ -s k/checkpoint.safetensors ]] && break; sleep 0.1; done
victim=  # rank 1: a clformer working in this test's directory with OMPI_COMM_WORLD_RANK=1
for p in $(pgrep -x clformer); do
  [[ $(readlink "/proc/$p/cwd") == "$tmp" ]] && tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=1 \
    && victim=$p
done
[[ -n $victim ]] || { bad "no rank 1 process found"; kill "$job"; exit 1; }
t0=$(date +%s.%N)
kill -9 "$victim"
for _ in $(seq 300); do kill -0 "$job" 2>/dev/null || break; sleep 0.1; done
wait "$job"; rc=$?
secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
log=$(cat kill.log)
[[ $rc -ne 0 ]] && awk -v s="$secs" 'BEGIN { exit !(s < 30) }' && [[ "$log" == *"signal 9"* || "$log" == *"Killed"* ]] \
  && ok "kill -9 of one rank: mpirun exits $rc after ${secs} s, saying so" || bad "kill: rc=$rc after ${secs} s: $log"
ck=$(awk -F, 'NR > 1 && $1 % 20 == 0 { s = $1 } END { print s + 0 }' k/metrics.csv)
out=$(mpi train --resume k --set train.steps=$((ck + 4)) 2>&1); rc=$?
[[ $ck -gt 0 && $rc -eq 0 && "$out" == *"resuming after step $ck of $((ck + 4))"* && "$out" == *"done:"* ]] \
  && ok "the killed job's checkpoint (step $ck) resumes" || bad "resume after kill (checkpoint $ck): rc=$rc $out"
# bench step: the 1-rank baseline and the world in one job
out=$(mpi bench step --config tiny.yaml --steps 10 --warmup 2 --json b.json 2>&1); rc=$?
[[ $rc -eq 0 && $(grep -c '^1 rank (rank 0 alone' <<<"$out") -eq 1 && $(grep -c '^world: .* tokens/s .*scaling efficiency' <<<"$out") -eq 1 \
   && $(grep -cE '^  [01] +[^ ].* [0-9.]+ \[[0-9.]+, [0-9.]+\] +[0-9]+ +[0-9.]+ +[0-9.]+$' <<<"$out") -eq 2 ]] \
  && ok "bench step under mpirun: 1 rank alone, then a row per rank and the world's figures, printed once" \
  || bad "bench step: rc=$rc $out"
python3 - b.json <<'PY' && ok "bench step --json: world.tokens_per_s, efficiency and per-rank rows agree" || bad "bench json: $(cat b.json)"
import json, sys
w = json.load(open(sys.argv[1]))["world"]
slow = max(r["step_ms"]["median"] for r in w["per_rank"])
assert w["ranks"] == 2 and len(w["per_rank"]) == 2 and w["tokens_per_rank"] == 128, w
assert abs(w["tokens_per_s"] - 2 * 128 / (slow / 1e3)) <= 1e-3 * w["tokens_per_s"], w
assert abs(w["efficiency"] - w["tokens_per_s"] / (2 * w["alone"]["tokens_per_s"])) <= 1e-3, w
assert all(0 <= r["mpi_ms"] <= r["exchange_ms"] + 0.01 <= r["step_ms"]["median"] for r in w["per_rank"]), w
PY
out=$(mpi bench kernels 2>&1); rc=$?
[[ $rc -eq 2 && $(grep -c "only \`bench step\` runs" <<<"$out") -eq 1 ]] && ok "bench kernels under mpirun is refused, said once" \
  || bad "bench kernels under mpirun: rc=$rc $out"
# compare: every variant data-parallel in turn, rank 0 writing; the report of one process
cat > cmp.yaml <<'YAML'
base: {seed: 5, data: {train: text.txt, seq_len: 32, batch_size: 4, valid_fraction: 0.1},
       model: {layers: 2, d_model: 32, heads: 2, d_ff: 64, dropout: 0.1, attn_dropout: 0.1}, optim: {lr: 3e-3},
       train: {steps: 10, eval_every: 5, eval_batches: 2, log_every: 5, checkpoint_every: 5}}
variants: [{name: pre, set: {model.norm: pre}}, {name: post, set: {model.norm: post}}]
target_loss: 4.5
YAML
out=$(mpi compare cmp.yaml --out c2 2>&1); rc=$?
"$bin" compare cmp.yaml --out c1 --set train.accumulate=2 >/dev/null 2>&1
[[ $rc -eq 0 && $(grep -c '^\[2/2 post\] | step 10/10' <<<"$out") -eq 1 && $(grep -c '^wrote c2/summary.md' <<<"$out") -eq 1 ]] \
  && ok "compare under mpirun: each variant in turn, progress and report said once" || bad "compare: rc=$rc $out"
python3 - c1/summary.json c2/summary.json <<'PY' && weights c1/pre c2/pre 0 && weights c1/post c2/post 0 \
  && ok "compare under mpirun == one process with accumulate 2: summary.json (but times) and weights bit for bit" \
  || bad "compare reports differ"
import json, sys
def strip(x):
    if isinstance(x, dict): return {k: strip(v) for k, v in x.items() if k not in ("wall_s", "tokens_per_s", "dir")}
    if isinstance(x, list): return [strip(v) for v in x]
    return x
a, b = (strip(json.load(open(p))) for p in sys.argv[1:])
if a != b: print("  ", a, "\n  ", b); sys.exit(1)
PY
out=$(mpi compare cmp.yaml --out c2 2>&1); rc=$?
[[ $rc -eq 0 && $(grep -c "already finished: skipped" <<<"$out") -eq 2 && "$out" != *"step 10/10"* ]] \
  && ok "compare under mpirun again: the finished runs skipped, said once each" || bad "compare again: rc=$rc $out"
# every other command runs as one process: refused under mpirun, said once
out=$(mpi devices 2>&1); rc=$?
[[ $rc -eq 2 && $(grep -c "runs as one process; under mpirun (2 ranks) only \`train\`, \`compare\` and \`bench step\`" <<<"$out") -eq 1 ]] \
  && ok "devices under mpirun is refused, said once" || bad "devices under mpirun: rc=$rc $out"
exit $fail
