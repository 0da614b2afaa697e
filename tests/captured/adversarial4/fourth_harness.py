"""A fourth independent tester's harness: the loops call J(fn) (needle.jit(fn) when MODE is
"jit"), return what they observed (snap), compared bit for bit by diff."""
import os, sys, pickle, warnings, traceback, subprocess, random, math
import numpy as np
import needle as ndl
from needle import nn, optim, ops

MODE = "plain"  # set by tests/captured/test_adversarial_loops4.py
JITS = []

def J(fn, **kw):
    if MODE == "jit":
        j = ndl.jit(fn, **kw); JITS.append(j); return j
    return fn

def T(a, rg=False):
    return ndl.Tensor(np.asarray(a, dtype=np.float32), requires_grad=rg)

def snap(v):
    if isinstance(v, ndl.Tensor):
        return ("T", np.array(v.numpy(), copy=True), v.requires_grad)
    if isinstance(v, np.ndarray):
        return ("A", v.copy())
    if isinstance(v, dict):
        return {str(k): snap(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [snap(x) for x in v]
    if isinstance(v, (int, float, bool, str, type(None))):
        return v
    if isinstance(v, np.generic):
        return v.item()
    return ("obj", type(v).__name__)

def model_obs(m):
    return {k: snap(v) for k, v in m.state_dict().items()}

def opt_obs(o):
    sd = o.state_dict()
    return snap({"state": sd["state"], "groups": [dict(g) for g in sd["param_groups"]]})

def grads_obs(m):
    return [None if p.grad is None else snap(p.grad) for p in m.parameters()]

def diff(a, b, path="", out=None):
    out = [] if out is None else out
    if type(a) != type(b):
        out.append(f"{path}: type {type(a).__name__} vs {type(b).__name__}"); return out
    if isinstance(a, np.ndarray):
        if a.shape != b.shape or a.dtype != b.dtype:
            out.append(f"{path}: {a.dtype}{a.shape} vs {b.dtype}{b.shape}")
        elif a.tobytes() != b.tobytes():
            d = np.abs(a.astype(np.float64) - b.astype(np.float64))
            out.append(f"{path}: max abs diff {np.nanmax(d):.3g} ({int((a != b).sum())}/{a.size})")
    elif isinstance(a, dict):
        if set(a) != set(b): out.append(f"{path}: keys {set(a) ^ set(b)}")
        for k in a:
            if k in b: diff(a[k], b[k], f"{path}.{k}", out)
    elif isinstance(a, (list, tuple)):
        if len(a) != len(b): out.append(f"{path}: len {len(a)} vs {len(b)}")
        for i, (x, y) in enumerate(zip(a, b)): diff(x, y, f"{path}[{i}]", out)
    elif isinstance(a, float):
        if not (a == b or (math.isnan(a) and math.isnan(b))): out.append(f"{path}: {a!r} vs {b!r}")
    elif a != b:
        out.append(f"{path}: {a!r} vs {b!r}")
    return out
