"""The profile as a table (`Profile.table`) and as Chrome trace-event JSON."""
from __future__ import annotations

import json
import os

from ..errors import ArgumentError
from . import sources


def _rate(row) -> str:
    """GFLOP/s for kernels that multiply matrices, GB/s for the rest."""
    if not row.total:
        return "-"
    if row.flops:
        return f"{row.flops / row.total / 1e9:.1f} GFLOP/s"
    return f"{row.bytes / row.total / 1e9:.2f} GB/s"


def _lines(row, top: int = 2) -> str:
    if not row.lines:
        return "?"
    common = [sources.short(w) for w, _ in row.lines.most_common(top)]
    more = len(row.lines) - len(common)
    return ", ".join(common) + (f" +{more}" if more > 0 else "")


def _ops(row, width: int = 34) -> str:
    text = "+".join(row.ops) or "+".join(row.ir_ops) or "?"
    return text if len(text) <= width else text[:width - 3] + "..."


def table(profile, rows, limit) -> str:
    kernel_total = profile.kernel_seconds
    step = max(profile.wall, 1e-12)
    head = (f"{'kernel':<26} {'device':<7} {'calls':>6} {'total ms':>9} {'mean us':>9} {'%kern':>6} "
            f"{'%step':>6} {'rate':>15}  {'fused ops':<34}  source lines")
    out = [head, "-" * len(head)]
    shown = rows if limit is None else rows[:limit]
    for r in shown:
        share = r.total / kernel_total * 100 if kernel_total else 0.0
        out.append(f"{r.name[:26]:<26} {r.device:<7} {r.calls:>6} {r.total * 1e3:>9.3f} {r.mean * 1e6:>9.1f} "
                   f"{share:>5.1f}% {r.total / step * 100:>5.1f}% {_rate(r):>15}  {_ops(r):<34}  {_lines(r)}")
    if len(rows) > len(shown):
        rest = rows[len(shown):]
        t = sum(r.total for r in rest)
        out.append(f"{'(' + str(len(rest)) + ' more kernels)':<26} {'':<7} {sum(r.calls for r in rest):>6} "
                   f"{t * 1e3:>9.3f} {'':>9} {t / kernel_total * 100 if kernel_total else 0:>5.1f}% "
                   f"{t / step * 100:>5.1f}%")
    out.append("-" * len(head))
    for label, seconds in (("[schedule: passes]", profile.schedule_seconds),
                           ("[compile]", profile.compile_seconds),
                           ("[graph key + cache lookup]", profile.lookup_seconds)):
        out.append(f"{label:<26} {'host':<7} {'':>6} {seconds * 1e3:>9.3f} {'':>9} {'':>6} "
                   f"{seconds / step * 100:>5.1f}%")
    launches = sum(r.calls for r in profile.kernels.values())
    other = max(profile.wall - kernel_total - profile.schedule_seconds - profile.compile_seconds
                - profile.lookup_seconds, 0.0)
    out.append(f"{'[other host work]':<26} {'host':<7} {'':>6} {other * 1e3:>9.3f} {'':>9} {'':>6} "
               f"{other / step * 100:>5.1f}%   (graph building, binding, Python)")
    out.append(f"step {profile.wall * 1e3:.3f} ms: {launches} launches of {len(rows)} kernels "
               f"({kernel_total * 1e3:.3f} ms), {profile.schedules} schedules run; "
               f"profiler overhead {profile.overhead * 1e3:.1f} ms excluded")
    return "\n".join(out)


def chrome_trace(profile, path) -> str:
    if not isinstance(path, (str, os.PathLike)):
        raise ArgumentError(f"export_chrome_trace: path must be a file name, got {type(path).__name__}")
    path = os.fspath(path)
    tids = {"host": 0}
    for e in profile.events:
        tids.setdefault(e["tid"], len(tids))
    meta = [{"name": "process_name", "ph": "M", "pid": 1, "tid": 0, "args": {"name": "needle"}}]
    meta += [{"name": "thread_name", "ph": "M", "pid": 1, "tid": k, "args": {"name": name}}
             for name, k in tids.items()]
    events = [dict(e, pid=1, tid=tids[e["tid"]]) for e in profile.events]
    try:
        with open(path, "w") as f:
            json.dump({"traceEvents": meta + events, "displayTimeUnit": "ms"}, f)
    except OSError as e:
        raise ArgumentError(f"export_chrome_trace: cannot write {path!r}: {e.strerror or e}") from None
    return path
