"""Muse-Glimmer text decoder (HF ``MuseGlimmerForConditionalGeneration``, text part only).

Sliding-window layers (RoPE) and global NoPE layers every fourth layer counted back from the last;
attention with a sigmoid output gate computed from the layer input, a weightless QK RMSNorm with the
query scaled by ``qk_scale_factor``; Gemma2-style sandwich norms ((1 + w) convention); an embedding
followed by a weightless RMSNorm (drafters embed *without* it, :meth:`draft_embed`); logits
``T * tanh(lm_head(h) * output_multiplier / T)``. Sliding-window layers keep a ring of
``sliding_window + PREFILL_CHUNK`` KV slots per request, so a request never holds more than its
window there; prefill runs in chunks of at most ``PREFILL_CHUNK`` rows to fit the ring.
"""

import dataclasses

import torch
import torch.nn.functional as F
from torch import nn

from specpilot.engines.cache import KVCache
from specpilot.engines.cache import ModelCache
from specpilot.engines.models.attention import cache_attention
from specpilot.engines.models.layers import Fusable
from specpilot.engines.models.layers import Linear
from specpilot.engines.models.layers import MergedLinear
from specpilot.engines.models.layers import ResidualRMSNorm
from specpilot.engines.models.layers import SwiGLU
from specpilot.engines.models.layers import ZeroCenteredRMSNorm
from specpilot.engines.models.layers import apply_rope
from specpilot.engines.models.target import TargetModel
from specpilot.engines.models.target import eos_ids

PREFILL_CHUNK = 256


@dataclasses.dataclass(frozen=True)
class MuseGlimmerTextArgs:
    vocab_size: int = 202048
    hidden_size: int = 6656
    intermediate_size: int = 19968
    num_hidden_layers: int = 52
    num_attention_heads: int = 32
    num_key_value_heads: int = 2
    head_dim: int = 128
    rms_norm_eps: float = 1e-5
    post_norm_eps: float = 1e-8
    rope_theta: float = 10000.0
    sliding_window: int = 2048
    layer_types: tuple[str, ...] = ()
    layer_rope_theta: tuple[float, ...] = ()
    final_logit_softcapping: float = 20.0
    qk_scale_factor: float = 3.87
    output_multiplier: float = 0.19611613513818404
    eos_token_ids: tuple[int, ...] = ()

    @classmethod
    def from_hf(cls, config: dict) -> "MuseGlimmerTextArgs":
        text = config.get("text_config", config)
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in text.items() if k in names and v is not None}
        rope = text.get("rope_parameters") or {}
        kwargs["rope_theta"] = rope.get("rope_theta", text.get("rope_theta", cls.rope_theta))
        layers = kwargs.get("num_hidden_layers", cls.num_hidden_layers)
        nope = [(layers - 1 - i) % 4 == 0 for i in range(layers)]
        kwargs["layer_types"] = tuple(text.get("layer_types") or [
            "full_attention" if g else "sliding_attention" for g in nope])
        kwargs["layer_rope_theta"] = tuple(text.get("layer_rope_theta") or [
            0 if g else kwargs["rope_theta"] for g in nope])
        eos = text.get("eos_token_id", config.get("eos_token_id", 200001))
        kwargs["eos_token_ids"] = eos_ids(eos)
        return cls(**kwargs)


def weightless_rms_norm(x: torch.Tensor, eps: float) -> torch.Tensor:
    """HF MuseGlimmerRMSNorm(with_scale=False): fp32, ``x * (mean(x^2) + eps) ** -0.5``."""
    xf = x.float()
    return (xf * torch.pow(xf.pow(2).mean(-1, keepdim=True) + eps, -0.5)).type_as(x)


def scaled_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    normed = xf * torch.pow(xf.pow(2).mean(-1, keepdim=True) + eps, -0.5)
    return (normed * weight.float()).type_as(x)


def qk_norm(q: torch.Tensor, k: torch.Tensor, eps: float, q_scale: float):
    """Weightless RMSNorm of q and k; q also multiplied by ``qk_scale_factor``."""
    return weightless_rms_norm(q, eps) * q_scale, weightless_rms_norm(k, eps)


def qk_norm_rope(q, k, eps: float, q_scale: float, cos, sin):
    """:func:`qk_norm`, then the rotary embedding of both (one fused kernel compiled)."""
    q, k = qk_norm(q, k, eps, q_scale)
    return apply_rope(q, cos, sin), apply_rope(k, cos, sin)


class ScaledRMSNorm(ResidualRMSNorm):
    """HF MuseGlimmerRMSNorm(with_scale=True): fp32 norm times fp32 weight, then cast back."""

    fn = staticmethod(scaled_rms_norm)
    weight_offset, round_first = 0.0, False

    def __init__(self, dim: int, eps: float):
        super().__init__(torch.ones(dim), eps)


class MuseGlimmerAttention(Fusable):
    def __init__(self, args: MuseGlimmerTextArgs, layer_idx: int):
        super().__init__()
        self.head_dim, self.num_kv_heads = args.head_dim, args.num_key_value_heads
        self.eps, self.qk_scale = args.rms_norm_eps, args.qk_scale_factor
        self.use_rope = bool(args.layer_rope_theta[layer_idx])
        sliding = args.layer_types[layer_idx] == "sliding_attention"
        self.window = args.sliding_window if sliding else None
        q_out = args.num_attention_heads * args.head_dim
        kv_out = args.num_key_value_heads * args.head_dim
        self.qkv_proj = MergedLinear(args.hidden_size, {"q_proj": q_out, "k_proj": kv_out,
                                                        "v_proj": kv_out, "gate_proj": q_out})
        self.o_proj = Linear(q_out, args.hidden_size, bias=False)

    def forward(self, x, cos, sin, positions, kv: KVCache):
        batch, num_tokens, _ = x.shape
        q, k, v, gate = self.qkv_proj.forward_split(x)
        q, k = (q.view(batch, num_tokens, -1, self.head_dim),
                k.view(batch, num_tokens, -1, self.head_dim))
        if self.use_rope:
            q, k = self.op(qk_norm_rope)(q, k, self.eps, self.qk_scale, cos, sin)
        else:
            q, k = self.op(qk_norm)(q, k, self.eps, self.qk_scale)
        v = v.view(batch, num_tokens, -1, self.head_dim)
        kv.write(k, v, positions, fused=self.fused)
        gate = gate.view(batch, num_tokens, -1, self.head_dim)
        return self.o_proj(cache_attention(self, q, kv, positions, gate))


class MuseGlimmerDecoderLayer(nn.Module):
    def __init__(self, args: MuseGlimmerTextArgs, layer_idx: int):
        super().__init__()
        self.self_attn = MuseGlimmerAttention(args, layer_idx)
        self.mlp = SwiGLU(args.hidden_size, args.intermediate_size)
        self.input_layernorm = ZeroCenteredRMSNorm(args.hidden_size, args.rms_norm_eps)
        self.post_attention_layernorm = ZeroCenteredRMSNorm(args.hidden_size, args.post_norm_eps)
        self.pre_feedforward_layernorm = ZeroCenteredRMSNorm(args.hidden_size, args.rms_norm_eps)
        self.post_feedforward_layernorm = ZeroCenteredRMSNorm(args.hidden_size, args.post_norm_eps)

    def forward(self, h, delta, cos, sin, positions, kv, commit_all):
        h, x = self.input_layernorm.add(h, delta)
        x = self.self_attn(x, cos, sin, positions, kv)
        h, x = self.pre_feedforward_layernorm.add(h, self.post_attention_layernorm(x))
        return h, self.post_feedforward_layernorm(self.mlp(x))


class _NormedEmbedding(nn.Embedding):
    def __init__(self, num: int, dim: int, eps: float):
        super().__init__(num, dim)
        self.eps = eps

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return weightless_rms_norm(super().forward(ids), self.eps)


class _TextModel(nn.Module):
    def __init__(self, args: MuseGlimmerTextArgs):
        super().__init__()
        self.embed_tokens = _NormedEmbedding(args.vocab_size, args.hidden_size, args.rms_norm_eps)
        self.layers = nn.ModuleList(
            [MuseGlimmerDecoderLayer(args, i) for i in range(args.num_hidden_layers)])
        self.norm = ScaledRMSNorm(args.hidden_size, args.rms_norm_eps)


class MuseGlimmerForConditionalGeneration(TargetModel):
    """The text decoder of the Muse-Glimmer VLM checkpoint (vision tower and adapter are skipped)."""

    max_rows_per_forward = PREFILL_CHUNK

    def __init__(self, config: dict):
        super().__init__()
        args = MuseGlimmerTextArgs.from_hf(config)
        self.args = args
        self.hidden_size, self.vocab_size = args.hidden_size, args.vocab_size
        self.num_layers, self.eos_token_ids = args.num_hidden_layers, args.eos_token_ids
        self.model = _TextModel(args)
        self.lm_head = Linear(args.hidden_size, args.vocab_size, bias=False)
        self.rope_spec = (args.rope_theta, args.head_dim)
        self._init_buffers()

    @staticmethod
    def checkpoint_name(name: str) -> str | None:
        if name.startswith("lm_head."):
            return name
        if name.startswith("model.language_model."):
            return name.replace("model.language_model.", "model.", 1)
        return None  # vision tower, adapter, projection

    def draft_embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        """The raw embedding rows, without the embedding norm (what DFlash drafters embed with)."""
        return F.embedding(input_ids, self.model.embed_tokens.weight)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        cap = self.args.final_logit_softcapping
        logits = self.lm_head(hidden).float() * self.args.output_multiplier
        return torch.tanh(logits / cap) * cap

    def new_cache(self, num_rows: int, capacity: int, rollback: str = "snapshot") -> ModelCache:
        param = self.lm_head.weight
        layers = []
        for layer in self.model.layers:
            attn = layer.self_attn
            slots = capacity if attn.window is None else min(capacity, attn.window + PREFILL_CHUNK)
            layers.append(KVCache(num_rows, slots, attn.num_kv_heads, attn.head_dim, param.dtype,
                                  param.device, window=attn.window))
        return ModelCache(layers)

    @torch.no_grad()
    def init_random_(self, generator: torch.Generator, std: float = 0.02) -> None:
        for name, param in self.named_parameters():
            if name == "model.norm.weight":
                param.fill_(1.0)
            elif "norm" in name:
                param.zero_()
            else:
                param.normal_(0.0, std, generator=generator)
