"""A recording as the page reads it: plain data, written to and read from one JSON file.

    {"version": 1, "program": "train.py", "argv": [...], "created": <unix time>, "limit": 16,
     "items": [{"id", "kind": "schedule" | "step", "title", "where", "count",
                "shots": ["s0", ...], "timeline": {"what", "segments", "total"} | null}],
     "shots": {"s0": {"target", "code_language", "groups", "kernels",
                      "stages": {"autograd" | "graph" | "folded" | "fused" | "kernels":
                                 {"text", "dot", "full", "nodes", "collapsed", "count"}}}}}

A recording made in this process keeps its `Shot`s, so kernels' code is rendered
when the page asks for it; one read from a file has it written in.
"""
from __future__ import annotations

import glob
import json
import os

from ..errors import NeedleError

#: recordings kept in a folder: writing one more removes the oldest past this many
KEEP = 20


class Recording:
    def __init__(self, data: dict, shots=None):
        self.data = data
        self.shots = shots or {}

    @property
    def empty(self) -> bool:
        return not self.data.get("items")

    def code(self, sid: str, i: int) -> str:
        kernel = self.data["shots"][sid]["kernels"][i]
        if kernel.get("code") is None and sid in self.shots:
            self.shots[sid].code(i)
        return kernel.get("code") or ""

    def summary(self) -> str:
        items = self.data.get("items", [])
        kernels = sum(len(self.data["shots"][s]["kernels"]) for s in self.data.get("shots", {}))
        steps = sum(1 for i in items if i["kind"] == "step")
        text = f"{len(items)} entr{'y' if len(items) == 1 else 'ies'} ({len(self.data.get('shots', {}))} schedules, " \
               f"{kernels} kernels"
        return text + (f", {steps} captured step{'s' if steps != 1 else ''})" if steps else ")")

    def save(self, path: str) -> str:
        """Write the recording (every kernel's code rendered) to `path`, and keep at most
        KEEP recordings in its folder."""
        memo = {}  # (equal kernels of several schedules: rendered once)
        for shot in self.shots.values():
            shot.fill_code(memo)
        folder = os.path.dirname(os.path.abspath(path))
        os.makedirs(folder, exist_ok=True)
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump(self.data, f)
        os.replace(tmp, path)
        _prune(folder)
        return path

    @classmethod
    def load(cls, path: str) -> "Recording":
        try:
            with open(path) as f:
                data = json.load(f)
        except OSError as e:
            raise NeedleError(f"cannot read the recording {path!r}: {e.strerror or e}") from None
        except ValueError as e:
            raise NeedleError(f"{path!r} is not a needle viz recording (not JSON: {e})") from None
        if not isinstance(data, dict) or data.get("version") != 1 or "items" not in data or "shots" not in data:
            raise NeedleError(f"{path!r} is not a needle viz recording (version 1)")
        return cls(data)


def newest(folder: str):
    """The most recently written recording in `folder`, or None."""
    files = glob.glob(os.path.join(folder, "*.json"))
    return max(files, key=os.path.getmtime) if files else None


def _prune(folder: str) -> None:
    files = sorted(glob.glob(os.path.join(folder, "*.json")), key=os.path.getmtime)
    for old in files[:-KEEP]:
        try:
            os.remove(old)
        except OSError:
            pass
