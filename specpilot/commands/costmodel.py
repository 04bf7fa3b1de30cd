"""``specpilot costmodel SETTING``: per-phase floors, the speedup bound, and (with a measured record)
the gap table that says which phase is farthest from its hardware ceiling."""

import dataclasses
import json
from typing import Annotated

from specpilot.cli import Positional


@dataclasses.dataclass(frozen=True)
class Args:
    setting: Annotated[str, Positional, "deployment setting, e.g. h200_c1_qwen38-27b_dflash2"]
    gpu: Annotated[str | None, "GPU ceilings to use (default: the setting's gpu)"] = None
    tau: Annotated[float | None, "acceptance length for the bound (default: the setting's "
                                 "replay profile)"] = None
    context: Annotated[int, "context length (tokens) the KV/state reads assume"] = 512
    rollback: Annotated[str, "Gated-DeltaNet rollback: snapshot or replay"] = "snapshot"
    measured: Annotated[str | None, "a bench record (JSON) whose phases fill the gap table"] = None
    concurrency: Annotated[int, "requests decoded together (weights read once for all)"] = 1
    prompt_tokens: Annotated[int, "prompt length of a request joining the batch (admission "
                             "terms)"] = 128
    prefill_fixed_ms: Annotated[float, "fixed cost of one prefill forward (launches, host work), "
                                "e.g. measured; 0 = floors only"] = 0.0
    host_step_ms: Annotated[float, "host work per batched decode step (reading the step, "
                            "bookkeeping), e.g. measured; > 0 prints overlapped scheduling's "
                            "term"] = 0.0

    def __post_init__(self):
        if self.context < 1:
            raise ValueError("--context must be >= 1")
        if self.concurrency < 1:
            raise ValueError("--concurrency must be >= 1")
        if self.prompt_tokens < 1:
            raise ValueError("--prompt-tokens must be >= 1")
        if self.prefill_fixed_ms < 0:
            raise ValueError("--prefill-fixed-ms must be >= 0")
        if self.host_step_ms < 0:
            raise ValueError("--host-step-ms must be >= 0")
        if self.host_step_ms > 0 and self.concurrency == 1:
            raise ValueError("--host-step-ms prices overlapped scheduling, a batch mechanism: "
                             "give --concurrency N > 1 too")
        if self.rollback not in ("snapshot", "replay"):
            raise ValueError("--rollback must be snapshot or replay")


def _config(setting, source, role):
    from specpilot.build import resolve
    from specpilot.engines.models.loader import read_config

    resolved = resolve(source, setting, role)
    return resolved if isinstance(resolved, dict) else read_config(resolved)


def run(args: Args) -> int:
    from specpilot.costmodel import GPUS
    from specpilot.costmodel import engine_costs
    from specpilot.costmodel import gap_table
    from specpilot.costmodel import speedup_bound
    from specpilot.errors import SpecPilotError
    from specpilot.settings import load_setting

    setting = load_setting(args.setting)
    gpu_key = args.gpu or setting.gpu
    if gpu_key not in GPUS:
        raise SpecPilotError(f"no ceilings for gpu {gpu_key!r}; known: {sorted(GPUS)} (use --gpu)")
    gpu = GPUS[gpu_key]
    target = _config(setting, setting.target, "target")
    drafter = _config(setting, setting.drafter, "drafter") if setting.drafter else None
    block = 1
    if drafter is not None:
        from specpilot.costmodel.phases import _meta_model

        block = _meta_model(drafter).block_size
    costs = engine_costs(target, drafter, gpu, block, args.context, args.rollback,
                         args.concurrency)
    print(f"{setting.name} on {gpu.name} ({gpu.source}); context {args.context}, block {block}, "
          f"{args.concurrency} request(s) per step")
    for cost in costs.values():
        print(f"  {cost.name:7s} {cost.bytes / 1e9:8.3f} GB  {cost.flops / 1e12:8.3f} TFLOP  "
              f"floor {cost.floor_ms:8.3f} ms")
    tau = args.tau
    profile = setting.scenario.acceptance_profile
    if tau is None and profile and profile.startswith("tau:"):
        tau = float(profile.split(":", 1)[1])
    if drafter is not None and tau is not None:
        print(f"  speedup bound at tau {tau:g}: {speedup_bound(costs, tau):.2f}x over AR")
    if drafter is not None and (profile or tau is not None):
        _batching_terms(args, setting, target, drafter, gpu, block, profile or f"tau:{tau:g}")
    if args.measured:
        record = json.loads(open(args.measured).read())
        phases = (record.get("summary") or {}).get("phases") or {}
        if not phases.get("measured"):
            raise SpecPilotError(f"{args.measured} has no measured phases")
        measured = dict(phases["ms_per_step"])
        if drafter is None:
            measured = {"ar": measured.get("verify", 0.0)}
        print("  gap table (largest excess over the floor first):")
        for row in gap_table(costs, measured):
            print(f"    {row['phase']:7s} measured {row['measured_ms']:8.3f} ms  floor "
                  f"{row['floor_ms']:8.3f} ms  x{row['gap']:.2f}  (+{row['excess_ms']:.3f} ms)")
    return 0


def _batching_terms(args, setting, target, drafter, gpu, block: int, profile: str) -> None:
    """The verify-shape terms: the verify width with the best bound, deeper drafting's and (one
    request) tree verification's upper bounds, two-stage verification at its best prefix against
    one stage of the whole block and against the best single-stage width (and, for a batch,
    grouped admission and the widths by occupancy)."""
    from specpilot.bench.workload import load_profile
    from specpilot.costmodel.phases import bound_by_width
    from specpilot.costmodel.phases import TREE_TAU_GAIN_PROXY
    from specpilot.costmodel.phases import deeper_drafting_bound
    from specpilot.costmodel.phases import tree_verify_bound
    from specpilot.costmodel.phases import two_stage_bound
    from specpilot.costmodel.phases import two_stage_verify_ms

    probs = load_profile(profile, block, setting.directory).probs
    widths = bound_by_width(target, drafter, gpu, block, args.concurrency, probs, args.context,
                            args.rollback)
    best = max(widths, key=widths.get)
    print(f"  verify width ({profile}): best {best} rows per request, bound {widths[best]:.2f}x "
          f"(the full block of {block}: {widths[block]:.2f}x)")
    deeper = deeper_drafting_bound(target, drafter, gpu, block, args.concurrency, probs,
                                   args.context, args.rollback)
    print(f"  deeper drafting ({profile}; upper bound): a block is fully accepted with p = "
          f"{deeper['p_full_block']:.3f}; bound {deeper['two_blocks']:.2f}x with a second block "
          f"vs {deeper['one_block']:.2f}x ({deeper['ratio']:.2f}x: "
          f"{'pays' if deeper['ratio'] > 1.0 else 'does not pay'})")
    if args.concurrency == 1:
        tree = tree_verify_bound(target, drafter, gpu, block, probs, 2 * block, 4,
                                 context=args.context, rollback=args.rollback)
        print(f"  tree verify ({profile}; upper bound, {2 * block} nodes on 4 paths, tau "
              f"+{TREE_TAU_GAIN_PROXY:.1%} as measured on the proxy pair): verify "
              f"{tree['verify_ms'][0]:.3f} -> {tree['verify_ms'][1]:.3f} ms, bound "
              f"{tree['tree']:.2f}x vs {tree['chain']:.2f}x ({tree['ratio']:.2f}x: "
              f"{'pays' if tree['ratio'] > 1.0 else 'does not pay'})")
    two = two_stage_verify_ms(target, drafter, gpu, block, args.concurrency, probs,
                              args.context, args.rollback)
    print(f"  two-stage verify ({profile}): best prefix {two['best_prefix']}, "
          f"{two['best_ms']:.3f} ms vs {two['one_stage_ms']:.3f} ms in one stage "
          f"({two['speedup']:.2f}x)")
    vs = two_stage_bound(target, drafter, gpu, block, args.concurrency, probs, args.context,
                         args.rollback)
    verdict = "pays" if vs["ratio"] > 1.0 else "does not pay"
    print(f"  two-stage verify against verifying fewer positions: bound "
          f"{vs['two_stage_bound']:.2f}x (window {vs['two_stage_width']}, prefix "
          f"{vs['two_stage_prefix']}) vs {vs['single_bound']:.2f}x at width {vs['single_width']} "
          f"in one stage ({vs['ratio']:.2f}x: {verdict})")
    if args.concurrency > 1:
        _admission_term(args, setting, target, drafter, gpu, block, probs)
        from specpilot.search.gaps import occupancy_widths

        widths = occupancy_widths(setting, args.concurrency, lambda rows: bound_by_width(
            target, drafter, gpu, block, rows, probs, args.context, args.rollback))
        print(f"  verify width by occupancy (recipe verify_widths, rows >= N -> width): "
              f"{widths or 'the whole block at every bucket'}")
        from specpilot.costmodel.phases import two_stage_bound
        from specpilot.search.gaps import two_stage_table

        stages = two_stage_table(setting, args.concurrency, lambda rows: two_stage_bound(
            target, drafter, gpu, block, rows, probs, args.context, args.rollback))
        print(f"  two-stage verify by occupancy (recipe two_stage, rows >= N -> window, prefix): "
              f"{stages or 'never above the best single-stage width'}")


def _admission_term(args, setting, target, drafter, gpu, block: int, probs) -> None:
    """Grouped admission (the catalog's delta) against joining at once, per joining request."""
    from specpilot.costmodel import engine_costs
    from specpilot.costmodel.phases import admission_ms
    from specpilot.search.catalog import load_catalog

    delta = next(m.delta for m in load_catalog() if m.name == "grouped-admission")
    costs = engine_costs(target, drafter, gpu, block, args.context, args.rollback,
                         args.concurrency)
    step_ms = sum(costs[p].floor_ms for p in ("draft", "verify", "commit"))
    tau = 1.0 + sum(k * p for k, p in enumerate(probs))  # tokens per step (P(k accepted))
    finishes = args.concurrency * tau / setting.scenario.max_new_tokens
    common = (target, drafter, gpu, args.concurrency, args.prompt_tokens, step_ms, finishes)
    now = admission_ms(*common, 0.0, 0, args.prefill_fixed_ms)
    grouped = admission_ms(*common, delta["admit_ratio"], delta["admit_max_wait_steps"],
                           args.prefill_fixed_ms)
    if args.host_step_ms > 0:
        from specpilot.costmodel.phases import overlap_schedule_bound

        overlap = overlap_schedule_bound(step_ms, args.host_step_ms,
                                         setting.scenario.max_new_tokens, tau)
        print(f"  overlapped scheduling (host {args.host_step_ms:g} ms per step over a "
              f"{step_ms:.2f} ms floor step; {setting.scenario.max_new_tokens} tokens per "
              f"request at tau {tau:.2f}): steps {overlap['step_ratio']:.3f}x faster, rows "
              f"held one step longer x{overlap['occupancy']:.3f}: decode wall "
              f"{overlap['decode']:.3f}x")
    verdict = "pays" if grouped["total_ms"] < now["total_ms"] else "does not pay"
    print(f"  grouped admission (ratio {delta['admit_ratio']:g}, wait <= "
          f"{delta['admit_max_wait_steps']} steps; {finishes:.2f} requests finish per step): "
          f"{grouped['total_ms']:.3f} ms per joining request (group {grouped['group']:.1f}, idle "
          f"{grouped['idle_ms']:.3f} ms) vs {now['total_ms']:.3f} ms at once "
          f"(group {now['group']:.1f}): {verdict}")

