"""needle.viz's recording: bounded, a captured step's replays as one entry, every stage
as needle.ir.dump shows it, fusion boundaries with their reasons, timelines, files."""
import json
import os

import numpy as np
import pytest

import needle as ndl
from needle import engine, viz
from needle.engine import schedule_cache
from needle.viz.recording import Recording, newest


@pytest.fixture(autouse=True)
def _no_leftover_work():
    """Other tests may leave state to compute with "the next schedule" (realize_later):
    the schedules recorded here must be those of the code under test only."""
    engine.forget_later()
    yield
    assert schedule_cache.WATCH is None, "a test left a recording on"


def _mlp_step(make):
    step = make(lambda model, x: model(x))
    return step, step.x, step.y


def _recorded_steps(make, steps: int) -> dict:
    """The recording of `steps` lazy steps of the MLP, each read back."""
    step, x, y = _mlp_step(make)
    with ndl.lazy(True), viz.record() as rec:
        for _ in range(steps):
            step(x, y).numpy()
    return rec.recording().data


def test_each_schedule_once_with_its_runs_and_every_stage(mlp_step):
    data = _recorded_steps(mlp_step, 4)
    # the first step differs (the optimizer's momentum appears), then one schedule runs 3 times
    assert [(i["kind"], i["count"]) for i in data["items"]] == [("schedule", 1), ("schedule", 3)]
    shot = data["shots"][data["items"][1]["shots"][0]]
    assert set(shot["stages"]) == {"autograd", "graph", "folded", "fused", "kernels"}
    assert all(s["dot"] and s["text"] for s in shot["stages"].values())
    assert shot["stages"]["kernels"]["count"] == len(shot["kernels"])
    # each kernel knows its group, fused ops and the lines of this file that built them
    named = [k for k in shot["kernels"] if k["group"] is not None]
    assert named and all(k["loop_ir"].startswith("kernel ") for k in shot["kernels"])
    lines = {line for g in shot["groups"] for line in g["lines"]}
    assert any("test_recorder.py" in line and "model(x)" in line for line in lines), lines
    # a node's table row: op, type, the user's line, the kernels computing it
    row = next(r for r in shot["stages"]["graph"]["nodes"].values() if r["op"] == "matmul")
    assert row["type"].startswith("f32[") and "test_recorder.py" in row["line"] and row["kernels"]


def test_the_stages_are_what_ir_dump_prints():
    rng = np.random.default_rng(1)
    a = ndl.Tensor(rng.standard_normal((32, 24)).astype(np.float32), requires_grad=True)
    w = ndl.Tensor(rng.standard_normal((24, 16)).astype(np.float32), requires_grad=True)
    with ndl.lazy(True):
        out = ndl.ops.logsumexp(ndl.relu(a @ w), axes=(1,))
        expected = {stage: ndl.ir.dump(out, stage=stage) for stage in ("graph", "fused", "kernels", "llvm", "autograd")}
        with viz.record() as rec:
            out.numpy()
    recording = rec.recording()
    shot_id = recording.data["items"][0]["shots"][0]
    stages = recording.data["shots"][shot_id]["stages"]
    for stage in ("graph", "fused", "kernels", "autograd"):
        assert stages[stage]["text"] == expected[stage], stage
    kernels = recording.data["shots"][shot_id]["kernels"]
    assert "\n".join(recording.code(shot_id, i) for i in range(len(kernels))) == expected["llvm"]
    assert "define" in recording.code(shot_id, 0)


def test_fusion_boundaries_carry_their_reasons():
    rng = np.random.default_rng(2)
    a = ndl.Tensor(rng.standard_normal((64, 32)).astype(np.float32), requires_grad=False)
    w = ndl.Tensor(rng.standard_normal((32, 16)).astype(np.float32), requires_grad=False)
    with ndl.lazy(True), viz.record() as rec:
        h = a @ w
        (ndl.relu(h) + h.sum(axes=(1,)).reshape((64, 1)).broadcast_to((64, 16))).numpy()
    data = rec.recording().data
    shot = data["shots"]["s0"]
    fused = shot["stages"]["fused"]
    reasons = [r["reason"] for r in fused["nodes"].values() if r["reason"].startswith("stored: ")]
    assert reasons, "the fused stage names why each stored node is stored"
    assert 'color="#cc0000"' in fused["dot"] and "stored" in fused["dot"]  # a boundary edge, its label line
    assert len(shot["groups"]) >= 2 and all(g["calls"] for g in shot["groups"])


def test_the_recording_is_bounded_to_the_last_schedules():
    rng = np.random.default_rng(3)
    with ndl.lazy(True), viz.record(limit=2) as rec:
        for n in (4, 5, 6, 7):  # four graphs of four structures: four schedules
            t = ndl.Tensor(rng.standard_normal((n, 3)).astype(np.float32), requires_grad=False)
            (ndl.exp(t) * 2).numpy()
    data = rec.recording().data
    assert len(data["items"]) == 2 and len(data["shots"]) == 2
    assert [i["id"] for i in data["items"]] == [2, 3]  # the last two


def test_a_captured_steps_replays_are_one_entry_with_a_count(mlp_step):
    step, x, y = _mlp_step(mlp_step)
    jitted = ndl.jit(step)
    with ndl.lazy(True), viz.record() as rec:
        for _ in range(7):
            jitted(x, y)
        loss = jitted(x, y).numpy()
    assert np.isfinite(loss)
    data = rec.recording().data
    steps = [i for i in data["items"] if i["kind"] == "step"]
    assert len(steps) == 1
    captured = steps[0]
    assert captured["count"] == jitted.replays + 1 and jitted.replays >= 5, (captured["count"], jitted.replays)
    assert captured["title"].startswith("needle.jit(MLPStep")
    # its timeline is a profiled replay, each launch linked to a kernel of its schedules
    timeline = captured["timeline"]
    assert timeline["what"].startswith("replay")
    launches = [s for s in timeline["segments"] if s["lane"] == "kernels"]
    kernels = sum(len(data["shots"][s]["kernels"]) for s in captured["shots"])
    assert len(launches) == kernels
    for s in launches:
        assert data["shots"][captured["shots"][s["shot"]]]["kernels"][s["call"]]["name"] == s["name"]


def test_a_profile_of_the_program_itself_still_works_while_recording(mlp_step):
    step, x, y = _mlp_step(mlp_step)
    with ndl.lazy(True), viz.record() as rec:
        step(x, y).numpy()
        with ndl.profile() as p:  # (the recorder never holds a profile open around user code)
            for _ in range(2):
                step(x, y).numpy()
        step(x, y).numpy()
    assert p.rows() and sum(r.calls for r in p.rows()) > 0
    data = rec.recording().data
    assert data["items"][-1]["count"] == 3
    lines = data["shots"][data["items"][-1]["shots"][0]]["groups"][0]["lines"]
    assert any("test_recorder.py" in line for line in lines)


def test_timeline_of_a_profiled_run_links_launches_to_kernels(mlp_step):
    data = _recorded_steps(mlp_step, 3)
    item = data["items"][-1]
    timeline = item["timeline"]
    lanes = {s["lane"] for s in timeline["segments"]}
    assert lanes == {"host", "schedule", "kernels"}
    launches = [s for s in timeline["segments"] if s["lane"] == "kernels"]
    kernels = data["shots"][item["shots"][0]]["kernels"]
    assert [s["call"] for s in launches] == list(range(len(kernels)))
    assert all(s["dur"] >= 0 and s["start"] >= 0 for s in timeline["segments"])
    assert timeline["total"] >= max(s["start"] + s["dur"] for s in launches)


def test_a_recording_round_trips_through_its_file(tmp_path, mlp_step):
    step, x, y = _mlp_step(mlp_step)
    with ndl.lazy(True), viz.record() as rec:
        step(x, y).numpy()
    path = rec.recording().save(str(tmp_path / "run-1.json"))
    assert newest(str(tmp_path)) == path
    loaded = Recording.load(path)
    assert not loaded.empty and "define" in loaded.code("s0", 0)
    with open(path) as f:
        assert json.load(f)["version"] == 1
    (tmp_path / "junk.json").write_text("{}")
    with pytest.raises(ndl.errors.NeedleError, match="not a needle viz recording"):
        Recording.load(str(tmp_path / "junk.json"))


def test_recording_nothing_is_an_empty_recording_and_one_at_a_time():
    with viz.record() as rec:
        with pytest.raises(ndl.errors.NeedleError, match="already on"):
            viz.start()
    assert rec.recording().empty


def test_needle_viz_env_writes_the_recording_at_exit(tmp_path):
    import subprocess
    import sys
    script = tmp_path / "tiny.py"
    script.write_text("import numpy as np\nimport needle as ndl\n"
                      "a = ndl.Tensor(np.ones((4, 4), dtype='float32'))\n"
                      "print(ndl.exp(a * 2).sum().numpy())\n")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, NEEDLE_VIZ="1", NEEDLE_VIZ_DIR=str(tmp_path / "rec"), PYTHONPATH=root)
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    path = newest(str(tmp_path / "rec"))
    assert path is not None and os.path.basename(path).startswith("tiny-")
    assert "needle viz: recorded" in done.stderr and path in done.stderr
    assert not Recording.load(path).empty


def test_a_schedule_that_cannot_be_recorded_does_not_break_the_program(monkeypatch):
    from needle.viz import recorder

    def broken(*args, **kwargs):
        raise RuntimeError("no picture today")
    monkeypatch.setattr(recorder, "Shot", broken)
    a = ndl.Tensor(np.arange(6, dtype=np.float32).reshape(2, 3), requires_grad=False)
    with pytest.warns(UserWarning, match="could not be recorded .*no picture today"):
        with ndl.lazy(True), viz.record() as rec:
            out = (ndl.exp(a) * 2).numpy()
    np.testing.assert_allclose(out, np.exp(np.arange(6, dtype=np.float32).reshape(2, 3)) * 2, rtol=1e-6)
    assert rec.recording().empty
