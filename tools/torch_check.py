#!/usr/bin/env python3
"""An independent implementation of clformer's model in PyTorch, to cross-check it.

usage: torch_check.py CHECKPOINT GRADS [--tol 1e-4]
       torch_check.py --init CHECKPOINT

CHECKPOINT is a clformer checkpoint (safetensors: weights named as in the README, the resolved
config in its metadata). GRADS is a safetensors file holding clformer's loss ("loss"), the batch
("inputs", "targets", as floats) and the gradient of every weight (same names), computed on that
batch with dropout off. This script rebuilds the model from the config with plain torch ops,
computes the loss and all gradients in float64, and compares: it prints the worst relative error
per tensor and exits 1 if any exceeds the tolerance (relative Frobenius error), 0 otherwise.
--init: CHECKPOINT holds a model as cf_model_init left it. Each tensor is compared with the same
tensor initialised by PyTorch (tools/torch_init.py: torch.nn.init's xavier_uniform_, normal_, ones_,
zeros_ by the config's model.init): the constants must be equal, the random tensors drawn from the
same distribution (a two-sample Kolmogorov-Smirnov test at significance 1e-4, and a Xavier tensor
inside its bound). Exits 1 naming every tensor that differs.
It reads safetensors with json + struct, so only torch (Debian's python3-torch) and PyYAML are needed.
"""
import json, math, struct, sys

import torch
import torch.nn.functional as F
import yaml

import torch_init


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    meta = header.pop("__metadata__", {})
    tensors = {}
    for name, e in header.items():
        assert e["dtype"] == "F32", name
        a, b = e["data_offsets"]
        t = torch.frombuffer(bytearray(data[a:b]), dtype=torch.float32).clone()
        tensors[name] = t.reshape(e["shape"]) if e["shape"] else t
    return tensors, meta


def forward(cfg, w, inputs, targets):
    m = cfg["model"]
    B, T = inputs.shape
    C, NH, L = m["d_model"], m["heads"], m["layers"]
    HS = C // NH
    eps = float(m["ln_eps"])
    pre = m["norm"] == "pre"
    act = {"relu": F.relu, "gelu": lambda x: F.gelu(x, approximate="tanh"), "gelu_erf": F.gelu}[m["activation"]]
    scale = math.sqrt(C) if m["scale_embeddings"] else 1.0
    x = w["wte"][inputs] * scale
    if m["positions"] == "learned":
        x = x + w["wpe"][:T]
    else:
        t = torch.arange(T, dtype=torch.float64)[:, None]
        c = torch.arange(C)
        freq = torch.pow(torch.tensor(10000.0, dtype=torch.float64), -(c - c % 2).double() / C)
        pos = torch.where(c % 2 == 1, torch.cos(t * freq), torch.sin(t * freq))
        x = x + pos
    mask = torch.ones(T, T, dtype=torch.bool).tril()

    def ln(v, name):
        return F.layer_norm(v, (C,), w[name + ".weight"], w[name + ".bias"], eps)

    def attn(v, l):
        p = f"layers.{l}.attn."
        qkv = v @ w[p + "qkv.weight"].T + w[p + "qkv.bias"]
        q, k, vv = qkv.split(C, dim=-1)
        q, k, vv = (z.reshape(B, T, NH, HS).transpose(1, 2) for z in (q, k, vv))
        s = (q @ k.transpose(-1, -2)) / math.sqrt(HS)
        s = s.masked_fill(~mask, float("-inf"))
        y = torch.softmax(s, dim=-1) @ vv
        y = y.transpose(1, 2).reshape(B, T, C)
        return y @ w[p + "proj.weight"].T + w[p + "proj.bias"]

    def ffn(v, l):
        p = f"layers.{l}.ffn."
        h = act(v @ w[p + "fc1.weight"].T + w[p + "fc1.bias"])
        return h @ w[p + "fc2.weight"].T + w[p + "fc2.bias"]

    for l in range(L):
        if pre:
            x = x + attn(ln(x, f"layers.{l}.ln1"), l)
            x = x + ffn(ln(x, f"layers.{l}.ln2"), l)
        else:
            x = ln(x + attn(x, l), f"layers.{l}.ln1")
            x = ln(x + ffn(x, l), f"layers.{l}.ln2")
    if "lnf.weight" in w:
        x = ln(x, "lnf")
    out_w = w["wte"] if m["tie_embeddings"] else w["out.weight"]
    logits = x @ out_w.T
    return F.cross_entropy(logits.reshape(B * T, -1), targets.reshape(-1),
                           label_smoothing=float(m["label_smoothing"]))


def ks_statistic(a, b):
    """The two-sample Kolmogorov-Smirnov statistic: the largest gap between the empirical CDFs."""
    a, b = a.double().flatten().sort().values, b.double().flatten().sort().values
    x = torch.cat([a, b])
    cdf_a = torch.searchsorted(a, x, right=True).double() / len(a)
    cdf_b = torch.searchsorted(b, x, right=True).double() / len(b)
    return (cdf_a - cdf_b).abs().max().item()


def check_init(path):
    weights, meta = read_safetensors(path)
    model = yaml.safe_load(meta["config"])["model"]
    torch.manual_seed(0)
    c_alpha = math.sqrt(-math.log(1e-4 / 2) / 2)  # KS critical value at significance 1e-4
    failures = 0
    for name, ours in weights.items():
        if name.startswith("optimizer."):
            continue
        kind = torch_init.rule(name, model)
        theirs = torch_init.init_(torch.empty_like(ours), name, model)
        if kind in ("one", "zero"):
            bad = not torch.equal(ours, theirs)
            print(f"  {name}: {kind}s{' DIFFER' if bad else ''}")
        else:
            n = ours.numel()
            d, crit = ks_statistic(ours, theirs), c_alpha * math.sqrt(2.0 / n)
            sd = torch_init.spread(name, ours.shape, model)
            out_of_bound = kind != "normal" and ours.abs().max().item() > sd * math.sqrt(3.0) * (1 + 1e-6)
            # a sample sd's relative error is about 1/sqrt(2n) (less for uniform draws): allow 6 of those
            sd_off = abs(ours.std().item() / sd - 1) > 6 / math.sqrt(2 * n)
            bad = d > crit or out_of_bound or sd_off
            print(f"  {name}: {kind}, sd clformer {ours.std().item():.5f} torch {theirs.std().item():.5f} "
                  f"(expected {sd:.5f}{', off' if sd_off else ''}), KS {d:.4f} (critical {crit:.4f})"
                  f"{', outside the Xavier bound' if out_of_bound else ''}{' DIFFER' if bad else ''}")
        failures += bad
    print(f"model.init {model.get('init', 'xavier')}: {len(weights)} tensors, "
          f"{'all drawn as torch.nn.init draws them' if not failures else f'{failures} differ'}")
    return 1 if failures else 0


def main():
    args = sys.argv[1:]
    if len(args) == 2 and args[0] == "--init":
        return check_init(args[1])
    tol = 1e-4
    if "--tol" in args:
        i = args.index("--tol")
        tol = float(args[i + 1])
        del args[i:i + 2]
    if len(args) != 2:
        print(__doc__)
        return 2
    weights, meta = read_safetensors(args[0])
    cfg = yaml.safe_load(meta["config"])
    ref, _ = read_safetensors(args[1])
    w = {k: v.double().requires_grad_() for k, v in weights.items() if not k.startswith("optimizer.")}
    inputs = ref["inputs"].long()
    targets = ref["targets"].long()
    loss = forward(cfg, w, inputs, targets)
    loss.backward()
    worst, failures = 0.0, 0
    lerr = abs(loss.item() - ref["loss"].item()) / abs(loss.item())
    print(f"loss: torch {loss.item():.8f}, clformer {ref['loss'].item():.8f}, relative error {lerr:.2e}")
    failures += lerr > tol
    for name, t in w.items():
        g = t.grad if t.grad is not None else torch.zeros_like(t)
        mine = ref[name].double().reshape(g.shape)
        err = ((mine - g).norm() / max(g.norm().item(), 1e-30)).item()
        worst = max(worst, err)
        if err > tol:
            failures += 1
            print(f"  {name}: relative error {err:.2e} (|grad| {g.norm().item():.3e})")
    print(f"{len(w)} gradients: worst relative error {worst:.2e} (tolerance {tol:g}); "
          f"{'all agree' if not failures else f'{failures} disagree'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
