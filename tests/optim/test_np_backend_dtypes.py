"""Under NEEDLE_BACKEND=np (chosen at import, so in a subprocess) an optimizer step
keeps float32 parameters float32 and matches the update written out in numpy."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SCRIPT = r"""
import json, numpy as np, needle as ndl
from needle import nn, optim
out = {}
for name in ("SGD", "Adam", "RMSprop"):
    np.random.seed(0)
    model = nn.Sequential(nn.Linear(4, 3))
    w0 = model.parameters()[0].numpy().copy()
    opt = getattr(optim, name)(model.parameters(), lr=0.1)
    x = ndl.Tensor(np.arange(8, dtype="float32").reshape(2, 4) / 8)
    loss = (model(x) ** 2).sum()
    loss.backward()
    g = model.parameters()[0].grad.numpy().copy()
    opt.step()
    out[name] = dict(dtypes=[p.dtype for p in model.parameters()], w0=w0.tolist(), g=g.tolist(),
                     w1=model.parameters()[0].numpy().tolist())
print(json.dumps(out))
"""


def test_optimizers_keep_float32_under_the_numpy_backend():
    env = dict(os.environ, NEEDLE_BACKEND="np", PYTHONPATH=ROOT)
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    import numpy as np
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    for name, r in out.items():
        assert r["dtypes"] == ["float32", "float32"], name
    sgd = out["SGD"]
    np.testing.assert_allclose(sgd["w1"], np.float32(sgd["w0"]) - np.float32(0.1) * np.float32(sgd["g"]), rtol=1e-6)
    adam = out["Adam"]  # first Adam step: m_hat / sqrt(v_hat) = sign(g)
    np.testing.assert_allclose(adam["w1"], np.float32(adam["w0"]) - 0.1 * np.sign(adam["g"]), rtol=1e-5, atol=1e-6)
