#!/usr/bin/env bash
# Faults during a run (issue 16). A tiny model trained with a checkpoint every 3 steps is SIGKILLed
# again and again, at random moments and the moment a checkpoint's temporary appears: after every kill
# the run directory holds a complete checkpoint (or none yet), `train --resume` continues it, and the
# finished run's tensors are byte-identical to an uninterrupted run's. Then SIGTERM and SIGINT: the
# current step finishes, a checkpoint is written, exit 143 / 130, with the one-line summary (also
# under --quiet), and --resume continues; `compare` exits the same way.
# CLFORMER_KILL_SEED=N replays one sequence of kill times; CLFORMER_KILLS=N sets how many (default 24).
bin=$1; src=$2
source "$(dirname "${BASH_SOURCE[0]}")/../lib/cli.sh"
require_opencl
require_corpus 300000 "$tmp/text.txt"
steps=150 every=3
tiny_config "$tmp/tiny.yaml" "{steps: $steps, eval_every: 30, eval_batches: 2, log_every: 10, checkpoint_every: $every}"
cd "$tmp"
"$bin" train tiny.yaml --set train.out=warm --set train.steps=1 --quiet >/dev/null 2>&1  # the self-test, once

# tensor bytes of a checkpoint (the metadata holds wall times, so compare data only)
tensors() { python3 -c "
import json,struct,sys,hashlib
b=open(sys.argv[1],'rb').read(); n=struct.unpack('<Q',b[:8])[0]; h=json.loads(b[8:8+n]); d=b[8+n:]
print(hashlib.sha256(b''.join(d[v['data_offsets'][0]:v['data_offsets'][1]] for k,v in sorted(h.items()) if k!='__metadata__')).hexdigest())" "$1"; }
# A whole checkpoint: its header parses, its data ends where the last tensor does, every tensor's
# bytes match its shape, and (with EVERY STEPS) its step is a checkpoint step; prints the step (nothing
# when it is not whole).
whole_step() { python3 -c "
import json,struct,sys
b=open(sys.argv[1],'rb').read(); n=struct.unpack('<Q',b[:8])[0]; h=json.loads(b[8:8+n]); m=h.pop('__metadata__')
end=0
for k,v in h.items():
  a,z=v['data_offsets']; c=4
  for s in v['shape']: c*=s
  assert v['dtype']=='F32' and z-a==c, k; end=max(end,z)
assert len(b)==8+n+end
s=int(m['step']); e=int(sys.argv[2]); assert e==0 or s%e==0 or s==int(sys.argv[3]), s
print(s)" "$1" "${2:-0}" "${3:-0}" 2>/dev/null; }
valid_losses() { awk -F, 'NR > 1 && $4 != "" { print $1 "," $4 }' "$1/metrics.csv"; }
ms_now() { echo $(($(date +%s%N) / 1000000)); }
sleep_ms() { sleep "$(($1 / 1000)).$(printf %03d $(($1 % 1000)))"; }

t0=$(ms_now)
"$bin" train tiny.yaml --set train.out=start --set train.steps=1 --quiet || bad "a one-step run"
t1=$(ms_now)
"$bin" train tiny.yaml --set train.out=ref --quiet || bad "the uninterrupted run"
start_ms=$((t1 - t0)) run_ms=$(($(ms_now) - t1))
ref=$(tensors ref/checkpoint.safetensors); valid_losses ref > ref.valid
[[ -n "$ref" && -s ref.valid ]] || bad "the uninterrupted run left no checkpoint or no validation losses"
((fail)) && exit 1

# Until the PID's Nth checkpoint temporary in DIR appears (or PID ends, or 10 s pass).
wait_checkpoint_tmp() {
  local dir=$1 pid=$2 n=$3 seen=0 last="" f end=$((SECONDS + 10))
  while kill -0 "$pid" 2>/dev/null && ((SECONDS < end)); do
    for f in "$dir"/checkpoint.safetensors.tmp."$pid".*; do
      [[ -e $f && $f != "$last" ]] || continue
      last=$f; seen=$((seen + 1)); ((seen >= n)) && return 0
    done
  done
  return 1
}

seed=${CLFORMER_KILL_SEED:-$((RANDOM * 32768 + RANDOM))}
RANDOM=$seed
want=${CLFORMER_KILLS:-24}
timed_in=0 kills=0 before=0 during=0 elsewhere=0 timed=0 finished=0 round=1 prev=0 last_done=0
dir=k1
echo "kill seed $seed: SIGKILL at a random moment of the rest of the run ([0, $run_ms ms] from step 0, starting takes $start_ms ms), every 4th the moment a checkpoint is being written"
t_kills=$(ms_now)
while ((fail == 0)); do
  if [[ -e $dir/config.yaml ]]; then "$bin" train --resume "$dir" --quiet > log 2>&1 & pid=$!
  else "$bin" train tiny.yaml --set train.out="$dir" --quiet > log 2>&1 & pid=$!; fi
  is_timed=0
  if ((kills >= want)); then :  # enough kills: let it finish
  elif ((kills % 4 == 3)); then wait_checkpoint_tmp "$dir" $pid $((1 + RANDOM % 8)) && kill -KILL $pid 2>/dev/null && is_timed=1
  else  # the time left: starting, then the steps after the last checkpoint
    left=$((start_ms + (run_ms - start_ms) * (steps - prev) / steps))
    sleep_ms $(( (RANDOM * 32768 + RANDOM) % left )); kill -KILL $pid 2>/dev/null
  fi
  wait $pid 2>/dev/null; rc=$?
  if ((rc == 0)); then  # the run finished: it must be the uninterrupted run, bit for bit
    [[ $(tensors "$dir"/checkpoint.safetensors) == "$ref" ]] && valid_losses "$dir" | cmp -s - ref.valid \
      && grep -q '"status": "finished"' "$dir"/run.json && [[ -z $(ls "$dir" | grep '\.tmp\.') ]] \
      && ok "$dir: finished after $((kills - last_done)) kills, tensors and validation losses identical to the uninterrupted run's" \
      || bad "$dir finished but differs: $(valid_losses "$dir" | diff - ref.valid | head -5) $(ls "$dir")"
    finished=$((finished + 1)); last_done=$kills
    ((kills >= want)) && break
    round=$((round + 1)); dir=k$round prev=0
    continue
  fi
  if ((rc == 2)) && grep -q "already has $steps steps" log && grep -q '"status": "finished"' "$dir"/run.json; then
    # the previous kill landed after run.json recorded the end, just before the process exited: the
    # run is finished, and --resume rightly refuses to train it further; its weights must be exact
    [[ $(tensors "$dir"/checkpoint.safetensors) == "$ref" ]] && ok "$dir: killed after recording its end; finished, identical" \
      || bad "$dir: the last checkpoint differs from the uninterrupted run's"
    finished=$((finished + 1)) last_done=$kills
    ((kills >= want)) && break
    round=$((round + 1)); dir=k$round prev=0
    continue
  fi
  if ((rc != 137)); then bad "$dir: the run exited $rc instead of being killed: $(tail -3 log)"; break; fi
  kills=$((kills + 1)) timed=$((timed + is_timed))
  if compgen -G "$dir/checkpoint.safetensors.tmp.$pid.*" > /dev/null; then during=$((during + 1)) timed_in=$((timed_in + is_timed))
  elif [[ ! -e $dir/checkpoint.safetensors ]]; then before=$((before + 1))
  else elsewhere=$((elsewhere + 1)); fi
  if [[ -e $dir/checkpoint.safetensors ]]; then
    step=$(whole_step "$dir"/checkpoint.safetensors $every $steps)
    if [[ -z $step ]]; then bad "$dir: kill $kills left a checkpoint that is not whole"; break; fi
    if ((step < prev)); then bad "$dir: kill $kills: the checkpoint went back from step $prev to $step"; break; fi
    prev=$step
  elif ((prev > 0)); then bad "$dir: kill $kills: the checkpoint of step $prev is gone"; break; fi
done
t_kills=$(($(ms_now) - t_kills))
((fail == 0 && kills >= want && finished >= 1)) \
  && ok "$kills SIGKILLs survived ($before before the first checkpoint, $during during a checkpoint write, $elsewhere elsewhere; $timed_in of $timed timed at a checkpoint's temporary landed in its write), $finished runs finished identical, in $((t_kills / 1000)) s" \
  || bad "$kills kills ($before before the first checkpoint, $during during a checkpoint write, $elsewhere elsewhere), $finished runs finished"

# SIGTERM / SIGINT: after the current step, a checkpoint of that step, exit 143 / 130 and the summary
# (on stdout, with --quiet too); --resume continues.
long=(--set train.steps=100000 --set train.log_every=1 --set train.eval_every=0 --set train.checkpoint_every=0)
stop_test() {  # NAME SIGNAL CODE [--quiet]
  local name=$1 sig=$2 code=$3 quiet=${4:-} i
  "$bin" train tiny.yaml --set train.out="$name" "${long[@]}" $quiet > "$name.out" 2> "$name.err" & pid=$!
  for i in $(seq 1 200); do  # a progress line, or with --quiet a metrics row
    sleep 0.05
    grep -q "step .*2/" "$name.out" 2>/dev/null && break
    [[ $(wc -l 2>/dev/null < "$name/metrics.csv" || echo 0) -ge 3 ]] && break
  done
  kill -"$sig" $pid; wait $pid 2>/dev/null; rc=$?
  local stopped ck_step
  stopped=$(sed -n 's/.*stopped by signal after step \([0-9]*\).*checkpoint saved: resume with --resume '"$name"'$/\1/p' "$name.out")
  ck_step=$(whole_step "$name"/checkpoint.safetensors)
  [[ $rc -eq $code && -n "$stopped" && "$ck_step" == "$stopped" ]] && grep -q '"status": "interrupted"' "$name"/run.json \
    && ok "SIG$sig${quiet:+ with $quiet}: exit $code, a checkpoint of step $stopped, the summary on stdout" \
    || bad "SIG$sig${quiet:+ with $quiet}: rc=$rc (want $code) stopped='$stopped' checkpoint=$ck_step out: $(tail -2 "$name.out") err: $(tail -2 "$name.err")"
  "$bin" train --resume "$name" --set train.steps=$((stopped + 2)) --quiet > /dev/null \
    && [[ $(whole_step "$name"/checkpoint.safetensors) == $((stopped + 2)) ]] \
    && ok "SIG$sig${quiet:+ with $quiet}: --resume continues" || bad "SIG$sig${quiet:+ with $quiet}: resume"
}
stop_test term TERM 143
stop_test termq TERM 143 --quiet
stop_test intq INT 130 --quiet

# compare: the same exit codes
cat > cmp.yaml <<YAML
base:
  seed: 5
  data: {train: text.txt, seq_len: 32, batch_size: 4, valid_fraction: 0.1}
  model: {norm: pre, layers: 2, d_model: 32, heads: 2, d_ff: 64}
  train: {steps: 100000, eval_every: 0, eval_batches: 2, log_every: 1, checkpoint_every: 0}
variants:
  - {name: pre, set: {model.norm: pre}}
out: cmpout
YAML
"$bin" compare cmp.yaml > cmp.out 2>&1 & pid=$!
for i in $(seq 1 200); do sleep 0.05; grep -q "step .*2/" cmp.out && break; done
kill -TERM $pid; wait $pid 2>/dev/null; rc=$?
[[ $rc -eq 143 ]] && grep -q "stopped by signal after step" cmp.out && ok "compare: SIGTERM exits 143 after a checkpoint" \
  || bad "compare SIGTERM: rc=$rc $(tail -2 cmp.out)"
exit $fail
