#!/usr/bin/env bash
# Device errors in the middle of a run (issue 16), made to happen by tests/lib/clfault.c (LD_PRELOADed
# before the OpenCL ICD loader; built beside clformer as libclfault.so): a kernel launch that fails with
# CL_OUT_OF_RESOURCES after a checkpoint was written, and a buffer allocation that fails with
# CL_MEM_OBJECT_ALLOCATION_FAILURE while the model is created. Each: exit 1, the OpenCL call and the
# error named, where the run stopped, the device's memory, the last checkpoint's state and how to
# continue; the checkpoint is left as it was and --resume finishes the run.
bin=$1; src=$2
source "$(dirname "${BASH_SOURCE[0]}")/../lib/cli.sh"
fault=$(dirname "$bin")/libclfault.so
[[ -f $fault ]] || { echo "SKIP: $fault not built"; exit 77; }
require_opencl
require_corpus 300000 "$tmp/text.txt"
tiny_config "$tmp/tiny.yaml"
cd "$tmp"
sha() { sha256sum "$1" | cut -d' ' -f1; }
# the tensors' bytes of a checkpoint (its metadata holds wall times and the config's train.steps)
tensors() { python3 -c "
import json,struct,sys,hashlib
b=open(sys.argv[1],'rb').read(); n=struct.unpack('<Q',b[:8])[0]; h=json.loads(b[8:8+n]); d=b[8+n:]
print(hashlib.sha256(b''.join(d[v['data_offsets'][0]:v['data_offsets'][1]] for k,v in sorted(h.items()) if k!='__metadata__')).hexdigest())" "$1"; }
count() { awk -v k="$1" '$1 == k {print $2}' "$2"; }
with_fault() { env LD_PRELOAD="$fault" "$@"; }

# 0. The injector reaches clformer's OpenCL calls (the ICD loader is a shared library it links), and
# counts them: 10 steps, then 20 (a checkpoint at 10), measure the launches of a step from here.
"$bin" train tiny.yaml --set train.out=warm --set train.steps=2 --quiet >/dev/null 2>&1  # self-test verdict cached
with_fault CLFAULT_COUNT_FILE=n10 "$bin" train tiny.yaml --set train.out=ten --set train.steps=10 --quiet || bad "10 steps"
with_fault CLFAULT_COUNT_FILE=n20 "$bin" train tiny.yaml --set train.out=twenty --quiet || bad "20 steps"
e10=$(count enqueue n10); e20=$(count enqueue n20)
if [[ -n "$e10" && -n "$e20" && $e20 -gt $e10 && $e10 -gt 0 ]]; then
  ok "LD_PRELOAD interposes clEnqueueNDRangeKernel ($e10 launches in 10 steps, $e20 in 20)"
else
  bad "the injector saw no launches (n10: $(cat n10 2>&1), n20: $(cat n20 2>&1))"; exit $fail
fi

# 1. CL_OUT_OF_RESOURCES at a launch three steps after the step-10 checkpoint
at=$(( e10 + 3 * (e20 - e10) / 10 ))
err=$(with_fault CLFAULT_ENQUEUE_FAIL_AT=$at "$bin" train tiny.yaml --set train.out=run --quiet 2>&1); rc=$?
[[ $rc -eq 1 ]] && ok "a device error mid-run exits 1" || bad "exit code $rc: $err"
[[ "$err" == *"clEnqueueNDRangeKernel("*") failed at "*"CL_OUT_OF_RESOURCES (-5)"* ]] \
  && ok "the message names the OpenCL call and the error" || bad "call and error: $err"
[[ "$err" =~ "the device failed with CL_OUT_OF_RESOURCES in step "1[3-4]" of 20" ]] \
  && ok "the message says in which step the run stopped" || bad "step: $err"
[[ "$err" == *"the run's buffers take "*" MiB of "*" MiB (at most "*" MiB in one buffer)"* ]] \
  && ok "the message gives the run's device memory and the device's" || bad "sizes: $err"
[[ "$err" == *"the last checkpoint, of step 10, is intact (run/checkpoint.safetensors): continue with clformer train --resume run"* ]] \
  && ok "the message says the step-10 checkpoint is intact and how to resume" || bad "checkpoint: $err"
[[ $(tensors run/checkpoint.safetensors) == $(tensors ten/checkpoint.safetensors) ]] \
  && ok "the checkpoint holds step 10's weights, as a run of 10 steps wrote them" || bad "checkpoint tensors differ"
[[ $(tail -1 run/metrics.csv | cut -d, -f1) == 10 && ! -e run/run.json ]] \
  && ok "metrics.csv ends at step 10; no run.json claims an end" || bad "records: $(tail -1 run/metrics.csv) $(cat run/run.json 2>&1)"

# 2. a second fault, in the resumed run's first step: the checkpoint stays byte for byte
before=$(sha run/checkpoint.safetensors)
err=$(with_fault CLFAULT_ENQUEUE_FAIL_AT=20 "$bin" train --resume run --quiet 2>&1); rc=$?
[[ $rc -eq 1 && "$err" == *"in step 11 of 20"* && "$err" == *"of step 10, is intact"* && $(sha run/checkpoint.safetensors) == "$before" ]] \
  && ok "a fault in a resumed run leaves the checkpoint byte-identical" || bad "second fault: rc=$rc $err"

# 3. --resume without faults finishes the run, as if nothing had happened
out=$("$bin" train --resume run --quiet 2>&1); rc=$?
[[ $rc -eq 0 && $(tensors run/checkpoint.safetensors) == $(tensors twenty/checkpoint.safetensors) ]] \
  && grep -q '"status": "finished"' run/run.json \
  && ok "--resume then finishes (exit 0) with an uninterrupted run's weights" || bad "resume: rc=$rc $out"

# 4. CL_MEM_OBJECT_ALLOCATION_FAILURE at every buffer from the first: the model cannot be created
err=$(with_fault CLFAULT_CREATE_BUFFER_FAIL_AT=1 CLFAULT_STICKY=1 CLFAULT_ERROR=CL_MEM_OBJECT_ALLOCATION_FAILURE \
      "$bin" train tiny.yaml --set train.out=alloc 2>&1); rc=$?
[[ $rc -eq 1 && "$err" == *"clCreateBuffer"*"CL_MEM_OBJECT_ALLOCATION_FAILURE (-4)"* && "$err" == *" MiB) asked for"* && "$err" == *"while setting up the run, before its first step"* \
   && "$err" == *" MiB of memory (at most "*" MiB in one buffer) and could not allocate"* && "$err" != *"Segmentation"* ]] \
  && ok "an allocation failure at model creation: exit 1, said clearly with the device's memory" || bad "alloc: rc=$rc $err"
[[ ! -e alloc/config.yaml && ! -e alloc/checkpoint.safetensors && "$err" == *"run the same command again"* ]] \
  && ok "nothing of that run was written; the message says to run it again" || bad "alloc files: $(ls alloc 2>&1)"
out=$("$bin" train tiny.yaml --set train.out=alloc --set train.steps=2 --quiet 2>&1); rc=$?
[[ $rc -eq 0 ]] && ok "the same command then runs" || bad "rerun after alloc failure: rc=$rc $out"

# 5. compare: the same words about the variant's run, and its own way to continue
cat > cmp.yaml <<YAML
base: {seed: 5, data: {train: text.txt, seq_len: 32, batch_size: 4}, model: {layers: 1, d_model: 32, heads: 2, d_ff: 64},
       train: {steps: 6, eval_every: 3, eval_batches: 1, log_every: 3, checkpoint_every: 3}}
variants: [{name: only, set: {model.norm: pre}}]
YAML
with_fault CLFAULT_COUNT_FILE=nc "$bin" compare cmp.yaml --out cmp-count >/dev/null 2>&1 || bad "compare count run"
err=$(with_fault CLFAULT_ENQUEUE_FAIL_AT=$(( $(count enqueue nc) * 5 / 6 )) "$bin" compare cmp.yaml --out cmp 2>&1); rc=$?
[[ $rc -eq 1 && "$err" == *"clformer compare: [1/1 only] the device failed with CL_OUT_OF_RESOURCES in step "* \
   && "$err" == *"of step 3, is intact (cmp/only/checkpoint.safetensors): run the same compare command again"* ]] \
  && ok "compare: the variant, the step and the checkpoint named" || bad "compare fault: rc=$rc $err"
out=$("$bin" compare cmp.yaml --out cmp 2>&1); rc=$?
[[ $rc -eq 0 && -s cmp/summary.md ]] && ok "compare run again finishes" || bad "compare again: rc=$rc $out"
exit $fail
