"""The fixed cost of each decode phase, measured on the worker's GPU with the engine's own code.

A phase's time splits into what scales with the bytes it moves (weights, KV, recurrent state) and
what does not: per-kernel launch, ramp and tail, host gaps between captured parts, scalar uploads,
the host work of the commit. The second part is measured here directly: the same engine build
(recipe, CUDA graphs, fused element-wise, dispatch paths) decodes with *shrunk* copies of the target
and drafter (:func:`specpilot.costmodel.launches.shrink_config`: every layer, head count, drafter
layer and block kept, widths and vocabulary made tiny), so its bytes are a few MB and its phase
times are the fixed cost alone. The gap table predicts a full-size phase as
``floor * efficiency + fixed``, with ``efficiency`` the AR step's measured time less its own fixed
cost, over its floor.

W12 packing is left out of the shrunk build: it changes the bytes a GEMM reads (the floor's
business), not the kernels a phase launches.
"""

import statistics

import torch

from specpilot.costmodel.launches import SHRUNK_SIZES
from specpilot.costmodel.launches import shrink_config

PROMPT_TOKENS = 32  # prefill stays on the decode kernels (fla's chunked kernel starts past 64)
# head dims of 16/32: the smallest every GPU kernel on the path takes (Triton's dot needs 16)
SIZES = {**SHRUNK_SIZES, "head_dim": 32, "linear_key_head_dim": 16, "linear_value_head_dim": 16}


def measure_fixed_ms(target_config: dict, drafter_config: dict | None, recipe, device,
                     dtype: torch.dtype = torch.bfloat16, max_new_tokens: int = 48,
                     repeats: int = 3, max_len: int | None = None) -> dict[str, float]:
    """Mean ms per decode step of each phase of ``recipe`` on shrunk models on ``device``: ``ar``
    (the target forward of an AR step of the same build) and, for a speculative recipe, ``draft``,
    ``verify``, ``accept`` and ``commit``. The median over ``repeats`` timed requests after one
    warm-up request (CUDA graphs captured, kernels compiled). ``max_len``: the measured engine's
    context (its KV slots: attention masks and slot bookkeeping scale with it, not with the widths
    the probe shrinks); default just enough for the probe's request."""
    from specpilot.engines.models import random_model
    from specpilot.recipe import AR

    device = torch.device(device)
    target = random_model(shrink_config(target_config, SIZES), device=device, dtype=dtype)
    ar = AR.replace(gemm=recipe.gemm, cuda_graphs=recipe.cuda_graphs,
                    fused_elementwise=recipe.fused_elementwise)
    max_len = max_len or PROMPT_TOKENS + max_new_tokens + 64
    out = {"ar": _phases(target, None, ar, max_new_tokens, repeats, max_len)["verify"]}
    if recipe.speculative and drafter_config is not None:
        drafter = random_model(shrink_config(drafter_config, SIZES), device=device, dtype=dtype,
                               seed=1)
        phases = _phases(target, drafter, recipe.replace(w12=()), max_new_tokens, repeats, max_len)
        out.update({p: phases[p] for p in ("draft", "verify", "accept", "commit") if p in phases})
    return out


def _phases(target, drafter, recipe, max_new_tokens: int, repeats: int,
            max_len: int) -> dict[str, float]:
    from specpilot.engines.engine import Engine
    from specpilot.engines.engine import SamplingParams
    from specpilot.engines.timing import PhaseTimer

    engine = Engine(target, drafter, recipe, max_len=max_len)
    vocab = target.lm_head.weight.shape[0]
    prompt = [1 + i % (vocab - 1) for i in range(PROMPT_TOKENS)]
    params = SamplingParams(max_new_tokens=max_new_tokens, ignore_eos=True)
    engine.generate(prompt, params)  # warm-up: graphs captured, Triton/compile caches filled
    runs = []
    for _ in range(repeats):
        timer = PhaseTimer(engine.device)
        engine.generate(prompt, params, timer=timer)
        runs.append(timer.ms_per_step())
    return {p: statistics.median(r.get(p, 0.0) for r in runs) for p in runs[0]}
