"""Data-parallel training on MPI (mpi4py + MPICH, the `distributed` extra).

Every process (an MPI *rank*) holds the whole model and trains on its shard of
each global batch; `average_gradients` sums the gradients of all ranks with one
`Allreduce` and divides by the number of ranks, so every rank applies the same
update and the parameters stay identical, as if one process had trained on the
whole batch.  Typical loop (run with `mpiexec -n N python script.py`):

    import needle.distributed as dist
    dist.init()
    dist.broadcast_parameters(model)          # every rank starts from rank 0's weights
    for X, y in loader:                       # loader: DataLoader(..., sampler=DistributedSampler(...))
        loss = loss_fn(model(X), y)
        opt.reset_grad(); loss.backward()
        dist.average_gradients(model.parameters())
        opt.step()

Outside `mpiexec` (no MPI launcher in the environment) the world has one process:
mpi4py is not even imported, so the same script runs alone, without the extra,
and every call returns at once without copying anything.

What is averaged: gradients only.  Buffers such as BatchNorm's running mean and
variance are updated by each rank from its own shard (as PyTorch's
DistributedDataParallel does without SyncBatchNorm); `broadcast_parameters`
copies them from the root, and `all_reduce(t, "mean")` averages them when wanted.

Faults: once `init()` joined a world of several ranks, an uncaught exception on
any rank prints its traceback and calls `MPI.COMM_WORLD.Abort(1)`, which ends
every rank with a non-zero status instead of leaving the others waiting forever
in a collective (under a launcher, importing this module already arms that for
failures before `init()`).  `sys.exit(code)` on one rank is not an exception Python reports,
so raise instead, or wrap the code that may fail in `with dist.abort_on_error():`.
"""
from __future__ import annotations

import contextlib
import functools
import os
import sys
import time
import traceback
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from .autograd import Tensor
from .errors import ArgumentError, DTypeError, NeedleError, fmt_shape
from .captured.function import host_call
from .realize import realize

__all__ = ["DistributedError", "init", "is_initialized", "rank", "world_size", "barrier",
           "all_reduce", "broadcast", "broadcast_parameters", "average_gradients", "abort_on_error",
           "launched_by_mpi", "mpiexec_path"]

INSTALL_HINT = "pip install 'needle[distributed]'  (or: pip install mpi4py mpich)"

# Variables that MPI launchers set in each rank's environment: MPICH/Intel MPI (Hydra),
# PMIx-based launchers (Open MPI, Slurm), Open MPI's own.
_LAUNCHER_VARIABLES = ("PMI_RANK", "PMI_SIZE", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE")
_OPS = ("sum", "mean", "max")


class DistributedError(NeedleError, RuntimeError):
    """A distributed call cannot go on: mpi4py is missing under mpiexec, or the ranks disagree."""


class _World:
    """The joined world: `comm` is None for a one-process world without MPI."""

    def __init__(self, mpi=None, comm=None, rank: int = 0, size: int = 1) -> None:
        self.mpi, self.comm, self.rank, self.size = mpi, comm, rank, size


_WORLD: Optional[_World] = None


# ---- joining the world ----------------------------------------------------------------
def launched_by_mpi() -> bool:
    """True when an MPI launcher (mpiexec, mpirun, srun) started this process."""
    return any(name in os.environ for name in _LAUNCHER_VARIABLES)


def mpiexec_path() -> Optional[str]:
    """The `mpiexec` of the MPICH wheel (the one mpi4py runs with), else one beside this
    Python or on PATH; None if there is none.  Another MPI's launcher on PATH (Open MPI's
    refuses to run as root) is taken only when the wheel's cannot be found."""
    try:
        from importlib.metadata import PackageNotFoundError, distribution
        for f in distribution("mpich").files or ():
            if f.name == "mpiexec" and f.parent.name == "bin":
                path = os.path.abspath(str(f.locate()))
                if os.path.isfile(path):
                    return path
    except (ImportError, PackageNotFoundError):
        pass
    import shutil
    import sysconfig
    for folder in (sysconfig.get_path("scripts"), os.path.dirname(sys.executable)):
        path = os.path.join(folder, "mpiexec")
        if os.path.isfile(path):
            return path
    return shutil.which("mpiexec")


def _import_mpi():
    try:
        from mpi4py import MPI
    except ImportError as e:
        raise DistributedError(
            f"needle.distributed: this process was started by an MPI launcher but mpi4py cannot be "
            f"imported ({e}); install it with: {INSTALL_HINT}") from None
    return MPI


def init() -> None:
    """Join the MPI world when launched by mpiexec, else make a one-process world.
    Calling it again does nothing; the other functions call it when needed."""
    global _WORLD
    if _WORLD is not None:
        return
    if not launched_by_mpi():
        _WORLD = _World()
        return
    MPI = _import_mpi()
    comm = MPI.COMM_WORLD
    world = _World(MPI, comm, comm.Get_rank(), comm.Get_size())
    if world.size > 1:
        _abort_all_ranks_on_uncaught_exception(comm)
    _WORLD = world


def _abort_all_ranks_on_uncaught_exception(comm) -> None:
    """Without this a rank that dies leaves the others blocked in their next collective."""
    previous = sys.excepthook

    def hook(kind, value, tb):
        try:
            previous(kind, value, tb)
        finally:
            _abort(comm)

    sys.excepthook = hook


@contextlib.contextmanager
def abort_on_error():
    """Inside this block an exception on one rank ends every rank (status 1) at once,
    even when the caller would catch it and exit "cleanly" (as `python -m needle`
    does): `sys.exit(code)` on one rank alone would leave the others waiting forever."""
    try:
        yield
    except BaseException as error:
        world = _WORLD
        if world is None or world.size == 1 or (isinstance(error, SystemExit) and not error.code):
            raise
        traceback.print_exc()
        print(f"needle.distributed: rank {world.rank} failed ({type(error).__name__}: {error}); "
              f"aborting all {world.size} ranks", file=sys.stderr, flush=True)
        _abort(world.comm)


#: seconds a failing rank waits between writing its error and aborting the world:
#: mpiexec forwards a rank's output through a proxy that the abort kills, and a
#: message still in that pipe would be lost (the user would see ranks die silently)
ABORT_GRACE = 0.5


def _abort(comm) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    time.sleep(ABORT_GRACE)
    comm.Abort(1)


def _abort_all_ranks_on_uncaught_exception_before_init() -> None:
    """A rank that fails before `init()` would leave the others waiting in MPI_Init or
    their first collective (mpiexec does not end them): join the world, then abort it."""
    previous = sys.excepthook

    def hook(kind, value, tb):
        previous(kind, value, tb)
        if _WORLD is None:  # after init(), init's own hook (which wraps this one) aborts
            try:
                init()
            except Exception:  # noqa: BLE001 - no mpi4py: nothing more can be done
                return
            if _WORLD.size > 1:
                _abort(_WORLD.comm)

    sys.excepthook = hook


if launched_by_mpi():
    _abort_all_ranks_on_uncaught_exception_before_init()


def _world() -> _World:
    if _WORLD is None:
        init()
    return _WORLD


def is_initialized() -> bool:
    return _WORLD is not None


def rank() -> int:
    """This process's index in the world, 0 .. world_size() - 1."""
    return _world().rank


def world_size() -> int:
    """The number of processes training together (1 outside mpiexec)."""
    return _world().size


def barrier() -> None:
    """Wait until every rank has reached this call."""
    world = _world()
    if world.size > 1:
        world.comm.Barrier()


# ---- tensors ----------------------------------------------------------------------------
def _check_tensor(fn: str, t) -> None:
    if not isinstance(t, Tensor):
        raise DTypeError(f"{fn}: expected a needle Tensor, got {type(t).__name__}")


def _check_root(fn: str, root, size: int) -> int:
    if isinstance(root, bool) or not isinstance(root, (int, np.integer)) or not 0 <= root < size:
        raise ArgumentError(f"{fn}: root must be a rank in [0, {size}), got {root!r}")
    return int(root)


def _like(t: Tensor, array: np.ndarray) -> Tensor:
    """A new realized, constant tensor holding `array`, on t's device with t's dtype."""
    return Tensor(array, device=t.device, dtype=t.dtype, requires_grad=False)


def all_reduce(t: Tensor, op: str = "sum") -> Tensor:
    """The elementwise sum, mean or max of `t` over all ranks, as a new constant tensor
    (no gradient flows through communication).  Every rank must pass the same shape."""
    _check_tensor("all_reduce", t)
    if op not in _OPS:
        raise ArgumentError(f"all_reduce: op must be one of {', '.join(map(repr, _OPS))}, got {op!r}")
    world = _world()
    if world.size == 1:
        return t.detach()
    _agree("all_reduce", [("tensor", tuple(t.shape), t.dtype)], world)
    buf = np.array(t.numpy(), copy=True, order="C")
    mpi = world.mpi
    world.comm.Allreduce(mpi.IN_PLACE, buf, op=mpi.MAX if op == "max" else mpi.SUM)
    if op == "mean":
        buf /= world.size
    return _like(t, buf)


def broadcast(t: Tensor, root: int = 0) -> Tensor:
    """Rank `root`'s value of `t`, on every rank, as a new constant tensor."""
    _check_tensor("broadcast", t)
    world = _world()
    root = _check_root("broadcast", root, world.size)
    if world.size == 1:
        return t.detach()
    _agree("broadcast", [("tensor", tuple(t.shape), t.dtype)], world, root)
    if world.rank == root:
        world.comm.Bcast(np.ascontiguousarray(t.numpy()), root=root)
        return t.detach()
    buf = np.empty(t.shape, dtype=t.dtype)
    world.comm.Bcast(buf, root=root)
    return _like(t, buf)


# ---- modules and gradients ----------------------------------------------------------------
def _named_state(module) -> List[Tuple[str, Tensor]]:
    """(name, tensor) for a Module's parameters and buffers, or for a list of tensors."""
    if hasattr(module, "named_parameters") and hasattr(module, "named_buffers"):
        return list(module.named_parameters()) + list(module.named_buffers())
    try:
        tensors = list(module)
    except TypeError:
        raise DTypeError(f"broadcast_parameters: expected a Module or a list of Tensors, "
                         f"got {type(module).__name__}") from None
    for t in tensors:
        _check_tensor("broadcast_parameters", t)
    return [(f"tensor {i}", t) for i, t in enumerate(tensors)]


def _agree(fn: str, signature: Sequence[Tuple[str, tuple, str]], world: _World, root: int = 0) -> None:
    """Raise the same DistributedError on every rank unless all ranks pass the same
    (name, shape, dtype) list as `root` (one allgather of a few bytes per tensor)."""
    signatures = world.comm.allgather(list(signature))
    reference = signatures[root]
    for other, theirs in enumerate(signatures):
        problem = _first_difference(reference, theirs)
        if problem:
            raise DistributedError(f"{fn}: ranks disagree: {problem} (rank {root}) vs "
                                   f"{_first_difference(theirs, reference)} (rank {other})")


def _first_difference(mine, theirs) -> Optional[str]:
    if len(mine) != len(theirs):
        return f"{len(mine)} tensors"
    for (name, shape, dtype), (name2, shape2, dtype2) in zip(mine, theirs):
        if (name, shape, dtype) != (name2, shape2, dtype2):
            return f"{name!r} of shape {fmt_shape(shape)} and dtype {dtype}"
    return None


def _by_dtype(tensors: Iterable[Tensor]) -> Dict[str, List[Tensor]]:
    groups: Dict[str, List[Tensor]] = {}
    for t in tensors:
        groups.setdefault(t.dtype, []).append(t)
    return groups


def broadcast_parameters(module, root: int = 0) -> None:
    """Copy rank `root`'s parameters and buffers into every rank's `module` (in place:
    optimizers holding the parameters see the new values).  Raises DistributedError on
    every rank when the ranks' models differ in parameter count, names, shapes or dtypes."""
    world = _world()
    root = _check_root("broadcast_parameters", root, world.size)
    named = _named_state(module)
    if world.size == 1:
        return
    _agree("broadcast_parameters", [(n, tuple(t.shape), t.dtype) for n, t in named], world, root)
    tensors = [t for _, t in named]
    realize(*tensors)
    for dtype, group in _by_dtype(tensors).items():
        sizes = [int(np.prod(t.shape)) for t in group]
        buf = np.empty(sum(sizes), dtype=dtype)
        if world.rank == root:
            _pack(buf, [t.numpy() for t in group], sizes)
        world.comm.Bcast(buf, root=root)
        if world.rank != root:
            for t, part in zip(group, _unpack(buf, group, sizes)):
                t.data = _like(t, part)


def _pack(buf: np.ndarray, arrays: Sequence[np.ndarray], sizes: Sequence[int]) -> None:
    offset = 0
    for a, n in zip(arrays, sizes):
        buf[offset:offset + n] = a.reshape(-1)
        offset += n


def _unpack(buf: np.ndarray, like: Sequence[Tensor], sizes: Sequence[int]) -> List[np.ndarray]:
    parts, offset = [], 0
    for t, n in zip(like, sizes):
        parts.append(buf[offset:offset + n].reshape(t.shape))
        offset += n
    return parts


def average_gradients(params) -> None:
    """Replace each parameter's `.grad` by its mean over all ranks: call it after
    `backward()` and before `opt.step()`.

    All gradients are realized with one schedule, packed into one flat buffer and
    summed with ONE in-place `Allreduce` (one per dtype when parameters mix dtypes),
    then divided by the world size.  A parameter that has no gradient on some ranks
    counts as zero there (a flag per parameter travels in the same buffer); one that
    has none on any rank keeps `grad = None`.  Every rank must pass the same list."""
    if hasattr(params, "parameters") and callable(params.parameters):
        params = params.parameters()
    params = list(params)
    for p in params:
        _check_tensor("average_gradients", p)
    world = _world()
    if world.size == 1:
        return
    grads = [getattr(p, "grad", None) for p in params]
    realize(*[g for g in grads if g is not None])
    for dtype, group in _by_dtype(params).items():
        have = [getattr(p, "grad", None) is not None for p in group]
        flags = {}
        reduce = functools.partial(_mean_over_ranks, world, dtype, [p.shape for p in group], have, flags)
        # a host call: a step captured by needle.jit replays the all-reduce between its schedules
        averaged = host_call(reduce, [p.grad for p, h in zip(group, have) if h], group[0].device)
        for p, flag, grad in zip(group, flags["any"], averaged):
            if flag > 0:
                p.grad = grad


def _mean_over_ranks(world, dtype, shapes, have, flags, *grads) -> List[np.ndarray]:
    """The mean over ranks of each gradient (zeros where a rank has none), with ONE
    in-place Allreduce of a flat buffer: the gradients, then a has-gradient flag each
    (left in flags["any"]: a parameter no rank has a gradient for keeps none)."""
    sizes = [int(np.prod(shape)) for shape in shapes]
    total = sum(sizes)
    buf = np.empty(total + len(sizes), dtype=dtype)
    given, offset = iter(grads), 0
    for i, (n, h) in enumerate(zip(sizes, have)):
        buf[offset:offset + n] = next(given).reshape(-1) if h else 0
        buf[total + i] = h
        offset += n
    world.comm.Allreduce(world.mpi.IN_PLACE, buf, op=world.mpi.SUM)
    flags["any"] = buf[total:].copy()
    values = buf[:total]
    values /= world.size
    return [part.reshape(shape) for part, shape in zip(np.split(values, np.cumsum(sizes)[:-1]), shapes)]
