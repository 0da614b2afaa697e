"""The thread team is sized from the cores other processes leave free: the busy time
of this process's CPUs less its own CPU time, per second, median of the last readings."""
import subprocess
import sys
import time

import pytest

from needle import config
from needle.runtime import team


class FakeMachine:
    """/proc/stat's busy seconds and this process's CPU time, advanced by hand."""

    def __init__(self, monkeypatch, cpus=2):
        self.wall = self.busy = self.ours = 0.0
        monkeypatch.setattr(team, "_cpus", lambda: frozenset(range(cpus)))
        monkeypatch.setattr(team, "_busy_seconds", lambda _: self.busy)
        monkeypatch.setattr(team.time, "perf_counter", lambda: self.wall)
        monkeypatch.setattr(team.time, "process_time", lambda: self.ours)
        self.workers = {}  # compile worker pid -> CPU seconds
        monkeypatch.setattr(team.compile_pool, "STARTED", [])
        monkeypatch.setattr(team, "_process_seconds", lambda pid: self.workers.get(pid))

    def run(self, t: "team.Team", seconds: float, ours: float, others: float) -> int:
        """`seconds` pass while this process uses `ours` cores and others `others`."""
        self.wall += seconds
        self.ours += ours * seconds
        self.busy += (ours + others) * seconds
        return t.now(self.wall)


@pytest.mark.parametrize("cpus, others, size", [
    (2, 0.0, 2),   # idle: every CPU
    (2, 0.7, 1),   # one busy process sharing two cores with our two threads
    (2, 1.0, 1),   # one busy process
    (2, 2.0, 1),   # never fewer than one
    (2, 0.3, 2),   # a light background job: keep both
    (16, 1.0, 15),
    (16, 3.4, 13),
])
def test_the_team_is_the_cores_others_leave(monkeypatch, cpus, others, size):
    machine = FakeMachine(monkeypatch, cpus)
    t = team.Team()
    for _ in range(team.READINGS):
        got = machine.run(t, team.INTERVAL, ours=1.5, others=others)
    assert got == size


def test_our_own_threads_never_count_against_us(monkeypatch):
    """Spinning workers are this process's CPU time: however busy we are, an otherwise
    idle machine keeps the whole team."""
    machine = FakeMachine(monkeypatch)
    t = team.Team()
    for ours in (2.0, 1.0, 2.0, 0.1):
        assert machine.run(t, team.INTERVAL, ours=ours, others=0.0) == 2


def test_a_passing_burst_does_not_move_the_team_and_the_team_comes_back(monkeypatch):
    machine = FakeMachine(monkeypatch)
    t = team.Team()
    sizes = [machine.run(t, team.INTERVAL, 1.0, others) for others in (0, 0, 1, 0, 0, 1, 1, 1, 0, 0, 0)]
    assert sizes == [2, 2, 2, 2, 2, 2, 1, 1, 1, 2, 2]


def test_measured_at_most_once_an_interval(monkeypatch):
    machine = FakeMachine(monkeypatch)
    t = team.Team()
    for _ in range(team.READINGS):
        machine.run(t, team.INTERVAL, 1.0, 2.0)
    assert t.size == 1
    machine.busy -= 100.0  # would read as an idle machine if it were measured now
    assert machine.run(t, team.INTERVAL / 10, 0.0, 0.0) == 1


def test_adapting_turned_off_uses_every_cpu(monkeypatch):
    machine = FakeMachine(monkeypatch)
    monkeypatch.setattr(config, "ADAPT_THREADS", False)
    t = team.Team()
    for _ in range(team.READINGS):
        assert machine.run(t, team.INTERVAL, 1.0, 2.0) == 2


def test_no_proc_stat_uses_every_cpu(monkeypatch):
    monkeypatch.setattr(team, "_busy_seconds", lambda _: None)
    t = team.Team()
    time.sleep(team.INTERVAL)
    assert t.now(time.perf_counter()) == len(t.cpus)


def test_a_busy_process_beside_us_shrinks_the_team():
    """Measured on this machine: a process spinning on a core leaves at most all CPUs
    but one (whatever else runs here only shrinks it further)."""
    t = team.Team()
    if len(t.cpus) < 2 or team._busy_seconds(t.cpus) is None:
        pytest.skip("one CPU, or no /proc/stat")
    busy = subprocess.Popen([sys.executable, "-c", "import time\nend = time.time() + 30\nwhile time.time() < end: pass"])
    try:
        time.sleep(0.3)  # it starts
        t = team.Team()
        for _ in range(team.READINGS):
            time.sleep(team.INTERVAL * 1.5)
            size = t.now(time.perf_counter())
        assert size <= len(t.cpus) - 1, t.others
    finally:
        busy.kill()
        busy.wait()


def test_our_compile_workers_are_not_others(monkeypatch):
    """While this process's compile workers compile its kernels, the team stays whole;
    a worker that exits keeps its count (no drop read as someone else's load)."""
    machine = FakeMachine(monkeypatch)
    t = team.Team()
    team.compile_pool.STARTED.extend([101, 102])
    for k in range(5):
        machine.workers = {101: 0.2 * (k + 1), 102: 0.2 * (k + 1)}  # two workers, each on a core
        assert machine.run(t, team.INTERVAL, ours=0.0, others=2.0) == 2
    del machine.workers[102]  # one exits
    assert machine.run(t, team.INTERVAL, ours=1.0, others=0.0) == 2
    team.compile_pool.STARTED.remove(101)  # one leaves the pool's (bounded) list: its count stays
    assert machine.run(t, team.INTERVAL, ours=1.0, others=0.0) == 2
    assert set(t._workers) == {102}


def test_process_seconds_reads_proc():
    import os
    seconds = team._process_seconds(os.getpid())
    if seconds is None:
        pytest.skip("no /proc here")
    assert 0.0 < seconds <= time.process_time() + 1.0
    assert team._process_seconds(2 ** 31 - 7) is None
