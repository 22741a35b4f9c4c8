"""clformer's initialisation, built with torch.nn.init: what tools/torch_step.py initialises its
model with, and what tools/torch_check.py --init compares a fresh clformer checkpoint against.

A tensor's rule follows from its safetensors name (README "Checkpoints") and the config's model
section (src/model/model.c, cf_model_init, draws the same distributions from Philox):
  - LayerNorm gains (ln1/ln2/lnf .weight): ones; every bias: zeros;
  - wte, wpe (learned positions) and out.weight: model.init xavier -> Xavier-uniform,
    fairseq -> normal(0, d_model^-1/2), as fairseq's Transformer (nn.init.normal_(std=embed_dim ** -0.5));
  - attn.qkv.weight: Q, K and V each a C x C Xavier-uniform matrix of its own;
  - every other matrix: Xavier-uniform.
Needs only torch."""
import math

import torch
from torch import nn


def rule(name, model):
    """How clformer initialises the tensor `name`: 'one', 'zero', 'normal', 'xavier' or 'xavier3'."""
    if name in ("wte", "wpe", "out.weight"):
        return "normal" if model.get("init", "xavier") == "fairseq" else "xavier"
    if name.endswith(".bias"):
        return "zero"
    if name.split(".")[-2].startswith("ln"):
        return "one"
    if name.endswith("attn.qkv.weight"):
        return "xavier3"
    return "xavier"


def init_(t, name, model):
    """Initialise the parameter tensor t (shape as stored, linear weights (out, in)) in place."""
    kind = rule(name, model)
    with torch.no_grad():
        if kind == "one":
            nn.init.ones_(t)
        elif kind == "zero":
            nn.init.zeros_(t)
        elif kind == "normal":
            nn.init.normal_(t, mean=0.0, std=int(model["d_model"]) ** -0.5)
        elif kind == "xavier3":
            for block in t.view(3, t.shape[0] // 3, t.shape[1]):
                nn.init.xavier_uniform_(block)
        else:
            nn.init.xavier_uniform_(t)
    return t


def spread(name, shape, model):
    """The standard deviation the rule gives a tensor of that shape (0 for the constants)."""
    kind = rule(name, model)
    if kind in ("one", "zero"):
        return 0.0
    if kind == "normal":
        return int(model["d_model"]) ** -0.5
    rows, cols = shape[0] // (3 if kind == "xavier3" else 1), shape[1]
    return math.sqrt(6.0 / (rows + cols)) / math.sqrt(3.0)
