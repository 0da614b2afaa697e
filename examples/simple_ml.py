"""The course's first models (hw0 in numpy, hw1 with needle), under the course's names.

hw0 and hw1 share the names `softmax_loss`, `nn_epoch` and `loss_err`; here each of
them looks at its arguments and runs the version they belong to:

- numpy arrays  -> hw0: `softmax_loss(Z, y)` with integer labels, `nn_epoch` updates
  the numpy weights in place;
- needle Tensors -> hw1: `softmax_loss(Z, y_one_hot)` built from needle ops,
  `nn_epoch` takes Tensor weights and returns the new ones.

The explicit `*_numpy` / `*_needle` functions are there for callers who prefer to say so.

hw4's training helpers (`train_cifar10`, `evaluate_cifar10`, `train_ptb`, `evaluate_ptb`)
follow the course's loop exactly (seed 4 first, one optimizer, per-sample averages), so
seeded course code reproduces the course's numbers.
"""
from __future__ import annotations

from typing import Tuple

import numpy as np

import needle as ndl
import needle.nn as nn
from needle.data import parse_mnist as _parse_mnist


def add(x, y):
    """hw0's warm-up: x + y."""
    return x + y


def parse_mnist(image_filename: str, label_filename: str) -> Tuple[np.ndarray, np.ndarray]:
    """X: float32 (N, 784) in [0, 1]; y: uint8 (N,).  Bad files raise needle.errors.DataError."""
    return _parse_mnist(image_filename, label_filename)


def one_hot(y: np.ndarray, k: int) -> np.ndarray:
    """Rows of the k x k identity picked by the labels y (float32)."""
    out = np.zeros((len(y), k), dtype=np.float32)
    out[np.arange(len(y)), np.asarray(y, dtype=np.int64)] = 1
    return out


# ---- hw0: numpy ---------------------------------------------------------------------------
def softmax_loss_numpy(Z: np.ndarray, y: np.ndarray) -> float:
    """Mean softmax cross-entropy of logits Z (N, k) against integer labels y (N,)."""
    Z = Z - Z.max(axis=1, keepdims=True)  # shift for stability; the loss does not change
    log_sum_exp = np.log(np.exp(Z).sum(axis=1))
    return float(np.mean(log_sum_exp - Z[np.arange(Z.shape[0]), y]))


def _softmax(Z: np.ndarray) -> np.ndarray:
    E = np.exp(Z - Z.max(axis=1, keepdims=True))
    return E / E.sum(axis=1, keepdims=True)


def softmax_regression_epoch(X: np.ndarray, y: np.ndarray, theta: np.ndarray, lr: float = 0.1,
                             batch: int = 100) -> None:
    """One epoch of minibatch SGD on softmax regression; updates theta in place."""
    k = theta.shape[1]
    for start in range(0, X.shape[0], batch):
        Xb, yb = X[start:start + batch], y[start:start + batch]
        grad = Xb.T @ (_softmax(Xb @ theta) - one_hot(yb, k)) / Xb.shape[0]
        theta -= lr * grad


def nn_epoch_numpy(X: np.ndarray, y: np.ndarray, W1: np.ndarray, W2: np.ndarray, lr: float = 0.1,
                   batch: int = 100) -> None:
    """One epoch of SGD on the two-layer net relu(X W1) W2, backprop by hand; in place."""
    k = W2.shape[1]
    for start in range(0, X.shape[0], batch):
        Xb, yb = X[start:start + batch], y[start:start + batch]
        Z1 = np.maximum(Xb @ W1, 0)
        G2 = _softmax(Z1 @ W2) - one_hot(yb, k)
        G1 = (Z1 > 0) * (G2 @ W2.T)
        W1 -= lr * (Xb.T @ G1) / Xb.shape[0]
        W2 -= lr * (Z1.T @ G2) / Xb.shape[0]


def loss_err_numpy(h: np.ndarray, y: np.ndarray) -> Tuple[float, float]:
    return softmax_loss_numpy(h, y), float(np.mean(h.argmax(axis=1) != y))


# ---- hw1: needle --------------------------------------------------------------------------
def softmax_loss_needle(Z: ndl.Tensor, y_one_hot: ndl.Tensor) -> ndl.Tensor:
    """Mean softmax cross-entropy, as a needle Tensor (differentiable)."""
    picked = (Z * y_one_hot).sum((1,))
    return (ndl.ops.logsumexp(Z, (1,)) - picked).sum() / Z.shape[0]


def nn_epoch_needle(X: np.ndarray, y: np.ndarray, W1: ndl.Tensor, W2: ndl.Tensor, lr: float = 0.1,
                    batch: int = 100) -> Tuple[ndl.Tensor, ndl.Tensor]:
    """One epoch of SGD on relu(X W1) W2 with needle's autograd; returns the new weights."""
    k = W2.shape[1]
    for start in range(0, X.shape[0], batch):
        Xb = ndl.Tensor(X[start:start + batch], requires_grad=False)
        yb = ndl.Tensor(one_hot(y[start:start + batch], k), requires_grad=False)
        loss = softmax_loss_needle(ndl.relu(Xb @ W1) @ W2, yb)
        loss.backward()
        # new leaves, so the next batch's graph does not reach back into this one
        W1 = ndl.Tensor(W1.data - W1.grad.data * lr)
        W2 = ndl.Tensor(W2.data - W2.grad.data * lr)
        ndl.realize(W1, W2)
    return W1, W2


def loss_err_needle(h: ndl.Tensor, y: np.ndarray) -> Tuple[float, float]:
    y_one_hot = ndl.Tensor(one_hot(y, h.shape[-1]), requires_grad=False)
    loss = softmax_loss_needle(h, y_one_hot)
    ndl.realize(h, loss)
    return float(loss.numpy()), float(np.mean(h.numpy().argmax(axis=1) != y))


# ---- the course's names, dispatching on the argument types --------------------------------
def softmax_loss(Z, y):
    """hw0 (numpy Z, integer labels) -> float; hw1 (Tensor Z, one-hot Tensor) -> Tensor."""
    if isinstance(Z, ndl.Tensor):
        return softmax_loss_needle(Z, y)
    return softmax_loss_numpy(Z, y)


def nn_epoch(X, y, W1, W2, lr: float = 0.1, batch: int = 100):
    """hw0 (numpy weights, updated in place, returns None); hw1 (Tensor weights, returns
    the new (W1, W2))."""
    if isinstance(W1, ndl.Tensor):
        return nn_epoch_needle(X, y, W1, W2, lr=lr, batch=batch)
    return nn_epoch_numpy(X, y, W1, W2, lr=lr, batch=batch)


def loss_err(h, y) -> Tuple[float, float]:
    """(mean softmax loss, error rate) of logits h against integer labels y."""
    if isinstance(h, ndl.Tensor):
        return loss_err_needle(h, y)
    return loss_err_numpy(h, y)


# ---- training drivers (the course's printouts) -------------------------------------------
def train_softmax(X_tr, y_tr, X_te, y_te, epochs: int = 10, lr: float = 0.5, batch: int = 100,
                  cpp: bool = False) -> np.ndarray:
    """Softmax regression with numpy SGD; prints a table and returns theta.  (`cpp` is
    the course's switch to its C++ epoch; accepted and ignored.)"""
    theta = np.zeros((X_tr.shape[1], int(y_tr.max()) + 1), dtype=np.float32)
    print("| Epoch | Train Loss | Train Err | Test Loss | Test Err |")
    for epoch in range(epochs):
        softmax_regression_epoch(X_tr, y_tr, theta, lr=lr, batch=batch)
        train_loss, train_err = loss_err(X_tr @ theta, y_tr)
        test_loss, test_err = loss_err(X_te @ theta, y_te)
        print(f"|  {epoch:>4} |    {train_loss:.5f} |   {train_err:.5f} |   {test_loss:.5f} |  {test_err:.5f} |")
    return theta


def train_nn(X_tr, y_tr, X_te, y_te, hidden_dim: int = 500, epochs: int = 10, lr: float = 0.5,
             batch: int = 100, use_needle: bool = False):
    """The two-layer net, with numpy (hw0) or needle (hw1, `use_needle=True`);
    returns (W1, W2)."""
    n, k = X_tr.shape[1], int(y_tr.max()) + 1
    np.random.seed(0)
    W1 = np.random.randn(n, hidden_dim).astype(np.float32) / np.sqrt(hidden_dim)
    W2 = np.random.randn(hidden_dim, k).astype(np.float32) / np.sqrt(k)
    if use_needle:
        W1, W2 = ndl.Tensor(W1), ndl.Tensor(W2)
    print("| Epoch | Train Loss | Train Err | Test Loss | Test Err |")
    for epoch in range(epochs):
        if use_needle:
            W1, W2 = nn_epoch(X_tr, y_tr, W1, W2, lr=lr, batch=batch)
            train_loss, train_err = loss_err(ndl.relu(ndl.Tensor(X_tr) @ W1) @ W2, y_tr)
            test_loss, test_err = loss_err(ndl.relu(ndl.Tensor(X_te) @ W1) @ W2, y_te)
        else:
            nn_epoch(X_tr, y_tr, W1, W2, lr=lr, batch=batch)
            train_loss, train_err = loss_err(np.maximum(X_tr @ W1, 0) @ W2, y_tr)
            test_loss, test_err = loss_err(np.maximum(X_te @ W1, 0) @ W2, y_te)
        print(f"|  {epoch:>4} |    {train_loss:.5f} |   {train_err:.5f} |   {test_loss:.5f} |  {test_err:.5f} |")
    return W1, W2


# ---- hw4: CIFAR-10 and Penn Treebank training loops ---------------------------------------
def _loss_module(loss_fn):
    """The course passes the loss class (nn.SoftmaxLoss) or an instance; either works."""
    return loss_fn() if isinstance(loss_fn, type) else loss_fn


def _tally(out: ndl.Tensor, y: ndl.Tensor, loss: ndl.Tensor) -> Tuple[int, float, int]:
    """(correct predictions, loss x samples, samples) of one batch."""
    ndl.realize(out, loss)
    labels = y.numpy()
    correct = int(np.sum(out.numpy().argmax(axis=1) == labels))
    return correct, float(loss.numpy()) * labels.shape[0], labels.shape[0]


def epoch_general_cifar10(dataloader, model: nn.Module, loss_fn=nn.SoftmaxLoss(), opt=None) -> Tuple[float, float]:
    """One pass over `dataloader`: training with `opt`, evaluation without.
    Returns (accuracy, average loss) over the samples."""
    np.random.seed(4)
    loss_fn = _loss_module(loss_fn)
    model.train() if opt is not None else model.eval()
    correct, total_loss, count = 0, 0.0, 0
    for X, y in dataloader:
        if opt is not None:
            opt.reset_grad()
        out = model(X)
        loss = loss_fn(out, y)
        if opt is not None:
            loss.backward()
            opt.step()
        c, l, n = _tally(out, y, loss)
        correct, total_loss, count = correct + c, total_loss + l, count + n
    return correct / max(count, 1), total_loss / max(count, 1)


def train_cifar10(model: nn.Module, dataloader, n_epochs: int = 1, optimizer=ndl.optim.Adam, lr: float = 0.001,
                  weight_decay: float = 0.001, loss_fn=nn.SoftmaxLoss) -> Tuple[float, float]:
    """Train for `n_epochs`; returns the last epoch's (accuracy, average loss)."""
    np.random.seed(4)
    opt = optimizer(model.parameters(), lr=lr, weight_decay=weight_decay)
    avg_acc, avg_loss = 0.0, 0.0
    for _ in range(n_epochs):
        avg_acc, avg_loss = epoch_general_cifar10(dataloader, model, _loss_module(loss_fn), opt)
    return avg_acc, avg_loss


def evaluate_cifar10(model: nn.Module, dataloader, loss_fn=nn.SoftmaxLoss) -> Tuple[float, float]:
    """(accuracy, average loss) of the model in eval mode."""
    np.random.seed(4)
    return epoch_general_cifar10(dataloader, model, _loss_module(loss_fn), None)


def _detach_state(h):
    """Cut the recurrent state from the last chunk's graph (truncated backprop)."""
    if h is None:
        return None
    if isinstance(h, (tuple, list)):
        return type(h)(_detach_state(x) for x in h)
    return h.detach()


def _clip_gradients(params, max_norm: float) -> None:
    """Scale the gradients so that their total 2-norm is at most max_norm."""
    grads = [p for p in params if p.grad is not None]
    total = float(np.sqrt(sum(float(np.sum(p.grad.numpy().astype(np.float64) ** 2)) for p in grads)))
    scale = max_norm / (total + 1e-6)
    if scale < 1:
        for p in grads:
            p.grad = (p.grad * scale).detach()


def epoch_general_ptb(data: np.ndarray, model: nn.Module, seq_len: int = 40, loss_fn=nn.SoftmaxLoss(), opt=None,
                      clip=None, device=None, dtype: str = "float32") -> Tuple[float, float]:
    """One pass over batchified `data` (nbatch, batch_size) in chunks of `seq_len`
    (training with `opt`, evaluation without); the hidden state is carried across
    chunks and detached after each forward.  Returns (accuracy, average loss) per
    target word."""
    np.random.seed(4)
    loss_fn = _loss_module(loss_fn)
    model.train() if opt is not None else model.eval()
    nbatch = data.shape[0]
    correct, total_loss, count = 0, 0.0, 0
    h = None
    for i in range(0, nbatch - 1, seq_len):
        X, y = ndl.data.get_batch(data, i, seq_len, device=device, dtype=dtype)
        if opt is not None:
            opt.reset_grad()
        out, h = model(X, h)
        h = _detach_state(h)
        loss = loss_fn(out, y)
        if opt is not None:
            loss.backward()
            if clip is not None:
                _clip_gradients(model.parameters(), clip)
            opt.step()
        c, l, n = _tally(out, y, loss)
        correct, total_loss, count = correct + c, total_loss + l, count + n
    return correct / max(count, 1), total_loss / max(count, 1)


def train_ptb(model: nn.Module, data: np.ndarray, seq_len: int = 40, n_epochs: int = 1, optimizer=ndl.optim.SGD,
              lr: float = 4.0, weight_decay: float = 0.0, loss_fn=nn.SoftmaxLoss, clip=None, device=None,
              dtype: str = "float32") -> Tuple[float, float]:
    """Train a LanguageModel for `n_epochs`; returns the last epoch's (accuracy, average loss)."""
    np.random.seed(4)
    opt = optimizer(model.parameters(), lr=lr, weight_decay=weight_decay)
    avg_acc, avg_loss = 0.0, 0.0
    for _ in range(n_epochs):
        avg_acc, avg_loss = epoch_general_ptb(data, model, seq_len, _loss_module(loss_fn), opt, clip, device, dtype)
    return avg_acc, avg_loss


def evaluate_ptb(model: nn.Module, data: np.ndarray, seq_len: int = 40, loss_fn=nn.SoftmaxLoss, device=None,
                 dtype: str = "float32") -> Tuple[float, float]:
    """(accuracy, average loss) per target word, in eval mode."""
    np.random.seed(4)
    return epoch_general_ptb(data, model, seq_len, _loss_module(loss_fn), None, None, device, dtype)


if __name__ == "__main__":
    data = "/usr/share/datasets/fashion-mnist"
    X_tr, y_tr = parse_mnist(f"{data}/train-images-idx3-ubyte.gz", f"{data}/train-labels-idx1-ubyte.gz")
    X_te, y_te = parse_mnist(f"{data}/t10k-images-idx3-ubyte.gz", f"{data}/t10k-labels-idx1-ubyte.gz")
    print("Training softmax regression")
    train_softmax(X_tr, y_tr, X_te, y_te, epochs=10, lr=0.2, batch=100)
    print("\nTraining two layer neural network w/ 100 hidden units")
    train_nn(X_tr, y_tr, X_te, y_te, hidden_dim=100, epochs=20, lr=0.2)
