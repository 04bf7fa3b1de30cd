"""Reading a compiled kernel's SASS without a GPU: disassemble a cubin with the ``nvdisasm`` Triton
ships and find the loop the work runs in.

Used by ``experiments/sass_per_weight.py`` (instructions per weight of the W12 GEMMs' K loop) and
by ``tests/kernels/test_codegen.py``, which bounds that count so that a change to the decode or to
its layout conversion that costs issue bandwidth fails on the CPU instead of surfacing as a slower
GPU run.
"""

import inspect
import os
import re
import subprocess
import tempfile

WORK = re.compile(r"^(HMMA|HGMMA|FFMA|FMUL)$")
"""Opcodes of the multiply work a GEMM's main loop exists for."""


def compile_sm90(kernel, constexprs: dict, num_warps: int, num_stages: int, pointers: dict,
                 aligned: tuple = ()):
    """Triton's compile of ``kernel`` (a ``@triton.jit`` function) for sm_90a, no GPU needed:
    ``constexprs`` by name; other parameters are the dtypes in ``pointers`` (e.g. ``"*u8"``),
    ``fp32`` for ``scale`` and ``i32`` else; those in ``pointers`` or ``aligned`` are declared
    16-divisible, as a launch at aligned sizes specialises them. ``.asm`` holds ``ptx`` and
    ``cubin``."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    names = list(inspect.signature(kernel.fn).parameters)
    sig = {n: "constexpr" if n in constexprs
           else pointers.get(n, "fp32" if n == "scale" else "i32") for n in names}
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(names)
             if n in pointers or n in aligned}
    src = ASTSource(fn=kernel, signature=sig, attrs=attrs,
                    constexprs={(names.index(n),): v for n, v in constexprs.items()})
    options = {"num_warps": num_warps, "num_stages": num_stages}
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)


def nvdisasm() -> str:
    """Path of the ``nvdisasm`` in Triton's NVIDIA backend."""
    import triton

    return os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "nvdisasm")


def disassemble(cubin: bytes) -> list[str]:
    """SASS lines in order: instructions (without address and ``;``) and ``.L_x_N:`` labels."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        text = subprocess.run([nvdisasm(), "-c", f.name], capture_output=True, text=True,
                              check=True).stdout
    out = []
    for line in text.splitlines():
        label = re.match(r"(\.L_x_\d+):", line)
        ins = re.match(r"\s*/\*[0-9a-f]+\*/\s+(.*?)\s*;", line)
        if label:
            out.append(label.group(1) + ":")
        elif ins:
            out.append(ins.group(1))
    return out


def opcode(ins: str) -> str:
    """The opcode of an instruction, without its predicate guard or modifiers."""
    return re.sub(r"^@!?U?P[T\d]\s+", "", ins).split()[0].split(".")[0]


def loops(sass: list[str]) -> list[list[str]]:
    """The instructions of every loop (a backward branch's body), in program order."""
    where = {line[:-1]: i for i, line in enumerate(sass) if line.endswith(":")}
    out = []
    for i, ins in enumerate(sass):
        m = re.search(r"BRA\s+`\((\.L_x_\d+)\)", ins)
        if m and where.get(m.group(1), i) < i:
            out.append([s for s in sass[where[m.group(1)]:i + 1] if not s.endswith(":")])
    return out


def main_loop(sass: list[str]) -> list[str]:
    """The instructions of the loop (a backward branch's body) with the most multiply work
    (:data:`WORK`; the first of equals); empty if there is none."""
    work = lambda body: sum(bool(WORK.match(opcode(s))) for s in body)
    best = max(loops(sass), key=work, default=[])
    return best if work(best) else []
