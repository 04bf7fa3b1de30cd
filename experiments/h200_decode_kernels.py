"""H200: the decode-path attention and Gated-DeltaNet kernels against what they replace.

- ``attention``: :mod:`specpilot.kernels.slot_attention` (two launches) against the path it
  replaces in a fused engine (compiled visibility mask, masked SDPA, compiled sigmoid gate), at
  Qwen3.8-27B's gated attention and Muse-Glimmer-30B's sliding and global layers, 1 and 16 query
  rows. Both are compared with the fp32 reference (max abs error) and timed side by side
  (CUDA-graph replays over rotating caches, interleaved rounds, median of per-round ratios).
- ``gdn_in_place``: fla-core's fused recurrent kernel storing the final state in place
  (``dispatch._fused_recurrent_into``) against fla's wrapper + the state copy it needed: outputs
  and states must be bit-identical; timed the same way.

Writes ``$OUT/h200_decode_kernels.json``. Run from the repo root:
``python3 experiments/h200_decode_kernels.py``
"""

import json
import os
import statistics
from pathlib import Path

import torch

OUT = Path(os.environ.get("OUT", "/tmp/out"))
ROUNDS = 5
# name: (q heads, kv heads, head dim, slots, visible context, window)
ATTENTION = {"qwen38_full": (24, 4, 256, 512, 300, None),
             "qwen38_graph_cache": (24, 4, 256, 4096, 200, None),  # the captured engine's cache
             "qwen38_full_long": (24, 4, 256, 4096, 3000, None),
             "muse_sliding": (32, 2, 128, 2304, 3000, 2048),
             "muse_global": (32, 2, 128, 4096, 3000, None)}


def _cache(heads_kv, dim, slots, context, rows, dtype, gen):
    k = torch.randn(1, slots, heads_kv, dim, generator=gen, device="cuda").to(dtype)
    v = torch.randn(1, slots, heads_kv, dim, generator=gen, device="cuda").to(dtype)
    last = context - 1 + rows  # positions context .. context + rows - 1 are this forward's rows
    slot_ids = torch.arange(slots, device="cuda")
    pos = last - ((last - slot_ids) % slots)
    pos = torch.where(pos < 0, -1, pos)[None]
    return k, v, pos


def _ratio_rounds(old, new, device):
    from specpilot.kernels.common.bench import time_calls

    rounds = []
    for _ in range(ROUNDS):
        a, b = time_calls(old, device), time_calls(new, device)
        rounds.append({"old_us": a.p50_us, "new_us": b.p50_us, "speedup": a.p50_us / b.p50_us})
    return {"rounds": rounds, "old_us": statistics.median(r["old_us"] for r in rounds),
            "new_us": statistics.median(r["new_us"] for r in rounds),
            "speedup_median": statistics.median(r["speedup"] for r in rounds),
            "speedup_min": min(r["speedup"] for r in rounds),
            "speedup_max": max(r["speedup"] for r in rounds)}


def attention_cases() -> dict:
    from specpilot.engines.cache import visible_slots
    from specpilot.engines.models.layers import compiled
    from specpilot.engines.models.layers import masked_attention
    from specpilot.engines.models.layers import sigmoid_gate
    from specpilot.kernels.common.bench import num_copies_for
    from specpilot.kernels.slot_attention import slot_attention
    from specpilot.kernels.slot_attention import slot_attention_ref

    device = torch.device("cuda")
    gen = torch.Generator(device="cuda").manual_seed(0)
    results = {}
    for name, (heads, heads_kv, dim, slots, context, window) in ATTENTION.items():
        for rows in (1, 16):
            scale = dim ** -0.5
            positions = torch.arange(context, context + rows, device="cuda")[None]
            caches = []
            nbytes = 2 * slots * heads_kv * dim * 2
            for _ in range(num_copies_for(nbytes)):
                caches.append(_cache(heads_kv, dim, slots, context, rows, torch.bfloat16, gen))
            merged = torch.randn(1, rows, heads, 2 * dim, generator=gen, device="cuda").bfloat16()
            q, gate = merged[..., :dim], merged[..., dim:]

            def old(k, v, pos):
                mask = compiled(visible_slots)(pos, positions, None, window)
                out = masked_attention(q, k, v, mask, scale).reshape(1, rows, -1)
                return compiled(sigmoid_gate)(out, gate.reshape(1, rows, -1))

            def new(k, v, pos):
                return slot_attention(q, k, v, pos, positions, scale, window, gate)

            k, v, pos = caches[0]
            want = slot_attention_ref(q.float(), k.float(), v.float(), pos, positions, scale,
                                      window, gate.float())
            case = {"max_abs_err_old": float((old(k, v, pos).float() - want.reshape(1, rows, -1))
                                             .abs().max()),
                    "max_abs_err_new": float((new(k, v, pos).float() - want).abs().max())}
            got32 = slot_attention(q.float(), k.float(), v.float(), pos, positions, scale, window,
                                   gate.float())
            case["fp32_max_abs_err"] = float((got32 - want).abs().max())
            one = slot_attention(q[:, -1:], k, v, pos, positions[:, -1:], scale, window,
                                 gate[:, -1:])
            case["last_row_alone_bit_equal"] = bool(torch.equal(one, new(k, v, pos)[:, -1:]))
            case.update(_ratio_rounds([lambda c=c: old(*c) for c in caches],
                                      [lambda c=c: new(*c) for c in caches], device))
            results[f"{name}_rows{rows}"] = case
            print(name, rows, {k: case[k] for k in case if k != "rounds"}, flush=True)
    return results


def gdn_cases() -> dict:
    from specpilot.kernels.gated_delta_rule.dispatch import _fused_recurrent_into
    from specpilot.kernels.gated_delta_rule.dispatch import have_fla

    if not have_fla():
        return {"skipped": "fla-core is not importable"}
    from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule

    device = torch.device("cuda")
    gen = torch.Generator(device="cuda").manual_seed(1)
    heads, heads_v, dim = 16, 48, 128  # Qwen3.8-27B's Gated DeltaNet
    results = {}
    for rows in (1, 16):
        def rand(*shape):
            return torch.randn(*shape, generator=gen, device="cuda")

        q, k = rand(1, rows, heads, dim).bfloat16(), rand(1, rows, heads, dim).bfloat16()
        v = rand(1, rows, heads_v, dim).bfloat16()
        g = -torch.rand(1, rows, heads_v, generator=gen, device="cuda")
        beta = torch.rand(1, rows, heads_v, generator=gen, device="cuda").bfloat16()
        h0 = rand(1, heads_v, dim, dim)
        o_ref, h_ref = fused_recurrent_gated_delta_rule(q, k, v, g=g, beta=beta, initial_state=h0,
                                                        output_final_state=True,
                                                        use_qk_l2norm_in_kernel=True)
        state = h0.clone()
        o_new = _fused_recurrent_into(q, k, v, g, beta, state, state)
        case = {"output_bit_equal": bool(torch.equal(o_new, o_ref)),
                "state_bit_equal": bool(torch.equal(state, h_ref))}
        states = [h0.clone() for _ in range(8)]

        def old(s):
            _, final = fused_recurrent_gated_delta_rule(q, k, v, g=g, beta=beta, initial_state=s,
                                                        output_final_state=True,
                                                        use_qk_l2norm_in_kernel=True)
            s.copy_(final)

        case.update(_ratio_rounds([lambda s=s: old(s) for s in states],
                                  [lambda s=s: _fused_recurrent_into(q, k, v, g, beta, s, s)
                                   for s in states], device))
        results[f"rows{rows}"] = case
        print("gdn", rows, {k: case[k] for k in case if k != "rounds"}, flush=True)
    return results


def main() -> None:
    from specpilot import fingerprint

    OUT.mkdir(parents=True, exist_ok=True)
    result = {"fingerprint": fingerprint.current("cuda").to_dict(),
              "attention": attention_cases(), "gdn_in_place": gdn_cases()}
    (OUT / "h200_decode_kernels.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
