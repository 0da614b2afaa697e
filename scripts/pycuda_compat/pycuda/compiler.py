"""pycuda.compiler.compile, the part needle uses: nvcc to a cubin."""
import os
import subprocess
import tempfile


class CompileError(Exception):
    pass


def compile(source, nvcc="nvcc", options=None, keep=False, no_extern_c=False, arch=None, code=None,  # noqa: A001
            cache_dir=None, include_dirs=(), target="cubin"):
    if not no_extern_c:
        source = 'extern "C" {\n' + source + "\n}\n"
    with tempfile.TemporaryDirectory() as tmp:
        src, out = os.path.join(tmp, "kernel.cu"), os.path.join(tmp, "kernel." + target)
        with open(src, "w") as f:
            f.write(source)
        cmd = [nvcc, "--" + target] + (["-arch", arch] if arch else []) + list(options or []) + \
            [f"-I{d}" for d in include_dirs] + ["-o", out, src]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise CompileError(f"nvcc failed:\n{proc.stderr}")
        with open(out, "rb") as f:
            return f.read()
