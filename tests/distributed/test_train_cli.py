"""`mpiexec -n 2 python -m needle train --distributed`: rank 0 alone prints and saves, and
the global batch split over two ranks trains like one process with the same sampler."""
import gzip
import os
import re
import struct
import subprocess
import sys

import numpy as np

from test_distributed import ROOT, mpiexec, pytestmark, rank_env  # noqa: F401  (skip without mpi4py)

import needle as ndl


def write_idx_dir(path, n_train=256, n_test=101):
    """Class 0: bright left half; class 1: bright right half (plus noise)."""
    rng = np.random.RandomState(0)
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        labels = rng.randint(0, 2, size=n).astype(np.uint8)
        images = rng.randint(0, 60, size=(n, 28, 28)).astype(np.uint8)
        images[labels == 0, :, :14] += 150
        images[labels == 1, :, 14:] += 150
        with gzip.open(os.path.join(path, f"{prefix}-images-idx3-ubyte.gz"), "wb") as f:
            f.write(struct.pack(">IIII", 2051, n, 28, 28) + images.tobytes())
        with gzip.open(os.path.join(path, f"{prefix}-labels-idx1-ubyte.gz"), "wb") as f:
            f.write(struct.pack(">II", 2049, n) + labels.tobytes())
    return str(path)


def train_cli(data, ranks, *options):
    command = [sys.executable, "-m", "needle", "train", "--distributed", "--data", data, "--epochs", "2",
               "--batch-size", "64", "--optimizer", "sgd", "--hidden", "16", "--no-progress", *options]
    if ranks is not None:
        command = [mpiexec(), "-n", str(ranks)] + command
    return subprocess.run(command, cwd=ROOT, env=rank_env(), capture_output=True, text=True, timeout=240)


def epoch_numbers(stdout):
    """[train loss, train acc %, test acc %] of each epoch line."""
    pattern = r"^epoch \d+/\d+  train loss ([\d.]+)  train acc ([\d.]+)%  test acc ([\d.]+)%"
    return [[float(x) for x in m] for m in re.findall(pattern, stdout, flags=re.M)]


def test_two_ranks_train_like_one_process(tmp_path):
    data = write_idx_dir(tmp_path)
    saved = tmp_path / "model.pkl"
    two = train_cli(data, 2, "--save", str(saved))
    assert two.returncode == 0, two.stderr
    one = train_cli(data, None)
    assert one.returncode == 0, one.stderr
    assert two.stdout.count("training mlp on 256 examples") == 1  # rank 0 alone prints
    assert len(epoch_numbers(two.stdout)) == 2
    # train loss, train acc %, test acc %: printed with 4 and 2 decimals
    np.testing.assert_allclose(epoch_numbers(two.stdout), epoch_numbers(one.stdout), atol=2e-4)
    state = ndl.load(str(saved))
    assert state["modules.0.weight"].shape == (784, 16)


def test_global_batch_must_split_evenly(tmp_path):
    data = write_idx_dir(tmp_path)
    proc = train_cli(data, 2, "--batch-size", "63")
    assert proc.returncode != 0
    assert "--batch-size 63 is the global batch: it must be a multiple of the 2 processes" in proc.stderr


def test_example_script_under_two_ranks(tmp_path):
    data = write_idx_dir(tmp_path)
    command = [mpiexec(), "-n", "2", sys.executable, os.path.join(ROOT, "examples", "train_distributed.py"),
               "--data", data, "--epochs", "2", "--batch-size", "32", "--limit", "256"]
    proc = subprocess.run(command, cwd=ROOT, env=rank_env(), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("epoch 1/2: mean loss")
    assert lines[0].endswith("over 256 examples on 2 processes")
    losses = [float(line.split("mean loss ")[1].split()[0]) for line in lines[:2]]
    assert losses[1] < losses[0]
    assert lines[2] == "weights identical on every rank: True" and len(lines) == 3
