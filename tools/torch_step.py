#!/usr/bin/env python3
"""PyTorch reference for the speed of a clformer training step, on the host CPU.

usage: torch_step.py CONFIG [--set KEY=VALUE ...] [--steps N] [--warmup N] [--threads N] [--as-is] [--json FILE]
       torch_step.py CONFIG --serve [--threads N] [--warmup N] [--as-is]   (driven by `clformer bench step --vs-torch`)

CONFIG is a clformer training config (YAML; missing keys take clformer's defaults, a compare file's
`base:` section is used when there is one). The script builds the same model as clformer (Pre-LN
or Post-LN decoder, byte vocabulary V = 256, sinusoidal or learned positions, optional final
LayerNorm, untied output projection without bias unless tie_embeddings) with plain torch ops in
float32, and times the same training step: forward with the mean cross-entropy loss, backward,
the global gradient norm (clipping when optim.clip_norm > 0), and the optimizer step (Adam, AdamW
or SGD with momentum), on random tokens. Each step is timed by the wall clock; after the warm-up
steps it prints the median [min, max] step time and tokens/s = batch_size * seq_len / median.

PyTorch gets its best settings unless --as-is is given (a comparison against a handicapped
baseline proves nothing), each one measured on this machine:
  - the allocator: glibc's malloc hands every large free block back to the kernel, so each of the
    step's hundreds of fresh multi-MB tensors is page-faulted in anew (in a VM a step took 2x as
    long); the script re-executes itself with MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_ and
    MALLOC_TOP_PAD_ set so freed memory stays in the process;
  - OpenBLAS's kernel: OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are removed from the environment so
    OpenBLAS picks its kernel for the CPU it finds (the environment may force an older one);
  - threads: without --threads, every pair of torch intra-op threads and OpenBLAS threads in
    {1, cores} is timed over a few steps and the fastest is kept (torch's OpenMP threads and
    OpenBLAS's pthreads together can oversubscribe the cores and make a step several times slower).
Setup reported: torch's version, the chosen threads, the settings applied, the BLAS library the
process loaded (from /proc/self/maps) and OpenBLAS's chosen core (openblas_get_corename).

--serve: print one JSON line describing the setup, then answer each `run N` line on stdin with
one JSON line {"times": [seconds, ...]} of N timed steps; `quit` ends. Needs only torch (Debian's
python3-torch) and PyYAML.
"""
import ctypes
import json
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
import yaml

import torch_init  # clformer's initialisation, beside this script

DEFAULTS = {
    "seed": 1234,
    "data": {"seq_len": 64, "batch_size": 16},
    "model": {"norm": "pre", "layers": 6, "d_model": 256, "heads": 4, "d_ff": 1024, "activation": "relu",
              "dropout": 0.0, "attn_dropout": 0.0, "final_norm": "auto", "tie_embeddings": False,
              "positions": "sinusoidal", "scale_embeddings": False, "init": "xavier", "ln_eps": 1e-5, "label_smoothing": 0.0},
    "optim": {"name": "adam", "lr": 1e-3, "betas": [0.9, 0.98], "eps": 1e-8, "weight_decay": 0.0,
              "momentum": 0.9, "clip_norm": 0.0},
}
V = 256


def load_config(path, sets):
    with open(path) as f:
        raw = yaml.safe_load(f) or {}
    if "base" in raw and "model" not in raw:
        raw = raw["base"] or {}
    cfg = {k: (dict(v) if isinstance(v, dict) else v) for k, v in DEFAULTS.items()}
    for section, values in raw.items():
        if isinstance(values, dict) and isinstance(cfg.get(section), dict):
            cfg[section].update(values)
        else:
            cfg[section] = values
    for s in sets:
        key, eq, value = s.partition("=")
        section, dot, name = key.partition(".")
        if not eq or not key:
            raise SystemExit(f"torch_step.py: --set wants KEY=VALUE, got {s!r}")
        if not dot:
            cfg[section] = yaml.safe_load(value)
            continue
        if section in ("model", "optim") and name not in DEFAULTS[section]:
            raise SystemExit(f"torch_step.py: unknown key {key!r} (the {section} keys are: "
                             f"{', '.join(sorted(DEFAULTS[section]))})")
        if not isinstance(cfg.get(section, {}), dict):
            raise SystemExit(f"torch_step.py: {section!r} is not a section")
        cfg.setdefault(section, {})[name] = yaml.safe_load(value)
    return cfg


class Model(nn.Module):
    def __init__(self, m, T):
        super().__init__()
        C, Fd, L = int(m["d_model"]), int(m["d_ff"]), int(m["layers"])
        self.C, self.NH, self.T = C, int(m["heads"]), T
        self.pre = m["norm"] == "pre"
        fn = m["final_norm"]
        self.final = self.pre if fn in ("auto", None) else bool(fn) and fn != "false"
        self.eps = float(m["ln_eps"])
        self.p = float(m["dropout"])
        self.pa = float(m["attn_dropout"])
        self.scale = math.sqrt(C) if m["scale_embeddings"] else 1.0
        self.act = {"relu": F.relu, "gelu": lambda x: F.gelu(x, approximate="tanh"), "gelu_erf": F.gelu}[m["activation"]]
        self.wte = nn.Parameter(torch_init.init_(torch.empty(V, C), "wte", m))
        if m["positions"] == "learned":
            self.wpe = nn.Parameter(torch_init.init_(torch.empty(T, C), "wpe", m))
        else:
            t = torch.arange(T, dtype=torch.float64)[:, None]
            c = torch.arange(C)
            freq = torch.pow(torch.tensor(10000.0, dtype=torch.float64), -(c - c % 2).double() / C)
            self.register_buffer("wpe", torch.where(c % 2 == 1, torch.cos(t * freq), torch.sin(t * freq)).float())
        self.layers = nn.ModuleList()
        for _ in range(L):
            blk = nn.Module()
            blk.ln1, blk.ln2 = nn.LayerNorm(C, eps=self.eps), nn.LayerNorm(C, eps=self.eps)
            blk.qkv, blk.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
            blk.fc1, blk.fc2 = nn.Linear(C, Fd), nn.Linear(Fd, C)
            for lin, name in ((blk.qkv, "attn.qkv"), (blk.proj, "attn.proj"), (blk.fc1, "ffn.fc1"), (blk.fc2, "ffn.fc2")):
                torch_init.init_(lin.weight.data, f"layers.0.{name}.weight", m)
                torch_init.init_(lin.bias.data, f"layers.0.{name}.bias", m)
            self.layers.append(blk)
        self.lnf = nn.LayerNorm(C, eps=self.eps) if self.final else None
        self.out = None if m["tie_embeddings"] else nn.Linear(C, V, bias=False)
        if self.out is not None:
            torch_init.init_(self.out.weight.data, "out.weight", m)
        self.register_buffer("mask", torch.ones(T, T, dtype=torch.bool).tril())

    def attn(self, blk, x):
        B, T, C = x.shape
        NH, HS = self.NH, C // self.NH
        q, k, v = blk.qkv(x).split(C, dim=-1)
        q, k, v = (z.reshape(B, T, NH, HS).transpose(1, 2) for z in (q, k, v))
        s = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(HS))
        s = s.masked_fill(~self.mask[:T, :T], float("-inf"))
        a = F.dropout(torch.softmax(s, dim=-1), self.pa, self.training)
        y = (a @ v).transpose(1, 2).reshape(B, T, C)
        return F.dropout(blk.proj(y), self.p, self.training)

    def ffn(self, blk, x):
        h = F.dropout(self.act(blk.fc1(x)), self.p, self.training)
        return F.dropout(blk.fc2(h), self.p, self.training)

    def forward(self, inputs, targets, smoothing):
        T = inputs.shape[1]
        x = self.wte[inputs] * self.scale + self.wpe[:T]
        for blk in self.layers:
            if self.pre:
                x = x + self.attn(blk, blk.ln1(x))
                x = x + self.ffn(blk, blk.ln2(x))
            else:
                x = blk.ln1(x + self.attn(blk, x))
                x = blk.ln2(x + self.ffn(blk, x))
        if self.lnf is not None:
            x = self.lnf(x)
        logits = x @ (self.wte if self.out is None else self.out.weight).T
        return F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), label_smoothing=smoothing)


def make_optimizer(params, o):
    lr, wd = float(o["lr"]), float(o["weight_decay"])
    b1, b2 = (float(b) for b in o["betas"])
    if o["name"] == "adamw":
        return torch.optim.AdamW(params, lr=lr, betas=(b1, b2), eps=float(o["eps"]), weight_decay=wd)
    if o["name"] == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=float(o["momentum"]), weight_decay=wd)
    return torch.optim.Adam(params, lr=lr, betas=(b1, b2), eps=float(o["eps"]), weight_decay=wd)


def blas_setup():
    """The BLAS shared objects this process mapped, and OpenBLAS's core and threads when loaded."""
    libs = set()
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1]
                if "blas" in os.path.basename(path).lower() or "mkl" in os.path.basename(path).lower():
                    libs.add(os.path.realpath(path))
    except OSError:
        pass
    core, threads = None, None
    for name in ["libopenblas.so.0"] + sorted(l for l in libs if "openblas" in l) + sorted(libs):
        try:
            lib = ctypes.CDLL(name, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
            fn = lib.openblas_get_corename
        except (OSError, AttributeError):
            continue
        fn.restype = ctypes.c_char_p
        core = fn().decode()
        try:
            threads = lib.openblas_get_num_threads()
        except AttributeError:
            pass
        break
    return sorted(libs), core, threads


MALLOC_SETTINGS = {"MALLOC_MMAP_THRESHOLD_": "4294967296", "MALLOC_TRIM_THRESHOLD_": "68719476736",
                   "MALLOC_TOP_PAD_": "268435456"}
REEXEC_MARK = "CLFORMER_TORCH_STEP_TUNED"


def reexec_with_best_environment():
    """Start this script again with the allocator settings and OpenBLAS's own kernel choice (the
    environment is read only when a process starts). Returns only when nothing needs changing."""
    if os.environ.get(REEXEC_MARK):
        return
    env = dict(os.environ)
    env.update(MALLOC_SETTINGS)
    env[REEXEC_MARK] = "1"
    for name in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
        env.pop(name, None)
    sys.stdout.flush()
    os.execve(sys.executable, [sys.executable] + sys.argv, env)


def openblas_handle():
    """ctypes handle of the OpenBLAS this process mapped, or None."""
    libs = []
    try:
        with open("/proc/self/maps") as f:
            libs = sorted({line.split()[-1] for line in f if "openblas" in line.split()[-1].lower()})
    except OSError:
        pass
    for name in ["libopenblas.so.0"] + libs:
        try:
            lib = ctypes.CDLL(name, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
            lib.openblas_set_num_threads
            return lib
        except (OSError, AttributeError):
            continue
    return None


def choose_threads(step, trials=3):
    """Time `trials` steps at each (torch threads, OpenBLAS threads) pair in {1, cores}^2; keep the
    fastest. Returns (torch threads, OpenBLAS threads or None, list of tried pairs with ms)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    counts = sorted({1, cores})
    lib = openblas_handle()
    tried = []
    for tt in counts:
        for ot in (counts if lib else [None]):
            torch.set_num_threads(tt)
            if lib:
                lib.openblas_set_num_threads(ot)
            step()  # settle after the switch
            t = sorted(timed(step, trials))
            tried.append({"torch": tt, "openblas": ot, "ms": t[len(t) // 2] * 1e3})
    best = min(tried, key=lambda r: r["ms"])
    torch.set_num_threads(best["torch"])
    if lib:
        lib.openblas_set_num_threads(best["openblas"])
    return best["torch"], best["openblas"], tried


def build(cfg, threads, as_is):
    default_threads = torch.get_num_threads()
    if threads > 0:
        torch.set_num_threads(threads)
    torch.manual_seed(int(cfg.get("seed", 1234)))
    B, T = int(cfg["data"]["batch_size"]), int(cfg["data"]["seq_len"])
    model = Model(cfg["model"], T)
    model.train()
    opt = make_optimizer(model.parameters(), cfg["optim"])
    g = torch.Generator().manual_seed(1)
    inputs = torch.randint(0, V, (B, T), generator=g)
    targets = torch.randint(0, V, (B, T), generator=g)
    clip = float(cfg["optim"]["clip_norm"])
    smoothing = float(cfg["model"]["label_smoothing"])
    params = [p for p in model.parameters()]
    acc = torch.zeros(())

    def step():
        nonlocal acc
        opt.zero_grad()
        loss = model(inputs, targets, smoothing)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, clip if clip > 0 else float("inf"))
        opt.step()
        acc = acc + loss.detach()

    step()  # the first step maps the BLAS in, so the setup can report it
    tried = []
    if threads <= 0 and not as_is:
        _, _, tried = choose_threads(step)
    libs, core, ob_threads = blas_setup()
    setup = {
        "torch_version": torch.__version__,
        "threads": torch.get_num_threads(),
        "default_threads": default_threads,
        "settings": "as-is" if as_is else "best: allocator keeps freed memory, OpenBLAS picks its own kernel, "
                    + ("threads as given" if threads > 0 else "fastest threads of those tried"),
        "threads_tried": tried,
        "blas": ", ".join(os.path.basename(l) for l in libs) or "unknown",
        "blas_paths": libs,
        "openblas_core": core,
        "openblas_threads": ob_threads,
        "openblas_coretype_env": os.environ.get("OPENBLAS_CORETYPE"),
        "params": sum(p.numel() for p in params),
        "tokens_per_step": B * T,
    }
    return step, setup


def timed(step, n):
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        step()
        out.append(time.perf_counter() - t0)
    return out


def main(argv):
    args, sets = [], []
    opts = {"--steps": 20, "--warmup": 3, "--threads": 0}
    json_path, serve, as_is = None, False, False
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("-h", "--help"):
            print(__doc__)
            return 0
        if a == "--serve":
            serve = True
        elif a == "--as-is":
            as_is = True
        elif a == "--set" and i + 1 < len(argv):
            sets.append(argv[i + 1])
            i += 1
        elif a == "--json" and i + 1 < len(argv):
            json_path = argv[i + 1]
            i += 1
        elif a in opts and i + 1 < len(argv):
            opts[a] = int(argv[i + 1])
            i += 1
        elif a.startswith("-"):
            print(f"torch_step.py: unexpected argument {a}\n{__doc__}", file=sys.stderr)
            return 2
        else:
            args.append(a)
        i += 1
    if len(args) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    if not as_is:
        reexec_with_best_environment()
    cfg = load_config(args[0], sets)
    step, setup = build(cfg, opts["--threads"], as_is)
    for _ in range(max(opts["--warmup"] - 1, 0)):
        step()
    if serve:
        print(json.dumps(setup), flush=True)
        for line in sys.stdin:
            words = line.split()
            if not words or words[0] == "quit":
                break
            if words[0] == "run" and len(words) == 2:
                print(json.dumps({"times": timed(step, int(words[1]))}), flush=True)
            else:
                print(json.dumps({"error": f"unknown request {line.strip()}"}), flush=True)
        return 0
    t = timed(step, opts["--steps"])
    s = sorted(t)
    n = len(s)
    med = s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])
    m = cfg["model"]
    print(f"PyTorch {setup['torch_version']}, {setup['threads']} threads (torch's default {setup['default_threads']}), "
          f"OpenBLAS threads {setup['openblas_threads']}, BLAS {setup['blas']}, OpenBLAS core {setup['openblas_core']} "
          f"(OPENBLAS_CORETYPE={setup['openblas_coretype_env']})")
    print(f"settings: {setup['settings']}")
    for r in setup["threads_tried"]:
        print(f"  tried torch {r['torch']} x OpenBLAS {r['openblas']} threads: {r['ms']:.1f} ms/step")
    print(f"model: {m['norm']}-LN, {m['layers']} layers, d_model {m['d_model']}, {m['heads']} heads, d_ff {m['d_ff']}; "
          f"{setup['params'] / 1e6:.2f}M parameters; {setup['tokens_per_step']} tokens per step")
    print(f"step time over {n} steps after {opts['--warmup']} warm-up: median {med * 1e3:.2f} ms "
          f"[min {s[0] * 1e3:.2f}, max {s[-1] * 1e3:.2f}], {setup['tokens_per_step'] / med:.0f} tokens/s")
    if json_path:
        result = dict(setup, steps=n, warmup=opts["--warmup"],
                      step_ms={"median": med * 1e3, "min": s[0] * 1e3, "max": s[-1] * 1e3},
                      tokens_per_s=setup["tokens_per_step"] / med)
        with (sys.stdout if json_path == "-" else open(json_path, "w")) as f:
            json.dump(result, f, indent=2)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
