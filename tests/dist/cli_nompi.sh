#!/usr/bin/env bash
# The build without MPI (-DCLFORMER_MPI=OFF) still compiles and runs as one process: configured and
# built (the clformer target only, incrementally) into nompi/ beside the tested binary. It links no
# MPI library, and started as if by a launcher of 2 processes it refuses (exit 2) rather than train
# twice alone.
bin=$1 src=$2
source "$src/tests/lib/cli.sh"
build=$(dirname "$bin")/nompi
if cmake -S "$src" -B "$build" -DCLFORMER_MPI=OFF -DCLFORMER_FUZZ=OFF -DCMAKE_BUILD_TYPE=Release >"$tmp/cfg.log" 2>&1 &&
   cmake --build "$build" --target clformer -j2 >"$tmp/build.log" 2>&1; then
  ok "the build with CLFORMER_MPI=OFF compiles"
else
  bad "the build without MPI: $(tail -n 20 "$tmp/cfg.log" "$tmp/build.log")"; exit 1
fi
ldd "$build/clformer" | grep -q libmpi && bad "it links MPI: $(ldd "$build/clformer" | grep mpi)" || ok "it links no MPI"
"$build/clformer" --version | grep -q "^clformer " && ok "it runs" || bad "--version"
err=$(OMPI_COMM_WORLD_SIZE=2 "$build/clformer" devices 2>&1); rc=$?
[[ $rc -eq 2 && "$err" == *"built without MPI"* ]] && ok "under a launcher of 2 it refuses (exit 2)" || bad "launcher: rc=$rc $err"
exit $fail
