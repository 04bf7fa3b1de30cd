"""Triton kernels for :mod:`specpilot.kernels.slot_attention`: split-slot (flash-decoding)
attention.

Pass 1, program (row, kv head, split): the cache's ``BLOCK_S``-slot chunks ``split``,
``split + num_splits``, ... (interleaved, so a short context in a large cache still spreads over
every split); a chunk whose slots are all invisible to the row's query is skipped without loading
K or V. The group's ``Hq / Hkv`` query heads share each K/V load as the rows of one ``tl.dot``
(padded to 16). It writes the split's running max, sum and unnormalised output. Pass 2, program
(row, q head): combines the splits, divides, rounds to the output dtype and applies the output
gate.

A query's result depends only on the cache's slot count and head dim (which fix the split
plan), never on how many rows the launch has: a decode step and a verify of the same position
compute it the same way, bit for bit.
"""

import torch
import triton
import triton.language as tl

from specpilot.kernels.common.interpret import dot_acc
from specpilot.kernels.common.launch import cdiv
from specpilot.kernels.common.pdl import pdl_launch
from specpilot.kernels.common.pdl import pdl_start

MAX_SPLITS = 32
NUM_WARPS = 4


@triton.jit
def slot_attention_split_kernel(
        q_ptr, k_ptr, v_ptr, pos_ptr, qpos_ptr, o_part, m_part, l_part,
        T, S, HKV, G, D, window, scale,
        s_qb, s_qt, s_qh, s_kb, s_ks, s_kh, s_vb, s_vs, s_vh, s_pb, s_qpb, s_qpt,
        BLOCK_G: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr,
        HAS_WINDOW: tl.constexpr, IEEE: tl.constexpr, PDL: tl.constexpr):
    pdl_start(PDL)
    pid = tl.program_id(0).to(tl.int64)  # (b * T + t) * HKV + h
    split = tl.program_id(1)
    nsplit = tl.num_programs(1)
    h, bt = pid % HKV, pid // HKV
    b, t = bt // T, bt % T
    q_pos = tl.load(qpos_ptr + b * s_qpb + t * s_qpt)
    offs_g = tl.arange(0, BLOCK_G)
    offs_d = tl.arange(0, BLOCK_D)
    mask_g, mask_d = offs_g < G, offs_d < D
    q = tl.load(q_ptr + b * s_qb + t * s_qt + (h * G + offs_g)[:, None] * s_qh + offs_d[None, :],
                mask=mask_g[:, None] & mask_d[None, :], other=0.0)
    m = tl.full([BLOCK_G], float("-inf"), tl.float32)
    total = tl.zeros([BLOCK_G], tl.float32)
    acc = tl.zeros([BLOCK_G, BLOCK_D], tl.float32)
    for chunk in range(split, tl.cdiv(S, BLOCK_S), nsplit):
        offs_s = chunk * BLOCK_S + tl.arange(0, BLOCK_S)
        key_pos = tl.load(pos_ptr + b * s_pb + offs_s, mask=offs_s < S, other=-1)
        visible = (key_pos >= 0) & (key_pos <= q_pos)
        if HAS_WINDOW:
            visible = visible & ((q_pos - key_pos) < window)
        if tl.max(visible.to(tl.int32), axis=0) > 0:
            kv_mask = visible[:, None] & mask_d[None, :]
            k = tl.load(k_ptr + b * s_kb + offs_s[:, None] * s_ks + h * s_kh + offs_d[None, :],
                        mask=kv_mask, other=0.0)
            scores = dot_acc(q, tl.trans(k), tl.zeros([BLOCK_G, BLOCK_S], tl.float32),
                             IEEE) * scale  # [BLOCK_G, BLOCK_S]
            scores = tl.where(visible[None, :], scores, float("-inf"))
            m_new = tl.maximum(m, tl.max(scores, axis=1))  # finite: one slot is visible
            alpha = tl.exp(m - m_new)
            p = tl.exp(scores - m_new[:, None])
            total = total * alpha + tl.sum(p, axis=1)
            v = tl.load(v_ptr + b * s_vb + offs_s[:, None] * s_vs + h * s_vh + offs_d[None, :],
                        mask=kv_mask, other=0.0)
            acc = dot_acc(p.to(v.dtype), v, acc * alpha[:, None], IEEE)
            m = m_new
    base = (pid * nsplit + split) * G + offs_g  # [rows * HKV, nsplit, G] (x D for the output)
    tl.store(m_part + base, m, mask=mask_g)
    tl.store(l_part + base, total, mask=mask_g)
    tl.store(o_part + base[:, None] * D + offs_d[None, :], acc,
             mask=mask_g[:, None] & mask_d[None, :])


@triton.jit
def slot_attention_combine_kernel(
        o_part, m_part, l_part, gate_ptr, out_ptr, T, HQ, G, D, NSPLIT,
        s_gb, s_gt, s_gh, BLOCK_SPLIT: tl.constexpr, BLOCK_D: tl.constexpr,
        HAS_GATE: tl.constexpr, PDL: tl.constexpr):
    pdl_start(PDL)
    pid = tl.program_id(0).to(tl.int64)  # (b * T + t) * HQ + head
    head, bt = pid % HQ, pid // HQ
    b, t = bt // T, bt % T
    row = bt * (HQ // G) + head // G  # the pass-1 program row of this head's kv group
    offs_s = tl.arange(0, BLOCK_SPLIT)
    offs_d = tl.arange(0, BLOCK_D)
    mask_s, mask_d = offs_s < NSPLIT, offs_d < D
    part = (row * NSPLIT + offs_s) * G + head % G
    m = tl.load(m_part + part, mask=mask_s, other=float("-inf"))
    peak = tl.max(m, axis=0)
    peak = tl.where(peak > float("-inf"), peak, 0.0)  # every split empty: all weights exp(-inf)
    weight = tl.exp(m - peak)
    total = tl.sum(weight * tl.load(l_part + part, mask=mask_s, other=0.0), axis=0)
    o = tl.load(o_part + part[:, None] * D + offs_d[None, :],
                mask=(mask_s & (m > float("-inf")))[:, None] & mask_d[None, :], other=0.0)
    o = tl.sum(o * weight[:, None], axis=0) / tl.where(total > 0, total, 1.0)
    o = o.to(out_ptr.dtype.element_ty)
    if HAS_GATE:
        gate = tl.load(gate_ptr + b * s_gb + t * s_gt + head * s_gh + offs_d, mask=mask_d,
                       other=0.0).to(tl.float32)
        o = (o.to(tl.float32) * tl.sigmoid(gate)).to(out_ptr.dtype.element_ty)
    tl.store(out_ptr + pid * D + offs_d, o, mask=mask_d)


def split_plan(num_slots: int, head_dim: int) -> tuple[int, int]:
    """``(block_s, num_splits)`` for a cache of ``num_slots`` slots: chunks of ``block_s`` slots
    dealt to at most :data:`MAX_SPLITS` splits (a function of the cache, not of the rows)."""
    block_s = 32 if head_dim > 128 else 64
    return block_s, max(1, min(MAX_SPLITS, cdiv(num_slots, block_s)))


def slot_attention_triton(q, cache_k, cache_v, cache_pos, positions, scale, window=None,
                          gate=None):
    """Same contract as :func:`~specpilot.kernels.slot_attention.reference.slot_attention_ref`;
    every tensor's last dim must have unit stride."""
    batch, tokens, heads, dim = q.shape
    num_slots, kv_heads = cache_k.shape[1], cache_k.shape[2]
    if (cache_k.shape[0] != batch or cache_k.shape[3] != dim or cache_v.shape != cache_k.shape
            or cache_pos.shape != (batch, num_slots) or positions.shape != (batch, tokens)
            or heads % kv_heads or (gate is not None and gate.shape != q.shape)):
        raise ValueError(f"slot_attention: q {tuple(q.shape)}, cache {tuple(cache_k.shape)}, "
                         f"v {tuple(cache_v.shape)}, pos {tuple(cache_pos.shape)}, positions "
                         f"{tuple(positions.shape)}, gate "
                         f"{None if gate is None else tuple(gate.shape)} do not match")
    for name, t in (("q", q), ("cache_k", cache_k), ("cache_v", cache_v), ("cache_pos", cache_pos),
                    ("gate", gate)):
        if t is not None and t.stride(-1) != 1:
            raise ValueError(f"slot_attention: {name}'s last dim is strided {t.stride()}")
    group = heads // kv_heads
    block_s, nsplit = split_plan(num_slots, dim)
    block_d = max(16, triton.next_power_of_2(dim))
    rows = batch * tokens * kv_heads
    o_part = torch.empty(rows, nsplit, group, dim, dtype=torch.float32, device=q.device)
    m_part = torch.empty(rows, nsplit, group, dtype=torch.float32, device=q.device)
    l_part = torch.empty_like(m_part)
    slot_attention_split_kernel[(rows, nsplit)](
        q, cache_k, cache_v, cache_pos, positions, o_part, m_part, l_part,
        tokens, num_slots, kv_heads, group, dim, 0 if window is None else window, scale,
        q.stride(0), q.stride(1), q.stride(2), cache_k.stride(0), cache_k.stride(1),
        cache_k.stride(2), cache_v.stride(0), cache_v.stride(1), cache_v.stride(2),
        cache_pos.stride(0), positions.stride(0), positions.stride(1),
        BLOCK_G=max(16, triton.next_power_of_2(group)), BLOCK_S=block_s, BLOCK_D=block_d,
        HAS_WINDOW=window is not None, IEEE=q.dtype == torch.float32, num_warps=NUM_WARPS,
        **pdl_launch(q.device))
    out = torch.empty(batch, tokens, heads, dim, dtype=q.dtype, device=q.device)
    g_strides = gate.stride()[:3] if gate is not None else (0, 0, 0)
    slot_attention_combine_kernel[(batch * tokens * heads,)](
        o_part, m_part, l_part, gate if gate is not None else out, out, tokens, heads, group, dim,
        nsplit, *g_strides, BLOCK_SPLIT=max(2, triton.next_power_of_2(nsplit)), BLOCK_D=block_d,
        HAS_GATE=gate is not None, num_warps=NUM_WARPS, **pdl_launch(q.device))
    return out
