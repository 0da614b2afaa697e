"""Harness: run one loop in one mode (plain / jit), record observables, warnings, errors."""
import os, sys, pickle, warnings, traceback, math
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), *[".."] * 3, "examples"))
import needle as ndl  # noqa: E402
from needle.errors import JitError  # noqa: E402

MODE = "plain"
JITS = []  # (label, jit object)


def J(fn, label=None, **kw):
    """needle.jit(fn) in jit mode, fn itself in plain mode."""
    if MODE == "jit":
        j = ndl.jit(fn, **kw)
        JITS.append((label or getattr(fn, "__name__", "fn"), j))
        return j
    return fn


def snap(v):
    if isinstance(v, ndl.Tensor):
        return np.array(v.numpy(), copy=True)
    if isinstance(v, np.ndarray):
        return v.copy()
    if isinstance(v, (np.floating, np.integer)):
        return v.item()
    if isinstance(v, dict):
        return {str(k): snap(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [snap(x) for x in v]
    return v


class Obs:
    def __init__(self):
        self.d = {}

    def __setitem__(self, k, v):
        self.d[k] = snap(v)

    def model(self, prefix, m):
        for n, t in m.state_dict().items():
            self.d[f"{prefix}.{n}"] = snap(t)
        self.d[f"{prefix}.__training"] = [mm.training for _, mm in m.named_modules()]

    def opt(self, prefix, opt):
        sd = opt.state_dict()
        self.d[f"{prefix}.state"] = snap(sd["state"])
        self.d[f"{prefix}.groups"] = snap([{k: v for k, v in g.items()} for g in sd["param_groups"]])
        for a in ("t", "lr", "momentum", "weight_decay"):
            if hasattr(opt, a):
                self.d[f"{prefix}.{a}"] = getattr(opt, a)

    def grads(self, prefix, m):
        for n, p in m.named_parameters():
            self.d[f"{prefix}.{n}.grad"] = None if p.grad is None else snap(p.grad)


def equal(a, b, path="", out=None):
    """Bitwise comparison; returns list of differing paths."""
    out = [] if out is None else out
    if type(a) != type(b):
        out.append(f"{path}: type {type(a).__name__} vs {type(b).__name__}")
        return out
    if isinstance(a, np.ndarray):
        if a.shape != b.shape or a.dtype != b.dtype:
            out.append(f"{path}: {a.dtype}{a.shape} vs {b.dtype}{b.shape}")
        elif a.tobytes() != b.tobytes():
            d = np.abs(a.astype(np.float64) - b.astype(np.float64)) if a.dtype.kind in "fiu" else None
            out.append(f"{path}: values differ" + (f" (max abs diff {np.nanmax(d):.3g}, "
                                                  f"{int((a != b).sum())}/{a.size} elements)" if d is not None else ""))
    elif isinstance(a, dict):
        if set(a) != set(b):
            out.append(f"{path}: keys {sorted(set(a) ^ set(b))[:5]}")
        for k in a:
            if k in b:
                equal(a[k], b[k], f"{path}.{k}", out)
    elif isinstance(a, list):
        if len(a) != len(b):
            out.append(f"{path}: length {len(a)} vs {len(b)}")
        for i, (x, y) in enumerate(zip(a, b)):
            equal(x, y, f"{path}[{i}]", out)
    elif isinstance(a, float):
        if not (a == b or (math.isnan(a) and math.isnan(b))) or math.copysign(1, a) != math.copysign(1, b):
            out.append(f"{path}: {a!r} vs {b!r}")
    else:
        if a != b:
            out.append(f"{path}: {a!r} vs {b!r}")
    return out


def run_one(name, mode, out_path):
    global MODE
    MODE = mode
    import loops
    fn = loops.LOOPS[name]
    o = Obs()
    result = {"name": name, "mode": mode, "status": "ok", "warnings": [], "error": None}
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        try:
            fn(o)
        except JitError as e:
            result["status"] = "jiterror"
            result["error"] = f"JitError: {e}"
            result["tb"] = traceback.format_exc()
        except BaseException as e:  # noqa
            result["status"] = "crash"
            result["error"] = f"{type(e).__name__}: {e}"
            result["tb"] = traceback.format_exc()
        result["warnings"] = [f"{x.category.__name__}: {x.message} ({os.path.basename(x.filename)}:{x.lineno})"
                              for x in w]
        result["needle_warned"] = any(issubclass(x.category, UserWarning) and "needle.jit" in str(x.message)
                                      for x in w)
    try:
        result["np_rng"] = snap(list(np.random.get_state()[1:]))
    except Exception:
        pass
    result["obs"] = o.d
    result["jits"] = [(label, j.replays, j.calls) for label, j in JITS]
    with open(out_path, "wb") as f:
        pickle.dump(result, f)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import harness
    harness.run_one(sys.argv[1], sys.argv[2], sys.argv[3])
