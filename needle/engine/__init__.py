"""The engine: the one door from pending work to computed data.

- `realize`: `realize_nodes` computes pending IR nodes, one schedule per device;
  `realize_later` queues state that outlives a step for the next schedule.
- `schedule_cache`: the bounded schedule cache, keyed by (graph structure, target);
  a miss plans (compiler), renders (codegen) and loads (runtime).
- `eager`: one primitive, one kernel, for cpu() and cuda() arrays.
- `stages`: the text of every compiler stage (`needle.ir.dump`).
- `capture`: records the schedules a step launches (for `needle.jit`).
"""
from . import eager, stages  # noqa: F401  (install the compiled devices' primitives, the stage views)
from .realize import forget_later, pending_nodes, realize_later, realize_nodes  # noqa: F401
