"""hw4's helpers in examples/simple_ml.py (train/evaluate on CIFAR-10 and PTB) and the
Transformer LanguageModel in examples/models.py, on small files written here in the real
formats.  References: softmax cross-entropy and SGD written in numpy here, and the loop's
contract from the course (seed 4 first, chunks of seq_len, per-sample averages).
What is tested is the loops, so most tests run numpy op by op (cpu_numpy): compiling
kernels for every model here would dominate the suite's time."""
import pickle

import numpy as np
import pytest

import needle as ndl
import needle.nn as nn
from examples import simple_ml
from examples.models import LanguageModel

DEV = ndl.cpu_numpy()


def softmax_ce(logits, labels):
    """Per-row -log softmax(logits)[label], float64."""
    z = logits - logits.max(1, keepdims=True)
    return np.log(np.exp(z).sum(1)) - z[np.arange(len(labels)), labels]


@pytest.fixture
def cifar_dir(tmp_path):
    rng = np.random.RandomState(0)
    for name, n in [("data_batch_1", 3), ("data_batch_2", 2), ("data_batch_3", 2), ("data_batch_4", 2),
                    ("data_batch_5", 2), ("test_batch", 5)]:
        with open(tmp_path / name, "wb") as f:
            pickle.dump({b"data": rng.randint(0, 256, size=(n, 3072)).astype(np.uint8),
                         b"labels": list(rng.randint(0, 10, size=n))}, f)
    return str(tmp_path)


class LinearClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.flatten = nn.Flatten()
        self.linear = nn.Linear(3072, 10, dtype="float32", device=DEV)

    def forward(self, x):
        return self.linear(self.flatten(x))


def test_evaluate_cifar10_averages_per_sample(cifar_dir):
    ds = ndl.data.CIFAR10Dataset(cifar_dir, train=False)
    loader = ndl.data.DataLoader(ds, batch_size=2, device=DEV)  # batches of 2, 2, 1: a plain batch mean would differ
    model = LinearClassifier()
    acc, loss = simple_ml.evaluate_cifar10(model, loader)
    assert not model.training
    W = model.linear.weight.numpy().astype(np.float64)
    b = model.linear.bias.numpy().astype(np.float64)
    logits = ds.X.reshape(5, -1).astype(np.float64) @ W + b
    assert acc == pytest.approx(np.mean(logits.argmax(1) == ds.y))
    assert loss == pytest.approx(softmax_ce(logits, ds.y).mean(), rel=1e-5)
    assert np.random.rand() == np.random.RandomState(4).rand()  # seeded with 4, nothing else drawn


def test_train_cifar10_is_minibatch_sgd(cifar_dir):
    ds = ndl.data.CIFAR10Dataset(cifar_dir, train=True)  # 11 images
    loader = ndl.data.DataLoader(ds, batch_size=4, device=DEV)
    model = LinearClassifier()
    W = model.linear.weight.numpy().astype(np.float64)
    b = model.linear.bias.numpy().astype(np.float64)
    lr, epochs = 0.05, 2
    acc, loss = simple_ml.train_cifar10(model, loader, n_epochs=epochs, optimizer=ndl.optim.SGD, lr=lr,
                                        weight_decay=0.0)
    assert model.training
    X, y = ds.X.reshape(11, -1).astype(np.float64), ds.y
    for _ in range(epochs):
        correct, total = 0, 0.0
        for start in range(0, 11, 4):
            xb, yb = X[start:start + 4], y[start:start + 4]
            logits = xb @ W + b
            correct += int(np.sum(logits.argmax(1) == yb))
            total += softmax_ce(logits, yb).mean() * len(yb)
            p = np.exp(logits - logits.max(1, keepdims=True))
            p /= p.sum(1, keepdims=True)
            p[np.arange(len(yb)), yb] -= 1
            W, b = W - lr * xb.T @ p / len(yb), b - lr * p.sum(0, keepdims=True) / len(yb)
    assert acc == pytest.approx(correct / 11)  # the last epoch's figures
    assert loss == pytest.approx(total / 11, rel=1e-4)
    np.testing.assert_allclose(model.linear.weight.numpy(), W, rtol=1e-4, atol=1e-5)


# ---- Penn Treebank ------------------------------------------------------------------------
@pytest.fixture
def ptb_dir(tmp_path):
    words = "the cat sat on the mat and the dog sat on the log".split()
    rng = np.random.RandomState(1)
    lines = [" ".join(rng.choice(words, size=rng.randint(3, 8))) for _ in range(30)]
    (tmp_path / "train.txt").write_text("\n".join(lines[:24]) + "\n")
    (tmp_path / "test.txt").write_text("\n".join(lines[24:]) + "\n")
    return str(tmp_path)


class LookupLM(nn.Module):
    """Logits = table[word]; records the chunks and states the loop passes in."""

    def __init__(self, vocab):
        super().__init__()
        self.table = nn.Parameter(ndl.Tensor(np.random.randn(vocab, vocab).astype(np.float32), device=DEV))
        self.calls = []

    def forward(self, x, h=None):
        self.calls.append((x.numpy().copy(), h))
        T, B = x.shape
        one_hot = ndl.init.one_hot(self.table.shape[0], x.reshape((T * B,)), device=DEV)
        state = ndl.Tensor(np.full((1, B), len(self.calls), dtype=np.float32), device=DEV) * 1
        return one_hot @ self.table, state


def test_evaluate_ptb_chunks_state_and_averages(ptb_dir):
    corpus = ndl.data.Corpus(ptb_dir)
    data = ndl.data.batchify(corpus.train, 3, ndl.cpu(), "float32")
    nbatch = data.shape[0]
    model = LookupLM(len(corpus.dictionary))
    acc, loss = simple_ml.evaluate_ptb(model, data, seq_len=7, device=DEV)
    starts = list(range(0, nbatch - 1, 7))
    assert len(model.calls) == len(starts)
    for k, (i, (x, h)) in enumerate(zip(starts, model.calls)):
        np.testing.assert_array_equal(x, data[i:i + min(7, nbatch - 1 - i)])
        if k == 0:
            assert h is None
        else:  # the previous chunk's state, detached
            assert h.op is None and h.numpy()[0, 0] == k
    table = model.table.numpy().astype(np.float64)
    inputs, targets = data[:-1].reshape(-1).astype(int), data[1:].reshape(-1).astype(int)
    logits = table[inputs]
    assert acc == pytest.approx(np.mean(logits.argmax(1) == targets))
    assert loss == pytest.approx(softmax_ce(logits, targets).mean(), rel=1e-5)


@pytest.mark.parametrize("seq_model, device", [("rnn", DEV), ("transformer", DEV)], ids=str)
def test_train_ptb_lowers_the_loss(ptb_dir, seq_model, device):
    corpus = ndl.data.Corpus(ptb_dir)
    data = ndl.data.batchify(corpus.train, 4, device, "float32")
    np.random.seed(0)
    model = LanguageModel(8, len(corpus.dictionary), 8, num_layers=1, seq_model=seq_model, seq_len=6, device=device)
    _, before = simple_ml.evaluate_ptb(model, data, seq_len=6, device=device)
    acc, last = simple_ml.train_ptb(model, data, seq_len=6, n_epochs=3, optimizer=ndl.optim.Adam, lr=0.05, clip=5.0,
                                    device=device)
    _, after = simple_ml.evaluate_ptb(model, data, seq_len=6, device=device)
    assert 0 <= acc <= 1 and np.isfinite(last)
    assert after < 0.8 * before


def test_language_model_transformer_shapes_and_parameters():
    np.random.seed(0)
    model = LanguageModel(16, 50, 24, num_layers=2, seq_model="transformer", seq_len=10)
    x = ndl.Tensor(np.random.randint(0, 50, size=(10, 3)).astype(np.float32))
    logits, h = model(x)
    assert logits.shape == (30, 50) and h.shape == (10, 3, 16)
    assert isinstance(model.seq_model, nn.Transformer)
    assert model.linear.weight.shape == (16, 50)  # from the embedding width
    assert model.seq_model.pos_embedding.weight.shape == (10, 16)
    with pytest.raises(ValueError, match="seq_model"):
        LanguageModel(4, 5, 4, seq_model="gru")


def test_clip_bounds_the_gradient_norm():
    p = nn.Parameter(ndl.Tensor(np.zeros(3, dtype=np.float32)))
    p.grad = ndl.Tensor(np.array([3.0, 4.0, 0.0], dtype=np.float32))
    simple_ml._clip_gradients([p], 1.0)
    np.testing.assert_allclose(p.grad.numpy(), [0.6, 0.8, 0.0], rtol=1e-5)
