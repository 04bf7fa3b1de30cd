"""``specpilot bench SETTING --engine E``: warm up, run the setting's prompt mix, record it.

``--scenario c1`` (one request at a time): decode tok/s, ms/token, tau and its histogram.
``--scenario cN``: throughput and per-request latency (TTFT, end to end, inter-token) at
concurrency 1, 2, 4 .. the setting's, through the engine's continuous-batching scheduler.
``--url`` runs the same prompts against a running SGLang / OpenAI-compatible server instead.
Every run is appended to the results store with its fingerprint and plots.
"""

import dataclasses
from typing import Annotated
from typing import Literal

from specpilot.cli import Positional


@dataclasses.dataclass(frozen=True)
class Args:
    setting: Annotated[str, Positional, "deployment setting, e.g. cpu_c1_tiny"]
    engine: Annotated[str, "engine: ar, stock, or a recipe name of the setting"] = "stock"
    scenario: Annotated[Literal["c1", "cN"], "c1: one request at a time; cN: continuous "
                        "batching at concurrency 1, 2, 4 .. the setting's"] = "c1"
    max_concurrency: Annotated[int | None, "largest concurrency of --scenario cN "
                               "(default: the setting's)"] = None
    url: Annotated[str | None, "benchmark the server at this base URL instead, "
                   "e.g. http://localhost:30000"] = None
    api: Annotated[Literal["auto", "sglang", "openai"], "server API for --url"] = "auto"
    dataset: Annotated[str | None, "bundled prompt set (default: the setting's)"] = None
    num_prompts: Annotated[int | None, "number of prompts (default: the setting's)"] = None
    max_new_tokens: Annotated[int | None, "tokens per prompt (default: the setting's)"] = None
    ignore_eos: Annotated[bool, "generate max-new-tokens for every prompt"] = True
    warmup: Annotated[bool, "warm-up generation first (compile, graph capture)"] = True
    json: Annotated[str | None, "also write the record as JSON to this path"] = None
    results_dir: Annotated[str | None, "results store (default: $SPECPILOT_RESULTS_DIR or "
                           "experiments/results)"] = None

    def __post_init__(self):
        for name in ("num_prompts", "max_new_tokens"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 1")
        if self.url is None and self.api != "auto":
            raise ValueError("--api applies to --url only")
        if self.max_concurrency is not None and (self.max_concurrency < 1 or
                                                 self.scenario != "cN"):
            raise ValueError("--max-concurrency needs --scenario cN and a value >= 1")


def _levels(args: Args, setting) -> list[int]:
    from specpilot.bench.workload import concurrency_levels

    if args.scenario == "c1":
        return [1]
    return concurrency_levels(args.max_concurrency or setting.scenario.concurrency)


def _without_requests(levels: list[dict]) -> list[dict]:
    return [{k: v for k, v in level.items() if k != "per_prompt"} for level in levels]


def _local(args: Args, setting) -> dict:
    from specpilot.bench import bench_engine
    from specpilot.bench import header
    from specpilot.bench import replay_for
    from specpilot.bench import workload_for
    from specpilot.bench.batched import bench_level
    from specpilot.bench.progress import progress_bar
    from specpilot.bench.runner import summarize
    from specpilot.build import load_models
    from specpilot.engine_names import recipe_for
    recipe = recipe_for(setting, args.engine)
    replayed = bool(setting.scenario.acceptance_profile) and recipe.speculative
    models = load_models(setting, with_drafter=recipe.speculative)
    engine = models.engine(recipe)
    workload = workload_for(setting, models.tokenizer, args.dataset, args.num_prompts,
                            args.max_new_tokens, args.ignore_eos)
    head = header("bench", setting, args.engine, recipe)
    replay = None
    if replayed:
        with progress_bar("AR reference for replay", len(workload.prompts)) as advance:
            replay = replay_for(models, workload, progress=advance)
    acceptance = replay.label if replay is not None else "measured"
    if args.scenario == "cN":
        levels = []
        for level in _levels(args, setting):
            with progress_bar(f"{args.engine} concurrency {level}", len(workload.prompts)) as adv:
                levels.append(bench_level(engine, workload, level, args.warmup, adv, replay))
        return {**head, "scenario": "cN", "acceptance": acceptance,
                "prompts": workload.to_dict(), "per_prompt": levels[0]["per_prompt"],
                "summary": summarize(levels[0]["per_prompt"]),
                "levels": _without_requests(levels)}
    with progress_bar(f"bench {args.engine}", len(workload.prompts)) as advance:
        body = bench_engine(engine, workload, replay, warmup=args.warmup, progress=advance)
    return {**head, **body}


def _remote(args: Args, setting) -> dict:
    from pathlib import Path

    from specpilot.bench import header
    from specpilot.bench import remote
    from specpilot.bench import workload_for
    from specpilot.bench.progress import progress_bar
    from specpilot.bench.runner import summarize
    from specpilot.build import load_tokenizer
    from specpilot.build import resolve

    target = resolve(setting.target, setting, "target")
    tokenizer = load_tokenizer(setting, target if isinstance(target, Path) else None)
    workload = workload_for(setting, tokenizer, args.dataset, args.num_prompts,
                            args.max_new_tokens, args.ignore_eos)
    server, about = remote.connect(args.url, args.api)
    texts = list(workload.texts)
    if args.warmup:
        remote.stream_request(server, texts[0], workload.params)
    results = []
    for level in _levels(args, setting):
        with progress_bar(f"{server.api} concurrency {level}", len(texts)) as advance:
            results.append(remote.run_level(server, texts, workload.params, level, advance))
    fingerprint = {"gpu": f"remote:{server.url}", "compute_capability": "unknown",
                   "driver": "unknown", "cuda": "unknown", "torch": "unknown",
                   "triton": "unknown", "python": "unknown", "commit": "unknown"}
    summary = summarize(results[0]["per_prompt"])
    summary.update(tau=results[0]["tau"], ttft_ms=results[0]["ttft_ms"],
                   phases={"measured": False, "reason": "a remote server reports no phase times"})
    return {**header("bench", setting, f"remote:{server.api}", None, fingerprint),
            "url": server.url, "server": about, "scenario": args.scenario,
            "acceptance": "server", "prompts": workload.to_dict(),
            "per_prompt": results[0]["per_prompt"], "summary": summary,
            "levels": _without_requests(results)}


def _print(record: dict) -> None:
    s = record["summary"]
    fp = record["fingerprint"]
    print(f"bench {record['setting']} --engine {record['engine']} [{record['acceptance']}] on "
          f"{fp['gpu']}: {s['num_prompts']} prompts, {s['num_tokens']} tokens")
    ms = s.get("ms_per_token") or {}

    def num(value, spec: str = ".2f") -> str:
        return "n/a" if value is None else format(value, spec)

    print(f"  decode {num(s['tok_s'], '.1f')} tok/s, ms/token median {num(ms.get('median'))} "
          f"(p20 {num(ms.get('p20'))}, p80 {num(ms.get('p80'))}), tau {num(s.get('tau'))}")
    if s.get("tau_histogram"):
        print("  accept lengths: " + ", ".join(f"{k}: {v}" for k, v in s["tau_histogram"].items()))
    for level in record.get("levels", []):
        lat = level["request_latency_s"]
        print(f"  concurrency {level['concurrency']}: {level['output_tok_s']:.1f} tok/s, "
              f"request latency median {lat['median']:.3f} s, TTFT median "
              f"{level['ttft_ms']['median']:.1f} ms")
    phases = s.get("phases") or {}
    if phases.get("measured"):
        parts = ", ".join(f"{k} {v:.3f}" for k, v in phases["ms_per_step"].items())
        print(f"  ms per step by phase ({phases['clock']}): {parts}")
    print(f"  stored: {record['store_path']}")
    for plot in record["plots"]:
        print(f"  plot: {plot}")


def run(args: Args) -> int:
    from specpilot.bench import publish
    from specpilot.settings import load_setting

    setting = load_setting(args.setting)
    record = _remote(args, setting) if args.url else _local(args, setting)
    _print(publish(record, args.results_dir, args.json))
    return 0
