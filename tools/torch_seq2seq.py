#!/usr/bin/env python3
"""An independent PyTorch implementation of clformer's encoder-decoder (issue 20), to cross-check it.

usage: torch_seq2seq.py CHECKPOINT GRADS [--tol 1e-4]
       torch_seq2seq.py --selftest

CHECKPOINT is a clformer checkpoint of a model.arch = encoder_decoder model (safetensors: weights
named as in the encoder-decoder spec -- wte, wpe, encoder.layers.{l}.*, encoder.lnf.*,
decoder.layers.{l}.* with the cross-attention's lnx/cross.q/cross.kv/cross.proj, decoder.lnf.*,
out.weight -- and the resolved config as YAML under the metadata key "config"). GRADS is a
safetensors file holding clformer's loss ("loss", shape (1)), the batch as floats ("src" (B, S),
"src_len" (B), "tgt_in" (B, T), "tgt_out" (B, T)) and the gradient of every weight under the
weight's own name, computed on that batch with dropout off.

The script rebuilds the model from the config with plain torch ops (attention, masks and the
label-smoothed loss written out; LayerNorm by F.layer_norm), computes the loss and every gradient
in float64, and compares: it prints the loss of both, every tensor whose relative Frobenius error
exceeds the tolerance and the worst error over all, and exits 1 if anything exceeds it, 0 if all
agree. Exit 2, with the reason, for input it cannot use: an unreadable file, model.arch not
encoder_decoder, a missing or unexpected tensor, a shape that does not follow from the config, ids
out of range, a source length outside [1, S], a batch without a target token.

The model (issue 20's specification):
  embed(ids) = [sqrt(C) if scale_embeddings] wte[ids] + pos[t], t from 0 on both sides
    (sinusoidal pos[t,2i] = sin(t w_i), pos[t,2i+1] = cos(t w_i), w_i = 10000^(-2i/C); or wpe[t]);
  sublayer F with LayerNorm LN: Pre-LN x = x + F(LN(x)); Post-LN x = LN(x + F(x));
  encoder block: self-attention, key j visible iff j < src_len[b]; FFN fc2(act(fc1(x)));
  memory = encoder.lnf(encoder output) if final_norm (auto: on for pre, off for post), else the
    last block's output; model.encoder_layers = 0 means model.layers encoder blocks;
  decoder block: causal self-attention (ln1), cross-attention (lnx: q from the decoder stream,
    k | v from memory, keys j < src_len[b] visible), FFN (ln2);
  logits = [decoder.lnf](decoder output) W_out^T, W_out = wte when tied, out.weight otherwise;
  loss = mean over positions with tgt_out != 0 of -(1-eps) log p[target] - eps/V sum_v log p[v].

--selftest proves the script before any clformer model exists: it builds random tiny models in
memory (Pre-LN and Post-LN, tied and untied, sinusoidal and learned positions, padding in src and
tgt), writes CHECKPOINT and GRADS files as clformer writes them (gradients from this script's own
autograd in float32) and checks that the comparison passes on them, that it fails on a perturbed
gradient, a wrong loss and a model that ignores the source padding, that unusable input exits 2,
that the same weights in torch.nn's TransformerEncoderLayer/TransformerDecoderLayer
(norm_first for Pre-LN, key padding and causal masks, F.cross_entropy) give the same loss and
gradients to 1e-10 (an implementation of the attention and the norm placement that is not this
script's), and that nothing leaks from padding: the loss and every gradient are unchanged when padded source
tokens or target inputs past a target's length change, the batch's loss is the token-weighted mean
of each pair's loss computed alone without padding, and the explicit loss is torch's
F.cross_entropy(label_smoothing=eps, ignore_index=0).

Needs only torch (Debian's python3-torch) and PyYAML; reads safetensors with torch_check.py's reader.
"""
import contextlib
import io
import json
import math
import os
import struct
import sys
import tempfile

import torch
import torch.nn.functional as F
import yaml

import torch_check
import torch_init


class Unusable(Exception):
    """Input this script cannot check (exit 2)."""


# ---------------------------------------------------------------- the config and the parameters

def resolve(cfg):
    """The model section's values this model needs, checked; raises Unusable."""
    if not isinstance(cfg, dict) or not isinstance(cfg.get("model"), dict):
        raise Unusable("the checkpoint's config has no model section")
    m = cfg["model"]
    arch = m.get("arch", "decoder")
    if arch != "encoder_decoder":
        raise Unusable(f"model.arch is '{arch}', not encoder_decoder (a decoder-only model: use tools/torch_check.py)")
    try:
        r = {
            "C": int(m["d_model"]), "NH": int(m["heads"]), "F": int(m["d_ff"]),
            "L": int(m["layers"]), "LE": int(m.get("encoder_layers", 0) or 0) or int(m["layers"]),
            "pre": {"pre": True, "post": False}[m["norm"]],
            "act": m["activation"], "eps": float(m["ln_eps"]),
            "learned": {"learned": True, "sinusoidal": False}[m["positions"]],
            "scale": bool(m["scale_embeddings"]), "tie": bool(m["tie_embeddings"]),
            "smoothing": float(m.get("label_smoothing", 0) or 0),
        }
    except KeyError as e:
        raise Unusable(f"the config lacks model.{e.args[0]} (or it has a value this script does not know)")
    except (TypeError, ValueError) as e:
        raise Unusable(f"the config's model section has a bad value: {e}")
    fn = m.get("final_norm", "auto")
    if fn in ("auto", None):
        r["final_norm"] = r["pre"]
    elif fn in (True, False, "true", "false"):
        r["final_norm"] = fn in (True, "true")
    else:
        raise Unusable(f"model.final_norm is '{fn}', not auto, true or false")
    if r["act"] not in ("relu", "gelu", "gelu_erf"):
        raise Unusable(f"model.activation is '{r['act']}', not relu, gelu or gelu_erf")
    if r["C"] < 1 or r["NH"] < 1 or r["C"] % r["NH"]:
        raise Unusable(f"model.heads = {r['NH']} does not divide model.d_model = {r['C']}")
    for k in ("dropout", "attn_dropout"):
        if float(m.get(k, 0) or 0) != 0:
            print(f"note: model.{k} = {m[k]}: the gradients must have been computed with dropout off")
    return r


def expected_shapes(r, V, P):
    """Every parameter's name and shape, in the order clformer lays them out (the spec's order)."""
    C, F_ = r["C"], r["F"]
    s = {"wte": (V, C)}
    if r["learned"]:
        s["wpe"] = (P, C)

    def lin(p, out, inp):
        s[p + ".weight"], s[p + ".bias"] = (out, inp), (out,)

    def ln(p):
        s[p + ".weight"], s[p + ".bias"] = (C,), (C,)

    for l in range(r["LE"]):
        p = f"encoder.layers.{l}."
        ln(p + "ln1"); lin(p + "attn.qkv", 3 * C, C); lin(p + "attn.proj", C, C)
        ln(p + "ln2"); lin(p + "ffn.fc1", F_, C); lin(p + "ffn.fc2", C, F_)
    if r["final_norm"]:
        ln("encoder.lnf")
    for l in range(r["L"]):
        p = f"decoder.layers.{l}."
        ln(p + "ln1"); lin(p + "attn.qkv", 3 * C, C); lin(p + "attn.proj", C, C)
        ln(p + "lnx"); lin(p + "cross.q", C, C); lin(p + "cross.kv", 2 * C, C); lin(p + "cross.proj", C, C)
        ln(p + "ln2"); lin(p + "ffn.fc1", F_, C); lin(p + "ffn.fc2", C, F_)
    if r["final_norm"]:
        ln("decoder.lnf")
    if not r["tie"]:
        s["out.weight"] = (V, C)
    return s


def check_weights(r, weights):
    """The parameters (optimizer state dropped) checked against the config: name -> tensor."""
    w = {k: v for k, v in weights.items() if not k.startswith("optimizer.")}
    if "wte" not in w or w["wte"].dim() != 2:
        raise Unusable("the checkpoint has no 2-D tensor wte")
    V = w["wte"].shape[0]
    P = w["wpe"].shape[0] if r["learned"] and "wpe" in w and w["wpe"].dim() == 2 else 0
    shapes = expected_shapes(r, V, P)
    missing = [k for k in shapes if k not in w]
    extra = [k for k in w if k not in shapes]
    if missing:
        raise Unusable(f"the checkpoint lacks {len(missing)} tensor(s) the config implies: {', '.join(missing[:6])}"
                       f"{' ...' if len(missing) > 6 else ''}")
    if extra:
        raise Unusable(f"the checkpoint holds {len(extra)} tensor(s) the config does not imply: {', '.join(extra[:6])}"
                       f"{' ...' if len(extra) > 6 else ''} (final_norm {r['final_norm']}, tied {r['tie']}, "
                       f"{r['LE']} encoder and {r['L']} decoder blocks)")
    for k, shape in shapes.items():
        if tuple(w[k].shape) != shape:
            raise Unusable(f"checkpoint tensor {k} has shape {tuple(w[k].shape)}, the config implies {shape}")
    return {k: w[k] for k in shapes}


def check_batch(ref, V, P, learned):
    """The batch from GRADS as int64 tensors (src, src_len, tgt_in, tgt_out); raises Unusable."""
    for k in ("loss", "src", "src_len", "tgt_in", "tgt_out"):
        if k not in ref:
            raise Unusable(f"GRADS lacks the tensor '{k}'")
    src, src_len, tgt_in, tgt_out = (ref[k] for k in ("src", "src_len", "tgt_in", "tgt_out"))
    if src.dim() != 2 or tgt_in.dim() != 2 or tgt_out.shape != tgt_in.shape:
        raise Unusable(f"src {tuple(src.shape)}, tgt_in {tuple(tgt_in.shape)}, tgt_out {tuple(tgt_out.shape)}: "
                       "expected (B, S), (B, T), (B, T)")
    B, S = src.shape
    T = tgt_in.shape[1]
    if tgt_in.shape[0] != B or tuple(src_len.shape) != (B,):
        raise Unusable(f"src {tuple(src.shape)}, src_len {tuple(src_len.shape)}, tgt_in {tuple(tgt_in.shape)}: "
                       "the batch sizes differ")
    if ref["loss"].numel() != 1:
        raise Unusable(f"'loss' has {ref['loss'].numel()} elements, not 1")
    out = []
    for name, t in (("src", src), ("src_len", src_len), ("tgt_in", tgt_in), ("tgt_out", tgt_out)):
        if not torch.equal(t, t.round()) or not torch.isfinite(t).all():
            raise Unusable(f"'{name}' holds a value that is not an integer")
        out.append(t.long())
    src, src_len, tgt_in, tgt_out = out
    for name, t in (("src", src), ("tgt_in", tgt_in), ("tgt_out", tgt_out)):
        if t.numel() and (t.min() < 0 or t.max() >= V):
            raise Unusable(f"'{name}' holds an id outside [0, {V}) (V = wte's rows)")
    if (src_len < 1).any() or (src_len > S).any():
        raise Unusable(f"src_len {src_len.tolist()} has a length outside [1, S = {S}]")
    if not (tgt_out != 0).any():
        raise Unusable("tgt_out has no target (every position is pad = 0): the loss is undefined")
    if learned and max(S, T) > P:
        raise Unusable(f"the batch's lengths S = {S}, T = {T} exceed wpe's {P} positions")
    pad_ok = all((src[b, src_len[b]:] == 0).all() and (src[b, :src_len[b]] != 0).all() for b in range(B))
    if not pad_ok:
        print(f"note: src does not look padded as src_len says (ids before src_len nonzero, pad 0 after): "
              f"src_len {src_len.tolist()}; the model follows src_len")
    return src, src_len, tgt_in, tgt_out


# ---------------------------------------------------------------- the model

def sinusoid(n, C, dtype):
    t = torch.arange(n, dtype=torch.float64)[:, None]
    c = torch.arange(C)
    w = torch.pow(torch.tensor(10000.0, dtype=torch.float64), -(c - c % 2).double() / C)
    return torch.where(c % 2 == 1, torch.cos(t * w), torch.sin(t * w)).to(dtype)


def forward(r, w, src, src_len, tgt_in, tgt_out, mutation=None):
    """The mean label-smoothed cross-entropy of the batch. `mutation` (self-test only) breaks one
    detail on purpose: 'no_src_mask' lets every source position be attended to."""
    C, NH = r["C"], r["NH"]
    HS = C // NH
    B, S = src.shape
    T = tgt_in.shape[1]
    dtype = w["wte"].dtype
    act = {"relu": F.relu, "gelu": lambda x: F.gelu(x, approximate="tanh"), "gelu_erf": F.gelu}[r["act"]]

    def embed(ids):
        n = ids.shape[1]
        x = w["wte"][ids] * (math.sqrt(C) if r["scale"] else 1.0)
        return x + (w["wpe"][:n] if r["learned"] else sinusoid(n, C, dtype))

    def ln(x, name):
        return F.layer_norm(x, (C,), w[name + ".weight"], w[name + ".bias"], r["eps"])

    def linear(x, name):
        return x @ w[name + ".weight"].T + w[name + ".bias"]

    def heads(z):  # (B, n, C) -> (B, NH, n, HS)
        return z.reshape(z.shape[0], z.shape[1], NH, HS).transpose(1, 2)

    def attend(q, k, v, visible):  # visible: bool, broadcast to (B, NH, Tq, Tk)
        s = (heads(q) @ heads(k).transpose(-1, -2)) / math.sqrt(HS)
        s = s.masked_fill(~visible, float("-inf"))
        y = torch.softmax(s, dim=-1) @ heads(v)
        return y.transpose(1, 2).reshape(q.shape[0], q.shape[1], C)

    def self_attn(x, p, visible):
        q, k, v = linear(x, p + "attn.qkv").split(C, dim=-1)
        return linear(attend(q, k, v, visible), p + "attn.proj")

    def cross_attn(x, memory, p, visible):
        q = linear(x, p + "cross.q")
        k, v = linear(memory, p + "cross.kv").split(C, dim=-1)
        return linear(attend(q, k, v, visible), p + "cross.proj")

    def ffn(x, p):
        return linear(act(linear(x, p + "ffn.fc1")), p + "ffn.fc2")

    def sublayer(x, f, norm):
        return x + f(ln(x, norm)) if r["pre"] else ln(x + f(x), norm)

    # source keys j < src_len[b] visible, to every query (encoder and cross-attention)
    src_visible = (torch.arange(S)[None, :] < src_len[:, None])[:, None, None, :]  # (B, 1, 1, S)
    if mutation == "no_src_mask":
        src_visible = torch.ones_like(src_visible)
    causal = torch.ones(T, T, dtype=torch.bool).tril()[None, None]  # (1, 1, T, T)

    x = embed(src)
    for l in range(r["LE"]):
        p = f"encoder.layers.{l}."
        x = sublayer(x, lambda h: self_attn(h, p, src_visible), p + "ln1")
        x = sublayer(x, lambda h: ffn(h, p), p + "ln2")
    memory = ln(x, "encoder.lnf") if r["final_norm"] else x

    y = embed(tgt_in)
    for l in range(r["L"]):
        p = f"decoder.layers.{l}."
        y = sublayer(y, lambda h: self_attn(h, p, causal), p + "ln1")
        y = sublayer(y, lambda h: cross_attn(h, memory, p, src_visible), p + "lnx")
        y = sublayer(y, lambda h: ffn(h, p), p + "ln2")
    if r["final_norm"]:
        y = ln(y, "decoder.lnf")
    logits = y @ (w["wte"] if r["tie"] else w["out.weight"]).T  # (B, T, V), no bias
    return smoothed_nll(logits, tgt_out, r["smoothing"])


def smoothed_nll(logits, tgt_out, eps):
    """-(1 - eps) log p[target] - eps/V sum_v log p[v], averaged over the positions with tgt_out != 0."""
    V = logits.shape[-1]
    logp = torch.log_softmax(logits, dim=-1)
    keep = tgt_out != 0
    nll = -logp.gather(-1, tgt_out[..., None])[..., 0]
    per = (1 - eps) * nll - eps / V * logp.sum(-1)
    return (per * keep).sum() / keep.sum()


# ---------------------------------------------------------------- the comparison

def read(path, what):
    try:
        return torch_check.read_safetensors(path)
    except Exception as e:  # noqa: BLE001 -- any failure to parse is unusable input
        raise Unusable(f"{what} {path}: not a readable float32 safetensors file ({type(e).__name__}: {e})")


def compare(ckpt_path, grads_path, tol):
    """0 if clformer's loss and every gradient agree within tol, 1 if not; raises Unusable."""
    weights, meta = read(ckpt_path, "CHECKPOINT")
    if "config" not in meta:
        raise Unusable(f"CHECKPOINT {ckpt_path}: no config in its metadata (not a clformer checkpoint?)")
    try:
        cfg = yaml.safe_load(meta["config"])
    except yaml.YAMLError as e:
        raise Unusable(f"CHECKPOINT {ckpt_path}: its config is not YAML: {e}")
    r = resolve(cfg)
    w32 = check_weights(r, weights)
    ref, _ = read(grads_path, "GRADS")
    V = w32["wte"].shape[0]
    P = w32["wpe"].shape[0] if r["learned"] else 0
    batch = check_batch(ref, V, P, r["learned"])
    for name, t in w32.items():
        if name not in ref:
            raise Unusable(f"GRADS lacks the gradient of {name}")
        if ref[name].numel() != t.numel():
            raise Unusable(f"GRADS's {name} has shape {tuple(ref[name].shape)}, the weight {tuple(t.shape)}")
    w = {k: v.double().requires_grad_() for k, v in w32.items()}
    loss = forward(r, w, *batch)
    loss.backward()
    B, S = batch[0].shape
    T = batch[2].shape[1]
    print(f"{'Pre' if r['pre'] else 'Post'}-LN encoder-decoder, {r['LE']} + {r['L']} blocks, C {r['C']}, "
          f"heads {r['NH']}, d_ff {r['F']}, V {V}, {r['act']}, {'learned' if r['learned'] else 'sinusoidal'} "
          f"positions, tied {int(r['tie'])}, final norm {int(r['final_norm'])}, smoothing {r['smoothing']:g}; "
          f"batch {B} x S {S} / T {T}, {int((batch[3] != 0).sum())} target tokens")
    failures, worst, worst_name = 0, 0.0, ""
    theirs = ref["loss"].double().reshape(()).item()
    lerr = abs(loss.item() - theirs) / max(abs(loss.item()), 1e-30)
    print(f"loss: torch {loss.item():.8f}, clformer {theirs:.8f}, relative error {lerr:.2e}")
    if not lerr <= tol:
        failures += 1
        print(f"  loss: relative error {lerr:.2e} exceeds {tol:g}")
    for name, t in w.items():
        g = t.grad if t.grad is not None else torch.zeros_like(t)
        mine = ref[name].double().reshape(g.shape)
        err = ((mine - g).norm() / max(g.norm().item(), 1e-30)).item()
        if not err <= tol:  # NaN counts as a failure
            failures += 1
            print(f"  {name}: relative error {err:.2e} (|grad| {g.norm().item():.3e}, clformer's "
                  f"{mine.norm().item():.3e})")
        if not err <= worst:
            worst, worst_name = err, name
    print(f"{len(w)} gradients: worst relative error {worst:.2e} ({worst_name}; tolerance {tol:g}); "
          f"{'all agree' if not failures else f'{failures} disagree'}")
    return 1 if failures else 0


def run(ckpt_path, grads_path, tol):
    """compare() as an exit status: 2 with the reason on stderr for unusable input."""
    try:
        return compare(ckpt_path, grads_path, tol)
    except Unusable as e:
        print(f"torch_seq2seq.py: unusable input: {e}", file=sys.stderr)
        return 2


# ---------------------------------------------------------------- the self-test

def write_safetensors(path, tensors, meta=None):
    """As cf_safetensors_write: compact JSON header, keys in order (__metadata__ first), padded with
    spaces so the data start 8-byte aligned, float32 little-endian data in the order given."""
    header, off = {}, 0
    if meta:
        header["__metadata__"] = meta
    for name, t in tensors:
        n = 4 * t.numel()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + n]}
        off += n
    hdr = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
    hlen = (8 + len(hdr) + 7) // 8 * 8 - 8
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", hlen) + hdr + b" " * (hlen - len(hdr)))
        for _, t in tensors:
            vals = t.detach().float().flatten().tolist()
            f.write(struct.pack(f"<{len(vals)}f", *vals))


def config_yaml(model):
    """The resolved config as cf_config_write dumps it (`clformer check`), model section from `model`."""
    def val(v):
        return ("true" if v else "false") if isinstance(v, bool) else str(v)
    lines = ['device: "auto"', "seed: 1234", "data:", '  train: "data/train"', '  valid: "data/valid"',
             "  valid_fraction: 0.05", '  test: "data/test"', '  source_lang: "de"', '  target_lang: "en"',
             "  tokenizer: bpe", "  vocab_size: 17", "  max_tokens: 4096", "  max_len: 128", "  seq_len: 64",
             "  batch_size: 16", "model:"]
    lines += [f"  {k}: {val(v)}" for k, v in model.items()]
    lines += ["optim:", "  name: adam", "  lr: 0.001", "  betas: [0.9, 0.98]", "  eps: 1e-08", "  weight_decay: 0",
              "  momentum: 0.9", "  clip_norm: 0", "schedule:", "  warmup: 0", "  decay: inverse_sqrt", "  min_lr: 0",
              "  total_steps: 0", "train:", "  steps: 1000", "  accumulate: 1", "  eval_every: 100",
              "  eval_batches: 8", "  log_every: 10", "  checkpoint_every: 500", '  out: "runs/default"']
    return "\n".join(lines) + "\n"


def model_section(norm, layers, encoder_layers, act, final_norm, tie, positions, scale, smoothing, C=8, NH=2, F_=12):
    return {"arch": "encoder_decoder", "norm": norm, "layers": layers, "encoder_layers": encoder_layers,
            "d_model": C, "heads": NH, "d_ff": F_, "activation": act, "dropout": 0, "attn_dropout": 0,
            "attention": "fused", "final_norm": final_norm, "tie_embeddings": tie, "positions": positions,
            "init": "xavier", "scale_embeddings": scale, "ln_eps": "1e-05", "label_smoothing": smoothing}


def random_weights(r, V, P, gen):
    """torch_init's initialisation (Xavier, ones, zeros) moved off by +-0.05 so every gain and bias matters."""
    torch.manual_seed(int(torch.randint(0, 2 ** 31, (1,), generator=gen)))
    w = {}
    for name, shape in expected_shapes(r, V, P).items():
        t = torch_init.init_(torch.empty(shape), name, {"init": "xavier", "d_model": r["C"]})
        w[name] = t + 0.1 * (torch.rand(shape, generator=gen) - 0.5)
    return w


def random_batch(B, S, T, V, gen, src_lens, tgt_lens):
    """ids: 0 pad, 1 bos, 2 eos; words from [3, V). src: words, eos, pad; tgt_in: bos, words, pad;
    tgt_out: words, eos, pad. src_lens count the eos; tgt_lens the words."""
    src = torch.zeros(B, S, dtype=torch.long)
    tgt_in = torch.zeros(B, T, dtype=torch.long)
    tgt_out = torch.zeros(B, T, dtype=torch.long)
    for b in range(B):
        n, m = src_lens[b], tgt_lens[b]
        src[b, :n - 1] = torch.randint(3, V, (n - 1,), generator=gen)
        src[b, n - 1] = 2
        words = torch.randint(3, V, (m,), generator=gen)
        tgt_in[b, 0] = 1
        tgt_in[b, 1:m + 1] = words
        tgt_out[b, :m] = words
        tgt_out[b, m] = 2
    return src, torch.tensor(src_lens), tgt_in, tgt_out


def grads_of(r, w, batch, mutation=None, dtype=torch.float64):
    """loss and {name: gradient} by autograd, in dtype."""
    wd = {k: v.detach().to(dtype).requires_grad_() for k, v in w.items()}
    loss = forward(r, wd, *batch, mutation=mutation)
    loss.backward()
    return loss.detach(), {k: v.grad if v.grad is not None else torch.zeros_like(v) for k, v in wd.items()}


def nn_reference(r, w, batch):
    """The same model assembled from torch.nn's TransformerEncoder/DecoderLayer (self-test only: an
    implementation of attention, masks and norm placement that is not this script's), float64:
    the loss (F.cross_entropy) and {name: gradient}."""
    from torch import nn
    src, src_len, tgt_in, tgt_out = batch
    C, NH, F_, eps = r["C"], r["NH"], r["F"], r["eps"]
    act = {"relu": F.relu, "gelu": lambda x: F.gelu(x, approximate="tanh"), "gelu_erf": F.gelu}[r["act"]]
    kw = dict(d_model=C, nhead=NH, dim_feedforward=F_, dropout=0.0, activation=act, layer_norm_eps=eps,
              batch_first=True, norm_first=r["pre"], dtype=torch.float64)
    enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(**kw), r["LE"], enable_nested_tensor=False,
                                norm=nn.LayerNorm(C, eps=eps, dtype=torch.float64) if r["final_norm"] else None)
    dec = nn.TransformerDecoder(nn.TransformerDecoderLayer(**kw), r["L"],
                                norm=nn.LayerNorm(C, eps=eps, dtype=torch.float64) if r["final_norm"] else None)
    ours = {}  # torch.nn's parameter -> (our name, row slice)
    for l, layer in enumerate(enc.layers):
        p = f"encoder.layers.{l}."
        ours.update({layer.self_attn.in_proj_weight: (p + "attn.qkv.weight", None),
                     layer.self_attn.in_proj_bias: (p + "attn.qkv.bias", None),
                     layer.self_attn.out_proj.weight: (p + "attn.proj.weight", None),
                     layer.self_attn.out_proj.bias: (p + "attn.proj.bias", None)})
        for mod, name in ((layer.norm1, "ln1"), (layer.norm2, "ln2"), (layer.linear1, "ffn.fc1"),
                          (layer.linear2, "ffn.fc2")):
            ours.update({mod.weight: (p + name + ".weight", None), mod.bias: (p + name + ".bias", None)})
    for l, layer in enumerate(dec.layers):
        p = f"decoder.layers.{l}."
        x = layer.multihead_attn
        ours.update({layer.self_attn.in_proj_weight: (p + "attn.qkv.weight", None),
                     layer.self_attn.in_proj_bias: (p + "attn.qkv.bias", None),
                     layer.self_attn.out_proj.weight: (p + "attn.proj.weight", None),
                     layer.self_attn.out_proj.bias: (p + "attn.proj.bias", None),
                     x.in_proj_weight: ((p + "cross.q.weight", p + "cross.kv.weight"), C),
                     x.in_proj_bias: ((p + "cross.q.bias", p + "cross.kv.bias"), C),
                     x.out_proj.weight: (p + "cross.proj.weight", None), x.out_proj.bias: (p + "cross.proj.bias", None)})
        for mod, name in ((layer.norm1, "ln1"), (layer.norm2, "lnx"), (layer.norm3, "ln2"),
                          (layer.linear1, "ffn.fc1"), (layer.linear2, "ffn.fc2")):
            ours.update({mod.weight: (p + name + ".weight", None), mod.bias: (p + name + ".bias", None)})
    for mod, name in ((enc.norm, "encoder.lnf"), (dec.norm, "decoder.lnf")):
        if mod is not None:
            ours.update({mod.weight: (name + ".weight", None), mod.bias: (name + ".bias", None)})
    with torch.no_grad():
        for param, (name, split) in ours.items():
            param.copy_(torch.cat([w[n].double() for n in name]) if split else w[name].double())
    wte = w["wte"].double().requires_grad_()
    wpe = w["wpe"].double().requires_grad_() if r["learned"] else None
    out = None if r["tie"] else w["out.weight"].double().requires_grad_()

    def embed(ids):
        n = ids.shape[1]
        return wte[ids] * (math.sqrt(C) if r["scale"] else 1.0) + (wpe[:n] if r["learned"] else sinusoid(n, C, torch.float64))

    S, T = src.shape[1], tgt_in.shape[1]
    pad = torch.arange(S)[None, :] >= src_len[:, None]  # True: not attended
    memory = enc(embed(src), src_key_padding_mask=pad)
    y = dec(embed(tgt_in), memory, tgt_mask=~torch.ones(T, T, dtype=torch.bool).tril(),
            memory_key_padding_mask=pad)
    logits = y @ (wte if r["tie"] else out).T
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt_out.reshape(-1), ignore_index=0,
                           label_smoothing=r["smoothing"])
    loss.backward()
    g = {"wte": wte.grad}
    if wpe is not None:
        g["wpe"] = wpe.grad
    if out is not None:
        g["out.weight"] = out.grad
    for param, (name, split) in ours.items():
        if split:
            g[name[0]], g[name[1]] = param.grad[:split], param.grad[split:]
        else:
            g[name] = param.grad
    return loss.detach(), g


def quiet(fn, *args):
    """fn(*args) with its stdout and stderr captured: (result, the text)."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        rc = fn(*args)
    return rc, buf.getvalue()


def selftest():
    gen = torch.Generator().manual_seed(20)
    V, P, B, S, T = 17, 9, 3, 7, 6
    src_lens, tgt_lens = [7, 4, 2], [3, 5, 1]  # one full source, one full target, the rest padded
    cases = [  # norm, decoder layers, encoder_layers, act, final_norm, tied, positions, scale, smoothing
        ("pre", 2, 0, "relu", "true", False, "sinusoidal", False, 0),
        ("post", 2, 1, "gelu", "false", True, "learned", True, 0.1),
        ("pre", 1, 3, "gelu_erf", "true", True, "sinusoidal", True, 0.1),
        ("post", 2, 0, "relu", "auto", False, "learned", False, 0),
        ("post", 1, 2, "gelu", "true", False, "sinusoidal", False, 0.1),  # Post-LN with final norms
    ]
    failures = 0

    def expect(ok, what):
        nonlocal failures
        print(f"  {'ok  ' if ok else 'FAIL'} {what}")
        failures += not ok

    with tempfile.TemporaryDirectory(prefix="torch_seq2seq-") as tmp:
        ckpt, grads = os.path.join(tmp, "model.safetensors"), os.path.join(tmp, "grads.safetensors")
        for i, case in enumerate(cases):
            model = model_section(*case)
            cfg_text = config_yaml(model)
            r = resolve(yaml.safe_load(cfg_text))
            w = random_weights(r, V, P, gen)
            batch = random_batch(B, S, T, V, gen, src_lens, tgt_lens)
            src, src_len, tgt_in, tgt_out = batch
            print(f"case {i + 1}: {case[0]}-LN, decoder {case[1]} / encoder_layers {case[2]}, {case[3]}, final_norm "
                  f"{case[4]}, tied {case[5]}, {case[6]} positions, scaled {case[7]}, smoothing {case[8]}")

            def save(grad32, loss32, weights=w, meta_cfg=cfg_text, drop=None):
                nparam = sum(t.numel() for t in weights.values())
                meta = {"format": "clformer-checkpoint-1", "clformer_version": "0.1.0", "config": meta_cfg,
                        "step": "0", "best_valid": "inf", "best_step": "0", "wall_s": "0.000",
                        "diverged_step": "0", "world_size": "1"}
                write_safetensors(ckpt, list(weights.items()) + [("optimizer.m1", torch.zeros(nparam)),
                                                                 ("optimizer.m2", torch.zeros(nparam))], meta)
                t = [(k, v) for k, v in grad32.items() if k != drop]
                t += [("src", src.float()), ("src_len", src_len.float()), ("tgt_in", tgt_in.float()),
                      ("tgt_out", tgt_out.float()), ("loss", loss32.reshape(1).float())]
                write_safetensors(grads, [x for x in t if x[0] != drop])

            # 1. float32 autograd files, as clformer would write them, pass the float64 comparison
            loss32, g32 = grads_of(r, w, batch, dtype=torch.float32)
            save(g32, loss32)
            rc = run(ckpt, grads, 1e-4)
            expect(rc == 0, f"the comparison passes on float32 autograd's loss and gradients (exit {rc})")

            # 2. it fails on one gradient off by 0.1% (a decoder cross-attention or the embedding)
            name = "decoder.layers.0.cross.kv.weight" if i % 2 == 0 else "wte"
            bad = dict(g32)
            bad[name] = g32[name] * 1.001
            save(bad, loss32)
            rc, out = quiet(run, ckpt, grads, 1e-4)
            expect(rc == 1 and name in out, f"it fails with {name}'s gradient 0.1% off (exit {rc})")
            # ... one element of the encoder's first qkv gradient changed
            bad = dict(g32)
            name = "encoder.layers.0.attn.qkv.weight"
            bad[name] = g32[name].clone()
            bad[name][5, 3] += 0.01 * g32[name].norm()
            save(bad, loss32)
            rc, out = quiet(run, ckpt, grads, 1e-4)
            expect(rc == 1 and name in out, f"it fails with one element of {name}'s gradient off (exit {rc})")
            # ... the loss off by 0.1%
            save(g32, loss32 * 1.001)
            rc, out = quiet(run, ckpt, grads, 1e-4)
            expect(rc == 1, f"it fails with the loss 0.1% off (exit {rc})")
            # ... a model that attends to the source padding
            lm, gm = grads_of(r, w, batch, mutation="no_src_mask", dtype=torch.float32)
            save(gm, lm)
            rc, out = quiet(run, ckpt, grads, 1e-4)
            worst = out.strip().splitlines()[-1] if out.strip() else ""
            expect(rc == 1, f"it fails on a model that attends to padded source positions (exit {rc}: {worst})")

            # 3. unusable input exits 2
            save(g32, loss32, drop="decoder.layers.0.cross.q.bias")
            rc, out = quiet(run, ckpt, grads, 1e-4)
            expect(rc == 2 and "cross.q.bias" in out, f"a missing gradient exits 2 (exit {rc}: {out.strip()})")
            save(g32, loss32, drop="src_len")
            rc, out = quiet(run, ckpt, grads, 1e-4)
            expect(rc == 2 and "src_len" in out, f"a missing batch tensor exits 2 (exit {rc})")
            save(g32, loss32, meta_cfg=cfg_text.replace("arch: encoder_decoder", "arch: decoder"))
            rc, out = quiet(run, ckpt, grads, 1e-4)
            expect(rc == 2 and "arch" in out, f"model.arch decoder exits 2 (exit {rc})")
            wrong = dict(w)
            wrong["decoder.layers.0.cross.kv.weight"] = torch.zeros(3 * r["C"], r["C"])
            save(g32, loss32, weights=wrong)
            rc, out = quiet(run, ckpt, grads, 1e-4)
            expect(rc == 2 and "shape" in out, f"a weight of the wrong shape exits 2 (exit {rc})")
            save(g32, loss32, meta_cfg=cfg_text.replace(f"encoder_layers: {case[2]}", f"encoder_layers: {r['LE'] + 1}"))
            rc, out = quiet(run, ckpt, grads, 1e-4)
            expect(rc == 2 and "lacks" in out, f"a config with more encoder blocks than the checkpoint exits 2 (exit {rc})")

            # 4. nothing leaks from padding (float64, in memory)
            loss, g = grads_of(r, w, batch)

            def same(batch2):
                loss2, g2 = grads_of(r, w, batch2)
                d = max([abs(loss2.item() - loss.item()) / abs(loss.item())] +
                        [((g2[k] - g[k]).norm() / max(g[k].norm().item(), 1e-300)).item() for k in g])
                return d

            # the forward and backward agree with torch.nn's Transformer layers given the same weights
            ln_, gn = nn_reference(r, w, batch)
            d = max([abs(ln_.item() - loss.item()) / loss.item()] +
                    [((gn[k] - g[k]).norm() / max(g[k].norm().item(), 1e-300)).item() for k in g])
            expect(set(gn) == set(g) and d < 1e-10,
                   f"loss and all {len(g)} gradients agree with torch.nn.TransformerEncoder/DecoderLayer's "
                   f"(norm_first={r['pre']}, key padding and causal masks; largest relative difference {d:.1e})")

            src2 = src.clone()
            pad = torch.arange(S)[None, :] >= src_len[:, None]
            src2[pad] = torch.randint(1, V, (int(pad.sum()),), generator=gen)
            d = same((src2, src_len, tgt_in, tgt_out))
            expect(d < 1e-12, f"other ids at the {int(pad.sum())} padded source positions change neither the loss nor "
                              f"any gradient (largest relative change {d:.1e})")
            tgt2 = tgt_in.clone()
            tpad = tgt_out == 0
            tgt2[tpad] = torch.randint(1, V, (int(tpad.sum()),), generator=gen)
            d = same((src, src_len, tgt2, tgt_out))
            expect(d < 1e-12, f"other ids in tgt_in at the {int(tpad.sum())} positions past the targets change "
                              f"nothing (largest relative change {d:.1e})")
            # positive controls: an id inside the source, a source length, a target input do matter
            src3 = src.clone()
            src3[1, 0] = 3 + (src[1, 0] - 3 + 1) % (V - 3)
            d1 = same((src3, src_len, tgt_in, tgt_out))
            len3 = src_len.clone()
            len3[2] += 1
            d2 = same((src, len3, tgt_in, tgt_out))
            tgt3 = tgt_in.clone()
            tgt3[1, 2] = 3 + (tgt_in[1, 2] - 3 + 1) % (V - 3)
            d3 = same((src, src_len, tgt3, tgt_out))
            expect(min(d1, d2, d3) > 1e-6, f"a source id, a source length and a target input id do change them "
                                           f"(relative changes {d1:.1e}, {d2:.1e}, {d3:.1e})")
            # each pair alone, unpadded: the batch's loss is the token-weighted mean of theirs
            total, ntok = 0.0, 0
            for b in range(B):
                n, m = src_lens[b], tgt_lens[b] + 1
                lb = forward(r, {k: v.double() for k, v in w.items()}, src[b:b + 1, :n], src_len[b:b + 1],
                             tgt_in[b:b + 1, :m], tgt_out[b:b + 1, :m]).item()
                total += lb * m
                ntok += m
            d = abs(total / ntok - loss.item()) / loss.item()
            expect(d < 1e-12, f"the batch's loss {loss.item():.6f} is the token-weighted mean of each pair's loss "
                              f"computed alone, unpadded (relative difference {d:.1e})")
            # the written-out loss is torch's label-smoothed cross-entropy with ignore_index 0
            with torch.no_grad():
                wd = {k: v.double() for k, v in w.items()}
                logits_loss = forward(r, wd, *batch).item()
                eps = r["smoothing"]
                logits = torch.randn(B, T, V, dtype=torch.float64, generator=gen)
                a = smoothed_nll(logits, tgt_out, eps).item()
                b_ = F.cross_entropy(logits.reshape(-1, V), tgt_out.reshape(-1), label_smoothing=eps,
                                     ignore_index=0).item()
            expect(abs(a - b_) < 1e-12 * abs(b_) and math.isfinite(logits_loss),
                   f"the loss is F.cross_entropy(label_smoothing={eps:g}, ignore_index=0) ({a:.10f} vs {b_:.10f})")

        # the usage line: bad arguments exit 2
        rc, _ = quiet(main, [])
        expect(rc == 2, f"no arguments exit 2 (exit {rc})")
        rc, out = quiet(run, os.path.join(tmp, "absent.safetensors"), grads, 1e-4)
        expect(rc == 2 and "CHECKPOINT" in out, f"an absent checkpoint exits 2 (exit {rc})")

    print(f"selftest: {'all checks pass' if not failures else f'{failures} checks FAILED'}")
    return 1 if failures else 0


def main(args):
    if args == ["--selftest"]:
        return selftest()
    tol = 1e-4
    if "--tol" in args:
        i = args.index("--tol")
        try:
            tol = float(args[i + 1])
        except (IndexError, ValueError):
            print(__doc__)
            return 2
        del args[i:i + 2]
    if len(args) != 2:
        print(__doc__)
        return 2
    return run(args[0], args[1], tol)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
