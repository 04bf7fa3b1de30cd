"""Bytes and FLOPs that each decode phase must move, from the models themselves (built on the meta
device from their configs: no weights needed).

Per step of one request at context length L:
- ``ar``: every target weight once, the KV of L tokens for attention layers, the recurrent state of
  Gated-DeltaNet layers read and written once;
- ``verify`` (B rows): the same weights once (B rows share each read), KV for L + B, GDN state read,
  and with ``snapshot`` rollback B states written;
- ``draft`` (Q rows): every drafter weight, its windowed context KV, and the target's lm_head read again
  for the Q - 1 proposal rows;
- ``commit``: snapshot = one state copy per GDN layer; replay = the recurrence re-run (state read +
  write).
The floor of a phase is its bytes over the read ceiling (or FLOPs over the bf16 rate when larger).
"""

import dataclasses

import torch

from specpilot.costmodel.gpus import Gpu
from specpilot.engines.cache import GDNState
from specpilot.engines.cache import KVCache


@dataclasses.dataclass(frozen=True)
class PhaseCost:
    name: str
    bytes: float
    flops: float
    floor_ms: float


def _meta_model(config: dict, dtype=torch.bfloat16):
    from specpilot.engines.models import model_class

    with torch.device("meta"):
        return model_class(config)(config).to(dtype)


def _linear_bytes_flops(model, rows: int, skip=()) -> tuple[float, float]:
    num_bytes = flops = 0.0
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear) and not any(name.startswith(s) for s in skip):
            n, k = module.weight.shape
            num_bytes += n * k * module.weight.element_size() + 2 * rows * (n + k)
            flops += 2.0 * rows * n * k
    return num_bytes, flops


def _state_bytes(model, context: int, rows: int, rollback: str) -> tuple[float, float]:
    """(reads, writes) of attention KV and GDN state for one forward of ``rows`` new tokens."""
    with torch.device("meta"):
        cache = model.new_cache(1, context + rows, rollback)
    reads = writes = 0.0
    for layer in cache.layers:
        if isinstance(layer, KVCache):
            per_token = 2 * layer.k[0, 0].numel() * layer.k.element_size()
            reads += per_token * min(context + rows, layer.capacity)
            writes += per_token * rows
        elif isinstance(layer, GDNState):
            state = layer.recurrent[0].numel() * 4
            reads += state
            writes += state * (rows if rollback == "snapshot" and rows > 1 else 1)
    return reads, writes


def engine_costs(target_config: dict, drafter_config: dict | None, gpu: Gpu, block_size: int,
                 context: int = 512, rollback: str = "snapshot") -> dict[str, PhaseCost]:
    """Floors of the AR step and of the stock speculative step's phases for one request."""
    target = _meta_model(target_config)
    out = {}

    def add(name, num_bytes, flops):
        out[name] = PhaseCost(name, num_bytes, flops, gpu.time_ms(num_bytes, flops))

    w_bytes, w_flops = _linear_bytes_flops(target, 1)
    emb = target.model.embed_tokens.weight.shape[1] * 2  # one embedding row per token
    reads, writes = _state_bytes(target, context, 1, rollback)
    add("ar", w_bytes + emb + reads + writes, w_flops)
    if drafter_config is None:
        return out
    drafter = _meta_model(drafter_config)
    q_rows = drafter.query_rows(block_size)
    v_bytes, v_flops = _linear_bytes_flops(target, block_size)
    reads, writes = _state_bytes(target, context, block_size, rollback)
    add("verify", v_bytes + emb * block_size + reads + writes, v_flops)
    d_bytes, d_flops = _linear_bytes_flops(drafter, q_rows)
    head = target.lm_head.weight
    head_bytes = head.numel() * head.element_size()
    window = drafter.window() or context
    kv = sum(2 * layer.self_attn.num_kv_heads * layer.self_attn.head_dim * 2 * min(context, window)
             for layer in drafter.layers)
    add("draft", d_bytes + head_bytes + kv, d_flops + 2.0 * (q_rows - 1) * head.numel())
    gdn_state = sum(4 * s.recurrent[0].numel() for s in _gdn_states(target))
    add("commit", 2 * gdn_state, 0.0)
    return out


def _gdn_states(model):
    with torch.device("meta"):
        cache = model.new_cache(1, 8, "replay")
    return [layer for layer in cache.layers if isinstance(layer, GDNState)]


def speedup_bound(costs: dict[str, PhaseCost], tau: float) -> float:
    """Best speedup over AR the floors allow: tau tokens per step at the step's floor time."""
    step = sum(costs[p].floor_ms for p in ("draft", "verify", "commit"))
    return tau * costs["ar"].floor_ms / step


def gap_table(costs: dict[str, PhaseCost], measured_ms: dict[str, float]) -> list[dict]:
    """One row per measured phase: measured ms, floor ms and measured / floor, largest gap first."""
    rows = [{"phase": p, "measured_ms": measured_ms[p], "floor_ms": costs[p].floor_ms,
             "gap": measured_ms[p] / costs[p].floor_ms if costs[p].floor_ms else float("inf"),
             "excess_ms": measured_ms[p] - costs[p].floor_ms}
            for p in measured_ms if p in costs]
    return sorted(rows, key=lambda r: -r["excess_ms"])
