# Shared by the tests/cli_*.sh scripts, sourced after `bin=$1` (and `src=$2`): a scratch directory
# removed on exit, ok/bad lines that set $fail, and the skips (exit 77, which CTest reports as
# skipped) for a machine without OpenCL or without the corpus tools/setup.sh writes.
set -u
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fail=1; }
require_opencl() {
  "$bin" devices >/dev/null 2>&1 || { [[ $? -eq 2 ]] && { echo "SKIP: no OpenCL"; exit 77; }; }
}
require_corpus() {  # BYTES FILE: the first BYTES of the corpus into FILE
  head -c "$1" "$src/build/data/kjv.txt" > "$2" 2>/dev/null || { echo "SKIP: corpus missing (run tools/setup.sh)"; exit 77; }
}
# tiny_config FILE [TRAIN]: the tiny model the training tests share (2 layers, d_model 32, dropout on) over
# text.txt beside FILE (see require_corpus); TRAIN replaces its train: mapping.
tiny_config() {
  local train=${2:-"{steps: 20, eval_every: 10, eval_batches: 2, log_every: 5, checkpoint_every: 10}"}
  cat > "$1" <<YAML
seed: 5
data: {train: text.txt, seq_len: 32, batch_size: 4, valid_fraction: 0.1}
model: {norm: pre, layers: 2, d_model: 32, heads: 2, d_ff: 64, dropout: 0.1, attn_dropout: 0.1}
optim: {lr: 3e-3}
train: $train
YAML
}

# toy_pairs copy|reverse SPLIT=N...: SPLIT.src and SPLIT.tgt in the working directory, N sentences a line each
# of 3 to 6 words out of 16 (seeded: the same files every run); the target is the source (copy) or its words in
# reverse order. A translation task a tiny encoder-decoder learns in seconds.
toy_pairs() {
  python3 - "$@" <<'PY'
import random, sys
r = random.Random(7)
words = "red blue green cat dog bird sun moon tree rock fish star big small old new".split()
for arg in sys.argv[2:]:
    split, n = arg.split("=")
    lines = [" ".join(r.choice(words) for _ in range(r.randint(3, 6))) for _ in range(int(n))]
    targets = lines if sys.argv[1] == "copy" else [" ".join(reversed(l.split())) for l in lines]
    open(f"{split}.src", "w").write("\n".join(lines) + "\n")
    open(f"{split}.tgt", "w").write("\n".join(targets) + "\n")
PY
}
