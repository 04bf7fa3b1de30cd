"""Building blocks shared by the model families: norms, rotary embedding, masked attention, MLP.

Every block mirrors the numerics of its HF counterpart (cast points included) so that our logits
match transformers in float32 and stay faithful in bf16. The element-wise math lives in plain
functions; ``set_fused_elementwise(model, True)`` (a recipe option, CUDA only) switches every block of
a model to ``torch.compile``d versions of the same functions, one fused kernel each instead of 5-10.
``w12_view(model, weights)`` (the recipe's ``w12`` groups) gives a copy of a model that shares its
tensors but multiplies chosen Linears by lossless 12-bit weights (:class:`W12Weight`).
"""

import contextlib
import copy
import functools
import itertools

import torch
import torch.nn.functional as F
from torch import nn

from specpilot.kernels.add_rms_norm import add_rms_norm
from specpilot.kernels.gated_rms_norm import gated_rms_norm as gated_rms_norm_kernel


def rms_norm(x, weight, eps: float):
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.to(x.dtype)


def zero_centered_rms_norm(x, weight, eps: float):
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (xf * (1.0 + weight.float())).type_as(x)


def gated_rms_norm(x, gate, weight, eps: float):
    dtype = x.dtype
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (weight * xf.to(dtype) * F.silu(gate.float())).to(dtype)


def silu_mul(gate, up):
    return F.silu(gate) * up


def sigmoid_gate(out, gate):
    return out * torch.sigmoid(gate)


@functools.lru_cache(maxsize=None)
def compiled(fn):
    """``torch.compile`` of an element-wise function (one fused kernel per input shape)."""
    # one function serves every norm width, dtype and row count of a model: allow those variants
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
    return torch.compile(fn, fullgraph=True)


class Fusable(nn.Module):
    """A block whose element-wise math can run eagerly or as compiled fused kernels."""

    fused = False

    def op(self, fn):
        return compiled(fn) if self.fused else fn


def set_fused_elementwise(model: nn.Module, fused: bool) -> None:
    """Switch every fusable block of ``model`` to compiled (True) or eager (False) element-wise math."""
    for module in model.modules():
        if isinstance(module, Fusable):
            module.fused = fused


class ResidualRMSNorm(Fusable):
    """A pre-norm block's RMSNorm that can take the residual add before it (:meth:`add`)."""

    fn = staticmethod(rms_norm)  # the element-wise norm
    weight_offset, round_first = 0.0, True  # the same norm in kernels/add_rms_norm's terms

    def __init__(self, weight: torch.Tensor, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.op(self.fn)(x, self.weight, self.eps)

    def add(self, h: torch.Tensor, delta: torch.Tensor | None):
        """``(h + delta, norm(h + delta))``, or ``(h, norm(h))`` when ``delta`` is None: the
        residual add a layer deferred to the next norm. Fused, one kernel (the add rounds to
        ``h.dtype`` first, as the eager add does)."""
        if delta is None:
            return h, self(h)
        if self.fused:
            return add_rms_norm(h, delta, self.weight, self.eps, self.weight_offset,
                                self.round_first)
        h = h + delta
        return h, self(h)


class RMSNorm(ResidualRMSNorm):
    """Qwen3-style RMSNorm: ``w * norm(x).to(dtype)``; weight initialised to 1."""

    def __init__(self, dim: int, eps: float):
        super().__init__(torch.ones(dim), eps)


class ZeroCenteredRMSNorm(ResidualRMSNorm):
    """Qwen3.5 RMSNorm with the ``(1 + w)`` convention, computed in fp32; weight initialised to 0."""

    fn = staticmethod(zero_centered_rms_norm)
    weight_offset, round_first = 1.0, False

    def __init__(self, dim: int, eps: float):
        super().__init__(torch.zeros(dim), eps)


class GatedRMSNorm(Fusable):
    """Gated-DeltaNet output norm: ``w * norm(x) * silu(gate)``; weight initialised to 1."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        if self.fused:  # our kernel: inductor's timing-picked config varied 2.6x between runs
            return gated_rms_norm_kernel(x, gate, self.weight, self.eps)
        return gated_rms_norm(x, gate, self.weight, self.eps)


class Linear(nn.Linear):
    """``nn.Linear`` whose GEMM kernel is chosen by the recipe (``set_gemm``): cuBLAS through
    ``F.linear`` ("torch"), or the tuned skinny Triton GEMM ("triton") for bf16 CUDA inputs of at most
    64 rows (decode and verify); anything else always takes ``F.linear``.

    A Linear given a :class:`W12Weight` (only in a :func:`w12_view` of a model) multiplies by its
    lossless 12-bit form instead, whatever ``kernel`` says: see :meth:`W12Weight.linear`.
    """

    kernel = "torch"
    max_triton_rows = 64
    w12: "W12Weight | None" = None
    rows: torch.Tensor | None = None  # set by :func:`row_subset`

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.rows is None:
            return self._matmul(x)
        # only the rows of x (flattened over its leading dims) listed in ``rows``; zeros elsewhere
        flat = x.reshape(-1, x.shape[-1])
        part = self._matmul(flat.index_select(0, self.rows))
        out = part.new_zeros(flat.shape[0], part.shape[-1]).index_copy_(0, self.rows, part)
        return out.view(*x.shape[:-1], out.shape[-1])

    def _matmul(self, x: torch.Tensor) -> torch.Tensor:
        if self.w12 is not None:
            out = self.w12.linear(x.reshape(-1, x.shape[-1]), self.bias, self.max_triton_rows)
            return out.view(*x.shape[:-1], out.shape[-1])
        if (self.kernel == "triton" and x.is_cuda and x.dtype == torch.bfloat16
                and self.bias is None and x.numel() // x.shape[-1] <= self.max_triton_rows):
            from specpilot.kernels import skinny_gemm

            out = skinny_gemm.linear(x.reshape(-1, x.shape[-1]), self.weight)
            return out.view(*x.shape[:-1], out.shape[-1])
        return F.linear(x, self.weight, self.bias)


GEMM_KERNELS = ("torch", "triton")


@contextlib.contextmanager
def row_subset(models, rows: torch.Tensor):
    """Within the block, every :class:`Linear` of ``models`` multiplies only the rows ``rows``
    (indices into its input flattened over the leading dims) and returns zeros for the others: a
    forward over a batch whose other requests' outputs are not wanted (the second stage of a
    two-stage verify) spends its GEMM rows on the wanted ones. Indices may repeat (padding to a
    fixed count); a repeated row gets one of its copies' results."""
    linears = [m for model in models if model is not None for m in model.modules()
               if isinstance(m, Linear)]
    for module in linears:
        module.rows = rows
    try:
        yield
    finally:
        for module in linears:
            module.rows = None


def set_gemm(model: nn.Module, kernel: str) -> None:
    """Route every :class:`Linear` of ``model`` through ``kernel`` ("torch" or "triton")."""
    if kernel not in GEMM_KERNELS:
        raise ValueError(f"gemm kernel must be one of {GEMM_KERNELS}, got {kernel!r}")
    for module in model.modules():
        if isinstance(module, Linear):
            module.kernel = kernel


def use_w12_kernel(x: torch.Tensor) -> bool:
    """Whether the Triton W12 GEMM serves ``x``: on CUDA only. CPU inputs take the exact decode
    path, as the bf16 :class:`Linear` falls back to ``F.linear`` there (CPU tests that want the
    kernel patch this to True and run it under ``TRITON_INTERPRET=1``)."""
    return x.is_cuda


class W12Weight:
    """The W12 form of one bf16 Linear weight ``[N, K]`` (``specpilot.kernels.w12``), or of a
    float32 weight holding bf16 values (the float32 validation twin: inputs stay float32, the
    kernel's products too).

    Decode and verify (at most ``max_rows`` bf16 or float32 rows, on CUDA) run the W12 skinny
    GEMM, which decodes the weight in registers and never writes a bf16 copy. Anything else (the
    prefill, the batched engine's wide verify, CPU inputs) decodes one row block of
    ``BLOCK_WEIGHTS`` weights at a time into a temporary tensor (32 MiB of bf16 at most) and
    multiplies it with ``F.linear``. The decoded block is bit-identical to the original rows, so
    that path computes the GEMM the unpacked engine computes, block by block; on CPU it gives that
    engine's bits exactly.

    ``order`` is the planes' byte order (the recipe's ``w12_order``): ``"frag"`` runs the GEMMs of
    :mod:`specpilot.kernels.w12f_gemm`; its decode path re-lays each block's planes in rows order
    first (a few extra passes over the block's 1.5 bytes per weight).
    """

    BLOCK_WEIGHTS = 1 << 24

    def __init__(self, weight: torch.Tensor, order: str = "rows"):
        from specpilot.kernels import w12

        weight = weight.detach()
        if weight.dtype != torch.bfloat16:  # a float32 model (the validation twin) of bf16 values
            as_bf16 = weight.to(torch.bfloat16)
            if not torch.equal(as_bf16.to(weight.dtype), weight):
                raise ValueError(f"W12 is lossless for bf16 values only: this {weight.dtype} "
                                 "weight holds values bf16 cannot represent")
            weight = as_bf16
        self.packed = w12.pack(weight, order)
        self.blocks = self.packed.row_blocks(self.BLOCK_WEIGHTS)  # [N_i, K], N_i summing to N

    @property
    def nbytes(self) -> int:
        """Device bytes the packed form adds (planes, escapes and the blocks' row pointers)."""
        extra = sum(b.row_ptr.numel() * b.row_ptr.element_size() for b in self.blocks)
        return self.packed.nbytes + (extra if len(self.blocks) > 1 else 0)

    def linear(self, x: torch.Tensor, bias: torch.Tensor | None, max_rows: int) -> torch.Tensor:
        """``x [M, K] @ W^T (+ bias)`` -> ``[M, N]`` in ``x.dtype``."""
        if (x.dtype in (torch.bfloat16, torch.float32) and x.shape[0] <= max_rows
                and use_w12_kernel(x)):
            from specpilot.kernels import w12_gemm
            from specpilot.kernels import w12f_gemm

            gemm = w12f_gemm if self.packed.order == "frag" else w12_gemm
            if bias is None:
                return gemm.linear(x, self.packed)
            # add the bias to the fp32 accumulator and round once, as F.linear does
            out = gemm.linear(x, self.packed, out_dtype=torch.float32)
            return (out + bias.float()).to(x.dtype)
        outs, n0 = [], 0
        for block in self.blocks:
            n1 = n0 + block.shape[0]
            outs.append(F.linear(x, block.unpack().to(x.dtype),
                                 None if bias is None else bias[n0:n1]))
            n0 = n1
        return outs[0] if len(outs) == 1 else torch.cat(outs, dim=-1)


def linear_names(model: nn.Module) -> list[str]:
    """Module paths of every :class:`Linear` (merged ones included) of ``model``."""
    return [name for name, module in model.named_modules() if isinstance(module, Linear)]


def w12_view(model: nn.Module, weights: dict[str, W12Weight]) -> nn.Module:
    """A copy of ``model`` in which the Linears named in ``weights`` run on those W12 weights.

    Every module is a new object, but every parameter, buffer and tensor attribute is the same
    tensor as in ``model``: the view costs only its W12 weights, and ``model`` (with the engines
    built on it) is left as it was, since per-engine switches such as ``set_gemm`` act on modules.
    """
    shared = {}
    for module in model.modules():
        for value in itertools.chain(module._parameters.values(), module._buffers.values(),
                                     vars(module).values()):
            if isinstance(value, torch.Tensor):
                shared[id(value)] = value
    view = copy.deepcopy(model, memo=shared)
    for name, weight in weights.items():
        module = view.get_submodule(name)
        if not isinstance(module, Linear):
            raise TypeError(f"{name} is a {type(module).__name__}, not a Linear")
        module.w12 = weight
    return view


class MergedLinear(Linear):
    """One GEMM for several checkpoint linears that read the same input (q/k/v, gate/up, ...).

    ``shards`` maps each checkpoint linear's name to its output rows, in order; the loader copies
    checkpoint tensor ``<prefix>.<shard>.weight`` into rows ``offsets[shard]`` of this weight.
    """

    def __init__(self, in_features: int, shards: dict[str, int], bias: bool = False):
        super().__init__(in_features, sum(shards.values()), bias=bias)
        self.shard_sizes = list(shards.values())
        self.offsets, start = {}, 0
        for name, size in shards.items():
            self.offsets[name] = (start, size)
            start += size

    def forward_split(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self(x).split(self.shard_sizes, dim=-1)


class SwiGLU(Fusable):
    """``down(silu(gate(x)) * up(x))``; gate and up run as one merged GEMM."""

    def __init__(self, hidden_size: int, intermediate_size: int):
        super().__init__()
        self.gate_up_proj = MergedLinear(hidden_size, {"gate_proj": intermediate_size,
                                                       "up_proj": intermediate_size})
        self.down_proj = Linear(intermediate_size, hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj.forward_split(x)
        return self.down_proj(self.op(silu_mul)(gate, up))


class RotaryBuffers:
    """Mixin for models with rotary embeddings: ``rope_spec = (theta, rotary dims)`` and the fp32
    ``inv_freq`` it implies, kept on the weights' device and out of ``.to(dtype)``."""

    rope_spec: tuple[float, int]

    def _init_buffers(self) -> None:
        """(Re)compute ``inv_freq`` on the weights' device (after meta init, ``to_empty``, ``.to()``)."""
        device = next(self.parameters()).device
        if device.type == "meta":
            self.inv_freq = None
            return
        with torch.device("cpu"):  # never under a surrounding meta-device context
            self.inv_freq = rope_inv_freq(*self.rope_spec).to(device)


def rope_inv_freq(theta: float, rotary_dim: int) -> torch.Tensor:
    """Inverse frequencies of the default rotary embedding over ``rotary_dim`` dims: [rotary_dim // 2]."""
    return 1.0 / (theta ** (torch.arange(0, rotary_dim, 2, dtype=torch.float) / rotary_dim))


def rope_cos_sin(inv_freq: torch.Tensor, positions: torch.Tensor, dtype: torch.dtype):
    """cos/sin for integer ``positions`` [B, T]: each [B, T, rotary_dim] (halves repeated, HF layout)."""
    freqs = positions[..., None].float() * inv_freq.to(positions.device)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate the first ``cos.shape[-1]`` dims of x [B, T, H, D]; the rest pass through (partial rotary)."""
    rot = cos.shape[-1]
    cos, sin = cos[:, :, None, :], sin[:, :, None, :]
    x_rot, x_pass = x[..., :rot], x[..., rot:]
    x_rot = x_rot * cos + _rotate_half(x_rot) * sin
    return torch.cat((x_rot, x_pass), dim=-1) if x_pass.shape[-1] else x_rot


def masked_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor,
                     scale: float) -> torch.Tensor:
    """Attention with an explicit boolean mask.

    Args:
        q: [B, T, Hq, D]; k, v: [B, S, Hkv, D] (GQA: Hq a multiple of Hkv); mask: [B, T, S] True = visible.
    Returns:
        [B, T, Hq, D]
    """
    out = F.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask[:, None],
        scale=scale, enable_gqa=q.shape[2] != k.shape[2],
    )
    return out.transpose(1, 2)
