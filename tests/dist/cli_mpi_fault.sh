#!/usr/bin/env bash
# A device failure on one rank of a data-parallel job (issue 18): tests/lib/clfault.c, LD_PRELOADed into
# rank 1 alone (a wrapper reads OMPI_COMM_WORLD_RANK), fails a kernel launch with CL_OUT_OF_RESOURCES three
# steps after the step-10 checkpoint, while rank 0 waits for rank 1's gradients. The whole job stops (rank 1
# aborts it: MPI_Abort) within 30 s, exit 1, with one line naming the rank, its host and the error; the
# checkpoint holds step 10's weights as a clean 2-rank run of 10 steps wrote them, and `mpirun --resume`
# finishes the run on the curve of a run that never failed (weights bit for bit). Skipped (77) without
# mpirun, a clformer built without MPI, or the injector.
bin=$1 src=$2
source "$src/tests/lib/cli.sh"
fault=$(dirname "$bin")/libclfault.so
[[ -f $fault ]] || { echo "SKIP: $fault not built"; exit 77; }
require_opencl
command -v mpirun >/dev/null || { echo "SKIP: no mpirun (apt-get install openmpi-bin libopenmpi-dev)"; exit 77; }
cd "$tmp" && require_corpus 300000 text.txt && tiny_config tiny.yaml
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
mpi() { timeout 120 mpirun --oversubscribe -np 2 "$@"; }
cat > rank1.sh <<EOF
#!/usr/bin/env bash
# the injector in rank 1 only; its settings come through mpirun -x
[[ \$OMPI_COMM_WORLD_RANK == 1 ]] && export LD_PRELOAD=$fault
exec "\$@"
EOF
chmod +x rank1.sh
out=$(mpi "$bin" train tiny.yaml --set train.out=warm --set train.steps=1 --quiet 2>&1)  # self-test verdict cached
[[ $? -ne 0 && "$out" == *"built without MPI"* ]] && { echo "SKIP: clformer built without MPI"; exit 77; }

# rank 1's launches in 10 and 20 steps (2 ranks), to aim the fault at step 13
CLFAULT_COUNT_FILE=n10 mpi -x CLFAULT_COUNT_FILE ./rank1.sh "$bin" train tiny.yaml --set train.out=ten --set train.steps=10 --quiet
CLFAULT_COUNT_FILE=n20 mpi -x CLFAULT_COUNT_FILE ./rank1.sh "$bin" train tiny.yaml --set train.out=clean --quiet
e10=$(awk '$1 == "enqueue" {print $2}' n10); e20=$(awk '$1 == "enqueue" {print $2}' n20)
[[ -n $e10 && -n $e20 && $e20 -gt $e10 ]] && ok "the injector counts rank 1's launches ($e10 in 10 steps, $e20 in 20)" \
  || { bad "no launch counts: $(cat n10 n20 2>&1)"; exit $fail; }

at=$(( e10 + 3 * (e20 - e10) / 10 ))
t0=$(date +%s.%N)
err=$(CLFAULT_ENQUEUE_FAIL_AT=$at mpi -x CLFAULT_ENQUEUE_FAIL_AT ./rank1.sh "$bin" train tiny.yaml --set train.out=run \
  --quiet 2>&1); rc=$?
secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
[[ $rc -eq 1 ]] && awk -v s="$secs" 'BEGIN { exit !(s < 30) }' \
  && ok "a device error on rank 1 ends the job: mpirun exits 1 after $secs s" || bad "rc=$rc after $secs s: $err"
line=$(grep -m1 "^clformer: rank 1 of 2 on $(hostname) failed (exit 1: clEnqueueNDRangeKernel(" <<<"$err")
[[ "$line" == *"CL_OUT_OF_RESOURCES (-5)): stopping the whole job (MPI_Abort)" ]] \
  && ok "one line names the rank, its host and the error" || bad "no rank/host/error line: $err"
[[ "$err" =~ "the device failed with CL_OUT_OF_RESOURCES in step "1[3-4]" of 20" && \
   "$err" == *"the last checkpoint, of step 10, is intact (run/checkpoint.safetensors): continue with mpirun -np 2 clformer train --resume run"* ]] \
  && ok "rank 1 says in which step, that the step-10 checkpoint is intact, and how to continue under mpirun" \
  || bad "step/checkpoint: $err"
d=$(python3 "$src/tests/dist/stdiff.py" run/checkpoint.safetensors ten/checkpoint.safetensors)
[[ "$d" == "max_abs 0 max_rel 0" && $(tail -1 run/metrics.csv | cut -d, -f1) == 10 && ! -e run/run.json ]] \
  && ok "the checkpoint holds step 10's weights; metrics.csv ends at step 10; no run.json" \
  || bad "checkpoint: $d; $(tail -1 run/metrics.csv); $(cat run/run.json 2>&1)"
out=$(mpi "$bin" train --resume run --quiet 2>&1); rc=$?
d=$(python3 "$src/tests/dist/stdiff.py" run/checkpoint.safetensors clean/checkpoint.safetensors)
[[ $rc -eq 0 && "$d" == "max_abs 0 max_rel 0" ]] && cmp -s <(cut -d, -f1-5 run/metrics.csv) <(cut -d, -f1-5 clean/metrics.csv) \
  && ok "mpirun --resume finishes the run as if nothing had failed (weights and metrics)" || bad "resume: rc=$rc $d $out"
exit $fail
