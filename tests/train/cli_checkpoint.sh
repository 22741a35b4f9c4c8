#!/usr/bin/env bash
# A checkpoint's metadata is checked, not trusted: tampered copies of a real tiny run's checkpoint
# (out-of-range, malformed or missing training state, a nonzero diverged_step, 100,000 metadata
# entries, a tensor of another rank) are each refused with exit 2 and a message naming the
# checkpoint and what is wrong, before anything in the run directory is touched.
bin=$1; src=$2
source "$(dirname "${BASH_SOURCE[0]}")/../lib/cli.sh"
require_opencl
require_corpus 200000 "$tmp/text.txt"
cat > "$tmp/tiny.yaml" <<YAML
seed: 5
data: {train: text.txt, seq_len: 16, batch_size: 2, valid_fraction: 0.1}
model: {norm: pre, layers: 1, d_model: 32, heads: 2, d_ff: 64}
train: {steps: 4, eval_every: 2, eval_batches: 1, log_every: 2, checkpoint_every: 2}
YAML
cd "$tmp"
"$bin" train tiny.yaml --set train.out=a --quiet || { bad "the tiny run failed"; exit 1; }

# tamper: for each line "DIR<tab>EDIT<tab>EDIT..." on stdin, a copy of run a in DIR whose
# checkpoint's header is rewritten. EDIT is KEY=VALUE (set a metadata value; VALUE *N: N bytes),
# -KEY (delete one), +N (add N metadata entries) or shape:TENSOR=D,D,... (a tensor's shape).
tamper() { python3 -c '
import json, shutil, struct, sys
for line in sys.stdin.read().splitlines():
    dst, *edits = line.split("\t")
    shutil.copytree("a", dst)
    b = open("a/checkpoint.safetensors", "rb").read(); n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n]); meta = h["__metadata__"]
    for e in edits:
        if e.startswith("shape:"):
            k, v = e[6:].split("=", 1); h[k]["shape"] = [int(d) for d in v.split(",")]
        elif e.startswith("-"): del meta[e[1:]]
        elif e.startswith("+"): meta.update({"pad%06d" % i: "x" for i in range(int(e[1:]))})
        else:
            k, v = e.split("=", 1); meta[k] = "x" * int(v[1:]) if v.startswith("*") else v
    j = json.dumps(h, separators=(",", ":")).encode(); j += b" " * (-len(j) % 8)
    open(dst + "/checkpoint.safetensors", "wb").write(struct.pack("<Q", len(j)) + j + b[8 + n:])
'; }
snapshot() { (cd "$1" && find . -type f | sort | xargs sha256sum); }
# peak resident memory (KiB) of a command's children, the command's exit code, then its output
peak() { python3 -c '
import resource, subprocess, sys
p = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, p.returncode); sys.stdout.write(p.stdout)
' "$@"; }

# WHAT, the text the refusal must name besides the checkpoint, and the edits
cases=(
  "step 4294967295|'step'|step=4294967295"
  "step -1|'step'|step=-1"
  "step 1e3|'step'|step=1e3"
  "step ' 3'|'step'|step= 3"
  "step past the stored config's train.steps|'step'|step=1000"
  "no step|'step'|-step"
  "diverged_step 2147483648|'diverged_step'|diverged_step=2147483648"
  "diverged_step 1|'diverged_step'|diverged_step=1"
  "best_step past step|'best_step'|best_step=5"
  "best_step -1|'best_step'|best_step=-1"
  "best_valid nan|'best_valid'|best_valid=nan"
  "best_valid -inf|'best_valid'|best_valid=-inf"
  "best_valid text|'best_valid'|best_valid=low"
  "wall_s -1|'wall_s'|wall_s=-1"
  "wall_s inf|'wall_s'|wall_s=inf"
  "no wall_s|'wall_s'|-wall_s"
  "a value of 20,000 bytes|'notes' is too long|notes=*20000"
  "a tensor of rank 3|'wte' has shape [256, 32, 1], the model expects [256, 32]|shape:wte=256,32,1"
  "a tensor of rank 5|'wte': shape has 5 dimensions|shape:wte=256,32,1,1,1"
  "100,000 metadata entries|metadata entries, more than the 64 allowed|+100000"
)
{ for i in "${!cases[@]}"; do IFS='|' read -r what needle edits <<< "${cases[$i]}"; printf 'r%d\t%s\n' $i "$edits"; done
  printf 'plain\t-step\nmany\t+100000\n'; } | tamper || { bad "cannot tamper"; exit 1; }
# each copy is refused on resume (exit 2, a message naming the checkpoint and the key), its files untouched
for i in "${!cases[@]}"; do
  IFS='|' read -r what needle edits <<< "${cases[$i]}"
  before=$(snapshot r$i)
  out=$("$bin" train tiny.yaml --resume r$i --set train.steps=8 --quiet 2>&1); rc=$?
  if [[ $rc -eq 2 && "$out" == *"r$i/checkpoint.safetensors"* && "$out" == *"$needle"* && "$(snapshot r$i)" == "$before" ]]; then
    ok "$what: refused, exit 2, files untouched"
  else
    bad "$what: rc=$rc (want 2), files $([[ "$(snapshot r$i)" == "$before" ]] && echo untouched || echo CHANGED): $out"
  fi
done
# the 100,000 entries are refused before anything is allocated for them: the peak memory is that of
# another refusal (it was 880 MiB more, 32 KiB an entry)
read -r plain_rss rc < <(peak "$bin" train tiny.yaml --resume plain --set train.steps=8 --quiet)
read -r many_rss rc < <(peak "$bin" train tiny.yaml --resume many --set train.steps=8 --quiet)
[[ $many_rss -lt $((plain_rss + 65536)) ]] && ok "100,000 metadata entries: peak memory $((many_rss / 1024)) MiB (a plain refusal: $((plain_rss / 1024)) MiB)" \
  || bad "100,000 metadata entries: peak memory $((many_rss / 1024)) MiB, a plain refusal $((plain_rss / 1024)) MiB"

# sampling reads the same checkpoint the same way
printf 's\tstep=4294967295\ng\n' | tamper
out=$("$bin" sample s --tokens 4 2>&1); rc=$?
[[ $rc -eq 2 && "$out" == *"s/checkpoint.safetensors"*"'step'"* ]] && ok "sample refuses it too" || bad "sample: rc=$rc $out"

# the untampered checkpoint still resumes (and the helper rewrites it faithfully)
"$bin" train tiny.yaml --resume g --set train.steps=6 --quiet && grep -q '"steps_done": 6,' g/run.json \
  && ok "a faithful copy resumes" || bad "a faithful copy does not resume: $(cat g/run.json)"
exit $fail
