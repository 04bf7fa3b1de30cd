"""Plain dense Qwen3 target (HF ``Qwen3ForCausalLM``): small dense models and proxy targets."""

import dataclasses

import torch
from torch import nn

from specpilot.engines.cache import KVCache
from specpilot.engines.cache import ModelCache
from specpilot.engines.models.attention import CachedAttention
from specpilot.engines.models.layers import Linear
from specpilot.engines.models.layers import RMSNorm
from specpilot.engines.models.layers import SwiGLU
from specpilot.engines.models.target import TargetModel
from specpilot.engines.models.target import eos_ids


@dataclasses.dataclass(frozen=True)
class Qwen3Args:
    vocab_size: int = 151936
    hidden_size: int = 4096
    intermediate_size: int = 22016
    num_hidden_layers: int = 32
    num_attention_heads: int = 32
    num_key_value_heads: int = 32
    head_dim: int = 128
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    attention_bias: bool = False
    tie_word_embeddings: bool = False
    sliding_window: int | None = None
    layer_types: tuple[str, ...] = ()
    eos_token_ids: tuple[int, ...] = ()

    @classmethod
    def from_hf(cls, config: dict) -> "Qwen3Args":
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in config.items() if k in names and v is not None}
        rope = config.get("rope_parameters") or config.get("rope_scaling") or {}
        kwargs["rope_theta"] = rope.get("rope_theta", config.get("rope_theta", cls.rope_theta))
        layers = kwargs.get("num_hidden_layers", cls.num_hidden_layers)
        kwargs["layer_types"] = tuple(config.get("layer_types") or ["full_attention"] * layers)
        if "head_dim" not in kwargs:
            kwargs["head_dim"] = kwargs.get("hidden_size", cls.hidden_size) // kwargs.get(
                "num_attention_heads", cls.num_attention_heads)
        eos = config.get("eos_token_id")
        kwargs["eos_token_ids"] = eos_ids(eos)
        return cls(**kwargs)


class Qwen3DecoderLayer(nn.Module):
    def __init__(self, args: Qwen3Args, layer_idx: int):
        super().__init__()
        self.window = args.sliding_window if args.layer_types[layer_idx] == "sliding_attention" else None
        self.self_attn = CachedAttention(args.hidden_size, args.num_attention_heads,
                                         args.num_key_value_heads, args.head_dim, RMSNorm,
                                         args.rms_norm_eps, bias=args.attention_bias)
        self.mlp = SwiGLU(args.hidden_size, args.intermediate_size)
        self.input_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps)

    def forward(self, h, delta, cos, sin, positions, kv, commit_all):
        h, x = self.input_layernorm.add(h, delta)
        h, x = self.post_attention_layernorm.add(h, self.self_attn(x, cos, sin, positions, kv))
        return h, self.mlp(x)


class _Model(nn.Module):
    def __init__(self, args: Qwen3Args):
        super().__init__()
        self.embed_tokens = nn.Embedding(args.vocab_size, args.hidden_size)
        self.layers = nn.ModuleList([Qwen3DecoderLayer(args, i) for i in range(args.num_hidden_layers)])
        self.norm = RMSNorm(args.hidden_size, args.rms_norm_eps)


class Qwen3ForCausalLM(TargetModel):
    def __init__(self, config: dict):
        super().__init__()
        args = Qwen3Args.from_hf(config)
        self.args = args
        self.hidden_size, self.vocab_size = args.hidden_size, args.vocab_size
        self.num_layers, self.eos_token_ids = args.num_hidden_layers, args.eos_token_ids
        self.model = _Model(args)
        self.lm_head = Linear(args.hidden_size, args.vocab_size, bias=False)
        self.tie_weights()
        self.rope_spec = (args.rope_theta, args.head_dim)
        self._init_buffers()

    def tie_weights(self) -> None:
        """Share the embedding table as lm_head when the config ties them (again after ``to_empty``)."""
        if self.args.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    @staticmethod
    def checkpoint_name(name: str) -> str | None:
        return name

    def new_cache(self, num_rows: int, capacity: int, rollback: str = "snapshot") -> ModelCache:
        param = self.lm_head.weight
        return ModelCache([
            KVCache(num_rows, capacity, layer.self_attn.num_kv_heads, layer.self_attn.head_dim,
                    param.dtype, param.device, window=layer.window)
            for layer in self.model.layers])

    @torch.no_grad()
    def init_random_(self, generator: torch.Generator, std: float = 0.02) -> None:
        for name, param in self.named_parameters():
            if "norm" in name:
                param.fill_(1.0)
            else:
                param.normal_(0.0, std, generator=generator)
