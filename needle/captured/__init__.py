"""Captured steps (`needle.jit`): call 2 of a jitted function records the compiled
schedules it launches (the engine's `capture`), later calls replay them.  This
package is the frontend's side: it knows Tensors, Modules and optimizers —
`function` is the user-facing JitFunction, `state` finds where a step's state
lives, `replay` binds inputs and state to a capture and reruns it."""
