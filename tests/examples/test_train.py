"""End-to-end training: needle.cli.train on Fashion-MNIST, `python -m needle train`,
examples/train_mnist.py and examples/mlp_resnet.py (on tiny IDX files written here)."""
import gzip
import os
import struct
import subprocess
import sys

import numpy as np
import pytest

import needle as ndl
import needle.nn as nn
from needle.cli import train

FASHION = "/usr/share/datasets/fashion-mnist"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
needs_fashion = pytest.mark.skipif(not os.path.isdir(FASHION),
                                   reason=f"{FASHION} absent (apt-get install dataset-fashion-mnist)")


@needs_fashion
def test_mlp_one_epoch_on_10k_fashion_mnist():
    """Loss falls from chance (ln 10 = 2.30) and test accuracy clears 75% after one
    epoch on 10k examples (measured: about 81%)."""
    train_set, test_set = train.load_data(FASHION, limit=10000)
    assert len(train_set) == 10000 and len(test_set) == 10000
    model = train.build_model("mlp", hidden=128)
    opt = train.make_optimizer("adam", model.parameters(), lr=2e-3)
    test_loader = ndl.data.DataLoader(test_set, 1000)
    loss_before, acc_before = train.evaluate(model, test_loader)
    assert loss_before > 1.8 and acc_before < 0.3
    train_loss, train_acc = train.train_epoch(model, ndl.data.DataLoader(train_set, 128, shuffle=True), opt,
                                              progress=False)
    loss_after, acc_after = train.evaluate(model, test_loader)
    assert train_loss < loss_before and loss_after < 0.75
    assert acc_after >= 0.75, acc_after
    for p in model.parameters():
        assert p.dtype == "float32"


def test_models_shapes_and_parameter_counts():
    x = ndl.Tensor(np.random.rand(2, 784).astype(np.float32), requires_grad=False)
    counts = {"softmax": 784 * 10 + 10,
              "mlp": 784 * 32 + 32 + 32 * 10 + 10,
              # conv weight + bias, batch-norm weight + bias, per stage; then the Linear
              "cnn": (9 * 1 * 16 + 16 + 2 * 16) + (9 * 16 * 32 + 32 + 2 * 32) + (32 * 7 * 7 * 10 + 10)}
    for name, count in counts.items():
        model = train.build_model(name, hidden=32)
        assert sum(int(np.prod(p.shape)) for p in model.parameters()) == count, name
        assert model(x).shape == (2, 10)
    with pytest.raises(ValueError):
        train.build_model("transformer")


def test_missing_data_message(tmp_path):
    with pytest.raises(ndl.errors.DataError) as info:
        train.find_data(str(tmp_path))
    message = str(info.value)
    assert str(tmp_path) in message and "apt-get install dataset-fashion-mnist" in message
    assert "train-images-idx3-ubyte.gz" in message


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "needle", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)


@needs_fashion
def test_cli_train_subprocess():
    proc = run_cli("train", "--model", "mlp", "--limit", "2000", "--epochs", "1", "--data", FASHION)
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.startswith("epoch 1/1")]
    assert len(lines) == 1, proc.stdout
    line = lines[0]
    for field in ("train loss", "train acc", "test acc", "time"):
        assert field in line
    test_acc = float(line.split("test acc")[1].split("%")[0])
    assert 50 < test_acc <= 100, line


def test_cli_without_data_fails_clearly(tmp_path):
    proc = run_cli("train", "--data", str(tmp_path / "nowhere"), "--epochs", "1")
    assert proc.returncode == 2
    assert "apt-get install dataset-fashion-mnist" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_cli_help_lists_train():
    proc = run_cli("--help")
    assert proc.returncode == 0 and "train" in proc.stdout
    proc = run_cli("train", "--help")
    for option in ("--data", "--model", "--epochs", "--batch-size", "--lr", "--optimizer", "--hidden",
                   "--device", "--eager", "--limit"):
        assert option in proc.stdout


# ---- tiny synthetic MNIST files: two classes that a model separates easily ------------------
def write_idx_dir(path, n_train=200, n_test=100):
    """Class 0: bright left half; class 1: bright right half (plus noise)."""
    def make(n):
        labels = np.random.randint(0, 2, size=n).astype(np.uint8)
        images = np.random.randint(0, 60, size=(n, 28, 28)).astype(np.uint8)
        for i, c in enumerate(labels):
            images[i, :, 14 * c:14 * c + 14] += 180
        return images, labels

    os.makedirs(path, exist_ok=True)
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        images, labels = make(n)
        with gzip.open(os.path.join(path, f"{prefix}-images-idx3-ubyte.gz"), "wb") as f:
            f.write(struct.pack(">IIII", 2051, n, 28, 28) + images.tobytes())
        with gzip.open(os.path.join(path, f"{prefix}-labels-idx1-ubyte.gz"), "wb") as f:
            f.write(struct.pack(">II", 2049, n) + labels.tobytes())
    return str(path)


def test_run_returns_metrics_on_synthetic_data(tmp_path):
    data = write_idx_dir(tmp_path / "data")
    result = train.run(train.defaults(data=data, model="softmax", epochs=2, batch_size=50, optimizer="sgd",
                                      no_progress=True))
    assert set(result) >= {"train_loss", "train_acc", "test_acc", "test_loss", "epoch_times", "total_time"}
    assert len(result["history"]) == 2 and len(result["epoch_times"]) == 2
    assert result["test_acc"] > 0.95
    assert result["history"][1]["train_loss"] < result["history"][0]["train_loss"]


def test_train_mnist_script(tmp_path, capsys):
    from examples import train_mnist
    data = write_idx_dir(tmp_path / "data")
    results = train_mnist.main(["--data", data, "--epochs", "1", "--batch-size", "20", "--no-progress"])
    assert set(results) == {"softmax", "mlp"}
    out = capsys.readouterr().out
    assert "training softmax" in out and "training mlp" in out
    assert all(r["test_acc"] > 0.9 for r in results.values())


def test_mlp_resnet_structure():
    from examples.mlp_resnet import MLPResNet, ResidualBlock
    block = ResidualBlock(8, 4, norm=nn.LayerNorm1d, drop_prob=0.0)
    # Linear(8,4) + LN(4) + Linear(4,8) + LN(8)
    assert sum(int(np.prod(p.shape)) for p in block.parameters()) == (32 + 4) + 8 + (32 + 8) + 16
    model = MLPResNet(20, hidden_dim=10, num_blocks=2, num_classes=3)
    inner = (10 * 5 + 5) + 10 + (5 * 10 + 10) + 20   # Linear, BN(5), Linear, BN(10)
    assert sum(int(np.prod(p.shape)) for p in model.parameters()) == (20 * 10 + 10) + 2 * inner + (10 * 3 + 3)
    x = ndl.Tensor(np.random.randn(6, 20).astype(np.float32), requires_grad=False)
    assert model(x).shape == (6, 3)


def test_mlp_resnet_eval_epoch_matches_numpy_forward():
    """In eval mode a fresh MLPResNet is deterministic: BatchNorm divides by sqrt(1 + eps)
    (running stats 0 and 1) and Dropout is the identity.  Recompute it in numpy."""
    from examples.mlp_resnet import MLPResNet, epoch
    model = MLPResNet(12, hidden_dim=8, num_blocks=1, num_classes=4)
    X = np.random.randn(10, 12).astype(np.float32)
    y = np.random.randint(0, 4, size=10).astype(np.uint8)
    err, loss = epoch(ndl.data.DataLoader(ndl.data.NDArrayDataset(X, y), batch_size=4), model)

    W = [p.numpy().astype(np.float64) for p in model.parameters()]
    lin = lambda h, w, b: h @ w + b.reshape(1, -1)  # noqa: E731
    bn = lambda h, g, b: h / np.sqrt(1 + 1e-5) * g + b  # noqa: E731
    h = np.maximum(lin(X, W[0], W[1]), 0)
    r = np.maximum(bn(lin(h, W[2], W[3]), W[4], W[5]), 0)
    h = np.maximum(h + bn(lin(r, W[6], W[7]), W[8], W[9]), 0)
    logits = lin(h, W[10], W[11])
    batch_losses = []
    for s in range(0, 10, 4):
        z, t = logits[s:s + 4], y[s:s + 4]
        lse = np.log(np.exp(z - z.max(1, keepdims=True)).sum(1)) + z.max(1)
        batch_losses.append(np.mean(lse - z[np.arange(len(t)), t]))
    assert err == pytest.approx(np.mean(logits.argmax(1) != y))
    assert loss == pytest.approx(np.mean(batch_losses), rel=1e-4)


def test_mlp_resnet_train_mnist_on_synthetic_files(tmp_path):
    from examples.mlp_resnet import train_mnist
    data = write_idx_dir(tmp_path / "data")
    train_err, train_loss, test_err, test_loss = train_mnist(batch_size=50, epochs=2, lr=0.01, hidden_dim=16,
                                                             data_dir=data)
    assert 0 <= train_err <= 1 and 0 <= test_err <= 1
    assert test_err < 0.1 and np.isfinite(train_loss) and np.isfinite(test_loss)


def test_eager_flag_gives_the_same_training(tmp_path):
    data = write_idx_dir(tmp_path / "data")
    mode = ndl.autograd.lazy_mode()
    runs = [train.run(train.defaults(data=data, model="mlp", hidden=16, epochs=1, batch_size=40, eager=eager,
                                     no_progress=True)) for eager in (False, True)]
    assert ndl.autograd.lazy_mode() == mode  # --eager does not leak out of run()
    assert runs[0]["train_loss"] == pytest.approx(runs[1]["train_loss"], rel=1e-4)
    assert runs[0]["test_loss"] == pytest.approx(runs[1]["test_loss"], rel=1e-4)
