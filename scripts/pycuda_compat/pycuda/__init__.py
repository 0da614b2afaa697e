"""A PyCUDA stand-in over NVIDIA's cuda-bindings, for scripts/gpu_check.sh only.

needle's CUDA runtime is written against PyCUDA.  A GPU machine without network may
lack what building PyCUDA from its sdist needs (Python headers, say); when that
build fails, gpu_check.sh puts this directory first on PYTHONPATH so the GPU tests
and benchmarks still run, and says so in its report.  It implements exactly the
part of PyCUDA that needle uses (driver init, a context, allocations, copies,
modules from cubins, prepared launches, events; nvcc for compile) and nothing
else.
"""
VERSION = (0, 0, 0)
VERSION_TEXT = "cuda-bindings compat"
