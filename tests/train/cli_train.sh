#!/usr/bin/env bash
# `clformer train` end to end on a tiny model: the run's files, determinism, bit-identical resume,
# refusal to overwrite a run, refusal of damaged checkpoints, Ctrl-C, divergence, and sampling.
bin=$1; src=$2
source "$(dirname "${BASH_SOURCE[0]}")/../lib/cli.sh"
require_opencl
require_corpus 300000 "$tmp/text.txt"
tiny_config "$tmp/tiny.yaml"
cd "$tmp"
# tensor bytes of a checkpoint (the metadata holds wall times, so compare data only)
tensors() { python3 -c "
import json,struct,sys,hashlib
b=open(sys.argv[1],'rb').read(); n=struct.unpack('<Q',b[:8])[0]; h=json.loads(b[8:8+n]); d=b[8+n:]
print(hashlib.sha256(b''.join(d[v['data_offsets'][0]:v['data_offsets'][1]] for k,v in sorted(h.items()) if k!='__metadata__')).hexdigest())" "$1"; }
losses() { cut -d, -f1,3,4 "$1/metrics.csv"; }

out=$("$bin" train tiny.yaml --set train.out=a 2>&1); rc=$?
[[ $rc -eq 0 ]] && ok "train exits 0" || bad "train: rc=$rc $out"
for f in metrics.csv config.yaml checkpoint.safetensors run.json; do [[ -s a/$f ]] || bad "a/$f missing"; done
[[ $(wc -l < a/metrics.csv) -eq 5 ]] && ok "metrics.csv has a header and 4 rows" || bad "metrics rows: $(cat a/metrics.csv)"
grep -q '"status": "finished"' a/run.json && ok "run.json says finished" || bad "run.json: $(cat a/run.json)"
[[ "$out" == *"parameters"* && "$out" == *"MiB of device memory"* && "$out" == *"step 20/20"* ]] && ok "progress lines" || bad "progress: $out"
[[ "$out" == *"memory: "*" MiB (parameters "*"activations "*" for a micro-batch of 4 x 32, workspaces "* ]] \
  && ok "the memory plan's summary at the start" || bad "memory line: $out"
"$bin" check a/config.yaml >/dev/null && ok "saved config is valid" || bad "saved config invalid"

"$bin" train tiny.yaml --set train.out=b --quiet; losses a > la; losses b > lb
wa=$(tensors a/checkpoint.safetensors); wb=$(tensors b/checkpoint.safetensors)
[[ -s la && -n "$wa" ]] && cmp -s la lb && [[ "$wa" == "$wb" ]] \
  && ok "same config and seed: identical losses and weights" || bad "runs differ (or are missing)"

"$bin" train tiny.yaml --set train.out=c --set train.steps=10 --quiet && \
"$bin" train tiny.yaml --resume c --set train.steps=20 --quiet; rc=$?
losses c > lc
[[ $rc -eq 0 ]] && cmp -s la lc && [[ $(tensors a/checkpoint.safetensors) == $(tensors c/checkpoint.safetensors) ]] \
  && ok "10 steps + resume + 10 steps == 20 steps, bit for bit" || { bad "resume differs (rc=$rc)"; diff la lc; }

before=$(tensors a/checkpoint.safetensors)
err=$("$bin" train tiny.yaml --set train.out=a 2>&1); rc=$?
[[ $rc -eq 2 && "$err" == *"already holds a run"* && $(tensors a/checkpoint.safetensors) == "$before" ]] \
  && ok "an existing run is never overwritten" || bad "overwrite guard: rc=$rc $err"

cp -r a d; head -c 5000 a/checkpoint.safetensors > d/checkpoint.safetensors
err=$("$bin" train tiny.yaml --resume d 2>&1); rc=$?
[[ $rc -eq 2 && "$err" == *"truncated"* ]] && ok "truncated checkpoint refused" || bad "truncated: rc=$rc $err"
cp -r a e
err=$("$bin" train tiny.yaml --resume e --set model.d_model=64 2>&1); rc=$?
[[ $rc -eq 2 && "$err" == *"shape"* ]] && ok "mismatched checkpoint refused" || bad "mismatch: rc=$rc $err"
err=$("$bin" train tiny.yaml --resume nowhere 2>&1); rc=$?
[[ $rc -eq 2 && "$err" == *"no checkpoint"* ]] && ok "resume without checkpoint refused" || bad "no ckpt: rc=$rc $err"

err=$("$bin" train tiny.yaml --set train.out=f --set optim.lr=9 --set model.norm=post --set optim.name=sgd --set optim.momentum=0 --quiet 2>&1); rc=$?
grep -q '"status": "diverged"' f/run.json 2>/dev/null && [[ $rc -eq 3 ]] && ok "divergence is recorded, exit 3" || bad "divergence: rc=$rc $(cat f/run.json 2>/dev/null) $err"
# every step is watched: the run stops at the very step that diverged however rarely it logs, says
# why, keeps the checkpoint before it and writes none after (rows every 50 steps found it at 4)
div=(train tiny.yaml --set optim.lr=10 --set model.norm=post --set optim.name=sgd --set optim.momentum=0
     --set train.eval_every=0 --set train.steps=40)
out1=$("$bin" "${div[@]}" --set train.out=f1 --set train.log_every=1 --set train.checkpoint_every=1 2>&1); rc1=$?
out2=$("$bin" "${div[@]}" --set train.out=f2 --set train.log_every=50 --set train.checkpoint_every=2 2>&1); rc2=$?
s1=$(sed -n 's/^step \([0-9]*\): loss .*the run diverged (the loss is above 16.6.*/\1/p' <<<"$out1")
s2=$(sed -n 's/^step \([0-9]*\): loss .*the run diverged (the loss is above 16.6.*/\1/p' <<<"$out2")
ck2=$(python3 -c "
import json,struct
b=open('f2/checkpoint.safetensors','rb').read(); n=struct.unpack('<Q',b[:8])[0]; print(json.loads(b[8:8+n])['__metadata__']['step'])" 2>/dev/null)
last2=$(tail -1 f2/metrics.csv | cut -d, -f1)
[[ $rc1 -eq 3 && $rc2 -eq 3 && -n "$s1" && "$s2" == "$s1" && "$last2" == "$s2" ]] \
  && grep -q "\"diverged_step\": $s2," f2/run.json && grep -q "\"steps_done\": $((s2 - 1))," f2/run.json \
  && ok "divergence found at its very step ($s2) whether rows come every step or every 50" \
  || bad "divergence step: rc=$rc1/$rc2 every-step=$s1 every-50=$s2 last row=$last2 $out2 $(cat f2/run.json)"
want=$(( (s2 - 1) / 2 * 2 ))
[[ "$ck2" == "$want" && "$out2" == *"the last good checkpoint is kept, from step $want"* ]] \
  && ok "the checkpoint before the divergence (step $want) is kept, none written after" \
  || bad "checkpoint after divergence: step $ck2, want $want: $out2"

"$bin" train tiny.yaml --set train.out=g --set train.steps=100000 --set train.log_every=1 --set train.eval_every=0 \
  --set train.checkpoint_every=0 > g.log 2>&1 &
pid=$!
for i in $(seq 1 100); do sleep 0.2; grep -q "step .*3/" g.log 2>/dev/null && break; done
kill -INT $pid; wait $pid; rc=$?
stopped=$(sed -n 's/.*stopped by signal after step \([0-9]*\).*/\1/p' g.log)
ck_step=$(python3 -c "
import json,struct,sys
b=open('g/checkpoint.safetensors','rb').read(); n=struct.unpack('<Q',b[:8])[0]; print(json.loads(b[8:8+n])['__metadata__']['step'])" 2>/dev/null)
[[ $rc -eq 130 && -n "$stopped" && "$ck_step" == "$stopped" ]] && grep -q "\"steps_done\": $stopped," g/run.json \
  && ok "Ctrl-C checkpoints the very step it stops after ($stopped), exit 130" || bad "interrupt: rc=$rc stopped=$stopped checkpoint=$ck_step $(cat g/run.json)"
"$bin" train tiny.yaml --resume g --set train.steps=$((stopped + 2)) --quiet && ok "an interrupted run resumes" || bad "resume after Ctrl-C"

err=$("$bin" train tiny.yaml --resume c --set train.steps=30 --set model.norm=post --set model.final_norm=true 2>&1); rc=$?
[[ $rc -eq 2 && "$err" == *"model.norm was pre"* ]] && ok "resume refuses a changed architecture" || bad "resume with another norm: rc=$rc $err"
err=$("$bin" train tiny.yaml --resume c --set train.steps=30 --set seed=99 2>&1); rc=$?
[[ $rc -eq 2 && "$err" == *"seed was 5"* ]] && ok "resume refuses a changed seed" || bad "resume with another seed: rc=$rc $err"
err=$("$bin" train tiny.yaml --resume c --set train.steps=10 2>&1); rc=$?
[[ $rc -eq 2 && "$err" == *"already has 20 steps"* ]] && ok "resume refuses to shorten a run" || bad "shorten: rc=$rc $err"

out=$("$bin" sample a --prompt "In the" --tokens 20 --seed 3); rc=$?
out2=$("$bin" sample a --prompt "In the" --tokens 20 --seed 3)
[[ $rc -eq 0 && ${#out} -ge 26 && "$out" == "In the"* && "$out" == "$out2" ]] && ok "sample: prompt + 20 bytes, reproducible" || bad "sample: rc=$rc '$out'"
"$bin" sample a --top-p 0 >/dev/null 2>&1; [[ $? -eq 2 ]] && ok "sample rejects --top-p 0" || bad "sample top-p"
# a cache directory that cannot be written costs time, never the run: notes, no error line
err=$(CLFORMER_CACHE_DIR=/proc/version/cache "$bin" train tiny.yaml --set train.out=nocache --set train.steps=2 --quiet 2>&1 >/dev/null); rc=$?
[[ $rc -eq 0 && "$err" != *"error"* && "$err" == *"not cached"* ]] && ok "an unwritable cache is a note, not an error" \
  || bad "unwritable cache: rc=$rc $err"
# train.accumulate: 2 micro-batches of 4 train as one batch of 8, dropout on (a row's masks are keyed by its place
# in the step's batch); the losses and gradient norms in metrics.csv (6 digits) agree to 2e-5 relative, float32 rounding
"$bin" train tiny.yaml --set train.out=big8 --set data.batch_size=8 --set train.steps=6 --set train.log_every=1 --quiet
out=$("$bin" train tiny.yaml --set train.out=acc2 --set train.accumulate=2 --set train.steps=6 --set train.log_every=1 2>&1)
[[ "$out" == *"2 micro-batches accumulated a step (8 sequences)"* ]] && ok "train says it accumulates" || bad "accumulate line: $out"
paste -d, <(cut -d, -f3,5 big8/metrics.csv) <(cut -d, -f3,5 acc2/metrics.csv) | tail -n +2 | awk -F, '
  function off(a, b) { d = a - b; if (d < 0) d = -d; return d > 2e-5 * (a < 0 ? -a : a) }
  NF != 4 || off($1, $3) || off($2, $4) { bad = 1; print "  differs: " $0 } END { exit bad || NR != 6 }' \
  && ok "accumulate 2 x batch 4 == batch 8: losses and gradient norms of 6 steps" \
  || bad "accumulate: $(paste -d' ' big8/metrics.csv acc2/metrics.csv)"
# a model too large for the device (31.6 GB: over any machine of ours; 19 GB of 24 layers fitted the
# 22 GiB PoCL sees on a 24 GiB machine) is refused before any allocation, with its memory plan
err=$("$bin" train tiny.yaml --set train.out=big --set model.d_model=2048 --set model.heads=16 --set model.d_ff=8192 \
      --set model.layers=40 2>&1 >/dev/null); rc=$?
[[ $rc -eq 2 && "$err" == *"does not fit"*"parameters"*"7688.1 MiB"*"at most"*"MiB in one buffer"*"no batch_size fits"*"choose a smaller model"* ]] \
  && ok "a model too large for the device: its plan, exit 2" || bad "too large: rc=$rc $err"
exit $fail
