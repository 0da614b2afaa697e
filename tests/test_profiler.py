"""needle.profile(): kernels, call counts, source lines, rates, Chrome trace, hooks removed."""
import inspect
import json

import numpy as np
import pytest

import needle as ndl
from needle import engine, runtime
from needle.engine import schedule_cache


@pytest.fixture(autouse=True)
def _no_leftover_work():
    """Other tests may leave losses registered for "the next schedule" (realize_later);
    launch counts here must be those of the code under test only."""
    engine.forget_later()
    yield


def _line_of(func, text: str):
    """(file, line) of the line of `func` that contains `text`."""
    lines, first = inspect.getsourcelines(func)
    for k, line in enumerate(lines):
        if text in line:
            return (inspect.getsourcefile(func), first + k)
    raise AssertionError(text)


def fused_step(a, b):
    y = ndl.relu(a * b)
    return y.sum(axes=(1,))


def _inputs(shape=(64, 96)):
    rng = np.random.default_rng(0)
    a = ndl.Tensor(rng.standard_normal(shape).astype(np.float32), requires_grad=False)
    b = ndl.Tensor(rng.standard_normal(shape).astype(np.float32), requires_grad=False)
    return a, b


def _launched():
    return runtime.stats()["kernels_launched"]


def test_lazy_step_is_one_fused_kernel_with_both_lines():
    a, b = _inputs()
    with ndl.lazy(True):
        fused_step(a, b).numpy()  # compile outside the profile
        with ndl.profile():  # (a graph built while lines are stamped is planned once more, with them)
            fused_step(a, b).numpy()
        before = _launched()
        with ndl.profile() as p:
            for _ in range(3):
                out = fused_step(a, b)
                out.numpy()
    # relu(a*b) is inlined into the row sum: one reduction kernel, launched once per step
    rows = p.rows()
    assert len(rows) == 1 and _launched() - before == 3
    row = rows[0]
    assert row.calls == 3 and row.device == "cpu()" and row.name.startswith("R_")
    assert set(row.ops) == {"EWiseMul", "ReLU", "Summation"}
    assert set(row.lines) == {_line_of(fused_step, "relu(a * b)"), _line_of(fused_step, "y.sum")}
    np.testing.assert_allclose(out.numpy(), np.maximum(a.numpy() * b.numpy(), 0).sum(axis=1), rtol=1e-5)
    # bytes: a and b read (2 * 64 * 96 floats), 64 sums written
    assert row.bytes == 3 * (2 * 64 * 96 + 64) * 4
    assert p.schedule_seconds == 0.0 and p.compile_seconds == 0.0  # the schedule was cached


def test_eager_ops_are_one_kernel_each_with_their_line():
    a, b = _inputs((32, 48))
    with ndl.lazy(False):
        fused_step(a, b)
        before = _launched()
        with ndl.profile() as p:
            for _ in range(2):
                fused_step(a, b)
    by_ops = {r.ops: r for r in p.rows()}
    assert sum(r.calls for r in p.rows()) == _launched() - before
    mul, relu, total = by_ops[("EWiseMul",)], by_ops[("ReLU",)], by_ops[("Summation",)]
    assert mul.calls == relu.calls == total.calls == 2
    assert set(mul.lines) == set(relu.lines) == {_line_of(fused_step, "relu(a * b)")}
    assert set(total.lines) == {_line_of(fused_step, "y.sum")}
    assert mul.bytes == 2 * 3 * 32 * 48 * 4  # two reads and a write of 32x48 floats, twice


def test_matmul_rate_is_in_flops():
    rng = np.random.default_rng(1)
    x = ndl.Tensor(rng.standard_normal((40, 30)).astype(np.float32), requires_grad=False)
    w = ndl.Tensor(rng.standard_normal((30, 20)).astype(np.float32), requires_grad=False)
    for lazy in (True, False):
        with ndl.lazy(lazy):
            (x @ w).numpy()
            with ndl.profile() as p:
                (x @ w).numpy()
        main = [r for r in p.rows() if r.flops]
        assert len(main) == 1 and main[0].flops == 2 * 40 * 30 * 20
        assert "GFLOP/s" in p.table(print_it=False)


def linear_loss(x, w):
    h = x @ w
    return (h * h).sum()


@pytest.mark.parametrize("lazy", [True, False])
def test_backward_kernels_point_at_the_forward_lines(lazy):
    rng = np.random.default_rng(2)
    x = ndl.Tensor(rng.standard_normal((16, 8)).astype(np.float32), requires_grad=False)
    w = ndl.Tensor(rng.standard_normal((8, 4)).astype(np.float32))
    with ndl.lazy(lazy):
        with ndl.profile() as p:
            loss = linear_loss(x, w)
            loss.backward()
            ndl.realize(loss, w.grad)
    forward = {_line_of(linear_loss, "x @ w"), _line_of(linear_loss, "h * h")}
    lines = set().union(*(set(r.lines) for r in p.rows()))
    assert lines and lines <= forward
    assert any(op.startswith("d") for r in p.rows() for op in r.ops)  # gradient ops are labelled
    np.testing.assert_allclose(w.grad.numpy(), x.numpy().T @ (2 * x.numpy() @ w.numpy()), rtol=1e-4)


def test_chrome_trace_has_one_complete_event_per_launch(tmp_path):
    a, b = _inputs((17, 23))  # a shape no other test uses: the schedule is planned in the profile
    with ndl.lazy(True):
        before = _launched()
        with ndl.profile() as p:
            for _ in range(4):
                fused_step(a, b).numpy()
    launches = _launched() - before
    path = p.export_chrome_trace(str(tmp_path / "trace.json"))
    with open(path) as f:
        trace = json.load(f)
    complete = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len(complete) == launches == 4
    assert all(e["cat"] == "kernel" and e["dur"] >= 0 and e["ts"] >= 0 for e in complete)
    schedule = [e for e in trace["traceEvents"] if e.get("cat") == "schedule"]
    assert [e["ph"] for e in schedule] == ["B", "E"] and p.schedule_seconds > 0
    assert schedule[1]["ts"] - schedule[0]["ts"] == pytest.approx(p.schedule_seconds * 1e6)
    text = p.table(print_it=False)
    assert "[schedule: passes]" in text and "[compile]" in text
    assert "test_profiler.py:" in text


def test_hooks_are_removed_and_profiles_do_not_nest():
    from needle.ir import build
    from needle.runtime import cpu
    new_before, make_before = build._new, ndl.autograd.Value.make_from_op.__func__
    with ndl.profile() as p:
        assert cpu.KERNEL_TIMER is not None and schedule_cache.CACHES["cpu"].observer is not None
        assert build.STAMP is not None and ndl.autograd.MADE is not None  # (ports, not patches)
        with pytest.raises(ndl.errors.NeedleError, match="already active"):
            with ndl.profile():
                pass
    assert cpu.KERNEL_TIMER is None and schedule_cache.CACHES["cpu"].observer is None
    assert build.STAMP is None and ndl.autograd.MADE is None
    # nothing was ever patched
    assert build._new is new_before and ndl.autograd.Value.make_from_op.__func__ is make_before
    with pytest.raises(ndl.errors.ArgumentError, match="sort_by"):
        p.table(sort_by="speed")
    assert "0 launches" in repr(p)


def jitted_linear_step(x, w):
    h = x @ w
    loss = (h * h).sum()
    loss.backward()
    return loss


def test_replayed_jit_steps_name_their_fused_ops_and_lines():
    """A replay builds no graph: the capture records what each kernel computes, so a
    profile of replayed steps still shows the fused ops and the user's lines."""
    rng = np.random.default_rng(3)
    x = ndl.Tensor(rng.standard_normal((13, 7)).astype(np.float32), requires_grad=False)
    w = ndl.Tensor(rng.standard_normal((7, 5)).astype(np.float32))
    step = ndl.jit(jitted_linear_step)
    for _ in range(3):  # run, capture, replay
        step(x, w)
    with ndl.profile() as p:
        step(x, w).numpy()
    assert step.replays >= 2
    rows = p.rows()
    assert rows and all(r.ops for r in rows)
    assert any("MatMul" in r.ops for r in rows) and any(op.startswith("d") for r in rows for op in r.ops)
    lines = set().union(*(set(r.lines) for r in rows))
    assert lines and lines <= {_line_of(jitted_linear_step, "x @ w"), _line_of(jitted_linear_step, "h * h")}


def same_graph_elsewhere(a, b):
    y = ndl.relu(a * b)  # the graph of fused_step, on another line
    return y.sum(axes=(1,))


def test_a_graph_planned_for_other_lines_is_named_by_its_own():
    # (plans made while lines are stamped were cached by structure alone: a profile of
    # one function named the lines of another that had planned the same graph first)
    a, b = _inputs((21, 11))
    for func, text in ((fused_step, "relu"), (same_graph_elsewhere, "relu"), (fused_step, "relu")):
        with ndl.profile() as p:
            func(a, b).numpy()
        lines = set().union(*(set(r.lines) for r in p.rows()))
        assert lines == {_line_of(func, text), _line_of(func, "sum")}


def test_a_replay_after_an_eager_op_names_the_replayed_lines():
    # (the kernel timer took the lines of the thread's last realize for any schedule the
    # profile had seen: replays after an eager op were credited to that op's line)
    rng = np.random.default_rng(4)
    x = ndl.Tensor(rng.standard_normal((11, 7)).astype(np.float32), requires_grad=False)
    w = ndl.Tensor(rng.standard_normal((7, 3)).astype(np.float32))
    step = ndl.jit(jitted_linear_step)
    for _ in range(3):
        step(x, w)
    with ndl.profile() as p:
        jitted_linear_step(x, w).numpy()  # a plain call: the profile sees the schedule
        with ndl.lazy(False):
            eager, eager_line = x * 2.0, (__file__, inspect.currentframe().f_lineno)
        for _ in range(2):
            step(x, w).numpy()
    assert step.replays >= 3
    replayed = [r for r in p.rows() if r.calls > 1]
    assert replayed and all(eager_line not in r.lines for r in replayed)
    assert any(eager_line in r.lines for r in p.rows())
    del eager


def test_graphs_of_one_structure_from_two_places_are_planned_once_each(monkeypatch):
    # (a plan per structure and "stamped" had each function's graph push out the other's
    # while a profile or needle.viz ran: planned again at every call)
    from needle.compiler import schedule
    plans, plan = [], schedule.plan
    monkeypatch.setattr(schedule, "plan", lambda *a, **k: (plans.append(1), plan(*a, **k))[1])
    a, b = _inputs((23, 13))
    with ndl.profile() as p:
        for _ in range(4):
            fused_step(a, b).numpy()
            same_graph_elsewhere(a, b).numpy()
        with ndl.lazy(False):  # eager ops: one plan serves every line that runs the op
            for _ in range(3):
                (a * b).numpy()
                (b * a).numpy()
    assert len(plans) == 3
    lines = set().union(*(set(r.lines) for r in p.rows()))
    assert {_line_of(fused_step, "relu"), _line_of(same_graph_elsewhere, "relu")} <= lines
