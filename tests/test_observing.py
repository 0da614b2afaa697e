"""One observed flag (needle/observing.py): every watcher raises it while it watches,
and the fast paths stand aside while it is up."""
import numpy as np
import pytest

import needle as ndl
from needle import backend_ndarray as nd
from needle import observing
from needle.engine import schedule_cache
from needle.runtime import runner


def test_nothing_watches_at_rest():
    assert observing.watchers() == {} and observing.OBSERVED is False


def test_a_profile_raises_the_flag_for_its_duration():
    with ndl.profile():
        assert observing.OBSERVED and set(observing.watchers()) == {"profile", "stamping"}
    assert observing.watchers() == {} and not observing.OBSERVED


def test_a_capture_raises_the_flag_while_it_records():
    from needle.engine import capture
    with capture.recording(object()):
        assert set(observing.watchers()) == {"capture"}
        with capture.recording(object()):  # (one watcher however many threads record)
            assert observing.watchers() == {"capture": 1}
    assert observing.watchers() == {}

    def step(x, w):
        loss = (x @ w).sum()
        loss.backward()
        return loss

    f = ndl.jit(step)
    x = ndl.Tensor(np.ones((4, 3), np.float32), requires_grad=False)
    w = ndl.Tensor(np.ones((3, 2), np.float32))
    for _ in range(4):
        f(x, w).numpy()
    assert f.replays >= 2 and observing.watchers() == {}


def test_needle_viz_raises_the_flag_until_stopped():
    from needle import viz
    viz.start(limit=4)
    try:
        assert "viz" in observing.watchers()
    finally:
        viz.stop()
    assert observing.watchers() == {}


def test_a_stop_without_a_start_is_refused():
    with pytest.raises(RuntimeError, match="without a start"):
        observing.stop("nobody")
    assert not observing.OBSERVED


def test_fast_paths_stand_aside_for_any_watcher(monkeypatch):
    """A watcher the fast paths have never heard of: a repeated eager op builds its
    graph again (no shortcut) and each kernel launches on the general loop."""
    a = nd.array(np.arange(12, dtype=np.float32).reshape(3, 4), device=ndl.cpu())
    graphs, general = [], []
    original = schedule_cache.realize
    monkeypatch.setattr(schedule_cache, "realize", lambda nodes: (graphs.append(1), original(nodes))[1])
    launch = runner.ScheduleRunner._launch_every
    monkeypatch.setattr(runner.ScheduleRunner, "_launch_every",
                        lambda self, *args: (general.append(1), launch(self, *args))[1])
    for _ in range(2):
        (a * 1.5).numpy()
    before, general_before = len(graphs), len(general)
    with observing.watch("a new watcher"):
        for _ in range(2):
            np.testing.assert_array_equal((a * 1.5).numpy(), np.arange(12, dtype=np.float32).reshape(3, 4) * 1.5)
    assert len(graphs) == before + 2 and len(general) == general_before + 2
    (a * 1.5).numpy()
    assert len(graphs) == before + 2  # the shortcut again once nobody watches
