"""What a plan is made for, as data: the compiler's passes, the code generators
and the JIT read the target from here, never from globals, so an AVX2 plan can be
built (and tested) on an AVX-512 host and the other way round."""
from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Target:
    """`name`: "cpu" or "cuda", a label (code asks for capabilities, never for the
    name).  `grid`: kernels run as a grid of GPU thread blocks, which the CUDA
    lowering maps work onto itself (reductions split over blocks, no loop-nest
    passes: register tiles, split reductions, conv windows read in place); else as
    loop nests whose outer loop is split across `threads`.  `vector_bytes`: SIMD
    register width the matmul tiles are shaped for (64 AVX-512, 32 AVX2, 16 SSE; 0 on
    CUDA).  `threads`: CPU
    threads a kernel may use.  `bounds_check`: generated code checks every index
    (NEEDLE_BOUNDS_CHECK).  `cpu`, `features`: the LLVM CPU name and feature string
    the JIT compiles for (empty on CUDA).  `unroll_min_work`: kernels touching fewer
    elements are compiled for compile time rather than speed (NEEDLE_UNROLL_MIN_WORK,
    which the engine passes in): the compiler marks the others `Kernel.hot`, so the
    choice is part of the kernel's text and of its cache key."""

    name: str
    vector_bytes: int
    threads: int = 1
    bounds_check: bool = False
    cpu: str = ""
    features: str = ""
    unroll_min_work: int = 0
    grid: bool = False

    def __hash__(self) -> int:
        """Hashed once: every eager op's cache lookup hashes its target."""
        found = self.__dict__.get("_hash")
        if found is None:
            found = hash((self.name, self.vector_bytes, self.threads, self.bounds_check, self.cpu, self.features,
                          self.unroll_min_work, self.grid))
            object.__setattr__(self, "_hash", found)
        return found

    def __getstate__(self) -> dict:
        """Pickled without the hash (a string's hash differs between processes)."""
        return {k: v for k, v in self.__dict__.items() if k != "_hash"}

    @property
    def loop_nests(self) -> bool:
        """Kernels are loop nests (a CPU): the passes that shape loops apply."""
        return not self.grid

    def with_vector_bytes(self, vector_bytes: int) -> "Target":
        """The same CPU limited to `vector_bytes`-wide SIMD: AVX-512 features turned
        off for 32 (AVX2), AVX as well for 16 (SSE)."""
        off = {64: (), 32: ("avx512",), 16: ("avx512", "avx", "fma", "f16c")}[vector_bytes]
        flags = [f for f in self.features.split(",") if f]
        flags = ["-" + f[1:] if f[0] == "+" and f[1:].startswith(off) else f for f in flags]
        return replace(self, vector_bytes=vector_bytes, features=",".join(flags))

    def can_run_on(self, host: "Target") -> bool:
        """Whether code for this target executes on `host` (no feature it lacks)."""
        have = {f[1:] for f in host.features.split(",") if f.startswith("+")}
        need = {f[1:] for f in self.features.split(",") if f.startswith("+")}
        return self.grid == host.grid and need <= have
