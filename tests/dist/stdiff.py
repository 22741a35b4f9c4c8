#!/usr/bin/env python3
"""Largest differences between two safetensors checkpoints, tensor by tensor (no numpy needed).
usage: stdiff.py A B  ->  prints 'max_abs REL max_rel_to_tensor_max REL' of all float tensors."""
import json, struct, sys
from array import array


def load(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in head.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        v = array("f")
        v.frombytes(data[a:b])
        out[name] = v
    return out


x, y = load(sys.argv[1]), load(sys.argv[2])
assert x.keys() == y.keys(), (sorted(x), sorted(y))
worst_abs = worst_rel = 0.0
for k in x:
    scale = max(max(abs(v) for v in x[k]), 1e-30)
    d = max(abs(a - b) for a, b in zip(x[k], y[k]))
    worst_abs, worst_rel = max(worst_abs, d), max(worst_rel, d / scale)
print(f"max_abs {worst_abs:.3g} max_rel {worst_rel:.3g}")
