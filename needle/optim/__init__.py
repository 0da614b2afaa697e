"""Optimizers: SGD (with momentum), Adam and RMSprop, as in the course framework.

Every update is array arithmetic on the tensors' data (lazy nodes in lazy mode,
NDArrays eagerly, numpy arrays with NEEDLE_BACKEND=np), never a host round trip:

- in lazy mode the whole step (all parameters and all optimizer state) becomes
  one IR graph, which `step()` realizes once at its end — one training step is
  one schedule, and fusion can merge the many small elementwise updates;
- updates need no autograd, so they build no Tensor graph (a third of the cost of
  Tensor ops), and the graph of the previous iteration is freed as soon as its
  results are realized;
- hyperparameters enter as `RuntimeScalar`s, so a step captured by needle.jit reads
  them again at each replay (a learning-rate scheduler needs no recapture).

`step()` never writes into `.grad` (it only reads its data), and keeps each
parameter's dtype: updates are cast back if a gradient arrives in another dtype.
"""
from .optimizer import Optimizer, ParamGroup
from .rules import SGD, Adam, AdamW, RMSprop
from . import lr_scheduler

__all__ = ["Optimizer", "ParamGroup", "SGD", "Adam", "AdamW", "RMSprop", "lr_scheduler"]
