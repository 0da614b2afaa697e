"""`python -m needle viz [SCRIPT [ARGS...] | WORKLOAD | RECORDING]`: a whole step in the browser.

- SCRIPT (a .py file): runs it with NEEDLE_VIZ=1 in a child process (its output and any
  traceback show as usual), then serves what it recorded;
- WORKLOAD (a built-in one, `mlp_step`): runs a few steps here, recording, then serves them;
- RECORDING (a .json file, or a folder of them): serves it; nothing: the newest recording
  in NEEDLE_VIZ_DIR (what `NEEDLE_VIZ=1 python script.py` wrote last).

The page is served on 127.0.0.1 only (never another interface), at --port (8765; 0 picks
a free one), until Ctrl-C.  The port is taken before anything runs, so a port in use
fails at once.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import webbrowser

from .. import config, viz
from ..backend_selection import cpu
from ..captured.function import jit
from ..errors import NeedleError
from ..realize import lazy, realize
from ..viz.recording import Recording, newest
from .workloads import WORKLOADS, get

_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("target", nargs="?", metavar="SCRIPT | WORKLOAD | RECORDING",
                   help="a Python script to run and record, a built-in workload (" + ", ".join(sorted(WORKLOADS)) +
                        "), or a recording (.json); default: the newest recording in NEEDLE_VIZ_DIR")
    p.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS", help="the script's own arguments")
    p.add_argument("--port", type=int, default=8765, metavar="P",
                   help="serve on http://127.0.0.1:P/ (default: 8765; 0: any free port)")
    p.add_argument("--steps", type=int, default=3, metavar="N", help="workload: steps recorded (default: 3)")
    p.add_argument("--jit", action="store_true", help="workload: capture its step with needle.jit")
    p.add_argument("--full", action="store_true", help="workload: full sizes instead of the quick ones")
    p.add_argument("--open", action="store_true", help="also open the page in the web browser")


def prepare(args):
    """The Server, bound to its port, with the Recording to show: the work before serving."""
    if args.args and not _is_script(args.target):  # (`viz mlp_step --jit`: options after a workload are ours)
        parser = argparse.ArgumentParser(prog="python -m needle viz")
        add_arguments(parser)
        args = parser.parse_args([*args.args, args.target])
    server = viz.Server(None, args.port)
    try:
        server.recording = _recording(args)
        if server.recording.empty:
            raise NeedleError(f"the recording of {args.target or 'the last run'} is empty: no schedule was compiled "
                              "and run (does it compute with needle, in lazy or eager mode on cpu() or cuda()?)")
    except BaseException:
        server.httpd.server_close()
        raise
    return server


def run(args) -> None:
    server = prepare(args)
    print(f"needle viz: serving {server.recording.summary()} at {server.url}  (Ctrl-C stops)", flush=True)
    if args.open:
        webbrowser.open(server.url)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print("needle viz: stopped", file=sys.stderr)


def _recording(args) -> Recording:
    target = args.target
    if target is None:
        path = newest(config.VIZ_DIR)
        if path is None:
            raise NeedleError(f"no recording in {config.VIZ_DIR}: record one with `NEEDLE_VIZ=1 python script.py`, "
                              "or give a script or a workload (python -m needle viz train.py)")
        print(f"needle viz: the newest recording, {path}", file=sys.stderr)
        return Recording.load(path)
    if target in WORKLOADS:
        return record_workload(target, args.steps, captured=args.jit, quick=not args.full)
    if os.path.isdir(target):
        path = newest(target)
        if path is None:
            raise NeedleError(f"no recording (.json) in {target}")
        return Recording.load(path)
    if target.endswith(".json"):
        return Recording.load(target)
    if _is_script(target):
        return record_script(target, args.args)
    raise NeedleError(f"{target!r} is not a script, a recording (.json) or a workload "
                      f"(choose from {', '.join(sorted(WORKLOADS))})")


def _is_script(target) -> bool:
    return target is not None and target not in WORKLOADS and not target.endswith(".json") and \
        (target.endswith(".py") or os.path.isfile(target))


def record_script(script: str, script_args=()) -> Recording:
    """Run `script` with NEEDLE_VIZ=1 in a child process and read what it recorded."""
    if not os.path.isfile(script):
        raise NeedleError(f"no such script: {script}")
    env = dict(os.environ, NEEDLE_VIZ="1", NEEDLE_VIZ_DIR=config.VIZ_DIR)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH", "")) if p)
    child = subprocess.Popen([sys.executable, script, *script_args], env=env)
    interrupted = False
    try:
        code = child.wait()
    except KeyboardInterrupt:  # (Ctrl-C reached the script too: show what it recorded so far)
        interrupted = True
        code = child.wait()
    path = viz.default_path(script, child.pid)
    if code != 0 and not interrupted:
        where = f"; what it recorded before is in {path} (python -m needle viz {path})" if os.path.isfile(path) else ""
        raise NeedleError(f"{script} raised an exception (its traceback is above; exit status {code}){where}")
    if not os.path.isfile(path):
        raise NeedleError(f"{script} wrote no recording ({path}): does it import needle?")
    return Recording.load(path)


def record_workload(name: str, steps: int = 3, captured: bool = False, quick: bool = True, device=None) -> Recording:
    """Record `steps` steps of a built-in workload (lazily; `captured`: under needle.jit,
    two more steps so that its replays run)."""
    if steps < 1:
        raise ValueError(f"--steps must be at least 1, got {steps}")
    with viz.record() as recorder:
        with lazy(True):
            workload = get(name)(device if device is not None else cpu(), quick=quick)
            step = jit(workload.step) if captured else workload.step
            for _ in range(steps + (2 if captured else 0)):
                realize(*step())
    recording = recorder.recording()
    recording.data["program"] = f"{name} ({get(name).description})"
    return recording
