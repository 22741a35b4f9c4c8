#!/usr/bin/env bash
# The experiments end to end at toy size: a two-variant comparison and a gradnorm run produce
# well-formed files whose numbers match the runs' metrics; finished variants are skipped on a rerun.
bin=$1; src=$2
source "$(dirname "${BASH_SOURCE[0]}")/../lib/cli.sh"
require_opencl
require_corpus 200000 "$tmp/text.txt"
cd "$tmp"
cat > cmp.yaml <<YAML
base:
  data: {train: text.txt, seq_len: 32, batch_size: 4}
  model: {layers: 2, d_model: 32, heads: 2, d_ff: 64}
  optim: {lr: 2e-3}
  train: {steps: 30, eval_every: 10, eval_batches: 2, log_every: 10, checkpoint_every: 10}
target_loss: 3.5
plateau_after: 10
variants:
  - {name: post, set: {model.norm: post, schedule.warmup: 10}}
  - {name: pre, set: {model.norm: pre}}
out: cmp-out
YAML
out=$("$bin" compare cmp.yaml --seeds 2 2>&1); rc=$?
[[ $rc -eq 0 ]] && ok "compare exits 0" || bad "compare rc=$rc: $out"
for f in summary.md summary.json curves.svg post/seed1234/metrics.csv post/seed1235/metrics.csv pre/seed1234/run.json; do
  [[ -s cmp-out/$f ]] || bad "cmp-out/$f missing"
done
[[ "$out" == *"[4/4 pre seed 1235]"* && "$out" == *"[1/4 post seed 1234]"* ]] && ok "progress names variant and seed" || bad "progress: $out"
python3 - <<'PY' && ok "summary.json is well formed and matches every run's metrics.csv" || bad "summary.json vs metrics"
import csv, json, math, xml.etree.ElementTree as ET
s = json.load(open("cmp-out/summary.json"))
assert [v["name"] for v in s["variants"]] == ["post", "pre"], s
assert s["seeds"] == 2 and s["target_loss"] == 3.5
for v in s["variants"]:
    assert len(v["runs"]) == 2, v
    finals = []
    for r in v["runs"]:
        rows = list(csv.DictReader(open(r["dir"] + "/metrics.csv")))
        valid = [(int(x["step"]), float(x["valid_loss"])) for x in rows if x["valid_loss"]]
        assert abs(r["final_valid"] - valid[-1][1]) < 1e-4 * abs(valid[-1][1]), (r, valid)
        assert abs(r["best_valid"] - min(x[1] for x in valid)) < 1e-4, (r, valid)
        hit = [st for st, x in valid if x <= 3.5]
        assert r["step_to_target"] == (hit[0] if hit else None), (r, hit)
        assert r["steps_done"] == 30
        finals.append(r["final_valid"])
    assert abs(v["mean"]["final_valid"] - sum(finals) / 2) < 1e-4
    assert abs(v["mean"]["final_valid_sd"] - abs(finals[0] - finals[1]) / math.sqrt(2)) < 1e-4
    bests = [r["best_valid"] for r in v["runs"]]
    m = v["mean"]
    assert (m["final_valid_min"], m["final_valid_max"]) == (min(finals), max(finals)), (m, finals)
    assert (m["best_valid_min"], m["best_valid_max"]) == (min(bests), max(bests)), (m, bests)
    assert abs(m["best_valid_sd"] - abs(bests[0] - bests[1]) / math.sqrt(2)) < 1e-4, (m, bests)
    assert f'{m["final_valid"]:.3f} ± {m["final_valid_sd"]:.3f} [{min(finals):.3f}, {max(finals):.3f}]' in \
        open("cmp-out/summary.md").read(), m
ET.parse("cmp-out/curves.svg")  # well-formed XML
md = open("cmp-out/summary.md").read()
assert "| post |" in md and "| pre |" in md and "**Reading.**" in md
PY
out=$("$bin" compare cmp.yaml --seeds 2 2>&1); rc=$?
[[ $rc -eq 0 && $(grep -c "skipped" <<<"$out") -eq 4 ]] && ok "a rerun skips finished variants" || bad "rerun: $out"
before=$(md5sum < cmp-out/summary.json)
err=$("$bin" compare cmp.yaml --seeds 2 --set optim.lr=1e-3 2>&1); rc=$?
[[ $rc -eq 2 && "$err" == *"holds a run with optim.lr"* && $(md5sum < cmp-out/summary.json) == "$before" ]] \
  && ok "a changed variant is not mixed with old runs, and the report is left alone" || bad "changed variant: rc=$rc $err"
err=$("$bin" compare cmp.yaml --seeds 2 --set train.steps=20 2>&1); rc=$?
[[ $rc -eq 2 && "$err" == *"holds a run of 30 steps"*"train.steps=30"* && $(md5sum < cmp-out/summary.json) == "$before" ]] \
  && ok "runs longer than the comparison asks for are not reported as shorter ones" || bad "fewer steps: rc=$rc $err"
err=$("$bin" compare cmp.yaml --seeds 2 --set optim.lr=1e-3 --report-only 2>&1); rc=$?
[[ $rc -eq 2 && "$err" == *"holds a run with optim.lr"* && $(md5sum < cmp-out/summary.json) == "$before" ]] \
  && ok "--report-only checks the runs too" || bad "report-only changed variant: rc=$rc $err"
# one seed, then two: the first seed's run is reused, not trained again; and back to one
"$bin" compare cmp.yaml --only pre --out one >/dev/null 2>&1
out=$("$bin" compare cmp.yaml --only pre --out one --seeds 2 2>&1); rc=$?
[[ $rc -eq 0 && "$out" == *"pre seed 1234] already finished: skipped"* && -s one/pre/seed1235/metrics.csv && ! -e one/pre/seed1234 ]] \
  && ok "--seeds 1 -> 2 reuses the single run" || bad "--seeds 1 -> 2: rc=$rc $out"
out=$("$bin" compare cmp.yaml --only pre --out cmp-out 2>&1); rc=$?
[[ $rc -eq 0 && "$out" == *"already finished: skipped"* && ! -e cmp-out/pre/metrics.csv ]] \
  && ok "--seeds 2 -> 1 reuses the base seed's run" || bad "--seeds 2 -> 1: rc=$rc $out"
err=$("$bin" compare cmp.yaml --only nosuch 2>&1); rc=$?
[[ $rc -eq 2 && "$err" == *"no variant named 'nosuch'"* ]] && ok "--only with an unknown name" || bad "--only: rc=$rc $err"
printf 'base: {data: {train: text.txt}}\nvariants:\n  - {name: a, set: {model.nrom: pre}}\n' > bad.yaml
err=$("$bin" compare bad.yaml 2>&1); rc=$?
[[ $rc -eq 2 && "$err" == *"bad.yaml:3"*"did you mean 'model.norm'"* ]] && ok "a bad variant key is reported with its line" || bad "bad variant: rc=$rc $err"

cat > gn.yaml <<YAML
base:
  data: {train: text.txt, seq_len: 16, batch_size: 2}
  model: {d_model: 16, heads: 2, d_ff: 32}
depths: [2, 4]
seeds: 2
out: gn-out
YAML
out=$("$bin" gradnorm gn.yaml 2>&1); rc=$?
[[ $rc -eq 0 && "$out" == *"fitted L^"* ]] && ok "gradnorm exits 0 and prints the fitted exponents" || bad "gradnorm rc=$rc: $out"
python3 - <<'PY' && ok "gradnorm.json is well formed and consistent" || bad "gradnorm.json"
import json, math, xml.etree.ElementTree as ET
g = json.load(open("gn-out/gradnorm.json"))
assert g["depths"] == [2, 4] and g["seeds"] == 2
for p in ("post", "pre"):
    for d in ("2", "4"):
        mean = g["placements"][p][d]["mean"]
        assert len(mean) == int(d) and all(len(r) == 5 and all(x > 0 and math.isfinite(x) for x in r) for r in mean)
    sc = g["last_layer_w2_scaling"][p]
    # the scaling table quotes the last layer's W2 (index 1) of each depth
    assert all(abs(sc["norms"][i] - g["placements"][p][d]["mean"][-1][1]) < 1e-5 * sc["norms"][i] for i, d in enumerate(("2", "4")))
    e = math.log(sc["norms"][1] / sc["norms"][0]) / math.log(2)
    assert abs(e - sc["exponent"]) < 1e-3, (e, sc)
    per = sc["per_seed"]  # a row per seed: the last layer's W2 at each depth
    assert len(per) == 2 and all(abs(min(r[i] for r in per) - sc["min"][i]) < 1e-9 for i in range(2)), sc
    assert all(abs(sum(r[i] for r in per) / 2 - sc["norms"][i]) < 1e-5 * sc["norms"][i] for i in range(2)), sc
ET.parse("gn-out/gradnorm.svg")
assert "## 4 layers" in open("gn-out/gradnorm.md").read()
PY
# each seed draws its own batch, keyed by that seed: seed 1235 alone measures what the second seed of
# 1234.. measured (with one batch for all seeds, it would see the batch of 1234 there)
"$bin" gradnorm gn.yaml --set seed=1235 --seeds 1 --out gn-one >/dev/null 2>&1
python3 - <<'PY' && ok "gradnorm: each seed its own weights and batch, reproducible from the seed" || bad "gradnorm per seed"
import json
two, one = (json.load(open(f"{d}/gradnorm.json"))["last_layer_w2_scaling"] for d in ("gn-out", "gn-one"))
for p in ("post", "pre"):
    assert one[p]["per_seed"][0] == two[p]["per_seed"][1], (p, one[p], two[p])
    assert one[p]["per_seed"][0] != two[p]["per_seed"][0], p
PY
exit $fail
