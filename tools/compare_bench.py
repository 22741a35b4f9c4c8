#!/usr/bin/env python3
"""Render several `clformer bench ... --json FILE` results as one Markdown table, side by side.

usage: compare_bench.py A.json B.json ... [--labels a,b,...] [--no-details] [-o OUT.md]

One column per file (headed by its label, default the device name, or the file name when two
files share a device), one row per measurement found in any file ("-" where a file lacks it):
the device and software, the copy bandwidth, GEMM medians and peak, the training step (median
ms, tokens/s, GFLOP/s, start-up, PyTorch's tokens/s and the ratio), then unless --no-details
every kernel's GB/s (or GFLOP/s for attention), every GEMM shape's GFLOP/s per implementation
and the step's per-kernel milliseconds. Reads the schema documented at the top of
src/app/cmd_bench.c; standard library only.
"""
import json
import os
import sys


def get(d, *path):
    for k in path:
        if not isinstance(d, dict) or d.get(k) is None:
            return None
        d = d[k]
    return d


def fmt(v, digits=1):
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v).replace("|", "\\|")


def rows_of(r):
    """(section, row label, cell text) for every measurement in one result."""
    out = []

    def add(sec, label, v, digits=1):
        if v is not None:
            out.append((sec, label, fmt(v, digits)))

    add("setup", "device", get(r, "device", "name"))
    add("setup", "type", get(r, "device", "type"))
    add("setup", "platform", get(r, "device", "platform"))
    add("setup", "driver", get(r, "device", "driver"))
    add("setup", "compute units", get(r, "device", "compute_units"))
    add("setup", "host CPU", get(r, "host", "cpu"))
    add("setup", "host core-to-core round trip (ns)", get(r, "host", "core_round_trip_ns"), 0)
    add("setup", "clformer", get(r, "clformer_version"))
    add("summary", "copy bandwidth (GB/s)", get(r, "kernels", "copy", "gbs"))
    if get(r, "gemm") is not None:  # the clblast rows below are CLBlast as tuned by `clformer tune`, or untuned
        add("setup", "CLBlast parameters", "tuned" if get(r, "gemm", "clblast_tuning") else "untuned (defaults)")
    add("summary", "fp32 FMA peak (GFLOP/s)", get(r, "gemm", "peak_gflops"))
    for impl in ("own", "clblast", "openblas", "clblast_default"):
        add("summary", f"GEMM median, {impl} (GFLOP/s)", get(r, "gemm", "median", impl))
    add("summary", "GEMM, median of the shapes' tuned / default clblast", get(r, "gemm", "median", "tuned_vs_default"), 2)
    own, clb = get(r, "gemm", "median", "own"), get(r, "gemm", "median", "clblast")
    add("summary", "GEMM, own median / clblast median", own / clb if own and clb else None, 2)
    add("summary", "GEMM, median of the shapes' own / clblast", get(r, "gemm", "median", "own_vs_clblast"), 2)
    add("summary", "GEMM upper bound (median of FMA peak / clblast)", get(r, "gemm", "median", "peak_vs_clblast"), 2)
    for impl in ("own", "clblast", "openblas", "clblast_default"):
        add("summary", f"GEMM of one step, {impl} (ms)", get(r, "gemm", "per_step", impl + "_ms"))
    s = get(r, "step")
    if s:
        m = s.get("model") or {}
        add("summary", "step model", f"{m.get('norm')}-LN L{m.get('layers')} C{m.get('d_model')} "
                                     f"F{m.get('d_ff')} B{m.get('batch_size')}xT{m.get('seq_len')}")
        add("summary", "step GEMM", s.get("gemm"))
        med, lo, hi = (get(s, "step_ms", k) for k in ("median", "min", "max"))
        if med is not None:
            add("summary", "step ms, median [min-max]", f"{med:.1f} [{lo:.1f}-{hi:.1f}]")
        add("summary", "tokens/s", get(s, "tokens_per_s"), 0)
        add("summary", "step GFLOP/s", get(s, "gflops"))
        add("summary", "start-up to first step (s)", get(s, "startup", "total_s"), 2)
        if get(s, "startup") is not None:
            add("summary", "start-up kernel cache", "warm" if get(s, "startup", "cache_misses") == 0 else "cold")
        add("summary", "PyTorch tokens/s", get(s, "torch", "tokens_per_s"), 0)
        add("summary", "PyTorch threads / OpenBLAS core",
            None if get(s, "torch") is None else
            f"{get(s, 'torch', 'setup', 'threads')} / {get(s, 'torch', 'setup', 'openblas_core')}")
        add("summary", "clformer / PyTorch speed", get(s, "torch", "clformer_vs_torch"), 2)
    for k in get(r, "kernels", "results") or []:
        shape = f"C={k.get('C')}" if "softmax" not in k.get("kernel", "") else f"T={k.get('T')}"
        if k.get("gbs") is not None:
            add("kernels", f"{k['kernel']} {shape} (GB/s)", k["gbs"])
        elif k.get("gflops") is not None:
            add("kernels", f"{k['kernel']} {shape} (GFLOP/s)", k["gflops"])
    for sh in get(r, "gemm", "shapes") or []:
        for impl in ("own", "clblast", "openblas", "clblast_default"):
            add("gemm", f"{sh['name']} {sh['op']} {sh['M']}x{sh['N']}x{sh['K']}"
                        f"{'x' + str(sh['batch']) if sh.get('batch', 1) > 1 else ''} {impl} (GFLOP/s)",
                get(sh, impl, "median"))
    for op in get(r, "step", "breakdown", "ops") or []:
        add("step", f"step: {op['name']} (ms)", op.get("ms"), 2)
    return out


def render(results, labels, details=True):
    table, order = {}, []
    for i, r in enumerate(results):
        for sec, label, cell in rows_of(r):
            if not details and sec in ("kernels", "gemm", "step"):
                continue
            key = (sec, label)
            if key not in table:
                table[key] = {}
                order.append(key)
            table[key][i] = cell
    rank = {"setup": 0, "summary": 1, "kernels": 2, "gemm": 3, "step": 4}
    order.sort(key=lambda k: rank[k[0]])  # stable: first-seen order within a section
    lines = ["| | " + " | ".join(fmt(l) for l in labels) + " |",
             "|---|" + "---:|" * len(labels)]
    for key in order:
        cells = [table[key].get(i, "-") for i in range(len(results))]
        lines.append(f"| {key[1]} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv):
    files, labels, out, details = [], None, None, True
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("-h", "--help"):
            print(__doc__)
            return 0
        if a == "--labels" and i + 1 < len(argv):
            labels = argv[i + 1].split(",")
            i += 1
        elif a == "-o" and i + 1 < len(argv):
            out = argv[i + 1]
            i += 1
        elif a == "--no-details":
            details = False
        elif a.startswith("-") and a != "-":
            print(f"compare_bench.py: unexpected argument {a}\n{__doc__}", file=sys.stderr)
            return 2
        else:
            files.append(a)
        i += 1
    if not files:
        print(__doc__, file=sys.stderr)
        return 2
    results = []
    for f in files:
        try:
            with (sys.stdin if f == "-" else open(f)) as fh:
                results.append(json.load(fh))
        except (OSError, ValueError) as e:
            print(f"compare_bench.py: {f}: {e}", file=sys.stderr)
            return 1
        r = results[-1]
        if not isinstance(r, dict) or not any(k in r for k in ("kernels", "gemm", "step")):
            print(f"compare_bench.py: {f}: no benchmark results (not the JSON of `clformer bench ... --json`)",
                  file=sys.stderr)
            return 1
    if labels is None:
        names = [get(r, "device", "name") or os.path.basename(f) for r, f in zip(results, files)]
        labels = [n if names.count(n) == 1 else f"{n} ({os.path.basename(f)})" for n, f in zip(names, files)]
    elif len(labels) != len(files):
        print("compare_bench.py: --labels needs one label per file", file=sys.stderr)
        return 2
    text = render(results, labels, details)
    if out:
        with open(out, "w") as fh:
            fh.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
