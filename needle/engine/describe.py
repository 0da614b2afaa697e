"""Human-readable summaries of schedules (NEEDLE_DEBUG=1, dump(stage="fused"))."""
from __future__ import annotations


def schedule_summary(schedule) -> str:
    temp = sum(schedule.temp_bytes)
    lines = [f"schedule: {len(schedule.calls)} kernel(s), {len(schedule.outputs)} output(s), "
             f"{len(schedule.temp_bytes)} temp buffer(s) ({_bytes(temp)})"]
    for c in schedule.calls:
        args = []
        for slot, buf in zip(c.slots, c.kernel.bufs):
            kind, index = schedule.slot_kinds[slot]
            args.append(f"{buf.name}={kind}{index}")
        par = f" threads over {c.kernel.parallel[1]}" if c.kernel.parallel else ""
        lines.append(f"  {c.kernel.name:<24} {' '.join(args)}{par}")
    return "\n".join(lines)


def _bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n:.0f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"
