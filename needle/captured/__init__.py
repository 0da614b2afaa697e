"""Captured steps (`needle.jit`): call 2 of a jitted function records the compiled
schedules it launches (the engine's `capture`), later calls replay them.  This
package is the frontend's side: it knows Tensors, Modules and optimizers —
`function` is the user-facing JitFunction and its contract, `world` the Python state
a step can read (guards) and change (effects), `tracing` what the capture call runs,
`build` turns a recorded call into a `step.CapturedStep`, `verify` checks replays
against plain calls."""
