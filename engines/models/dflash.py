"""DFlash and DFlash2 block drafters (HF ``DFlashDraftModel`` / ``DFlash2DraftModel``).

A drafter has no embedding and no lm_head of its own: the block ``[anchor, MASK x (B-1)]`` is embedded
with the target's embedding, and logits come from the target's lm_head. Committed context enters only
as K/V: the target's hidden states at ``target_layer_ids`` (HF ``hidden_states[i + 1]``) are
concatenated, fused by ``fc`` + ``hidden_norm`` and projected by every layer's k/v projections
(k_norm + rope at absolute positions). The drafter's KV cache holds those context rows only, windowed
(a ring of ``sliding_window + max_block`` slots) when every layer is sliding-window.

Attention inside the block is bidirectional unless the layer is causal (z-lab rule: a
``sliding_attention`` layer is causal unless ``is_causal`` is set false). DFlash2 adds a grouped
dynamic causal conv around both sublayers of every layer and a candidate selector that walks the
top-k of each position's logits with a low-rank predecessor/successor bilinear score.
"""

import dataclasses

import torch
import torch.nn.functional as F
from torch import nn

from specpilot.engines.cache import KVCache
from specpilot.engines.cache import ModelCache
from specpilot.engines.models.layers import Linear
from specpilot.engines.models.layers import RMSNorm
from specpilot.engines.models.layers import SwiGLU
from specpilot.engines.models.layers import apply_rope
from specpilot.engines.models.layers import masked_attention
from specpilot.engines.models.layers import rope_cos_sin
from specpilot.engines.models.layers import RotaryBuffers
from specpilot.errors import CheckpointError


def _draft_value(config: dict, name: str, default=None):
    """SGLang's lookup order: ``dflash_config.<name>`` (merged under a DSpark ``dspark_config``)
    first, then the top-level key."""
    nested = {**(config.get("dflash_config") or {}), **(config.get("dspark_config") or {})}
    value = nested.get(name, config.get(name))
    return default if value is None else value


@dataclasses.dataclass(frozen=True)
class DFlashArgs:
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int | None  # headless drafters may omit it; only the DFlash2 selector needs it
    rms_norm_eps: float
    rope_theta: float
    layer_types: tuple[str, ...]
    sliding_window: int | None
    is_causal: bool | None
    block_size: int
    mask_token_id: int
    target_layer_ids: tuple[int, ...]
    num_target_layers: int | None
    input_embedding_scale: float
    output_multiplier: float
    final_logit_softcapping: float | None
    conv_kernel_size: int | None
    conv_group_size: int | None
    selector_rank: int | None
    selector_top_k: int | None

    @classmethod
    def from_hf(cls, config: dict, default_is_causal: bool | None = None) -> "DFlashArgs":
        layer_ids = _draft_value(config, "target_layer_ids")
        if layer_ids is None:
            raise CheckpointError("drafter config must define dflash_config.target_layer_ids")
        mask_id = _draft_value(config, "mask_token_id")
        if mask_id is None:
            raise CheckpointError("drafter config must define dflash_config.mask_token_id")
        rope = config.get("rope_parameters") or config.get("rope_scaling") or {}
        num_layers = config["num_hidden_layers"]
        softcap = _draft_value(config, "final_logit_softcapping")
        return cls(
            hidden_size=config["hidden_size"], intermediate_size=config["intermediate_size"],
            num_hidden_layers=num_layers, num_attention_heads=config["num_attention_heads"],
            num_key_value_heads=config["num_key_value_heads"],
            head_dim=config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"],
            vocab_size=config.get("vocab_size"), rms_norm_eps=config.get("rms_norm_eps", 1e-6),
            rope_theta=rope.get("rope_theta", config.get("rope_theta", 10000.0)),
            layer_types=tuple(config.get("layer_types") or ["full_attention"] * num_layers),
            sliding_window=config.get("sliding_window"),
            is_causal=config.get("is_causal", default_is_causal),
            block_size=int(_draft_value(config, "block_size", 16)), mask_token_id=int(mask_id),
            target_layer_ids=tuple(int(i) for i in layer_ids),
            num_target_layers=_draft_value(config, "num_target_layers"),
            input_embedding_scale=float(_draft_value(config, "input_embedding_scale", 1.0)),
            output_multiplier=float(_draft_value(config, "output_multiplier", 1.0)),
            final_logit_softcapping=float(softcap) if softcap else None,
            conv_kernel_size=_draft_value(config, "conv_kernel_size"),
            conv_group_size=_draft_value(config, "conv_group_size"),
            selector_rank=_draft_value(config, "selector_rank"),
            selector_top_k=_draft_value(config, "selector_top_k"),
        )


class DFlashAttention(nn.Module):
    """Queries from the block; keys/values from [cached context rows, block rows]."""

    def __init__(self, args: DFlashArgs, layer_idx: int, window_inclusive: bool = False):
        super().__init__()
        self.head_dim, self.num_kv_heads = args.head_dim, args.num_key_value_heads
        layer_type = args.layer_types[layer_idx]
        self.is_causal = layer_type == "sliding_attention" if args.is_causal is None else args.is_causal
        # self.window: keys strictly closer than this many positions are visible
        self.window = None
        if layer_type == "sliding_attention":
            self.window = args.sliding_window + (1 if window_inclusive else 0)
        self.q_proj = Linear(args.hidden_size, args.num_attention_heads * args.head_dim, bias=False)
        self.k_proj = Linear(args.hidden_size, args.num_key_value_heads * args.head_dim, bias=False)
        self.v_proj = Linear(args.hidden_size, args.num_key_value_heads * args.head_dim, bias=False)
        self.o_proj = Linear(args.num_attention_heads * args.head_dim, args.hidden_size, bias=False)
        self.q_norm = RMSNorm(args.head_dim, args.rms_norm_eps)
        self.k_norm = RMSNorm(args.head_dim, args.rms_norm_eps)

    def project_kv(self, x: torch.Tensor, cos, sin):
        """k [B, N, Hkv, D] (k_norm + rope) and v for rows x [B, N, hidden]."""
        batch, num_rows, _ = x.shape
        k = self.k_norm(self.k_proj(x).view(batch, num_rows, -1, self.head_dim))
        return apply_rope(k, cos, sin), self.v_proj(x).view(batch, num_rows, -1, self.head_dim)

    def forward(self, x, cos, sin, positions, ctx: KVCache, block_start: torch.Tensor):
        batch, num_rows, _ = x.shape
        q = apply_rope(self.q_norm(self.q_proj(x).view(batch, num_rows, -1, self.head_dim)), cos, sin)
        k, v = self.project_kv(x, cos, sin)
        ctx_mask = ctx.visible(positions, before=block_start)  # [B, T, cap]
        q_pos, k_pos = positions[:, :, None], positions[:, None, :]
        block_mask = torch.ones_like(ctx_mask[:, :, :1]).expand(-1, -1, num_rows).clone()
        if self.is_causal:
            block_mask &= k_pos <= q_pos
        if self.window is not None:
            block_mask &= ((q_pos - k_pos) < self.window) & ((k_pos - q_pos) < self.window)
        out = masked_attention(q, torch.cat([ctx.k, k], 1), torch.cat([ctx.v, v], 1),
                               torch.cat([ctx_mask, block_mask], -1), self.head_dim ** -0.5)
        return self.o_proj(out.reshape(batch, num_rows, -1))


class GroupedDynamicCausalConv(nn.Module):
    """DFlash2's in-block conv: out_t = sum_j (base[j] + dyn_t[j]) * x_{t-j}, dyn shared per channel group."""

    def __init__(self, hidden_size: int, kernel_size: int, group_size: int):
        super().__init__()
        self.kernel_size, self.group_size = kernel_size, group_size
        self.base_kernel = nn.Parameter(torch.zeros(2, kernel_size, hidden_size))
        self.kernel_projection = Linear(hidden_size, 2 * kernel_size * (hidden_size // group_size),
                                           bias=False)

    def _convolve(self, x, dynamic, base):
        batch, num_rows, hidden = x.shape
        groups = hidden // self.group_size
        blocks = x.view(batch, num_rows, groups, self.group_size)
        dynamic = dynamic.reshape(batch, num_rows, self.kernel_size, groups, 1)
        out = torch.zeros_like(blocks)
        for offset in range(self.kernel_size):
            shifted = blocks if offset == 0 else F.pad(blocks[:, :-offset], (0, 0, 0, 0, offset, 0))
            out = out + base[offset].view(1, 1, groups, self.group_size).to(x.dtype) * shifted
            out = torch.addcmul(out, dynamic[:, :, offset], shifted)
        return out.view_as(x)

    def prepare(self, x: torch.Tensor):
        """Convolve the sublayer input; return it with the coefficients ``finish`` will use."""
        dynamic = self.kernel_projection(x).view(*x.shape[:-1], 2, self.kernel_size, -1)
        return self._convolve(x, dynamic[..., 0, :, :], self.base_kernel[0]), dynamic[..., 1, :, :]

    def finish(self, x: torch.Tensor, dynamic: torch.Tensor) -> torch.Tensor:
        return self._convolve(x, dynamic, self.base_kernel[1])


class DFlashDecoderLayer(nn.Module):
    def __init__(self, args: DFlashArgs, layer_idx: int, with_conv: bool,
                 window_inclusive: bool = False):
        super().__init__()
        self.self_attn = DFlashAttention(args, layer_idx, window_inclusive)
        self.mlp = SwiGLU(args.hidden_size, args.intermediate_size)
        self.input_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps)
        conv = (lambda: GroupedDynamicCausalConv(args.hidden_size, args.conv_kernel_size,
                                                 args.conv_group_size)) if with_conv else None
        self.attention_conv = conv() if conv else None
        self.mlp_conv = conv() if conv else None

    def forward(self, h, cos, sin, positions, ctx, block_start):
        x = self.input_layernorm(h)
        if self.attention_conv is not None:
            x, dyn = self.attention_conv.prepare(x)
        x = self.self_attn(x, cos, sin, positions, ctx, block_start)
        if self.attention_conv is not None:
            x = self.attention_conv.finish(x, dyn)
        h = h + x
        x = self.post_attention_layernorm(h)
        if self.mlp_conv is not None:
            x, dyn = self.mlp_conv.prepare(x)
        x = self.mlp(x)
        if self.mlp_conv is not None:
            x = self.mlp_conv.finish(x, dyn)
        return h + x


class CandidateSelector(nn.Module):
    """Walks each draft row's top-k candidates: score = unary + <A[pred] * P h, B[cand]>."""

    def __init__(self, args: DFlashArgs):
        super().__init__()
        self.top_k = int(args.selector_top_k)
        self.predecessor_codebook = nn.Embedding(args.vocab_size, args.selector_rank)
        self.successor_codebook = nn.Embedding(args.vocab_size, args.selector_rank)
        self.hidden_projection = Linear(args.hidden_size, args.selector_rank, bias=False)

    def walk(self, hidden, logits, anchor, temperature: float, generator=None):
        """hidden [B, T, H], logits [B, T, V], anchor [B] -> tokens [B, T], q [B, T, V] or None."""
        unary, candidates = torch.topk(logits, self.top_k, dim=-1)
        proj = self.hidden_projection(hidden)
        predecessor, tokens, q_rows = anchor, [], []
        for t in range(hidden.shape[1]):
            scores = unary[:, t] + torch.einsum(
                "br,bkr->bk", self.predecessor_codebook(predecessor) * proj[:, t],
                self.successor_codebook(candidates[:, t])).float()
            if temperature > 0:
                probs = torch.softmax(scores / temperature, dim=-1)
                index = torch.multinomial(probs, 1, generator=generator)[:, 0]
                q_rows.append(torch.zeros_like(logits[:, t]).scatter_(-1, candidates[:, t], probs))
            else:
                index = scores.argmax(dim=-1)
            predecessor = candidates[:, t].gather(-1, index[:, None])[:, 0]
            tokens.append(predecessor)
        return torch.stack(tokens, 1), (torch.stack(q_rows, 1) if q_rows else None)


class DFlashDraftModel(nn.Module, RotaryBuffers):
    """DFlash v1: Qwen3-style layers over the block, context by KV injection."""

    with_conv = False
    default_is_causal: bool | None = None  # None: z-lab rule (sliding layers causal)
    window_inclusive = False  # z-lab/SGLang: visible iff distance < sliding_window

    def __init__(self, config: dict):
        super().__init__()
        args = DFlashArgs.from_hf(config, self.default_is_causal)
        self.args = args
        self.block_size, self.mask_token_id = args.block_size, args.mask_token_id
        self.target_layer_ids = args.target_layer_ids
        self.layers = nn.ModuleList(
            [DFlashDecoderLayer(args, i, self.with_conv, self.window_inclusive)
             for i in range(args.num_hidden_layers)])
        self.norm = RMSNorm(args.hidden_size, args.rms_norm_eps)
        self.fc = Linear(len(args.target_layer_ids) * args.hidden_size, args.hidden_size, bias=False)
        self.hidden_norm = RMSNorm(args.hidden_size, args.rms_norm_eps)
        self.rope_spec = (args.rope_theta, args.head_dim)
        self._init_buffers()

    def check_target(self, target) -> None:
        """Refuse a target this drafter cannot read (layer ids out of range, hidden/vocab mismatch)."""
        bad = [i for i in self.target_layer_ids if not 0 <= i < target.num_layers]
        if bad:
            raise CheckpointError(
                f"drafter target_layer_ids {list(self.target_layer_ids)} include {bad}, outside the "
                f"target's {target.num_layers} layers (0..{target.num_layers - 1})")
        if target.hidden_size != self.args.hidden_size:
            raise CheckpointError(f"drafter hidden_size {self.args.hidden_size} != target hidden_size "
                                  f"{target.hidden_size}")
        if not 0 <= self.mask_token_id < target.vocab_size:
            raise CheckpointError(f"drafter mask_token_id {self.mask_token_id} is outside the target "
                                  f"vocabulary of {target.vocab_size}")

    @staticmethod
    def checkpoint_name(name: str) -> str | None:
        name = name.removeprefix("model.")
        name = {"encoder.fc.weight": "fc.weight",
                "encoder.output_norm_enc.weight": "hidden_norm.weight"}.get(name, name)
        if name.startswith(("lm_head.", "embed_tokens.", "rotary_emb.")):
            return None
        if name in ("candidate_selector.predecessor_codebook", "candidate_selector.successor_codebook"):
            return name + ".weight"
        return name

    def window(self) -> int | None:
        """The context window when every layer is windowed (then the KV is a ring), else None."""
        windows = [layer.self_attn.window for layer in self.layers]
        return None if any(w is None for w in windows) else max(windows)

    def new_cache(self, num_rows: int, capacity: int, verify_rows: int | None = None
                  ) -> ModelCache:
        """Context KV for ``num_rows`` requests; a ring when every layer is windowed, sized for
        the window plus twice the rows one verify commits (``verify_rows``, default the block:
        deeper drafting verifies more)."""
        window = self.window()
        rows = max(self.block_size, verify_rows or 0)
        slots = capacity if window is None else min(capacity, window + 2 * rows)
        weight = self.fc.weight
        return ModelCache([
            KVCache(num_rows, slots, layer.self_attn.num_kv_heads, layer.self_attn.head_dim,
                    weight.dtype, weight.device, window=layer.self_attn.window)
            for layer in self.layers])

    @torch.inference_mode()
    def commit_context(self, aux: torch.Tensor, positions: torch.Tensor, cache: ModelCache) -> None:
        """Write context K/V for target rows ``aux`` [B, N, len(ids) * hidden] at ``positions`` [B, N]."""
        slots = cache.layers[0].capacity
        if aux.shape[1] > slots:  # a ring keeps only its last `slots` rows; older ones are out of window
            aux, positions = aux[:, -slots:], positions[:, -slots:]
        ctx = self.hidden_norm(self.fc(aux))
        cos, sin = rope_cos_sin(self.inv_freq, positions, ctx.dtype)
        for layer, kv in zip(self.layers, cache.layers):
            k, v = layer.self_attn.project_kv(ctx, cos, sin)
            kv.write(k, v, positions)

    @torch.inference_mode()
    def forward(self, block_embeds: torch.Tensor, positions: torch.Tensor,
                cache: ModelCache) -> torch.Tensor:
        """Draft hidden states [B, T, hidden] (after the final norm) for a block at ``positions`` [B, T]."""
        h = block_embeds * self.args.input_embedding_scale
        cos, sin = rope_cos_sin(self.inv_freq, positions, h.dtype)
        block_start = positions[:, 0]
        for layer, kv in zip(self.layers, cache.layers):
            h = layer(h, cos, sin, positions, kv, block_start)
        return self.norm(h)

    def compute_logits(self, hidden: torch.Tensor, lm_head: nn.Module) -> torch.Tensor:
        logits = lm_head(hidden).float() * self.args.output_multiplier
        cap = self.args.final_logit_softcapping
        return torch.tanh(logits / cap) * cap if cap else logits

    def query_rows(self, block_size: int) -> int:
        """Rows of the draft forward for a verify window of ``block_size``: [anchor, MASK x (B-1)]."""
        return block_size

    @torch.inference_mode()
    def propose(self, hidden: torch.Tensor, anchor: torch.Tensor, lm_head: nn.Module,
                temperature: float = 0.0, generator=None):
        """Drafts [B, Q-1] from the draft forward's rows [B, Q, H] (row 0, the anchor, is not decoded)
        and the proposal q [B, Q-1, V] (None = greedy point masses)."""
        logits = self.compute_logits(hidden[:, 1:], lm_head)
        if temperature <= 0:
            return logits.argmax(dim=-1), None
        q = torch.softmax(logits / temperature, dim=-1)
        tokens = torch.multinomial(q.flatten(0, 1), 1, generator=generator).view(q.shape[:2])
        return tokens, q

    @torch.inference_mode()
    def draft_logits(self, hidden: torch.Tensor, anchor: torch.Tensor, lm_head: nn.Module):
        """Greedy drafts [B, Q-1] (``propose`` at temperature 0) and the logits [B, Q-1, V] each
        was chosen from (tree verification takes alternatives from them)."""
        logits = self.compute_logits(hidden[:, 1:], lm_head)
        return logits.argmax(dim=-1), logits

    @torch.no_grad()
    def init_random_(self, generator: torch.Generator, std: float = 0.02) -> None:
        for name, param in self.named_parameters():
            if name.endswith("norm.weight"):
                param.fill_(1.0)
            elif name.endswith("base_kernel"):
                param.zero_()
                param[:, 0].fill_(1.0)
            else:
                param.normal_(0.0, std, generator=generator)


class DFlash2DraftModel(DFlashDraftModel):
    """DFlash2: DFlash + grouped dynamic in-block convs + candidate selector."""

    with_conv = True

    def __init__(self, config: dict):
        args = DFlashArgs.from_hf(config)
        if (args.conv_kernel_size is None) != (args.conv_group_size is None):
            raise CheckpointError("DFlash2 config: conv_kernel_size and conv_group_size go together")
        if args.conv_kernel_size is None or args.selector_rank is None or args.selector_top_k is None:
            raise CheckpointError("DFlash2 config needs conv_kernel_size, conv_group_size, "
                                  "selector_rank and selector_top_k")
        super().__init__(config)
        self.candidate_selector = CandidateSelector(args)

    @torch.inference_mode()
    def propose(self, hidden, anchor, lm_head, temperature: float = 0.0, generator=None):
        hidden = hidden[:, 1:]
        logits = self.compute_logits(hidden, lm_head)
        return self.candidate_selector.walk(hidden, logits, anchor, temperature, generator)

    @torch.inference_mode()
    def draft_logits(self, hidden, anchor, lm_head):
        """The selector's greedy walk [B, Q-1] and the unary logits [B, Q-1, V] it walked."""
        hidden = hidden[:, 1:]
        logits = self.compute_logits(hidden, lm_head)
        return self.candidate_selector.walk(hidden, logits, anchor, 0.0)[0], logits


class MuseGlimmerAssistantModel(DFlashDraftModel):
    """Muse-Glimmer's official DFlash drafter (HF ``muse_glimmer_assistant``): all-sliding-window
    layers attending bidirectionally within the window, context fusion ``encoder.fc`` +
    ``encoder.output_norm_enc``; the block is embedded without the target's embedding norm."""

    default_is_causal = False
    window_inclusive = True  # transformers' bidirectional sliding mask: visible iff distance <= window
