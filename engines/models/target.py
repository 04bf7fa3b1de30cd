"""What every target model offers the decode loops, and the shared decoder-stack forward."""

import abc
import dataclasses

import torch
from torch import nn

from specpilot.engines.cache import ModelCache
from specpilot.engines.models.layers import rope_cos_sin
from specpilot.engines.models.layers import RotaryBuffers


def eos_ids(value) -> tuple[int, ...]:
    """A config's ``eos_token_id`` (an int, a list of ints, or None) as a tuple of ids."""
    if value is None:
        return ()
    return tuple(int(v) for v in value) if isinstance(value, (list, tuple)) else (int(value),)


@dataclasses.dataclass(frozen=True)
class TargetOutput:
    """logits [B, T', V] fp32 (T' = T, or 1 with ``last_only``); aux [B, T, len(capture) * hidden]."""

    logits: torch.Tensor
    aux: torch.Tensor | None


class TargetModel(nn.Module, RotaryBuffers, abc.ABC):
    """Decoder-only target: ``model.embed_tokens``, ``model.layers``, ``model.norm``, ``lm_head``.

    Subclasses build the modules, set ``self.inv_freq`` and implement ``new_cache``; every layer's
    forward is ``layer(h, delta, cos, sin, positions, layer_cache, commit_all) -> (h, delta)``: the
    residual stream is ``h + delta``, and each layer's last add is left to the next norm
    (``model.norm`` too: a :class:`~specpilot.engines.models.layers.ResidualRMSNorm`), which fuses
    it (``delta`` is None before the first layer).
    """

    hidden_size: int
    vocab_size: int
    num_layers: int
    eos_token_ids: tuple[int, ...]  # every id that ends a generation

    max_rows_per_forward: int | None = None  # ring-buffer KV caches bound one forward's rows

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model.embed_tokens(input_ids)

    def draft_embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        """How a block drafter embeds its block with this target's table (default: as the target)."""
        return self.embed(input_ids)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden).float()

    @abc.abstractmethod
    def new_cache(self, num_rows: int, capacity: int, rollback: str = "snapshot") -> ModelCache:
        """Fresh per-layer state for ``num_rows`` requests of up to ``capacity`` tokens."""

    @torch.inference_mode()
    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, cache: ModelCache,
                commit_all: bool = True, capture: tuple[int, ...] = (),
                last_only: bool = False, last_index: torch.Tensor | None = None) -> TargetOutput:
        """Run T new tokens per request through the stack, updating ``cache``.

        Args:
            input_ids, positions: [B, T]. ``commit_all``: keep every row (prefill, AR); otherwise rows
                stay pending until ``cache.commit``. ``capture``: layer ids whose outputs (HF
                ``hidden_states[i + 1]``) are concatenated into ``aux`` in that order.
            last_only: logits of the last row only. ``last_index`` [B]: of row ``last_index[b]``
                of request b only (right-padded prompts); logits are then [B, 1, V].
        """
        hidden = self.embed(input_ids)
        cos, sin = rope_cos_sin(self.inv_freq, positions, hidden.dtype)
        captured, delta = {}, None
        for i, layer in enumerate(self.model.layers):
            hidden, delta = layer(hidden, delta, cos, sin, positions, cache.layers[i], commit_all)
            if i in capture:
                captured[i] = hidden + delta
        aux = torch.cat([captured[i] for i in capture], dim=-1) if capture else None
        if last_index is not None:
            rows = torch.arange(hidden.shape[0], device=hidden.device)
            hidden, delta = hidden[rows, last_index][:, None], delta[rows, last_index][:, None]
        elif last_only:
            hidden, delta = hidden[:, -1:], delta[:, -1:]
        return TargetOutput(self.compute_logits(self.model.norm.add(hidden, delta)[1]), aux)

    def prefill(self, input_ids: torch.Tensor, positions: torch.Tensor, cache: ModelCache,
                capture: tuple[int, ...] = (), last_only: bool = True) -> TargetOutput:
        """``forward`` over a whole prompt, in chunks of ``max_rows_per_forward`` rows if set."""
        chunk = self.max_rows_per_forward or input_ids.shape[1]
        outs = [self(input_ids[:, i:i + chunk], positions[:, i:i + chunk], cache, capture=capture,
                     last_only=last_only) for i in range(0, input_ids.shape[1], chunk)]
        if len(outs) == 1:
            return outs[0]
        logits = outs[-1].logits if last_only else torch.cat([o.logits for o in outs], 1)
        aux = torch.cat([o.aux for o in outs], 1) if capture else None
        return TargetOutput(logits, aux)
