"""`python -m needle viz`: what it runs and reads, and its clear errors (a script that
raises, an empty recording, a port in use, nothing recorded yet)."""
import argparse
import json
import os
import socket
import subprocess
import sys
import urllib.request

import pytest

from needle import config
from needle.cli import viz as viz_cli
from needle.errors import NeedleError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _args(target=None, *script_args, port=0):
    return argparse.Namespace(target=target, args=list(script_args), port=port, steps=1, jit=False, full=False,
                              open=False)


def _needle_viz(*argv, folder):
    env = dict(os.environ, NEEDLE_VIZ_DIR=str(folder), PYTHONPATH=ROOT)
    env.pop("NEEDLE_VIZ", None)
    return subprocess.run([sys.executable, "-m", "needle", "viz", *argv], env=env, capture_output=True, text=True,
                          timeout=180, cwd=ROOT)


def test_a_script_that_raises_shows_its_traceback_and_says_so(tmp_path):
    script = tmp_path / "broken.py"
    script.write_text("import numpy as np\nimport needle as ndl\n"
                      "(ndl.Tensor(np.ones((2, 2), dtype='float32')) * 2).numpy()\n"
                      "raise RuntimeError('the loss diverged')\n")
    done = _needle_viz("--port", "0", str(script), folder=tmp_path / "rec")
    assert done.returncode == 2
    assert "Traceback" in done.stderr and "RuntimeError: the loss diverged" in done.stderr
    assert "broken.py raised an exception (its traceback is above" in done.stderr
    assert "serving" not in done.stdout


def test_a_script_that_computes_nothing_is_an_empty_recording(tmp_path, monkeypatch):
    script = tmp_path / "idle.py"
    script.write_text("import needle\nprint('nothing to compute')\n")
    monkeypatch.setattr(config, "VIZ_DIR", str(tmp_path / "rec"))
    with pytest.raises(NeedleError, match="is empty: no schedule was compiled"):
        viz_cli.prepare(_args(str(script)))


def test_a_script_is_run_recorded_and_served_on_localhost(tmp_path, monkeypatch):
    script = tmp_path / "train.py"
    script.write_text("import sys\nimport numpy as np\nimport needle as ndl\n"
                      "a = ndl.Tensor(np.ones((8, 8), dtype='float32'))\n"
                      "for _ in range(int(sys.argv[1])):\n"
                      "    (ndl.relu(a @ a) + 1).numpy()\n")
    monkeypatch.setattr(config, "VIZ_DIR", str(tmp_path / "rec"))
    server = viz_cli.prepare(_args(str(script), "3"))
    try:
        assert server.httpd.server_address[0] == "127.0.0.1" and server.url.startswith("http://127.0.0.1:")
        items = server.recording.data["items"]
        assert [i["count"] for i in items] == [3]
        server.start()
        index = json.loads(urllib.request.urlopen(server.url + "api/recording", timeout=30).read())
        assert index["items"][0]["count"] == 3 and index["program"] == "train.py"
        svg = urllib.request.urlopen(server.url + "api/svg?shot=s0&stage=fused", timeout=60).read().decode()
        assert svg.startswith("<svg") and "kernel 0" in svg
        page = urllib.request.urlopen(server.url, timeout=30).read().decode()
        assert "/static/viz.js" in page and "http" not in page.replace("http-equiv", "")  # nothing from elsewhere
    finally:
        server.close()
    # ... and the recording stays, for `python -m needle viz` without arguments
    assert os.path.basename(viz_cli.newest(str(tmp_path / "rec"))).startswith("train-")


def test_a_port_in_use_is_a_clear_error():
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    try:
        port = taken.getsockname()[1]
        with pytest.raises(NeedleError, match=f"port {port} on 127.0.0.1 is in use"):
            viz_cli.prepare(_args("mlp_step", port=port))
    finally:
        taken.close()


def test_nothing_recorded_yet_and_unknown_targets_are_clear_errors(tmp_path, monkeypatch):
    monkeypatch.setattr(config, "VIZ_DIR", str(tmp_path / "none"))
    with pytest.raises(NeedleError, match="no recording in"):
        viz_cli.prepare(_args())
    with pytest.raises(NeedleError, match="is not a script, a recording"):
        viz_cli.prepare(_args("no_such_workload"))
    with pytest.raises(NeedleError, match="no such script"):
        viz_cli.prepare(_args(str(tmp_path / "missing.py")))


def test_errors_reach_the_terminal_as_one_line(tmp_path):
    done = _needle_viz("--port", "0", folder=tmp_path / "empty")
    assert done.returncode == 2
    assert done.stderr.startswith("needle viz: error: no recording in")


def test_a_builtin_workload_is_recorded_in_process_options_after_its_name_included():
    server = viz_cli.prepare(_args("matmul_bias_relu", "--steps", "2", "--port", "0"))
    try:
        recording = server.recording
        assert [i["count"] for i in recording.data["items"]] == [2]
        assert recording.data["program"].startswith("matmul_bias_relu")
    finally:
        server.close()
