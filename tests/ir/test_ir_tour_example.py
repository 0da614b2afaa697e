"""examples/ir_tour.py runs end to end and draws the autograd graph beside the others."""
import os
import runpy
import shutil
import sys

import pytest

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "ir_tour.py")


@pytest.mark.skipif(shutil.which("dot") is None, reason="needs Graphviz's dot")
def test_ir_tour_draws_autograd_fused_and_graph(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["ir_tour.py", "--out", str(tmp_path)])
    runpy.run_path(EXAMPLE, run_name="__main__")
    out = capsys.readouterr().out
    for name in ("ir_tour_autograd", "ir_tour_graph", "ir_tour_fused", "ir_tour_autograd_after"):
        path = tmp_path / f"{name}.png"
        assert path.exists() and path.stat().st_size > 1000, name
    assert "param modules.0.weight" in out and "grad norm" in out
    assert "ir_tour.py:" in out  # the profile table names the example's lines
