#!/usr/bin/env bash
# `clformer bench`: step (an encoder-decoder's too), kernels --only, gemm --repeat and --json produce well-formed
# JSON with the documented fields (schema at the top of src/app/cmd_bench.c); --json - keeps stdout pure JSON; bad
# options are refused; tools/compare_bench.py renders two files as one table; --vs-torch when torch exists.
bin=$1; src=$2
source "$(dirname "${BASH_SOURCE[0]}")/../lib/cli.sh"
require_opencl
py=python3
small=(--set model.layers=1 --set model.d_model=32 --set model.heads=2 --set model.d_ff=64
       --set data.seq_len=16 --set data.batch_size=4)


# Checks a JSON file against the documented keys; prints the missing ones.
check_json() {  # file, then what: step | kernels
  "$py" - "$1" "$2" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
need = {"": ["schema", "clformer_version", "host", "device"],
        "device": ["name", "platform", "platform_version", "driver", "type", "compute_units"],
        "host": ["cpu", "cpus"]}
if sys.argv[2] == "step":
    need[""].append("step")
    need["step"] = ["model", "gemm", "warmup", "steps", "step_ms", "tokens_per_s", "flops_per_step", "gflops",
                    "startup", "breakdown", "torch"]
    need["step.step_ms"] = ["median", "min", "max"]
    need["step.startup"] = ["context_s", "model_s", "first_step_s", "total_s", "cache_hits", "cache_misses"]
    need["step.breakdown"] = ["steps", "step_ms", "device_ms", "gemm_ms", "ops"]
    need["step.model"] = ["norm", "layers", "d_model", "heads", "d_ff", "vocab", "seq_len", "batch_size", "params"]
else:
    need[""].append("kernels")
    need["kernels"] = ["copy", "method", "results"]
missing = []
for path, keys in need.items():
    o = d
    for p in filter(None, path.split(".")):
        o = o[p]
    missing += [f"{path}.{k}" for k in keys if k not in o]
if sys.argv[2] == "step":
    s = d["step"]
    if s["steps"] < 10: missing.append("steps >= 10")
    if not (0 < s["step_ms"]["min"] <= s["step_ms"]["median"] <= s["step_ms"]["max"]): missing.append("min<=median<=max")
    if abs(s["tokens_per_s"] - 64 / (s["step_ms"]["median"] * 1e-3)) > 1e-3 * s["tokens_per_s"]: missing.append("tokens/s")
    # 6 N P + 6 L B T (T + 1) C (six causal triangles) with N 64, P = 4*32^2 + 2*32*64 + 256*32, L 1, B 4,
    # T 16, C 32
    if s["flops_per_step"] != 6 * 64 * (4 * 32 * 32 + 2 * 32 * 64 + 256 * 32) + 6 * 4 * 16 * 17 * 32:
        missing.append("flops_per_step")
    # host transfers both ways: 2 x B T ints a step; the read-out's statistics ordered; the way in force is
    # the device's (PoCL shares host memory) unless CLFORMER_ZERO_COPY says
    t = d.get("transfers") or {}
    if t.get("upload_kib") != 0.5: missing.append("transfers.upload_kib")
    if t.get("in_force") != ("map" if t.get("host_unified") else "copy"): missing.append("transfers.in_force")
    for way in ("map", "copy"):
        u, r = t.get("upload", {}).get(way, {}), t.get("checkpoint_readout_ms", {}).get(way, {})
        if not (u.get("host_ms", -1) >= 0 and u.get("step_ms", 0) > 0): missing.append(f"transfers.upload.{way}")
        if u.get("unavailable") is None and not (u.get("device_ms", -1) >= 0 and u.get("commands") == (4 if way == "map" else 2)):
            missing.append(f"transfers.upload.{way} commands")
        if not (0 < r.get("min", 0) <= r.get("median", 0) <= r.get("max", 0)): missing.append(f"transfers.readout.{way}")
    ops = s["breakdown"]["ops"]
    names = [o["name"] for o in ops]
    if not any(n.startswith("gemm") or n.startswith("clblast") for n in names): missing.append("GEMM in breakdown")
    if not any("layernorm" in n for n in names): missing.append("layernorm in breakdown")
    if any(ops[i]["ms"] < ops[i + 1]["ms"] for i in range(len(ops) - 1)): missing.append("ops sorted")
    if abs(sum(o["ms"] for o in ops) - s["breakdown"]["device_ms"]) > 1e-2: missing.append("device_ms = sum")
    bd = s["breakdown"]
    frac = s["flops_per_step"] / (bd["gemm_ms"] * 1e6) / bd["fma_peak_gflops"] if bd.get("fma_peak_gflops", 0) > 0 else -1
    if not (0 < frac < 1.2 and abs(frac - (bd.get("gemm_fraction_of_peak") or 0)) < 1e-3):
        missing.append("gemm_fraction_of_peak = flops / gemm_ms / fma_peak_gflops")
    # the products by shape: every GEMM launch tagged with a model shape's signature (their ms add up to
    # gemm_ms), the shapes' FLOPs to the step's, calls as the model issues them (one layer: a call of each
    # linear product, two of each attention signature), largest first
    pr = bd.get("products") or []
    if abs(sum(p["ms"] for p in pr) - bd["gemm_ms"]) > 1e-3 * bd["gemm_ms"] + 1e-3: missing.append("products ms = gemm_ms")
    if abs(sum(p["flops"] for p in pr) - s["flops_per_step"]) > 1e-9 * s["flops_per_step"] + len(pr):
        missing.append("products flops = flops_per_step")
    calls = {p["names"]: p["calls"] for p in pr}
    if len(calls) != 18 or calls.get("qkv fwd") != 1 or calls.get("logits dW") != 1 or calls.get("att q.kT, att dp=dy.vT") != 2:
        missing.append("products calls %r" % calls)
    if any(pr[i]["ms"] < pr[i + 1]["ms"] for i in range(len(pr) - 1)): missing.append("products sorted")
    if any(p["names"] == "other" for p in pr): missing.append("products: launches of no model shape")
    for p in pr:
        # ms is rounded to 4 decimals: gflops lies between the FLOPs over its bounds
        if p["ms"] <= 5e-5 or not p["flops"] / (p["ms"] + 5e-5) * 1e-6 - 0.01 <= p["gflops"] <= p["flops"] / (p["ms"] - 5e-5) * 1e-6 + 0.01:
            missing.append(p["names"] + " gflops")
else:
    r = d["kernels"]["results"]
    if not r or any("adam" not in x["kernel"] for x in r): missing.append("--only adam rows")
print(" ".join(missing))
sys.exit(1 if missing else 0)
EOF
}

out=$("$bin" bench step "${small[@]}" --steps 10 --warmup 2 --json "$tmp/a.json" 2>&1); rc=$?
miss=$(check_json "$tmp/a.json" step 2>&1)
if [[ $rc -eq 0 && -z "$miss" && "$out" == *"tokens/s"* && "$out" == *"GEMM total"* && "$out" == *"of the fp32 FMA peak"* ]]
then ok "bench step: JSON fields, FLOP count, breakdown, products against the FMA peak"
else bad "bench step rc=$rc missing: $miss"; echo "$out"; fi
# the table and the JSON come from one measurement: the step time's median, min and max agree (the table
# rounds to 0.01 ms), and so do the breakdown's kernels
miss=$(printf '%s\n' "$out" | "$py" -c '
import json, re, sys
s = json.load(open(sys.argv[1]))["step"]
text = sys.stdin.read()
m = re.search(r"median ([\d.]+) ms \[min ([\d.]+), max ([\d.]+)\]", text)
bad = ["no step time line"] if not m else \
    [k for k, v in zip(("median", "min", "max"), m.groups()) if abs(float(v) - s["step_ms"][k]) > 0.0051]
rows, ops = re.findall(r"^  (\w+) +\d+ +([\d.]+) +[\d.]+%$", text, re.M), s["breakdown"]["ops"]
if [n for n, _ in rows] != [o["name"] for o in ops] or any(abs(float(ms) - o["ms"]) > 0.00051 for (_, ms), o in zip(rows, ops)):
    bad.append("breakdown rows")
print(" ".join(bad))
' "$tmp/a.json" 2>&1)
if [[ -z "$miss" ]]; then ok "bench step: the table's step time and breakdown are the JSON's"
else bad "bench step, the table against the JSON: $miss"; fi

# an encoder-decoder: its largest batch (data.max_tokens in sentences of data.max_len), the FLOPs of both stacks
# and the cross-attention (6 N P, counted here independently), every kernel of its step; --vs-torch refused
cat > "$tmp/ed.yaml" <<'YAML'
data: {train: none, valid: none, source_lang: src, target_lang: tgt, tokenizer: bpe, vocab_size: 300, max_tokens: 128,
       max_len: 16}
model: {arch: encoder_decoder, encoder_layers: 2, layers: 1, d_model: 32, heads: 2, d_ff: 64}
YAML
out=$("$bin" bench step --config "$tmp/ed.yaml" --steps 10 --warmup 1 --json "$tmp/ed.json" 2>&1); rc=$?
miss=$("$py" - "$tmp/ed.json" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))["step"]
m, bad = s["model"], []
if (m["arch"], m["encoder_layers"], m["layers"], m["seq_len"], m["batch_size"]) != ("encoder_decoder", 2, 1, 16, 8):
    bad.append(f"model {m}")
N, C, F, V, L, E = 8 * 16, 32, 64, 300, 1, 2
if s["flops_per_step"] != 6 * N * ((L + E) * (4 * C * C + 2 * C * F) + V * C + 4 * L * C * C): bad.append("flops")
names = [o["name"] for o in s["breakdown"]["ops"]]
if not any(n.startswith("attention_fused") for n in names) or not any(n.startswith("gemm") for n in names):
    bad.append(f"breakdown {names}")
# every GEMM launch of both stacks and the cross-attention is one of cf_model_gemm_shapes' products
bd = s["breakdown"]
pr = bd.get("products") or []
if not pr or any(p["names"] == "other" for p in pr) or abs(sum(p["ms"] for p in pr) - bd["gemm_ms"]) > 1e-3 * bd["gemm_ms"] + 1e-3:
    bad.append("products %r" % [(p["names"], p["ms"]) for p in pr])
print(" ".join(bad))
EOF
)
[[ $rc -eq 0 && -z "$miss" && "$out" == *"encoder-decoder"*"8 pairs x 16 tokens"* ]] \
  && ok "bench step on an encoder-decoder: its largest batch, both stacks' FLOPs, fused attention in the breakdown" \
  || { bad "bench step encoder-decoder rc=$rc: $miss"; echo "$out"; }
out=$("$bin" bench step --config "$tmp/ed.yaml" --steps 10 --vs-torch 2>&1); rc=$?
[[ $rc -eq 2 && "$out" == *"language model only"* ]] && ok "bench step --vs-torch refuses an encoder-decoder" \
  || bad "--vs-torch on an encoder-decoder: rc=$rc $out"

# --json -: the JSON alone on stdout, the tables on stderr
"$bin" bench step "${small[@]}" --steps 10 --warmup 1 --json - >"$tmp/b.json" 2>"$tmp/b.err"; rc=$?
miss=$(check_json "$tmp/b.json" step 2>&1)
if [[ $rc -eq 0 && -z "$miss" && $(cat "$tmp/b.err") == *"step time"* ]]; then ok "bench step --json - keeps stdout pure JSON"
else bad "bench step --json - rc=$rc missing: $miss"; fi

"$bin" bench kernels --only adam --repeat 3 --json - >"$tmp/k2.json" 2>"$tmp/k2.err"; rc=$?
miss=$(check_json "$tmp/k2.json" kernels 2>&1)
if [[ $rc -eq 0 && -z "$miss" && $(cat "$tmp/k2.err") == *"copy bandwidth"* ]]; then ok "bench kernels --json - keeps stdout pure JSON"
else bad "bench kernels --json - rc=$rc missing: $miss"; fi
out=$("$bin" bench kernels --only adam --repeat 3 --json "$tmp/k.json" 2>&1); rc=$?
miss=$(check_json "$tmp/k.json" kernels 2>&1)
if [[ $rc -eq 0 && -z "$miss" ]]; then ok "bench kernels --only adam: JSON"; else bad "bench kernels rc=$rc missing: $miss"; echo "$out"; fi

# bench gemm: the model's 21 shapes (15 linear, 6 batched attention), --repeat samples each, ratios
# that are the medians' ratios, min <= median <= max; the JSON alone on stdout
"$bin" bench gemm "${small[@]}" --set model.layers=2 --repeat 3 --json - >"$tmp/g.json" 2>"$tmp/g.err"; rc=$?
miss=$("$py" - "$tmp/g.json" "$tmp/g.err" <<'EOF'
import json, statistics, sys
d = json.load(open(sys.argv[1]))
g = d["gemm"]
bad = []
rt = d["host"]["core_round_trip_ns"]  # on a CPU device, where two CPUs answer within 0.5 s (a busy machine: null)
if (rt is not None and (d["device"]["type"] != "CPU" or not 0 < rt < 1e6)): bad.append("core_round_trip_ns %r" % rt)
if (rt is None) == ("core-to-core round trip" in open(sys.argv[2]).read()): bad.append("round trip line vs JSON")
if g["repeat"] != 3: bad.append("repeat %r" % g["repeat"])
sh = g["shapes"]
if len(sh) != 21 or sum(s["batch"] > 1 for s in sh) != 6: bad.append("%d shapes" % len(sh))
for s in sh:
    for impl in ("own", "clblast"):
        v = s[impl]
        if not (0 < v["min"] <= v["median"] <= v["max"]): bad.append(s["name"] + " " + impl + " min/median/max")
    if abs(s["own_vs_clblast"] - s["own"]["median"] / s["clblast"]["median"]) > 2e-3 * s["own_vs_clblast"]:
        bad.append(s["name"] + " ratio")
    # the attention's causal triangles: the scores' (C) lower, the probabilities' and dpreatt's (op(A)) lower,
    # their transposes upper; each row i of C counted over k <= i, k >= i, or its columns j <= i
    want_tri = {"att q.kT": "c_lower", "att dp=dy.vT": "c_lower", "att p.v": "a_lower", "att dq=ds.k": "a_lower",
                "att dv=pT.dy": "a_upper", "att dk=dsT.q": "a_upper"}.get(s["name"], "full")
    M, N, K = s["M"], s["N"], s["K"]
    terms = {"full": M * N * K, "a_lower": N * sum(min(i + 1, K) for i in range(M)),
             "a_upper": N * sum(max(K - i, 0) for i in range(M)),
             "c_lower": K * sum(min(i + 1, N) for i in range(M))}[want_tri]
    if s["tri"] != want_tri or s["flops"] != 2 * terms * s["batch"]: bad.append(s["name"] + " tri/flops")
    if abs(s["peak_vs_clblast"] - g["peak_gflops"] / s["clblast"]["median"]) > 2e-3 * s["peak_vs_clblast"]:
        bad.append(s["name"] + " ceiling")
if abs(g["median"]["peak_vs_clblast"] - statistics.median(s["peak_vs_clblast"] for s in sh)) > 2e-3 * g["median"]["peak_vs_clblast"]:
    bad.append("median ceiling")
# one step's products: the logits' projection once, every other shape once per block
layers = {s["per_step"] for s in sh if not s["name"].startswith("logits")}
if layers != {2} or any(s["per_step"] != 1 for s in sh if s["name"].startswith("logits")): bad.append("per_step counts")
st = g["per_step"]
if abs(st["gflop"] - sum(s["per_step"] * s["flops"] for s in sh) * 1e-9) > 1e-3: bad.append("per_step gflop")
for impl in ("own", "clblast"):
    ms = sum(s["per_step"] * s["flops"] / (s[impl]["median"] * 1e9) for s in sh) * 1e3
    if abs(st[impl + "_ms"] - ms) > 2e-3 * ms: bad.append("per_step " + impl + "_ms")
if abs(st["own_vs_clblast"] - st["clblast_ms"] / st["own_ms"]) > 2e-3 * st["own_vs_clblast"]: bad.append("per_step ratio")
if st["openblas_ms"] is not None: bad.append("openblas_ms without --vs-blas")
# CLBlast's defaults are timed only when a tuning file was held back for them (none in a fresh cache)
dflt = "default parameters first" in open(sys.argv[2]).read()
if any((s["clblast_default"] is not None) != dflt for s in sh) or (g["median"]["clblast_default"] is not None) != dflt \
   or (st["clblast_default_ms"] is not None) != dflt: bad.append("clblast_default vs the header")
print(" ".join(bad))
EOF
)
if [[ $rc -eq 0 && -z "$miss" && $(cat "$tmp/g.err") == *"of 3 samples"* && $(cat "$tmp/g.err") == *"one training step's products"* &&
      $(cat "$tmp/g.err") == *"upper bound: with every shape at the FMA peak"* ]]
then ok "bench gemm --repeat 3 --json -: shapes, samples, ratios, ceiling, one step's products, core round trip"
else bad "bench gemm --repeat 3 rc=$rc: $miss"; head -5 "$tmp/g.err"; fi
# the gemm table and its JSON report the same medians per shape (the table rounds to 0.1 GFLOP/s)
miss=$("$py" - "$tmp/g.json" "$tmp/g.err" <<'EOF'
import json, re, sys
shapes = {s["name"]: s for s in json.load(open(sys.argv[1]))["gemm"]["shapes"]}
text = open(sys.argv[2]).read()
impls = ["clblast_default"] * ("default parameters first" in text) + ["clblast", "own"]  # the table's columns
seen, bad = set(), []
for line in text.splitlines():
    name, m = line[:14].rstrip(), re.match(r"(NN|NT|TN|TT) +\d+ +\d+ +\d+ +\d+ ", line[15:])
    if not m or name not in shapes: continue
    seen.add(name)
    s = shapes[name]
    if m.group(1) != s["op"]: bad.append(name + " op")
    cells = re.findall(r"([\d.]+) \[[\d.]+-[\d.]+\]", line[15:])
    for impl, v in zip(impls, cells):
        if abs(float(v) - s[impl]["median"]) > 0.051: bad.append(name + " " + impl)
    if len(cells) < len(impls): bad.append(name + " cells")
if seen != set(shapes): bad.append("%d of %d shapes in the table" % (len(seen), len(shapes)))
print(" ".join(bad))
EOF
)
if [[ -z "$miss" ]]; then ok "bench gemm: the table's medians are the JSON's"; else bad "bench gemm, the table against the JSON: $miss"; fi

"$bin" bench step --steps 3 >/dev/null 2>&1; rc=$?
if [[ $rc -eq 2 ]]; then ok "--steps below 10 refused"; else bad "--steps 3 gave rc=$rc"; fi
# an experiment file's base is the model measured
printf 'base:\n  model: {layers: 1, d_model: 32, heads: 2, d_ff: 64}\nvariants:\n  - {name: a, set: {model.norm: post}}\n' > "$tmp/cmp.yaml"
out=$("$bin" bench step --config "$tmp/cmp.yaml" --steps 10 --warmup 1 2>&1); rc=$?
if [[ $rc -eq 0 && "$out" == *"using its base config"* && "$out" == *"1 layers, d_model 32"* ]]; then ok "bench step takes a comparison file's base"
else bad "bench step on a comparison file: rc=$rc $out"; fi
err=$("$bin" bench kernels --only nosuch 2>&1 >/dev/null); rc=$?
if [[ $rc -eq 2 && "$err" == *"--only 'nosuch' matches no kernel"*"layernorm_forward"* ]]; then ok "--only matching nothing refused, kernels listed"
else bad "--only nosuch gave rc=$rc: $err"; fi
err=$("$bin" bench stepp 2>&1 >/dev/null); rc=$?
if [[ $rc -eq 2 && "$err" == *"unknown benchmark 'stepp': kernels, gemm, step or all"* ]]; then ok "unknown benchmark refused"
else bad "bench stepp gave rc=$rc: $err"; fi
echo '{}' > "$tmp/empty.json"
err=$("$py" "$src/tools/compare_bench.py" "$tmp/empty.json" 2>&1); rc=$?
if [[ $rc -ne 0 && "$err" == *"no benchmark results"* ]]; then ok "compare_bench.py refuses a JSON without results"
else bad "compare_bench.py on {}: rc=$rc $err"; fi

table=$("$py" "$src/tools/compare_bench.py" "$tmp/a.json" "$tmp/k.json" --labels one,two); rc=$?
header=$(head -1 <<<"$table")
if [[ $rc -eq 0 && "$header" == "| | one | two |" && "$table" == *"| tokens/s |"*" | - |"* && "$table" == *"adam"* ]] &&
   ! grep -qv '^|' <<<"$table"; then ok "compare_bench.py renders two files as one table"
else bad "compare_bench.py rc=$rc"; echo "$table"; fi

# --vs-torch with a Python that does not exist: a clear error, no temporary config left behind
before=$(ls /tmp/clformer-bench-* 2>/dev/null | wc -l)
err=$(CLFORMER_PYTHON=/nonexistent/python3 "$bin" bench step "${small[@]}" --steps 10 --warmup 1 --vs-torch \
      --torch-script "$src/tools/torch_step.py" 2>&1 >/dev/null); rc=$?
after=$(ls /tmp/clformer-bench-* 2>/dev/null | wc -l)
if [[ $rc -ne 0 && "$err" == *"cannot run /nonexistent/python3"* && $after -le $before ]]; then ok "--vs-torch without its Python: clear error"
else bad "--vs-torch with a missing Python: rc=$rc $err ($before -> $after temporary files)"; fi

torch_py=/usr/bin/python3
if "$torch_py" -c "import torch, yaml" 2>/dev/null; then
  out=$("$bin" bench step "${small[@]}" --steps 10 --warmup 1 --vs-torch --torch-script "$src/tools/torch_step.py" \
        --json "$tmp/t.json" 2>&1); rc=$?
  ratio=$("$py" -c "import json,sys; t=json.load(open(sys.argv[1]))['step']['torch']; print(t['clformer_vs_torch'] > 0 and t['setup']['params'] == json.load(open(sys.argv[1]))['step']['model']['params'])" "$tmp/t.json" 2>&1)
  if [[ $rc -eq 0 && "$ratio" == True && "$out" == *"clformer / torch speed"* ]]; then ok "--vs-torch: same parameter count, ratio"
  else bad "--vs-torch rc=$rc ($ratio)"; echo "$out"; fi
else
  echo "skip --vs-torch: no torch in $torch_py"
fi
exit $fail
