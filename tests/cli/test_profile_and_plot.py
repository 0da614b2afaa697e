"""`python -m needle profile WORKLOAD` and `python -m needle train --plot FILE`."""
import gzip
import json
import os
import struct

import numpy as np
import pytest

import needle as ndl
from needle.__main__ import main
from needle.cli import plot, train


def test_profile_command_prints_the_table_and_writes_a_trace(tmp_path, capsys):
    ndl.engine.forget_later()  # pending work other tests left for "the next schedule"
    trace = tmp_path / "trace.json"
    before = ndl.runtime.stats()["kernels_launched"]
    assert main(["profile", "softmax", "--steps", "2", "--trace", str(trace)]) == 0
    launched = ndl.runtime.stats()["kernels_launched"] - before
    out = capsys.readouterr().out
    assert "profile of softmax" in out and "kernel" in out.splitlines()[1]
    # the row softmax is one kernel (max, exp and sum fused as reduction stages) per step
    rows = [line for line in out.splitlines() if line.startswith(("R_", "E_"))]
    assert len(rows) == 1 and rows[0].split()[2] == "2"
    assert "workloads.py:" in rows[0]
    with open(trace) as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("cat") == "kernel"]
    assert len(events) == 2 and launched == 2 + 2  # two warm-up steps, two profiled


def test_profile_command_profiles_the_replays_of_a_captured_step(capsys):
    """--jit: the profiled steps are replays of the captured step (no schedule is
    planned or looked up), and every kernel still names its ops and workload line."""
    from needle.cli.profile import profile_workload
    ndl.engine.forget_later()
    p = profile_workload("mlp_step", steps=2, captured=True)
    rows = p.rows()
    assert p.schedules == 0 and rows and all(r.calls == 2 for r in rows)
    assert all(r.ops for r in rows) and any(op.startswith("MatMul") for r in rows for op in r.ops)
    assert all(any(w[0].endswith("workloads.py") for w in r.lines) for r in rows)


def test_profile_command_rejects_bad_arguments(capsys):
    assert main(["profile", "mlp_step", "--steps", "0"]) == 2
    assert "--steps" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["profile", "no_such_workload"])


HISTORY = [dict(epoch=1, train_loss=1.2, train_acc=0.55, test_loss=1.0, test_acc=0.6),
           dict(epoch=2, train_loss=0.8, train_acc=0.7, test_loss=0.9, test_acc=0.66),
           dict(epoch=3, train_loss=0.6, train_acc=0.8, test_loss=0.85, test_acc=0.7)]


def test_curves_plot_the_history():
    fig = plot.curves_figure(HISTORY)
    loss_ax, acc_ax = fig.axes
    assert [list(line.get_ydata()) for line in loss_ax.lines] == [[1.2, 0.8, 0.6], [1.0, 0.9, 0.85]]
    assert [list(line.get_ydata()) for line in acc_ax.lines] == [[0.55, 0.7, 0.8], [0.6, 0.66, 0.7]]
    assert [line.get_label() for line in acc_ax.lines] == ["train", "test"]
    assert list(loss_ax.lines[0].get_xdata()) == [1, 2, 3]
    with pytest.raises(ndl.errors.ArgumentError):
        plot.curves_figure([])


def _write_idx(folder, name, images, labels):
    with gzip.open(os.path.join(folder, name[0] + ".gz"), "wb") as f:
        f.write(struct.pack(">IIII", 2051, len(images), 28, 28) + images.astype(np.uint8).tobytes())
    with gzip.open(os.path.join(folder, name[1] + ".gz"), "wb") as f:
        f.write(struct.pack(">II", 2049, len(labels)) + labels.astype(np.uint8).tobytes())


def test_train_plot_writes_a_png(tmp_path):
    rng = np.random.default_rng(0)
    for prefix, n in (("train", 96), ("t10k", 48)):
        labels = rng.integers(0, 10, n)
        images = rng.integers(0, 60, (n, 784)) + labels[:, None] * 19  # learnable: brightness = class
        _write_idx(str(tmp_path), (f"{prefix}-images-idx3-ubyte", f"{prefix}-labels-idx1-ubyte"), images, labels)
    path = tmp_path / "curves.png"
    result = train.run(train.defaults(data=str(tmp_path), model="softmax", epochs=2, batch_size=32,
                                      no_progress=True, plot=str(path)))
    assert len(result["history"]) == 2
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert os.path.getsize(path) > 5000
