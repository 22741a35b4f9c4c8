#!/usr/bin/env python3
"""One Markdown section for the README from a tools/device_run.sh output folder: the device and
driver, the self-test's verdict, the tests, the benchmark's figures (bench.json) and the
comparison's final losses (compare/summary.json). Missing pieces are said, not invented.
usage: device_section.py OUT_DIR DEVICE_SPEC STATUS"""
import datetime
import json
import os
import sys


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def last_line(path):
    try:
        with open(path) as f:
            lines = [l.strip() for l in f if l.strip()]
        return lines[-1] if lines else "(empty)"
    except OSError:
        return "(missing)"


def fmt(v, spec=".3g"):
    return "n/a" if v is None else format(v, spec)


def device_lines(bench):
    d = (bench or {}).get("device")
    if not d:
        return ["- Device: unknown (bench.json missing)"]
    return [f"- Device: {d['name']} ({d['type']}, {d['compute_units']} compute units), platform {d['platform']}, "
            f"driver {d['driver']}"]


def tests_lines(out):
    try:
        with open(os.path.join(out, "tests.summary")) as f:
            rows = [l.split() for l in f if l.strip()]
    except OSError:
        return ["- Tests: not run"]
    passed = [r[0] for r in rows if r[1] in ("rc=0", "rc=77")]
    failed = [r[0] for r in rows if r[1] not in ("rc=0", "rc=77")]
    line = f"- Tests: {len(passed)} of {len(rows)} passed"
    return [line + (f"; failed: {', '.join(failed)}" if failed else "")]


def bench_lines(bench):
    if not bench:
        return ["- Benchmark: bench.json missing"]
    lines = []
    k = bench.get("kernels")
    if k:
        lines.append(f"- Copy bandwidth: {fmt(k['copy'].get('gbs'))} GB/s")
    g = bench.get("gemm")
    if g:
        m = g.get("median", {})
        lines.append(f"- GEMM over the step's shapes, median GFLOP/s: CLBlast {fmt(m.get('clblast'))}, "
                     f"ours {fmt(m.get('own'))}; FMA peak {fmt(g.get('peak_gflops'))}")
    s = bench.get("step")
    if s:
        mo, ms = s["model"], s["step_ms"]
        lines.append(f"- Training step ({mo['layers']} layer{'s' if mo['layers'] != 1 else ''}, d_model {mo['d_model']}, batch {mo['batch_size']} x "
                     f"{mo['seq_len']}, GEMM {s['gemm']}): median {fmt(ms['median'])} ms "
                     f"[{fmt(ms['min'])}, {fmt(ms['max'])}], {fmt(s['tokens_per_s'], '.0f')} tokens/s, "
                     f"{fmt(s['gflops'])} GFLOP/s")
    return lines


def compare_lines(out):
    doc = load_json(os.path.join(out, "compare", "summary.json"))
    if not doc:
        return ["- Comparison: summary.json missing"]
    lines = ["", "| variant | final validation loss | best | diverged |", "|---|---|---|---|"]
    for v in doc.get("variants", []):
        mean = v.get("mean", {})
        if not mean.get("runs"):
            continue  # a variant this run did not train (--only)
        lines.append(f"| {v['name']} | {fmt(mean.get('final_valid'), '.4f')} | {fmt(mean.get('best_valid'), '.4f')} | "
                     f"{mean.get('diverged', 'n/a')} |")
    return lines


def main():
    out, spec, status = sys.argv[1], sys.argv[2], sys.argv[3]
    bench = load_json(os.path.join(out, "bench.json"))
    lines = [f"### `{spec}`: {((bench or {}).get('device') or {}).get('name', 'unknown device')}", "",
             f"Measured {datetime.date.today().isoformat()} with `bash tools/device_run.sh {spec}` "
             f"({'passed' if status == '0' else 'FAILED: see the run folder'}).", ""]
    lines += device_lines(bench)
    lines.append(f"- Self-test: {last_line(os.path.join(out, 'selftest.txt'))}")
    lines += tests_lines(out)
    lines += bench_lines(bench)
    lines += compare_lines(out)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
