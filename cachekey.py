"""schedule/kernel cache keys: same structure, different parameters, one process"""
import numpy as np, itertools, warnings
warnings.simplefilter("ignore")
import needle as ndl
ops = ndl.ops
rng = np.random.default_rng(0)
A = rng.standard_normal((6, 8)).astype(np.float32)
B = rng.standard_normal((6, 8)).astype(np.float32)
bad = 0; n = 0
def chk(name, got, ref):
    global bad, n
    n += 1
    got = got.numpy()
    if got.shape != ref.shape or not np.allclose(got, ref, rtol=1e-5, atol=1e-5):
        bad += 1; print("MISMATCH", name, got.shape, ref.shape, np.abs(got - ref).max() if got.shape == ref.shape else "")
for rep in range(2):
    for c in [0.5, 2.0, -3.0, 1e-3, 7.0]:
        chk(f"scalar {c}", (ndl.Tensor(A) * c + c).exp().sum(axes=(1,)), (np.exp(A * c + c)).sum(1))
        chk(f"pow {c}", (ndl.Tensor(np.abs(A) + 0.1) ** c).sum(axes=(0,)), ((np.abs(A) + 0.1) ** c).sum(0))
    for st, sp, step in [(0, 6, 1), (1, 6, 2), (2, 5, 1), (0, 6, 3), (5, 0, -1), (None, None, -2), (3, None, 1)]:
        chk(f"slice {st},{sp},{step}", (ndl.Tensor(A)[st:sp:step, 1::2] * 2.0).sum(axes=(1,)), (A[st:sp:step, 1::2] * 2.0).sum(1))
    for p in [((0, 0), (1, 0)), ((1, 0), (0, 0)), ((0, 2), (0, 1)), ((2, 2), (2, 2))]:
        chk(f"pad {p}", (ops.pad(ndl.Tensor(A), p) + 1.0).max(axes=(0,)), (np.pad(A, p) + 1.0).max(0))
    for ax in [(0,), (1,), (0, 1)]:
        chk(f"flip {ax}", ops.flip(ndl.Tensor(A), ax) - ndl.Tensor(B), np.flip(A, ax) - B)
    for sh in [(48,), (8, 6), (2, 24), (4, 2, 6), (6, 8)]:
        chk(f"reshape {sh}", (ndl.Tensor(A).transpose().reshape(sh) * 1.5).relu(), np.maximum(A.T.reshape(sh) * 1.5, 0))
    for ax in [None, (0,), (1,), (0, 1)]:
        for kd in [False, True]:
            r = A.sum(axis=ax, keepdims=kd) if ax is not None else (A.sum(keepdims=kd))
            chk(f"sum {ax} {kd}", (ndl.Tensor(A) * 1.0).sum(axes=ax, keepdims=kd), np.asarray(r))
            r = A.max(axis=ax, keepdims=kd)
            chk(f"max {ax} {kd}", (ndl.Tensor(A) * 1.0).max(axes=ax, keepdims=kd), np.asarray(r))
    for i in [0, 1, -1, 3]:
        chk(f"int idx {i}", ndl.Tensor(A)[i] * ndl.Tensor(B)[i - 1], A[i] * B[i - 1])
    for perm in itertools.permutations(range(3)):
        X = A.reshape(2, 3, 8)
        chk(f"perm {perm}", ops.permute(ndl.Tensor(X), perm).exp().sum(axes=(2,)), np.exp(np.transpose(X, perm)).sum(2))
    for sh in [(6, 8), (3, 6, 8), (2, 1, 6, 8)]:
        chk(f"bcast {sh}", (ndl.Tensor(A[:1]).broadcast_to((6, 8)) + ndl.Tensor(B)).broadcast_to(sh).sum(axes=(0,)), np.broadcast_to(A[:1] + B, sh).sum(0))
    for d in [0, 1, 2]:
        chk(f"dilate {d}", ops.dilate(ndl.Tensor(A), (0,), d) * 3.0, np.kron(A * 3.0, np.eye(d + 1)[:, :1])[:, :8] if False else np.concatenate([np.stack([A[i] * 3.0] + [np.zeros(8, np.float32)] * d) for i in range(6)]))
    for k in range(3):
        chk(f"split {k}", ops.split(ndl.Tensor(A[:3]), 0)[k] * 2.0, A[k] * 2.0)
    for ax in [0, 1, 2, -1]:
        chk(f"stack {ax}", ops.stack([ndl.Tensor(A), ndl.Tensor(B)], ax) * 1.0, np.stack([A, B], ax))
    for m in [(A > 0), (A > 0.5), (A < -1)]:
        chk(f"mask", ndl.Tensor(A)[m] * 2.0, A[m] * 2.0)
    for dt in ["float32", "float64"]:
        chk(f"dtype {dt}", ndl.Tensor(A, dtype=dt).exp().sum(), np.asarray(np.exp(A.astype(dt)).sum()))
print("checks", n, "bad", bad)
