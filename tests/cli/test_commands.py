"""The command line: `python -m needle compare | ir | train` run in a subprocess."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORKLOADS = ["elementwise", "softmax", "layernorm", "matmul_bias_relu", "mlp_step", "cnn_step"]
MODES = ["eager numpy", "eager compiled", "lazy fused"]
TRAINING = {"mlp_step", "cnn_step"}  # also run as captured steps (needle.jit)


def needle(*args, timeout=600):
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.run([sys.executable, "-m", "needle", *args], capture_output=True, text=True,
                          env=env, timeout=timeout, cwd=ROOT)


@pytest.fixture(scope="module")
def compare_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("compare")
    result = needle("compare", "--quick", "--json", str(out / "r.json"), "--plot", str(out / "r.png"))
    return result, out


def test_compare_quick_prints_a_table_and_agrees(compare_run):
    result, _ = compare_run
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    assert lines[0].startswith("needle compare on cpu()")
    for name in WORKLOADS:
        assert any(line.startswith(name) for line in lines), name
    assert "all modes agree numerically" in result.stdout
    assert "[1/20]" in result.stderr  # progress is shown


def test_compare_json_holds_every_workload_and_mode(compare_run):
    _, out = compare_run
    report = json.load(open(out / "r.json"))
    assert set(report["workloads"]) == set(WORKLOADS)
    for name, entry in report["workloads"].items():
        assert entry["agree"] is True, name
        assert set(entry["modes"]) == set(MODES) | ({"lazy jit"} if name in TRAINING else set())
        for mode, r in entry["modes"].items():
            assert r["median_s"] > 0 and r["speedup"] > 0
            assert (r["kernels"] is None) == (mode == "eager numpy")
        assert entry["modes"]["lazy fused"]["kernels"] <= entry["modes"]["eager compiled"]["kernels"]
        if name in TRAINING:  # a replay launches the same kernels as the step it captured
            assert entry["modes"]["lazy jit"]["kernels"] == entry["modes"]["lazy fused"]["kernels"]


def test_compare_plot_is_a_png(compare_run):
    _, out = compare_run
    assert open(out / "r.png", "rb").read(8) == b"\x89PNG\r\n\x1a\n"


def test_compare_rejects_unknown_workload():
    result = needle("compare", "--quick", "--workload", "nope")
    assert result.returncode == 2 and "unknown workload" in result.stderr


@pytest.mark.parametrize("stage", ["graph", "fused", "kernels", "llvm"])
def test_ir_prints_every_stage(stage):
    result = needle("ir", "softmax", "--stage", stage)
    assert result.returncode == 0, result.stderr
    marker = {"graph": "reduce_max", "fused": "kernel 0:", "kernels": "parallel for", "llvm": "define void"}
    assert marker[stage] in result.stdout


def test_ir_draws_svg(tmp_path):
    import shutil
    path = tmp_path / ("g.svg" if shutil.which("dot") else "g.dot")
    result = needle("ir", "mlp_step", "--stage", "fused", "--svg", str(path))
    assert result.returncode == 0, result.stderr
    assert path.exists() and path.stat().st_size > 1000


def test_help_lists_the_commands():
    result = needle("--help")
    assert result.returncode == 0
    for cmd in ("compare", "ir", "train"):
        assert cmd in result.stdout
