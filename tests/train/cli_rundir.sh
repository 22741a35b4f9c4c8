#!/usr/bin/env bash
# The run directory under stress: two runs started into one directory at once (one proceeds, the
# other is refused at once naming the holder), a run killed before its first checkpoint (continued
# with --resume), and the temporaries a killed checkpoint write leaves (removed when their writer
# is dead, kept when it is alive).
bin=$1; src=$2
source "$(dirname "${BASH_SOURCE[0]}")/../lib/cli.sh"
require_opencl
require_corpus 300000 "$tmp/text.txt"
tiny_config "$tmp/tiny.yaml"
cd "$tmp"
"$bin" train tiny.yaml --set train.out=warm --set train.steps=1 --quiet >/dev/null 2>&1  # the self-test, once

# metrics.csv whole: the header, then rows of 7 fields with numeric steps strictly increasing up to $2
metrics_intact() {
  awk -F, -v last="$2" 'NR == 1 { ok = $0 == "step,lr,train_loss,valid_loss,grad_norm,tokens_per_s,wall_s"; next }
    { if (NF != 7 || $1 !~ /^[0-9]+$/ || $1 + 0 <= prev || $2 == "" || $3 == "" || $7 == "") ok = 0; prev = $1 + 0 }
    END { exit !(ok && prev == last) }' "$1/metrics.csv"
}
# Two commands ("$@" split at --) at once; sets rc1 rc2 pid1 pid2 and the logs r1.log r2.log.
race() {
  local a=() b=() x
  for x in "$@"; do shift; [[ $x == -- ]] && break; a+=("$x"); done
  b=("$@")
  "$bin" "${a[@]}" > r1.log 2>&1 & pid1=$!
  "$bin" "${b[@]}" > r2.log 2>&1 & pid2=$!
  wait $pid1; rc1=$?
  wait $pid2; rc2=$?
}
# exactly one of the racers finished (0), the other was refused (2) naming $1 and the winner's pid
one_refused() {
  local win lose_log
  if [[ $rc1 -eq 0 && $rc2 -eq 2 ]]; then win=$pid1; lose_log=r2.log
  elif [[ $rc2 -eq 0 && $rc1 -eq 2 ]]; then win=$pid2; lose_log=r1.log
  else return 1; fi
  grep -q "$1" $lose_log && grep -q "in use" $lose_log && grep -q "pid $win" $lose_log
}
long=(--set train.steps=1500 --set train.log_every=1 --set train.eval_every=0 --set train.checkpoint_every=500 --quiet)

# 1. two fresh runs into one directory
race train tiny.yaml --set train.out=same "${long[@]}" -- train tiny.yaml --set train.out=same "${long[@]}"
one_refused same && metrics_intact same 1500 \
  && ok "two runs into one directory: one proceeds, the other is refused (exit 2) naming the holder" \
  || bad "concurrent train: rc=$rc1,$rc2 $(head -c 600 r1.log) | $(head -c 600 r2.log) | $(awk -F, 'NF != 7' same/metrics.csv | head -3)"

# 2. two resumes of one directory
"$bin" train tiny.yaml --set train.out=res --quiet
race train --resume res "${long[@]}" -- train --resume res "${long[@]}"
one_refused res && metrics_intact res 1500 \
  && ok "two resumes of one directory: one proceeds, the other is refused (exit 2)" \
  || bad "concurrent resume: rc=$rc1,$rc2 $(head -c 600 r1.log) | $(head -c 600 r2.log)"

# 3. killed (SIGKILL) before its first checkpoint: --resume starts it from step 0 and finishes
"$bin" train tiny.yaml --set train.out=k --set train.steps=100000 --set train.log_every=1 --set train.eval_every=0 \
  --set train.checkpoint_every=0 > k.log 2>&1 &
pid=$!
for i in $(seq 1 100); do sleep 0.1; grep -q "^step " k.log 2>/dev/null && break; done
kill -KILL $pid; wait $pid 2>/dev/null
[[ -e k/config.yaml && ! -e k/checkpoint.safetensors ]] || bad "setup: the killed run left $(ls k | tr "\n" " ")"
err=$("$bin" train tiny.yaml --set train.out=k --quiet 2>&1); rc=$?
[[ $rc -eq 2 && "$err" == *"--resume k"* ]] && ok "train into it names --resume" || bad "train into a killed run: rc=$rc ${err:0:400}"
out=$("$bin" train --resume k --set train.steps=30 --set train.log_every=10 2>&1); rc=$?
[[ $rc -eq 0 && "$out" == *"no checkpoint"*"step 0"* && "$out" == *"step 30/30"* ]] && metrics_intact k 30 \
  && grep -q '"status": "finished"' k/run.json \
  && ok "a run killed before its first checkpoint continues with --resume (from step 0)" || bad "resume after kill: rc=$rc ${out:0:400}"
mkdir -p k2; cp k/config.yaml k2/; echo "my notes" > k2/metrics.csv
err=$("$bin" train --resume k2 --quiet 2>&1); rc=$?
[[ $rc -eq 2 && $(cat k2/metrics.csv) == "my notes" ]] && ok "a metrics.csv that is not ours is never overwritten" \
  || bad "foreign metrics.csv: rc=$rc ${err:0:400} $(head -2 k2/metrics.csv)"
mkdir -p k3; sed 's/lr: 0.003/lr: 0.001/' k/config.yaml > k3/config.yaml
err=$("$bin" train tiny.yaml --resume k3 --quiet 2>&1); rc=$?
[[ $rc -eq 2 && "$err" == *"optim.lr"* ]] && ok "restarting a run with no checkpoint keeps its config" || bad "k3: rc=$rc ${err:0:400}"
cp -r k k4; rm k4/checkpoint.safetensors; cp k4/metrics.csv k4.csv
err=$("$bin" train --resume k4 --quiet 2>&1); rc=$?
[[ $rc -eq 2 && "$err" == *"no checkpoint"* ]] && cmp -s k4/metrics.csv k4.csv \
  && ok "a run that ended (run.json) but lost its checkpoint is not started again" || bad "k4: rc=$rc ${err:0:400}"
mkdir -p empty; "$bin" train tiny.yaml --resume empty --quiet >/dev/null 2>&1
[[ -z $(ls empty) ]] && ok "a resume of a directory without a run leaves nothing there" || bad "empty: $(ls empty)"

# 4. stale temporaries: a dead writer's are removed, a live one's and anything not ours are kept
"$bin" train tiny.yaml --set train.out=t --quiet
touch t/checkpoint.safetensors.tmp.99999999.0 t/run.json.tmp.99999999.3 t/checkpoint.safetensors.tmp.$$.0 \
      t/notes.txt.tmp.99999999.0 t/checkpoint.safetensors.tmp.99999999.x t/checkpoint.safetensors.tmp.99999999
out=$("$bin" train --resume t --set train.steps=25 --quiet 2>&1); rc=$?
[[ $rc -eq 0 && ! -e t/checkpoint.safetensors.tmp.99999999.0 && ! -e t/run.json.tmp.99999999.3 \
   && -e t/checkpoint.safetensors.tmp.$$.0 && -e t/notes.txt.tmp.99999999.0 && -e t/checkpoint.safetensors.tmp.99999999.x \
   && -e t/checkpoint.safetensors.tmp.99999999 && "$out" == *"removed 2 stale temporar"* ]] \
  && ok "on resume, a dead writer's temporaries are removed, the rest kept" || bad "temporaries: rc=$rc ${out:0:400} $(ls t | tr "\n" " ")"
mkdir -p u; touch u/config.yaml.tmp.99999999.1 u/metrics.csv.tmp.99999999.2
out=$("$bin" train tiny.yaml --set train.out=u --quiet 2>&1); rc=$?
[[ $rc -eq 0 && -z $(ls u | grep tmp) && "$out" == *"removed 2 stale temporar"* ]] \
  && ok "a fresh run into a directory removes them too" || bad "fresh temporaries: rc=$rc ${out:0:400} $(ls u | tr "\n" " ")"

# 5. compare's runs: a directory in use is refused, and a variant killed before its first checkpoint
# is started again by rerunning compare
cat > cmp.yaml <<YAML
base:
  data: {train: text.txt, seq_len: 32, batch_size: 4}
  model: {layers: 2, d_model: 32, heads: 2, d_ff: 64}
  train: {steps: 600, eval_every: 0, eval_batches: 2, log_every: 1, checkpoint_every: 0}
target_loss: 3.5
plateau_after: 10
variants:
  - {name: pre, set: {model.norm: pre}}
out: cmp
YAML
"$bin" compare cmp.yaml > c.log 2>&1 &
pid=$!
for i in $(seq 1 100); do sleep 0.1; grep -q "step *[0-9]*/600 |" c.log 2>/dev/null && break; done
kill -KILL $pid; wait $pid 2>/dev/null
[[ -e cmp/pre/config.yaml && ! -e cmp/pre/checkpoint.safetensors ]] || bad "setup: the killed compare left $(ls cmp/pre | tr "\n" " ")"
if command -v flock >/dev/null; then
  exec 9>>cmp/pre/run.lock; flock -n 9  # this shell holds the lock (flock(1), the same flock(2) lock)
  err=$("$bin" compare cmp.yaml 2>&1 9>&-); rc=$?
  exec 9>&-
  [[ $rc -eq 2 && "$err" == *"cmp/pre' is in use"* ]] && ok "compare is refused a run directory in use" \
    || bad "compare into a locked directory: rc=$rc ${err:0:400}"
fi
out=$("$bin" compare cmp.yaml 2>&1); rc=$?
[[ $rc -eq 0 ]] && metrics_intact cmp/pre 600 && grep -q '"status": "finished"' cmp/pre/run.json \
  && ok "a compare variant killed before its first checkpoint is run again by rerunning compare" \
  || bad "compare after kill: rc=$rc ${out: -400}"
# killed between the last step's checkpoint and run.json: --resume records the end (exit 0), once
"$bin" train tiny.yaml --set train.out=endless --quiet >/dev/null 2>&1 && rm endless/run.json
err=$("$bin" train --resume endless 2>&1 >/dev/null); rc=$?
err2=$("$bin" train --resume endless 2>&1 >/dev/null); rc2=$?
[[ $rc -eq 0 && "$err" == *"recorded as finished"* && $(grep -c '"status": "finished"' endless/run.json) -eq 1 && $rc2 -eq 2 \
   && "$err2" == *"already has"* ]] && ok "a run killed after its last checkpoint is recorded finished on resume" \
  || bad "last-step resume: rc=$rc $err / rc2=$rc2 $err2"
exit $fail
