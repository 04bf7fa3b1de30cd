"""Triton interpreter (``TRITON_INTERPRET=1``) support: the CPU CI runs every kernel through it.

Two interpreter limits of triton 3.6 shape our kernels:

- bfloat16 is stored as raw ``uint16`` by the interpreter, so bf16 *arithmetic* (and ``tl.dot`` on
  bf16 operands, triton-lang/triton#11584, "we just don't support it yet") computes on bit
  patterns. Kernels therefore do all arithmetic in fp32/int32, and :func:`dot_bf16` upcasts its
  operands to fp32 only when :data:`INTERPRET` is set (a compile-time constant: the GPU build is
  unchanged).
- With numpy >= 2.4 the interpreter's ``int(tensor)`` on a runtime loop bound raises "only
  0-dimensional arrays can be converted" (triton-lang/triton#9171, fixed upstream by #9172 after
  3.6). :func:`ensure_interpreter_compat` applies that same one-line fix; it is a no-op on a GPU
  run.
"""

import os

import triton
import triton.language as tl

INTERPRET: tl.constexpr = tl.constexpr(os.environ.get("TRITON_INTERPRET", "0") == "1")


def interpreting() -> bool:
    """True when triton kernels run through the CPU interpreter in this process."""
    return bool(INTERPRET)


def ensure_interpreter_compat() -> None:
    """Make the triton 3.6 interpreter work with numpy >= 2.4 (idempotent; no-op on GPU)."""
    if not interpreting():
        return
    from triton.runtime import interpreter

    original = interpreter._patch_lang_tensor
    if getattr(original, "_specpilot_compat", False):
        return

    def _patch_lang_tensor(tensor, scope):
        original(tensor, scope)
        # Scalars are 1-element arrays in the interpreter; numpy 2.4 refuses int() on ndim > 0.
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    _patch_lang_tensor._specpilot_compat = True
    interpreter._patch_lang_tensor = _patch_lang_tensor


@triton.jit
def dot_bf16(a, b, acc):
    """``acc + a @ b`` for bf16 tiles ``a [BM, BK]`` and ``b [BK, BN]`` with fp32 accumulation."""
    if INTERPRET:
        out = tl.dot(a.to(tl.float32), b.to(tl.float32), acc)
    else:
        out = tl.dot(a, b, acc)
    return out


@triton.jit
def dot_acc(a, b, acc, IEEE: tl.constexpr):
    """``acc + a @ b``: an exact IEEE float32 dot for float32 tiles (the float32 validation
    twin; no tf32), :func:`dot_bf16` for bf16 tiles."""
    if IEEE:
        out = tl.dot(a, b, acc, input_precision="ieee")
    else:
        out = dot_bf16(a, b, acc)
    return out


ensure_interpreter_compat()
