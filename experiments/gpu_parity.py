"""Lossless checks of the CUDA-only paths on a GPU: batched steps replayed from CUDA graphs per batch
bucket, and the single-request engine's graphs, against greedy AR one request at a time.

The tiny CPU settings run with their engine moved to ``cuda`` (float32 by default, so that a
batch-size dependent GEMM rounding cannot flip a near-tie). For each, 8 concurrent requests with
ragged prompts, lengths and stop tokens go through a ``BatchEngine`` (graphs captured at
construction, padded buckets) for AR, stock, stock with replay rollback, AR with batched prefill
and stock with batched prefill and the fused snapshot kernel, two-stage verification, the
confidence budget (one captured verify per bucket and width; steep and flat steps/s tables,
greedy and replayed acceptance) and overlapped scheduling (AR and stock). One request at a time
goes through the captured stock engine (per-token and fused snapshot kernels), the captured tree
engine (greedy and replayed) and deeper drafting (two blocks per step). Every output must equal
the request's greedy AR output alone, token for token.
Writes ``$OUT/gpu-parity.json``; exits 1 on any mismatch. ``--checks`` runs only the checks whose
labels start with one of its prefixes (``single_tree``: the tree engine alone).

    python3 experiments/gpu_parity.py [--settings cpu_c1_tiny,cpu_c1_tiny-muse] [--dtype float32]
        [--checks single,batched]
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

OUT = Path(os.environ.get("OUT", "/tmp/out"))
NUM_REQUESTS = 8


def on_device(name: str, dtype: str, device: str):
    """Setting ``name`` with its engine moved to ``device`` and ``dtype``."""
    import dataclasses

    from specpilot.settings import load_setting

    setting = load_setting(name)
    return dataclasses.replace(setting, engine=dataclasses.replace(setting.engine, device=device,
                                                                   dtype=dtype))


TREE = {"tree_branches": 2, "tree_positions": 2, "tree_max_nodes": 24}


def check(setting, checks: tuple[str, ...] = ("",)) -> dict:
    from specpilot.build import load_models
    from specpilot.datasets import load_prompts
    from specpilot.engines.batch import BatchEngine
    from specpilot.engines.batch import Running
    from specpilot.engines.batch import run_requests
    from specpilot.engines.drafters.replay import AcceptanceProfile
    from specpilot.engines.drafters.replay import ReplayPlan
    from specpilot.engines.engine import SamplingParams
    from specpilot.recipe import AR
    from specpilot.recipe import STOCK
    models = load_models(setting)
    texts = load_prompts("gsm8k", NUM_REQUESTS)
    prompts = [models.tokenizer.encode(t).ids[:9 + 5 * i] for i, t in enumerate(texts)]
    lengths = [48 - 3 * i for i in range(NUM_REQUESTS)]
    lengths[3] = 1
    ar = models.engine(AR)
    alone = [ar.generate(p, SamplingParams(max_new_tokens=n, ignore_eos=True)).tokens
             for p, n in zip(prompts, lengths)]
    stops = [(ref[len(ref) // 2],) if i % 2 else () for i, ref in enumerate(alone)]
    expected = [ref[:ref.index(s[0]) + 1] if s else ref for ref, s in zip(alone, stops)]
    out = {"setting": setting.name, "device": str(ar.device), "num_requests": NUM_REQUESTS}
    fused = STOCK.replace(gdn_snapshot="fused")
    tree = STOCK.replace(name="tree", **TREE)
    block = models.drafter.block_size
    for label, recipe, replay in (
            ("single_stock", STOCK, False), ("single_stock_fused_snapshot", fused, False),
            ("single_tree", tree, False), ("single_tree_replay_rollback",
                                           tree.replace(gdn_rollback="replay"), False),
            ("single_tree_replayed", tree, True),
            ("single_deeper", STOCK.replace(name="deeper", draft_depth=2), False),
            ("single_deeper_replay_rollback",
             STOCK.replace(name="deeper", draft_depth=2, gdn_rollback="replay"), False)):
        if not label.startswith(checks):
            continue
        engine = models.engine(recipe)
        single = [engine.generate(p, SamplingParams(max_new_tokens=n, ignore_eos=True),
                                  replay=ReplayPlan(ref, AcceptanceProfile.parametric(6.0, block),
                                                    models.target.vocab_size, seed=i)
                                  if replay else None)
                  for i, (p, n, ref) in enumerate(zip(prompts, lengths, alone))]
        out[label] = {"graphs": engine.use_graphs,
                      "mismatched_requests": sum(s.tokens != r for s, r in zip(single, alone)),
                      "tau": _tau([n for s in single for n in s.accept_lengths]),
                      "steps_through_an_alternative": sum(p > 0 for s in single
                                                          for p in s.tree_paths)}
    two_stage = STOCK.replace(two_stage=((2, 10, 3),))
    # the confidence budget: a steep steps/s table verifies narrow, a flat one whole windows
    steep = STOCK.replace(verify_budget="sps", sps_table=((1, 100.0), (4, 60.0), (8, 30.0),
                                                          (64, 4.0)))
    flat = STOCK.replace(verify_budget="sps", sps_table=((1, 100.0), (256, 100.0)))
    for label, recipe, replay in (
            ("batched_ar", AR, False), ("batched_stock", STOCK, False),
            # replayed rows' drafts and drawn counts built on the device (ReplayRows)
            ("batched_stock_replayed", STOCK, True),
            ("batched_stock_replay", STOCK.replace(gdn_rollback="replay"), False),
            ("batched_ar_prefill", AR.replace(batched_prefill=True), False),
            ("batched_stock_fused_prefill", fused.replace(batched_prefill=True), False),
            # two stages (attention-only targets); replayed acceptance (drafts = the AR tokens,
            # counts drawn at tau 6) so that second stages run on the tiny pair
            ("batched_two_stage", two_stage, False),
            ("batched_two_stage_replayed", two_stage, True),
            ("batched_budget_steep", steep, False),
            ("batched_budget_steep_replayed", steep, True),
            ("batched_budget_flat_replayed", flat, True),
            # the host reads step k after step k+1 is queued (graphs, async copies, events)
            ("batched_overlap_ar", AR.replace(overlap_schedule=True), False),
            ("batched_overlap_stock", STOCK.replace(overlap_schedule=True), False),
            ("batched_overlap_stock_replayed", STOCK.replace(overlap_schedule=True), True)):
        if not label.startswith(checks):
            continue
        started = time.perf_counter()
        try:
            batch = BatchEngine(models.engine(recipe), NUM_REQUESTS)
        except ValueError as err:  # two stages on a hybrid target: refused, with the reason
            out[label] = {"skipped": str(err), "mismatched_requests": 0}
            continue
        capture_s = time.perf_counter() - started
        second_stage_rows = []
        first_stage_only = batch._second_stage

        def counting(size, table, captured, _f=first_stage_only, _rows=second_stage_rows,
                     _b=batch):
            _rows.append(int(_b._passed[:size].sum()))
            return _f(size, table, captured)

        batch._second_stage = counting
        requests = [Running(str(i), list(p), SamplingParams(max_new_tokens=n, ignore_eos=True,
                                                            stop_token_ids=s), set(s))
                    for i, (p, n, s) in enumerate(zip(prompts, lengths, stops))]
        if replay:
            for req, ref in zip(requests, alone):
                req.replay = ReplayPlan(ref, AcceptanceProfile.parametric(6.0, block),
                                        models.target.vocab_size, seed=int(req.request_id))
        steps = run_requests(batch, requests)
        got = [r.tokens for r in requests]
        out[label] = {"graphs": bool(batch._graphs), "buckets": batch.buckets,
                      "capture_s": capture_s, "steps": steps,
                      "second_stage_rows": sum(second_stage_rows),
                      "overlapped_steps": batch.overlapped_steps,
                      "budget_widths": {str(w): batch.budget_steps[w]
                                        for w in sorted(batch.budget_steps)},
                      "mismatched_requests": sum(g != e for g, e in zip(got, expected)),
                      "first_mismatch": next(({"request": i, "got": g, "expected": e}
                                              for i, (g, e) in enumerate(zip(got, expected))
                                              if g != e), None),
                      "tau": _tau([n for r in requests for n in r.accept_lengths])}
    return out


def _tau(lengths: list[int]) -> float | None:
    return sum(lengths) / len(lengths) if lengths else None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--settings", default="cpu_c1_tiny,cpu_c1_tiny-muse")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--checks", default="", help="comma-separated label prefixes (all: '')")
    args = parser.parse_args(argv)
    import torch

    from specpilot import fingerprint

    torch.backends.cuda.matmul.allow_tf32 = False
    OUT.mkdir(parents=True, exist_ok=True)
    record = {"kind": "gpu_parity", "dtype": args.dtype, "settings": []}
    failed = False
    for name in args.settings.split(","):
        row = check(on_device(name, args.dtype, args.device), tuple(args.checks.split(",")))
        record["settings"].append(row)
        failed |= any(row[k]["mismatched_requests"] for k in row if k.startswith(("single",
                                                                                 "batched")))
        print(json.dumps({k: v if not isinstance(v, dict) else
                          {kk: vv for kk, vv in v.items() if kk != "first_mismatch"}
                          for k, v in row.items()}), flush=True)
        record["fingerprint"] = fingerprint.current(args.device).to_dict()
        (OUT / "gpu-parity.json").write_text(json.dumps(record, indent=1))
    record["passed"] = not failed
    (OUT / "gpu-parity.json").write_text(json.dumps(record, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
