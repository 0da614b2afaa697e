"""Text of every compiler stage, for `needle.ir.dump` and `visualize`.

- fused:   the folded graph, kernel by kernel: which nodes each kernel computes,
           what it stores, and why every boundary is where it is
- kernels: the loop-nest kernel IR of the schedule
- llvm:    the LLVM IR module of each kernel (as generated, before O3)
- cuda:    one CUDA C translation unit holding every kernel
"""
from __future__ import annotations


from ..codegen import cuda
from ..compiler.schedule import plan
from ..ir import printer
from ..ir.nodes import toposort
from . import schedule_cache


def dump(outputs, stage: str) -> str:
    target = schedule_cache.target_for("cuda" if stage == "cuda" else "cpu")
    schedule, fused = plan(outputs, target)
    if stage == "fused":
        return fused_text(fused)
    if stage == "kernels":
        return "\n\n".join(_kernel_text(c) for c in schedule.calls)
    if stage == "llvm":
        return "\n".join(schedule_cache.kernel_code(c.kernel, target) for c in schedule.calls)
    if stage == "cuda":
        return cuda.render_module([c.kernel for c in schedule.calls], bounds_check=target.bounds_check)
    raise ValueError(f"unknown stage {stage!r}")


def _kernel_text(call) -> str:
    """A kernel's IR, and the constant offsets its launch adds to its buffer pointers
    (compiler/buffer_offsets.py: they are no longer in its indices)."""
    moved = [f"{b.name} + {n}" for b, n in zip(call.kernel.bufs, call.offsets) if n]
    return call.kernel.text() + (f"\n  (launched at {', '.join(moved)} elements)" if moved else "")


def kernel_members(fused) -> list:
    """(group, the folded nodes it evaluates) for each kernel, as fusion recorded them."""
    return [(g, g.members) for g in fused.groups]


def fused_text(fused) -> str:
    order = toposort(fused.folded.outputs)
    num = printer.numbering(order)
    lines = []
    for k, (g, members) in enumerate(kernel_members(fused)):
        ids = {id(n) for n in members}
        title = f"kernel {k}: {g.name} ({g.kind}"
        if g.stages:
            title += f", {len(g.stages)} reduction stage{'s' if len(g.stages) > 1 else ''}"
        lines.append(title + ")")
        for n in order:
            if id(n) not in ids:
                continue
            text = printer.node_line(n, num)
            note = fused.reasons.get(id(n))
            if n is g.root or any(n is e for e in g.extra):  # what the kernel stores
                note = f"stored: {note}" if note else "stored"
            lines.append("  " + text + (f"   <- {note}" if note else ""))
        for note in g.notes:
            lines.append(f"  note: {note}")
    lines.append("return " + ", ".join(f"%{num[id(n)]}" for n in fused.folded.outputs))
    return "\n".join(lines)


def kernel_clusters(outputs) -> tuple:
    """(order, num, clusters) of the folded graph for drawing fused kernels."""
    _, fused = plan(outputs, schedule_cache.cpu_target())
    order = toposort(fused.folded.outputs)
    num = printer.numbering(order)
    clusters = {}
    for k, (g, members) in enumerate(kernel_members(fused)):
        clusters[f"kernel {k}: {g.name}"] = {id(n) for n in members if n.op not in ("buffer", "const", "param")}
    return order, num, clusters, fused.folded.outputs

