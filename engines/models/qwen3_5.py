"""Qwen3.5 / Qwen3.8 hybrid target: Gated DeltaNet + gated full attention (HF ``qwen3_5``).

Layer ``i`` is full attention when ``layer_types[i] == "full_attention"`` (by default every 4th), else
Gated DeltaNet. Parameter names equal the checkpoint's, so safetensors load without renaming
(``Qwen3_5ForConditionalGeneration`` stores the text model under ``model.language_model.``).
"""

import dataclasses

import torch
import torch.nn.functional as F
from torch import nn

from specpilot.engines.cache import GDNState
from specpilot.engines.cache import KVCache
from specpilot.engines.cache import ModelCache
from specpilot.engines.cache import PendingRows
from specpilot.engines.models.attention import CachedAttention
from specpilot.engines.models.layers import Linear
from specpilot.engines.models.layers import Fusable
from specpilot.engines.models.layers import GatedRMSNorm
from specpilot.engines.models.layers import MergedLinear
from specpilot.engines.models.layers import SwiGLU
from specpilot.engines.models.layers import ZeroCenteredRMSNorm
from specpilot.engines.models.target import TargetModel
from specpilot.engines.models.target import eos_ids
from specpilot.kernels.gated_delta_rule import gated_delta_rule
from specpilot.kernels.short_conv import conv_silu_gates
from specpilot.kernels.short_conv import gdn_gates_ref
from specpilot.kernels.short_conv import short_conv_silu_ref


@dataclasses.dataclass(frozen=True)
class Qwen3_5TextArgs:
    """The text-config fields the model reads (names and defaults as HF ``Qwen3_5TextConfig``)."""

    vocab_size: int = 248320
    hidden_size: int = 4096
    intermediate_size: int = 12288
    num_hidden_layers: int = 32
    num_attention_heads: int = 16
    num_key_value_heads: int = 4
    head_dim: int = 256
    rms_norm_eps: float = 1e-6
    linear_conv_kernel_dim: int = 4
    linear_key_head_dim: int = 128
    linear_value_head_dim: int = 128
    linear_num_key_heads: int = 16
    linear_num_value_heads: int = 32
    rope_theta: float = 10000.0
    partial_rotary_factor: float = 0.25
    layer_types: tuple[str, ...] = ()
    attention_bias: bool = False
    eos_token_ids: tuple[int, ...] = ()

    @classmethod
    def from_hf(cls, config: dict) -> "Qwen3_5TextArgs":
        text = config.get("text_config", config)
        rope = text.get("rope_parameters") or text.get("rope_scaling") or {}
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in text.items() if k in names and v is not None}
        kwargs["rope_theta"] = rope.get("rope_theta", text.get("rope_theta", cls.rope_theta))
        kwargs["partial_rotary_factor"] = rope.get(
            "partial_rotary_factor", text.get("partial_rotary_factor", cls.partial_rotary_factor))
        layers = kwargs.get("num_hidden_layers", cls.num_hidden_layers)
        interval = text.get("full_attention_interval", 4)
        kwargs["layer_types"] = tuple(text.get("layer_types") or [
            "linear_attention" if (i + 1) % interval else "full_attention" for i in range(layers)])
        eos = text.get("eos_token_id", config.get("eos_token_id"))
        kwargs["eos_token_ids"] = eos_ids(eos)
        return cls(**kwargs)


class Qwen3_5GatedDeltaNet(Fusable):
    """Gated DeltaNet token mixer: conv1d over [q|k|v], gated delta rule, gated RMSNorm, out_proj."""

    def __init__(self, args: Qwen3_5TextArgs):
        super().__init__()
        self.num_k_heads, self.num_v_heads = args.linear_num_key_heads, args.linear_num_value_heads
        self.head_k_dim, self.head_v_dim = args.linear_key_head_dim, args.linear_value_head_dim
        self.key_dim = self.num_k_heads * self.head_k_dim
        self.value_dim = self.num_v_heads * self.head_v_dim
        self.conv_dim = 2 * self.key_dim + self.value_dim
        self.conv_kernel = args.linear_conv_kernel_dim
        self.conv1d = nn.Conv1d(self.conv_dim, self.conv_dim, self.conv_kernel, bias=False,
                                groups=self.conv_dim, padding=self.conv_kernel - 1)
        self.dt_bias = nn.Parameter(torch.ones(self.num_v_heads))
        self.A_log = nn.Parameter(torch.zeros(self.num_v_heads))
        self.norm = GatedRMSNorm(self.head_v_dim, args.rms_norm_eps)
        self.out_proj = Linear(self.value_dim, args.hidden_size, bias=False)
        self.in_proj = MergedLinear(args.hidden_size, {
            "in_proj_qkv": self.conv_dim, "in_proj_z": self.value_dim,
            "in_proj_b": self.num_v_heads, "in_proj_a": self.num_v_heads})

    def new_state(self, num_rows: int, dtype, device, rollback: str) -> GDNState:
        return GDNState(num_rows, self.conv_dim, self.conv_kernel, self.num_v_heads,
                        self.head_k_dim, self.head_v_dim, dtype, device, rollback)

    def forward(self, x: torch.Tensor, state: GDNState, commit_all: bool) -> torch.Tensor:
        batch, num_tokens, _ = x.shape
        mixed, z, b, a = self.in_proj.forward_split(x)
        tree = state.tree
        if tree is not None:  # one sequence per root-to-leaf path, each from the committed state
            mixed, b, a = (tree.to_paths(t) for t in (mixed, b, a))
        out = self._mix(mixed, b, a, state, commit_all)
        if tree is not None:
            out = tree.to_nodes(out)
        z = z.reshape(batch, num_tokens, -1, self.head_v_dim)
        out = self.norm(out.reshape(-1, self.head_v_dim), z.reshape(-1, self.head_v_dim))
        return self.out_proj(out.reshape(batch, num_tokens, -1))

    def _mix(self, mixed, b, a, state: GDNState, commit_all: bool) -> torch.Tensor:
        """Short conv + gated delta rule over sequences mixed [S, T, C] from ``state`` (one row per
        sequence, or one row for all: a tree's paths); returns [S, T, HV, Dv]."""
        num_seqs, num_tokens, _ = mixed.shape
        conv_state, recurrent = state.conv, state.recurrent
        if num_seqs != conv_state.shape[0]:
            conv_state = conv_state.expand(num_seqs, -1, -1)
            recurrent = recurrent.expand(num_seqs, -1, -1, -1).contiguous()
        window_out = state.window_buffer(num_seqs, num_tokens) if not commit_all else None
        # committed rows update the conv state in the same step (right-padded rows: below)
        commit_conv = commit_all and state.padding is None
        weight = self.conv1d.weight.squeeze(1)
        if self.fused:  # one kernel: conv, SiLU, state or window, gates
            mixed, window, beta, g = conv_silu_gates(conv_state, mixed, weight, commit_conv,
                                                     window_out, a, b, self.A_log, self.dt_bias)
        else:
            mixed, window = short_conv_silu_ref(conv_state, mixed, weight, commit_conv,
                                                window_out)
            beta, g = gdn_gates_ref(a, b, self.A_log, self.dt_bias)
        mixed = mixed.to(b.dtype)  # [S, T, C]; window [S, C, K-1+T] unless committed
        q, k, v = torch.split(mixed, [self.key_dim, self.key_dim, self.value_dim], dim=-1)
        q = q.reshape(num_seqs, num_tokens, -1, self.head_k_dim)
        k = k.reshape(num_seqs, num_tokens, -1, self.head_k_dim)
        v = v.reshape(num_seqs, num_tokens, -1, self.head_v_dim)
        if state.padding is not None:  # right-padded rows leave the state as it is
            drop = state.padding.dropped_rows(num_tokens)[..., None]  # [S, T, 1]
            g, beta = g.masked_fill(drop, 0.0), beta.masked_fill(drop, 0.0)
        keep_steps = not commit_all and state.rollback == "snapshot"
        buffer = state.snapshot_buffer(num_seqs, num_tokens) if keep_steps else None
        # a commit updates the cache's recurrent state in place
        into = state.recurrent if commit_all and recurrent is state.recurrent else None
        out, final, steps = gated_delta_rule(q, k, v, g, beta, recurrent, keep_steps, buffer,
                                             state.snapshot_kernel, into)
        if commit_all:
            if not commit_conv:  # the conv state after each sequence's real rows
                state.conv.copy_(window.gather(2, state.padding.conv_window(
                    window, state.conv.shape[-1])))
            if final is not state.recurrent:
                state.recurrent.copy_(final)
        else:
            state.pending = PendingRows(window, steps, None if keep_steps else (q, k, v, g, beta))
        return out


class Qwen3_5DecoderLayer(nn.Module):
    def __init__(self, args: Qwen3_5TextArgs, layer_idx: int):
        super().__init__()
        self.layer_type = args.layer_types[layer_idx]
        if self.layer_type == "linear_attention":
            self.linear_attn = Qwen3_5GatedDeltaNet(args)
        else:
            self.self_attn = CachedAttention(
                args.hidden_size, args.num_attention_heads, args.num_key_value_heads, args.head_dim,
                ZeroCenteredRMSNorm, args.rms_norm_eps, output_gate=True, bias=args.attention_bias)
        self.mlp = SwiGLU(args.hidden_size, args.intermediate_size)
        self.input_layernorm = ZeroCenteredRMSNorm(args.hidden_size, args.rms_norm_eps)
        self.post_attention_layernorm = ZeroCenteredRMSNorm(args.hidden_size, args.rms_norm_eps)

    def forward(self, h, delta, cos, sin, positions, layer_cache, commit_all):
        h, x = self.input_layernorm.add(h, delta)
        if self.layer_type == "linear_attention":
            x = self.linear_attn(x, layer_cache, commit_all)
        else:
            x = self.self_attn(x, cos, sin, positions, layer_cache)
        h, x = self.post_attention_layernorm.add(h, x)
        return h, self.mlp(x)


class _TextModel(nn.Module):
    def __init__(self, args: Qwen3_5TextArgs):
        super().__init__()
        self.embed_tokens = nn.Embedding(args.vocab_size, args.hidden_size)
        self.layers = nn.ModuleList(
            [Qwen3_5DecoderLayer(args, i) for i in range(args.num_hidden_layers)])
        self.norm = ZeroCenteredRMSNorm(args.hidden_size, args.rms_norm_eps)


class Qwen3_5ForCausalLM(TargetModel):
    """Text-only Qwen3.5-architecture target (also the text part of the conditional-generation class)."""

    def __init__(self, config: dict):
        super().__init__()
        args = Qwen3_5TextArgs.from_hf(config)
        self.args = args
        self.hidden_size, self.vocab_size = args.hidden_size, args.vocab_size
        self.num_layers, self.eos_token_ids = args.num_hidden_layers, args.eos_token_ids
        self.model = _TextModel(args)
        self.lm_head = Linear(args.hidden_size, args.vocab_size, bias=False)
        self.rope_spec = (args.rope_theta, int(args.head_dim * args.partial_rotary_factor))
        self._init_buffers()

    @staticmethod
    def checkpoint_name(name: str) -> str | None:
        """Map a checkpoint tensor name to ours; None = not part of the text model (vision, MTP)."""
        if name.startswith(("mtp.", "model.visual.")):
            return None
        return name.replace("model.language_model.", "model.", 1)

    def new_cache(self, num_rows: int, capacity: int, rollback: str = "snapshot") -> ModelCache:
        param = self.lm_head.weight
        layers = []
        for layer in self.model.layers:
            if layer.layer_type == "linear_attention":
                layers.append(layer.linear_attn.new_state(num_rows, param.dtype, param.device,
                                                          rollback))
            else:
                attn = layer.self_attn
                layers.append(KVCache(num_rows, capacity, attn.num_kv_heads, attn.head_dim,
                                      param.dtype, param.device))
        return ModelCache(layers)

    @torch.no_grad()
    def init_random_(self, generator: torch.Generator, std: float = 0.02) -> None:
        """Same-shape random weights (seed scale): normal linears/embeddings, HF-convention norms."""
        for name, param in self.named_parameters():
            if name.endswith("A_log"):
                param.uniform_(1.0, 16.0, generator=generator).log_()
            elif name.endswith("dt_bias") or name.endswith("linear_attn.norm.weight"):
                param.fill_(1.0)
            elif "norm" in name:
                param.zero_()
            else:
                param.normal_(0.0, std, generator=generator)


class Qwen3_5ForConditionalGeneration(Qwen3_5ForCausalLM):
    """The text part of the VLM checkpoint (config nests ``text_config``; vision weights are skipped)."""
