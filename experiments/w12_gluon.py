"""A Gluon W12 GEMM on fragment-order planes with the next K step's planes held in registers.

A probe of the structure the Triton kernel (``kernels/w12f_gemm``) cannot express: there the
one-stage K loop loads a step's planes and waits for them before its MMAs, so each warp has bytes
in flight only between its steps, and carrying the next step's planes as loop values made Triton
re-layout them every step (results/h200-2026-12-03-w12f-unroll-probe.json). Gluon fixes every
layout, so here:

- the planes of step ``s + 1`` are loaded (16-byte loads, the A operand's register order) before
  step ``s``'s decode and MMAs, in registers of the same layout: a warp always has one step in
  flight while it computes;
- the x tiles (both K halves, ``T`` tokens) are copied with ``cp.async`` into a 3-stage shared
  memory ring shared by the ``W`` warps of a program (one barrier per step), so x costs one
  global load per program rather than per warp, and no register staging;
- the decode is the product's prmt PTX (:mod:`specpilot.kernels.w12.triton`), the MMA
  ``mma.sync`` m16n8k16 with kWidth 4 (the frag order's labelling), swap-AB as in the product.

Not in the product: no escapes (timed against the product on the same planes with the escape
list emptied), no split K, no PDL. ``experiments/h200_w12_gluon.py`` checks and times it.
"""

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.ampere import mma_v2

from specpilot.kernels.common.launch import cdiv
from specpilot.kernels.w12.triton import _pairs_asm
from specpilot.kernels.w12.triton import window_scale

# The prmt decode with its operands as the kernel passes them: four copies of one 32-bit word of
# sm bytes ($2..$5) and of nib bytes ($6..$9) per call, of which it reads the first of each.
LO_ASM_C = gl.constexpr(_pairs_asm(False).replace("$3", "$6"))
HI_ASM_C = gl.constexpr(_pairs_asm(True).replace("$3", "$6"))
DECODE_CONSTRAINTS = gl.constexpr("=r,=r," + ",".join(["r"] * 8))
X_STAGES: gl.constexpr = gl.constexpr(3)
"""x stages: a step's copy targets the stage read two steps earlier, so one barrier per step."""
PLANE_WORDS: gl.constexpr = gl.constexpr(128)  # one plane of a 16 x 32 block, in 32-bit words
STEP_WORDS: gl.constexpr = gl.constexpr(3 * 128)  # a block's three planes


@gluon.jit
def _words_to_bytes(w):
    """int32 words ``[n]`` (4 per thread per 16 bytes) -> ``[4 n]``, each word repeated 4 times in
    consecutive registers: the shape of the bytes, with no byte ever a value of its own (a loop
    carrying uint8 tensors makes LLVM keep each byte in a register and repack them)."""
    t = gl.join(w, w)
    t = gl.join(t, t)
    return gl.reshape(t, [4 * w.shape[0]])


@gluon.jit
def _decode(sm, nib, ASM: gl.constexpr):
    """bf16 ``[4 n]`` from the int32 words of the sm and nib planes."""
    return gl.inline_asm_elementwise(ASM, DECODE_CONSTRAINTS,
                                     [_words_to_bytes(sm), _words_to_bytes(nib)],
                                     dtype=gl.bfloat16, is_pure=True, pack=4)


@gluon.jit
def _load_step(p):
    """The three planes' words of one K step (nib, low-half sm, high-half sm) at ``p``."""
    nib = gl.load(p, eviction_policy="evict_first")
    sm_a = gl.load(p + PLANE_WORDS, eviction_policy="evict_first")
    sm_b = gl.load(p + 2 * PLANE_WORDS, eviction_policy="evict_first")
    return nib, sm_a, sm_b


@gluon.jit
def _to_a(t, W: gl.constexpr, FC: gl.constexpr, A_LAYOUT: gl.constexpr):
    """Decoded bytes as loaded (chunk, row block, lane (g, t), byte (e3, e2, e1 e0)) -> the
    ``[16 W, 32 FC]`` A operand (row ``16 w + 8 e2 + g``, pair ``32 c + 16 e3 + 4 t + e1e0``)."""
    t = gl.reshape(t, [FC, W, 8, 4, 2, 2, 4])
    t = gl.permute(t, [1, 5, 2, 0, 4, 3, 6])
    t = gl.reshape(t, [16 * W, 32 * FC])
    return gl.convert_layout(t, A_LAYOUT, assert_trivial=True)


@gluon.jit
def _copy_x(xa_smem, xb_smem, x_ptr, offs_t, offs_j, t_mask, stride_xm, K2, j0):
    """cp.async of x's two K-half tiles ``[T, 32 FC]`` at pair column ``j0`` into one stage."""
    rows = x_ptr + offs_t[:, None] * stride_xm + (j0 + offs_j)[None, :]
    async_copy.async_copy_global_to_shared(xa_smem, rows, mask=t_mask[:, None])
    async_copy.async_copy_global_to_shared(xb_smem, rows + K2, mask=t_mask[:, None])


@gluon.jit
def w12g_kernel(x_ptr, planes_ptr, out_ptr, M, N, K2, RB, KB, stride_xm, scale,
                W: gl.constexpr, FC: gl.constexpr, T: gl.constexpr, DEPTH: gl.constexpr,
                PDL: gl.constexpr):
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[W, 1],
                                                  instr_shape=[16, 8])
    a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=4)
    b_layout: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=mma, k_width=4)
    word_layout: gl.constexpr = gl.BlockedLayout([4], [32], [W], [0])
    VEC_ROW: gl.constexpr = 4 * FC  # 16-byte vectors per x tile row
    TPW_J: gl.constexpr = VEC_ROW if VEC_ROW < 32 else 32
    x_layout: gl.constexpr = gl.BlockedLayout([1, 8], [32 // TPW_J, TPW_J], [W, 1], [1, 0])
    x_smem_layout: gl.constexpr = gl.SwizzledSharedLayout(vec=8, per_phase=1, max_phase=8,
                                                          order=[1, 0])

    pid_t = gl.program_id(0)
    pid_n = gl.program_id(1)
    steps = KB // FC
    # (chunk, row block, lane, word)
    i = gl.arange(0, W * FC * PLANE_WORDS, layout=word_layout)
    row_block = gl.minimum(pid_n * W + (i // PLANE_WORDS) % W, RB - 1)
    words = planes_ptr.to(gl.pointer_type(gl.int32))
    tiles = words + ((row_block.to(gl.int64) * KB + i // (W * PLANE_WORDS)) * STEP_WORDS
                     + i % PLANE_WORDS)

    offs_xt = pid_t * T + gl.arange(0, T, layout=gl.SliceLayout(1, x_layout))
    offs_xj = gl.arange(0, 32 * FC, layout=gl.SliceLayout(0, x_layout))
    xt_mask = offs_xt < M
    xa_smem = gl.allocate_shared_memory(gl.bfloat16, [X_STAGES, T, 32 * FC], x_smem_layout)
    xb_smem = gl.allocate_shared_memory(gl.bfloat16, [X_STAGES, T, 32 * FC], x_smem_layout)

    nib, sm_a, sm_b = _load_step(tiles)
    if DEPTH == 2:
        nib1, sm_a1, sm_b1 = _load_step(tiles + gl.minimum(1, steps - 1) * (FC * STEP_WORDS))
    if PDL:
        gl.inline_asm_elementwise("griddepcontrol.wait; // dummy $0", "=r", [], dtype=gl.int32,
                                  is_pure=False, pack=1)
        gl.inline_asm_elementwise("griddepcontrol.launch_dependents; // dummy $0", "=r", [],
                                  dtype=gl.int32, is_pure=False, pack=1)
    _copy_x(xa_smem.index(0), xb_smem.index(0), x_ptr, offs_xt, offs_xj, xt_mask, stride_xm, K2,
            0)
    async_copy.commit_group()
    acc = gl.zeros([16 * W, T], gl.float32, mma)
    for s in range(0, steps):
        ahead = gl.minimum(s + DEPTH, steps - 1)
        nib_n, sm_a_n, sm_b_n = _load_step(tiles + ahead * (FC * STEP_WORDS))
        nxt = gl.minimum(s + 1, steps - 1)
        stage = (s + 1) % X_STAGES
        _copy_x(xa_smem.index(stage), xb_smem.index(stage), x_ptr, offs_xt, offs_xj, xt_mask,
                stride_xm, K2, nxt * (32 * FC))
        async_copy.commit_group()
        async_copy.wait_group(1)
        gl.thread_barrier()
        xa = xa_smem.index(s % X_STAGES).permute([1, 0]).load(b_layout)
        xb = xb_smem.index(s % X_STAGES).permute([1, 0]).load(b_layout)
        a = _to_a(_decode(sm_a, nib, LO_ASM_C), W, FC, a_layout)
        acc = mma_v2(a, xa, acc)
        b = _to_a(_decode(sm_b, nib, HI_ASM_C), W, FC, a_layout)
        acc = mma_v2(b, xb, acc)
        if DEPTH == 2:
            nib, sm_a, sm_b = nib1, sm_a1, sm_b1
            nib1, sm_a1, sm_b1 = nib_n, sm_a_n, sm_b_n
        else:
            nib, sm_a, sm_b = nib_n, sm_a_n, sm_b_n
    async_copy.wait_group(0)
    offs_n = pid_n * (16 * W) + gl.arange(0, 16 * W, layout=gl.SliceLayout(1, mma))
    offs_t = pid_t * T + gl.arange(0, T, layout=gl.SliceLayout(0, mma))
    y = (acc * scale).to(gl.bfloat16)
    mask = (offs_n < N)[:, None] & (offs_t < M)[None, :]
    gl.store(out_ptr + offs_t[None, :] * N + offs_n[:, None], y, mask=mask)


def w12g_gemm(x: torch.Tensor, packed, w: int = 4, fc: int = 4, t: int = 16, depth: int = 1,
              pdl: bool = False) -> torch.Tensor:
    """``x [M, K]`` bf16 @ the fragment-order W12 planes ``[N, K]``^T (escapes NOT applied)."""
    if packed.order != "frag":
        raise ValueError("w12g_gemm reads fragment-order planes")
    m, k = x.shape
    n = packed.shape[0]
    rb, kb = packed.planes.shape[:2]
    if kb % fc:
        raise ValueError(f"{fc} pair blocks per K step do not divide the {kb} of a row")
    out = torch.empty((m, n), device=x.device, dtype=torch.bfloat16)
    grid = (cdiv(m, t), cdiv(rb, w))
    w12g_kernel[grid](x, packed.planes, out, m, n, packed.k_half, rb, kb, x.stride(0),
                      window_scale(packed.base), W=w, FC=fc, T=t, DEPTH=depth, PDL=pdl,
                      num_warps=w, launch_pdl=pdl)
    return out

