"""Bytes and FLOPs that each decode phase must move, from the models themselves (built on the meta
device from their configs: no weights needed).

Per step of one request at context length L:
- ``ar``: every target weight once, the KV of L tokens for attention layers, the recurrent state of
  Gated-DeltaNet layers read and written once;
- ``verify`` (B rows): the same weights once (B rows share each read), KV for L + B, GDN state read,
  and with ``snapshot`` rollback B states written; then the drafter's context injection of the B
  rows (``commit_context``: its ``fc`` and every layer's k/v projections, and their KV writes);
- ``draft`` (Q rows): the drafter's other weights (its k/v projections again, for the block rows),
  its windowed context KV, and the target's lm_head read again for the Q - 1 proposal rows;
- ``commit``: every attention layer's slot positions (target and drafter) read and rewritten, every
  GDN layer's conv state gathered out of the pending window and its recurrent state restored:
  snapshot = one state copy; replay = the recurrence re-run over the B pending rows (state read and
  written, their q, k, v, g, beta read).
The floor of a phase is its bytes over the read ceiling (or FLOPs over the bf16 rate when larger):
what the phase's mechanism must move, not what the engine's kernels move (the snapshot commit
copies through a temporary, twice the bytes).
"""

import dataclasses
import functools
import json
import math

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
    """A model of ``config`` on the meta device (shapes only), one per config and dtype: the
    bounds below walk the same models many times (every width, prefix and batch bucket)."""
    return _meta_model_of(json.dumps(config, sort_keys=True), dtype)


@functools.lru_cache(maxsize=16)
def _meta_model_of(config_json: str, dtype):
    from specpilot.engines.models import model_class

    config = json.loads(config_json)
    with torch.device("meta"):
        return model_class(config)(config).to(dtype)


_CONTEXT_LINEARS = ("fc", ".self_attn.k_proj", ".self_attn.v_proj")
"""The drafter Linears ``DFlashDraftModel.commit_context`` runs on the verified rows."""


def _is_context_linear(name: str) -> bool:
    return name == _CONTEXT_LINEARS[0] or name.endswith(_CONTEXT_LINEARS[1:])


def _every_linear(name: str) -> bool:
    return True


def _not_context_fc(name: str) -> bool:
    return name != "fc"


@functools.lru_cache(maxsize=256)
def _linear_bytes_flops(model, rows: int, keep=_every_linear) -> tuple[float, float]:
    num_bytes = flops = 0.0
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear) and keep(name):
            n, k = module.weight.shape
            num_bytes += n * k * module.weight.element_size() + 2 * rows * (n + k)
            flops += 2.0 * rows * n * k
    return num_bytes, flops


@functools.lru_cache(maxsize=256)
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
                 context: int = 512, rollback: str = "snapshot",
                 num_requests: int = 1) -> dict[str, PhaseCost]:
    """Floors of the AR step and of the stock speculative step's phases for ``num_requests``
    running requests decoded together (each weight read once per step for all of them; every
    request's activations, KV, recurrent state and FLOPs counted)."""
    target = _meta_model(target_config)
    n = num_requests
    out = {}

    def add(name, num_bytes, flops):
        out[name] = PhaseCost(name, num_bytes, flops, gpu.time_ms(num_bytes, flops))

    w_bytes, w_flops = _linear_bytes_flops(target, n)
    emb = target.model.embed_tokens.weight.shape[1] * 2  # one embedding row per token
    reads, writes = _state_bytes(target, context, 1, rollback)
    add("ar", w_bytes + n * (emb + reads + writes), w_flops)
    if drafter_config is None:
        return out
    drafter = _meta_model(drafter_config)
    out["verify"] = verify_cost(target, drafter, gpu, n, block_size, context, rollback)
    # the engine drafts the drafter's whole block, whatever width it verifies (engines/engine.py)
    q_rows = drafter.query_rows(max(block_size, drafter.block_size))
    d_bytes, d_flops = _linear_bytes_flops(drafter, n * q_rows, _not_context_fc)
    head = target.lm_head.weight
    head_bytes = head.numel() * head.element_size()
    window = drafter.window() or context
    kv = sum(_kv_row_bytes(drafter)) * min(context, window)
    add("draft", d_bytes + head_bytes + n * kv,
        d_flops + 2.0 * n * (q_rows - 1) * head.numel())
    add("commit", n * _commit_bytes(target, drafter, context, block_size, rollback), 0.0)
    return out


def _kv_row_bytes(drafter) -> list[int]:
    """K and V bytes of one drafter context row, per drafter layer."""
    return [2 * layer.self_attn.num_kv_heads * layer.self_attn.head_dim * 2
            for layer in drafter.layers]


def verify_cost(target, drafter, gpu: Gpu, num_requests: float, rows: int, context: int = 512,
                rollback: str = "snapshot", state_requests: float | None = None) -> PhaseCost:
    """One target forward of ``rows`` rows for each of ``num_requests`` requests (a fraction is an
    expectation: the weights are read once, everything per request scales), plus the drafter's
    context injection of those rows (none without a drafter). ``state_requests``: the requests
    whose attention KV and recurrent state the forward reads and writes, if more than those whose
    rows its linear layers multiply (a two-stage verify's second stage runs attention on every
    row). ``target``/``drafter`` are meta models (``_meta_model``)."""
    n = num_requests
    n_state = n if state_requests is None else state_requests
    if n <= 0 or rows <= 0:
        return PhaseCost("verify", 0.0, 0.0, 0.0)
    w_bytes, _ = _linear_bytes_flops(target, 0)
    per_row_bytes, per_row_flops = _linear_bytes_flops(target, 1)
    per_row_bytes -= w_bytes
    emb = target.model.embed_tokens.weight.shape[1] * 2
    reads, writes = _state_bytes(target, context, rows, rollback)
    c_w = c_row_bytes = c_row_flops = 0.0
    if drafter is not None:
        c_w, _ = _linear_bytes_flops(drafter, 0, _is_context_linear)
        c_row_bytes, c_row_flops = _linear_bytes_flops(drafter, 1, _is_context_linear)
        c_row_bytes += sum(_kv_row_bytes(drafter)) - c_w
    num_bytes = (w_bytes + c_w + n * rows * (per_row_bytes + emb + c_row_bytes)
                 + n_state * (reads + writes))
    flops = n * rows * (per_row_flops + c_row_flops)
    return PhaseCost("verify", num_bytes, flops, gpu.time_ms(num_bytes, flops))


def two_stage_verify_ms(target_config: dict, drafter_config: dict, gpu: Gpu, block_size: int,
                        num_requests: int, accept_probs: list[float], context: int = 512,
                        rollback: str = "snapshot", width: int | None = None) -> dict:
    """The floor of two-stage verification against one verify of the window, at every prefix.

    The window is ``width`` positions of the drafted block (default: all ``block_size``). Stage 1
    verifies the first ``p`` positions of every request's window; a request goes on to stage 2 (the
    remaining ``width - p`` positions) when its ``p - 1`` drafts and the next one all pass (``k >=
    p`` drafts accepted, probability from ``accept_probs`` over k = 0 .. block-1), as an expectation
    (weights read once per stage; the second stage's linear layers on the passing requests' rows,
    its attention on every request's, as the batched engine runs it). Tokens per step are those of
    one verify of the window (a
    request that stopped in stage 1 would have kept no more anyway), so the ratio of floors is the
    phase's speedup. Returns ``{"one_stage_ms", "by_prefix": {p: ms}, "best_prefix", "best_ms",
    "speedup"}``."""
    width = width or block_size
    target, drafter = _meta_model(target_config), _meta_model(drafter_config)
    one = verify_cost(target, drafter, gpu, num_requests, width, context, rollback).floor_ms
    by_prefix = {}
    for prefix in range(1, width):
        passed = sum(accept_probs[prefix:])  # P(at least ``prefix`` drafts accepted)
        stage1 = verify_cost(target, drafter, gpu, num_requests, prefix, context, rollback)
        runs, rows = padded_passing(num_requests, passed)
        stage2 = verify_cost(target, drafter, gpu, rows, width - prefix, context, rollback,
                             state_requests=num_requests) if runs else None
        by_prefix[prefix] = stage1.floor_ms + (runs * stage2.floor_ms if runs else 0.0)
    best = min(by_prefix, key=by_prefix.get)
    return {"one_stage_ms": one, "by_prefix": by_prefix, "best_prefix": best,
            "best_ms": by_prefix[best], "speedup": one / by_prefix[best]}


def padded_passing(num_requests: int, passed: float) -> tuple[float, float]:
    """``(P(some request passes), E[rows | some pass])`` for a second stage over the requests that
    pass (each with probability ``passed``, independently) padded, as the batched engine's CUDA
    graphs are, to a power of two (at most ``num_requests``)."""
    n = max(int(num_requests), 1)
    if passed <= 0.0:
        return 0.0, 0.0
    if passed >= 1.0:
        return 1.0, float(n)
    runs = rows = 0.0
    for k in range(1, n + 1):  # the binomial pmf in log space (large batches)
        p_k = math.exp(math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
                       + k * math.log(passed) + (n - k) * math.log1p(-passed))
        runs += p_k
        rows += p_k * min(1 << (k - 1).bit_length(), n)
    return runs, (rows / runs if runs > 0 else 0.0)


def two_stage_bound(target_config: dict, drafter_config: dict, gpu: Gpu, block_size: int,
                    num_requests: int, accept_probs: list[float], context: int = 512,
                    rollback: str = "snapshot") -> dict:
    """Two-stage verification against the mechanism it competes with, one verify of fewer
    positions (:func:`bound_by_width`): the speedup bound over AR of the best (window, prefix) in
    two stages and of the best single-stage width. Both keep the tokens of their window
    (:func:`truncated_tau`); the second stage saves the rows of requests that failed the prefix
    and pays a second read of every weight. Returns ``{"single_width", "single_bound",
    "two_stage_width", "two_stage_prefix", "two_stage_bound", "ratio"}``."""
    singles = bound_by_width(target_config, drafter_config, gpu, block_size, num_requests,
                             accept_probs, context, rollback)
    single = max(singles, key=singles.get)
    best = (0.0, None, None)
    for width in range(2, block_size + 1):
        costs = engine_costs(target_config, drafter_config, gpu, width, context, rollback,
                             num_requests)
        two = two_stage_verify_ms(target_config, drafter_config, gpu, block_size, num_requests,
                                  accept_probs, context, rollback, width)
        step_ms = costs["draft"].floor_ms + two["best_ms"] + costs["commit"].floor_ms
        bound = truncated_tau(accept_probs, width) * costs["ar"].floor_ms / step_ms
        if bound > best[0]:
            best = (bound, width, two["best_prefix"])
    return {"single_width": single, "single_bound": singles[single], "two_stage_width": best[1],
            "two_stage_prefix": best[2], "two_stage_bound": best[0],
            "ratio": best[0] / singles[single]}


def deeper_drafting_bound(target_config: dict, drafter_config: dict, gpu: Gpu, block_size: int,
                          num_requests: int, accept_probs: list[float], context: int = 512,
                          rollback: str = "snapshot") -> dict:
    """An upper bound on deeper drafting (issue 9 item 2): a second block drafted ahead, as if the
    first were accepted, and both verified in one forward.

    Costs: a second, sequential drafter pass (the draft phase twice) and ``2 * block - 1`` verify
    rows (``block``: the drafter's own). Gain: only when every draft of the first block is accepted
    (probability ``accept_probs[-1]``), the second block's own accept length; bounded here by the
    first block's tau (drafts conditioned on unverified tokens accept no better). Returns the bound
    of one block, of two, the probability of a fully accepted block and the ratio."""
    tau = 1.0 + sum(k * p for k, p in enumerate(accept_probs))
    p_full = accept_probs[-1]
    one = engine_costs(target_config, drafter_config, gpu, block_size, context, rollback,
                       num_requests)
    two = engine_costs(target_config, drafter_config, gpu, 2 * block_size - 1, context, rollback,
                       num_requests)
    step_one = sum(one[p].floor_ms for p in ("draft", "verify", "commit"))
    step_two = 2 * one["draft"].floor_ms + two["verify"].floor_ms + two["commit"].floor_ms
    bound_one = tau * one["ar"].floor_ms / step_one
    bound_two = (tau + p_full * (tau - 1.0)) * one["ar"].floor_ms / step_two
    return {"one_block": bound_one, "two_blocks": bound_two, "p_full_block": p_full,
            "ratio": bound_two / bound_one}


TREE_TAU_GAIN_PROXY = 0.047
"""Tokens per step a tree of 2 branches at the 2 least confident positions (16 nodes) added over
the chain on the H200 proxy pair, gsm8k: tau 4.32 -> 4.52
(experiments/results/h200-2026-11-30-proxy-compare-stock-tree-graphs.json). A measured input of
:func:`tree_verify_bound`, not a property of other drafters."""


def tree_verify_bound(target_config: dict, drafter_config: dict, gpu: Gpu, block_size: int,
                      accept_probs: list[float], num_nodes: int, num_paths: int,
                      tau_gain: float = TREE_TAU_GAIN_PROXY, context: int = 512,
                      rollback: str = "snapshot") -> dict:
    """An upper bound on tree verification at one request (issue 9 item 1): ``num_nodes`` verify
    rows instead of ``block_size``, the Gated-DeltaNet recurrence run along ``num_paths`` paths of
    ``block_size`` rows from the committed state (each path reads the state and, with snapshot
    rollback, writes one per row), repaid by ``tau_gain``, the relative gain in tokens per step
    (measured: a tree keeps more only where the target's token is one of the drafter's next
    choices at the first rejected draft). The host read between draft and verify, the per-layer
    commit and the engine's kernels are not counted. Returns the bounds of the chain and the tree
    and their ratio."""
    target, drafter = _meta_model(target_config), _meta_model(drafter_config)
    tau = 1.0 + sum(k * p for k, p in enumerate(accept_probs))
    chain = engine_costs(target_config, drafter_config, gpu, block_size, context, rollback)
    verify = verify_cost(target, drafter, gpu, 1, num_nodes, context, rollback)
    with torch.device("meta"):
        layers = target.new_cache(1, context + num_nodes, rollback).layers
    state = sum(layer.recurrent[0].numel() * 4 for layer in layers if isinstance(layer, GDNState))
    writes = block_size if rollback == "snapshot" else 1
    # verify_cost counted one state read and num_nodes (snapshot) writes per layer
    extra = state * (num_paths * (1 + writes) - (1 + (num_nodes if writes > 1 else 1)))
    tree_verify_ms = gpu.time_ms(verify.bytes + max(extra, 0.0), verify.flops)
    others = chain["draft"].floor_ms + chain["commit"].floor_ms
    bound_chain = tau * chain["ar"].floor_ms / (chain["verify"].floor_ms + others)
    bound_tree = tau * (1.0 + tau_gain) * chain["ar"].floor_ms / (tree_verify_ms + others)
    return {"chain": bound_chain, "tree": bound_tree, "ratio": bound_tree / bound_chain,
            "verify_ms": (chain["verify"].floor_ms, tree_verify_ms)}


def truncated_tau(accept_probs: list[float], width: int) -> float:
    """Tokens per step when each request verifies only ``width`` rows of its block (``accept_probs``
    over 0 .. block-1 drafts accepted, as a replay profile): the engine drafts the whole block and
    verifies its first ``width - 1`` drafts, which are the same drafts, so a step keeps
    ``1 + min(k, width - 1)``."""
    return 1.0 + sum(min(k, width - 1) * p for k, p in enumerate(accept_probs))


def bound_by_width(target_config: dict, drafter_config: dict, gpu: Gpu, block_size: int,
                   num_requests: int, accept_probs: list[float], context: int = 512,
                   rollback: str = "snapshot") -> dict[int, float]:
    """The speedup bound over AR when every request verifies ``width`` rows (2 .. block) with
    ``num_requests`` requests decoded together: fewer rows cost less once the verify is
    compute-bound, and lose the tokens past them (:func:`truncated_tau`)."""
    out = {}
    for width in range(2, block_size + 1):
        costs = engine_costs(target_config, drafter_config, gpu, width, context, rollback,
                             num_requests)
        out[width] = speedup_bound(costs, truncated_tau(accept_probs, width))
    return out


def _commit_bytes(target, drafter, context: int, rows: int, rollback: str) -> float:
    """Bytes one commit of ``rows`` pending rows must move (see the module docstring)."""
    with torch.device("meta"):
        layers = target.new_cache(1, context + rows, rollback).layers + \
            drafter.new_cache(1, context + rows).layers
    total = 0.0
    for layer in layers:
        if isinstance(layer, KVCache):  # positions past the kept rows are marked empty
            total += 2 * layer.pos.numel() * layer.pos.element_size()
        elif isinstance(layer, GDNState):
            conv = layer.conv.numel() * layer.conv.element_size()
            state = layer.recurrent.numel() * layer.recurrent.element_size()
            total += 2 * conv + 2 * state
            if rollback == "replay":  # q, k, v (the conv channels) and fp32 g, bf16 beta per row
                channels, heads = layer.conv.shape[1], layer.recurrent.shape[1]
                total += rows * (channels * layer.conv.element_size() + heads * (4 + 2))
    return total


def bandwidth_efficiency(ar_floor_ms: float, ar_ms: float, ar_fixed_ms: float = 0.0) -> float:
    """How far the AR step's bandwidth-bound time sits above its floor (>= 1), once its fixed cost
    (kernel launches, host gaps: what does not scale with bytes) is taken out:
    ``(ar_ms - ar_fixed_ms) / ar_floor_ms``."""
    return max(1.0, (ar_ms - ar_fixed_ms) / ar_floor_ms)


def predicted_ms(floor_ms: float, efficiency: float, fixed_ms: float = 0.0) -> float:
    """A phase's time: its floor at the AR step's bandwidth efficiency, plus its fixed cost."""
    return floor_ms * efficiency + fixed_ms


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


def prefill_ms(target_config: dict, drafter_config: dict | None, gpu: Gpu, num_requests: int,
               prompt_tokens: int, batched: bool, fixed_ms: float = 0.0) -> float:
    """Floor of prefilling ``num_requests`` prompts of ``prompt_tokens`` tokens that join a batch
    at one step (the ``batched_prefill`` mechanism's term): one forward each reads every target
    (and drafter context) weight once per request; one padded forward for all reads them once.
    FLOPs and per-token bytes are the same either way, so on floors alone batching pays while the
    prefill is weight-bound (few requests, short prompts). ``fixed_ms``: a prefill forward's
    fixed cost (launches, host work of an eager forward), paid once per forward: that part
    batching divides by ``num_requests`` whatever the prompt length. A prefill forward costs what a
    verify of ``prompt_tokens`` rows at an empty context does (:func:`verify_cost`; it keeps no
    per-token states)."""
    target = _meta_model(target_config)
    drafter = _meta_model(drafter_config) if drafter_config is not None else None

    def forward_ms(requests: int) -> float:
        return verify_cost(target, drafter, gpu, requests, prompt_tokens, 0, "replay").floor_ms \
            + fixed_ms

    return forward_ms(num_requests) if batched else num_requests * forward_ms(1)


def admission_ms(target_config: dict, drafter_config: dict | None, gpu: Gpu, num_requests: int,
                 prompt_tokens: int, step_ms: float, finishes_per_step: float, ratio: float,
                 max_wait_steps: int, fixed_ms: float = 0.0) -> dict:
    """Cost per request that joins a running batch (the ``grouped-admission`` mechanism's term), in
    ms of the whole batch's time: the prefill forward every running row waits for, shared by the
    requests that join together (one padded forward, :func:`prefill_ms`), plus the decode its free
    row forgoes while its group gathers. Requests finish at ``finishes_per_step`` (concurrency x
    tau / tokens per request). At once (``ratio`` 0) a group is whoever finished in one step;
    grouped, it gathers until ``ratio`` x the requests still running can join (g = ratio x
    (num_requests - g)), for at most ``max_wait_steps`` more steps, its rows idling half that wait
    on average, each idle row-step worth ``step_ms`` / ``num_requests``. Returns the group size
    and the two parts."""
    f = finishes_per_step
    at_once = max(1.0, f)
    group = at_once if ratio == 0 else max(at_once, min(ratio * num_requests / (1 + ratio),
                                                        f * (max_wait_steps + 1)))
    size = max(1, round(group))
    prefill = prefill_ms(target_config, drafter_config, gpu, size, prompt_tokens, True,
                         fixed_ms) / size
    idle = (group - at_once) / (2 * f) * step_ms / num_requests if f > 0 else 0.0
    return {"group": group, "prefill_ms": prefill, "idle_ms": idle, "total_ms": prefill + idle}


SNAPSHOT_STATE_MOVES = {
    # per verify of B rows, in states of one Gated-DeltaNet layer and request: fla's kernel once
    # per token reads and writes a state each time (2 B), then a stack reads and writes the B
    # temporaries into the kept buffer (2 B); the fused kernel reads the state once, writes B
    "per-token": lambda rows: 4 * rows,
    "fused": lambda rows: rows + 1,
}


def snapshot_traffic_ms(target_config: dict, gpu: Gpu, num_requests: int, rows: int,
                        kernel: str) -> float:
    """Time the snapshot verify's recurrent-state traffic takes at the read ceiling with
    ``kernel`` (the recipe's ``gdn_snapshot``): the ``gdn-fused-snapshot`` mechanism's term is
    the difference between the two kernels."""
    from specpilot.engines.cache import request_state_bytes

    state = request_state_bytes(_meta_model(target_config))
    moves = SNAPSHOT_STATE_MOVES[kernel](rows)
    return gpu.time_ms(num_requests * moves * state, 0.0)


def overlap_schedule_bound(gpu_step_ms: float, host_step_ms: float, tokens_per_request: float,
                           tau: float) -> dict:
    """Overlapped scheduling's decode-wall ratio under continuous batching (issue 9 item 4c): the
    host's work per step (reading the step, bookkeeping, queueing the next) runs while the next
    step runs on the GPU, so a step takes ``max(gpu, host)`` instead of ``gpu + host``; but the
    step after a request's last is already queued when the host learns it finished, so each
    request holds its row one step longer (``S + 1`` steps for ``S = tokens / tau``), a row
    that keeps nothing. Admissions (prefill rounds) are not counted: they are the same on both
    sides. Returns the step ratio, the row-occupancy factor and their product."""
    if gpu_step_ms <= 0 or host_step_ms < 0 or tokens_per_request <= 0 or tau < 1:
        raise ValueError("overlap_schedule_bound needs gpu_step_ms > 0, host_step_ms >= 0, "
                         "tokens_per_request > 0 and tau >= 1")
    steps = tokens_per_request / tau
    step_ratio = (gpu_step_ms + host_step_ms) / max(gpu_step_ms, host_step_ms)
    occupancy = steps / (steps + 1.0)
    return {"step_ratio": step_ratio, "occupancy": occupancy, "decode": step_ratio * occupancy}
