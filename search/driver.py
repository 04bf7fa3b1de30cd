"""The campaign driver (DESIGN.md §7): the only writer of MLflow, Optuna and the knowledge store.

One round:
1. measure the champion (ms/token, tau, per-phase ms/step) on a worker and build the gap table
   (measured vs the cost model's floor per phase); stop when every phase is near its floor;
2. proposal agents (Ray CPU tasks that see no GPU) propose recipe edits from the gap table, the
   knowledge store's priors and what was tried;
3. workers evaluate the candidates in parallel: build -> token forcing -> A/B vs the champion;
4. winners (CI lower bound above 1 + min_effect) are merged when their deltas are compatible,
   and the merged engine is re-validated and re-benchmarked as a whole; the best becomes champion;
5. the kernel sub-agent tunes the GEMM farthest from its ceiling;
6. knowledge rows for every verdict.
Every attempt is an MLflow run. A restarted driver with the same config regenerates the same rounds
(agents are deterministic given the records) and skips every trial already recorded.
"""

import dataclasses
import json
import os
import socket
import time
from pathlib import Path

from specpilot.errors import SpecPilotError
from specpilot.fingerprint import stable_hash
from specpilot.recipe import GROUP_FIELDS
from specpilot.recipe import STOCK
from specpilot.recipe import Recipe
from specpilot.recipe import merge_field
from specpilot.search.agents import AGENTS
from specpilot.search.agents import AgentContext
from specpilot.search.agents import Proposal
from specpilot.search.config import CampaignConfig
from specpilot.search.execution import Job
from specpilot.search.execution import run_jobs
from specpilot.search.knowledge import KnowledgeStore
from specpilot.search.knowledge import trial_row

PASS_ENV = ("SPECPILOT_HOME", "SPECPILOT_SETTINGS_DIR", "SPECPILOT_COMMIT",
            "SPECPILOT_CAMPAIGN_DIR", "SPECPILOT_CACHE_DIR", "PYTHONPATH")
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                 "NVSHMEM_DISABLE_NVLS": "1"}
"""NVLink multicast stays off in every process the campaign starts (shared GPU hosts)."""


def default_store_dir() -> Path:
    """``$SPECPILOT_CAMPAIGN_DIR``, else ``$SPECPILOT_HOME/campaigns``."""
    if os.environ.get("SPECPILOT_CAMPAIGN_DIR"):
        return Path(os.environ["SPECPILOT_CAMPAIGN_DIR"])
    home = Path(os.environ.get("SPECPILOT_HOME", Path.home() / ".cache" / "specpilot"))
    return home / "campaigns"


def connect_ray(address: str | None, num_workers: int, cpu_setting: bool, log=print) -> None:
    """Join the given cluster (checked first: unreachable fails at once), else a cluster that
    ``ray start`` runs on this machine (as ``ray.init()`` would), else start a local one."""
    import ray

    if ray.is_initialized():
        return
    env_address = os.environ.get("RAY_ADDRESS")
    target = address or env_address
    if target and target != "auto" and not target.startswith("ray://"):
        host, _, port = target.removeprefix("http://").partition(":")
        try:
            socket.create_connection((host, int(port or 6379)), timeout=5).close()
        except (OSError, ValueError) as err:
            raise SpecPilotError(f"Ray cluster at {target} is unreachable: {err}") from err
    if target:
        try:
            ray.init(address=target, logging_level="ERROR", log_to_driver=False)
        except (ConnectionError, RuntimeError) as err:
            raise SpecPilotError(f"cannot join the Ray cluster at {target}: {err}") from err
        return
    try:
        ray.init(address="auto", logging_level="ERROR", log_to_driver=False)
        log(f"joined the Ray cluster running on this machine ({ray.get_runtime_context().gcs_address})")
        return
    except ConnectionError:
        pass  # none: start one
    kwargs = {"num_cpus": max(2, num_workers + 1), "include_dashboard": False,
              "logging_level": "ERROR", "log_to_driver": False}
    if cpu_setting:
        kwargs["num_gpus"] = num_workers  # logical GPUs: scheduling is exercised, no CUDA used
    ray.init(**kwargs)


def _run_agent(name: str, config: CampaignConfig, context: AgentContext) -> dict:
    agent = AGENTS[name](config)
    proposals = agent.propose(context)
    return {"proposals": proposals, "rejected": getattr(agent, "rejected", []),
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}


def cpu_helper_options() -> dict:
    """Ray options of CPU-only helpers: no GPU reserved and none visible."""
    return {"num_cpus": 0, "num_gpus": 0,
            "runtime_env": {"env_vars": {"CUDA_VISIBLE_DEVICES": "", **MULTICAST_OFF}}}


def merge_deltas(winners: list[tuple[Proposal, float]]) -> dict | None:
    """Union of the winners' deltas, best first, skipping any that conflicts (group fields such as
    ``w12`` never conflict: their groups add up); None if < 2 merge."""
    merged, used = {}, 0
    for proposal, _ in sorted(winners, key=lambda w: -w[1]):
        if proposal.fault is not None:
            continue
        if any(k in merged and k not in GROUP_FIELDS and merged[k] != v
               for k, v in proposal.delta.items()):
            continue
        for k, v in proposal.delta.items():
            merged[k] = list(merge_field(k, merged.get(k, ()), v)) if k in GROUP_FIELDS else v
        used += 1
    return merged if used >= 2 else None


class Campaign:
    def __init__(self, config: CampaignConfig, log=print):
        from specpilot.search.catalog import model_configs
        from specpilot.search.catalog import setting_features
        from specpilot.search.records import CampaignRecords
        from specpilot.settings import load_setting

        self.config, self.log = config, log
        self.setting = load_setting(config.setting)  # an unknown setting fails here, at once
        self.store_dir = Path(config.campaign_dir) if config.campaign_dir else default_store_dir()
        self.store_dir.mkdir(parents=True, exist_ok=True)
        self.tracking_uri = config.tracking_uri or f"sqlite:///{self.store_dir / 'mlflow.db'}"
        self.campaign_id = config.campaign_id()
        self.cpu = not self.setting.engine.device.startswith("cuda")
        from specpilot.search.records import check_tracking_uri

        check_tracking_uri(self.tracking_uri)
        connect_ray(config.ray_address, config.num_workers, self.cpu, log)
        self.features = setting_features(self.setting)
        self._width_bounds: dict | None = None  # the cost model's bound per verify width
        self.target_config, _ = model_configs(self.setting)
        self.records = CampaignRecords(self.tracking_uri, self.store_dir / "artifacts",
                                       config.setting, self.campaign_id, config.to_dict())
        self.knowledge = KnowledgeStore(config.knowledge_dir or self.store_dir / "knowledge")
        self.done = self.records.done_trials()
        self.optuna_journal = str(self.store_dir / "optuna.journal")
        self.trials_run = 0
        self.started = time.monotonic()
        from specpilot.workers.pool import WorkerPool

        self.pool = WorkerPool(self.setting.gpu, config.num_workers, self._worker_env())
        self.evaluated: list[dict] = []  # (round, kind, mechanism, key, state) in order
        self.proposed: list[dict] = []  # per round, the proposals in the order they were run
        self.on_job_start = None
        """Optional ``f(job, worker)`` called when a job is handed to a worker (monitoring)."""

    # --- jobs ---------------------------------------------------------------------------------
    def _worker_env(self) -> dict:
        env = {k: os.environ[k] for k in PASS_ENV if k in os.environ}
        env.update(MULTICAST_OFF)
        if self.cpu:
            env.update({"CUDA_VISIBLE_DEVICES": "", "TRITON_INTERPRET": "1"})
        return env

    def _job_spec(self, kind: str, **fields) -> dict:
        c = self.config
        spec = {"kind": kind, "setting": c.setting, "seed": c.seed,
                "device": self.setting.engine.device,
                "validation": {"num_prompts": c.validation_prompts,
                               "max_new_tokens": c.validation_tokens},
                "bench": {"num_prompts": c.bench_prompts, "max_new_tokens": c.bench_tokens,
                          "half_width": c.compare_half_width, "budget_s": c.compare_budget_s,
                          "max_rounds": c.compare_max_rounds}, **fields}
        return spec

    def _execute(self, jobs: list[Job]) -> dict[str, dict]:
        """Run ``jobs`` (skipping recorded ones); key -> result. Every attempt is recorded."""
        results, todo = {}, []
        for job in jobs:
            if job.key in self.done:
                results[job.key] = self.done[job.key]
                self.log(f"  [resume] {job.meta.get('mechanism', job.spec['kind'])}: recorded "
                         f"{self.done[job.key].get('state')}")
            else:
                todo.append(job)

        def record(job: Job, result: dict) -> str:
            recipe = job.spec.get("recipe")
            return self.records.log_trial(job.key, job.meta.get("kind", job.spec["kind"]),
                                          job.meta.get("round", 0), job.meta.get("proposal"),
                                          recipe, result)

        def on_done(job: Job, result: dict) -> None:
            result["run_id"] = record(job, result)
            self._remember(job, result)
            self.done[job.key] = result
            results[job.key] = result
            self.trials_run += 1
            self.evaluated.append({"round": job.meta.get("round", 0),
                                   "kind": job.meta.get("kind", job.spec["kind"]),
                                   "mechanism": job.meta.get("mechanism"), "key": job.key,
                                   "state": result["state"]})
            self.log(f"  {job.meta.get('mechanism', job.spec['kind'])}: {result['state']}"
                     f"{_brief(result)}")

        def on_lost(job: Job, lost: dict) -> None:
            record(job, lost)
            self.log(f"  {job.meta.get('mechanism', job.spec['kind'])}: worker lost (attempt "
                     f"{job.attempt}); re-running elsewhere")

        if todo:
            run_jobs(self.pool, todo, self.config.trial_timeout_s, self.config.max_attempts,
                     on_done, on_lost, self.on_job_start)
        return results

    # --- steps --------------------------------------------------------------------------------
    def measure(self, champion: Recipe, round_: int) -> dict:
        key = stable_hash({"measure": champion.hash(), "round": round_})
        job = Job(key, self._job_spec("measure", recipe=champion.to_dict()),
                  {"round": round_, "kind": "measure", "mechanism": f"measure:{champion.name}"})
        return self._execute([job])[key]

    def gap_rows(self, measured: dict, champion: Recipe) -> list[dict]:
        from specpilot.search.gaps import gap_rows

        return gap_rows(self.setting, self.features, measured, champion)

    def propose(self, champion: Recipe, gaps: list[dict], round_: int) -> list[Proposal]:
        import ray

        priors = (self.knowledge.priors(self.features, exclude_campaign=self.campaign_id)
                  if self.config.priors else {})
        tried = frozenset(self._tried)
        if self._width_bounds is None:
            from specpilot.search.gaps import width_bounds

            self._width_bounds = width_bounds(self.setting)
        context = AgentContext(self.config.setting, self.features, champion, gaps, tried, priors,
                               round_, self.config.seed, self.config.proposals_per_agent,
                               self._width_bounds)
        task = ray.remote(_run_agent).options(**cpu_helper_options())
        refs = [task.remote(name, self.config, context) for name in self.config.agents]
        proposals, seen = [], set()
        for name, out in zip(self.config.agents, ray.get(refs)):
            for rejected in out["rejected"]:
                self.records.log_trial(stable_hash(rejected), "rejected", round_,
                                       {"mechanism": f"{name}:rejected", "agent": name,
                                        "delta": {}}, None,
                                       {"state": "rejected", "error": rejected["reason"]})
                self.log(f"  {name} proposal rejected: {rejected['reason']}")
            for p in out["proposals"]:
                key = p.key(champion)
                if key not in seen:
                    seen.add(key)
                    proposals.append(p)
        return proposals

    def evaluate(self, champion: Recipe, proposals: list[Proposal], round_: int,
                 kind: str = "candidate") -> list[tuple[Proposal, dict]]:
        jobs = []
        for p in proposals:
            recipe = p.recipe(champion)
            key = stable_hash({"candidate": p.key(champion), "champion": champion.hash()})
            spec = self._job_spec("candidate", recipe=recipe.to_dict(),
                                  champion=champion.to_dict(), fault=p.fault, name=p.mechanism)
            meta = {"round": round_, "kind": kind, "mechanism": p.mechanism,
                    "proposal": dataclasses.asdict(p)}
            jobs.append(Job(key, spec, meta))
            self._tried.add(p.key(champion))
        results = self._execute(jobs)
        return [(p, results[job.key]) for p, job in zip(proposals, jobs)]

    def _wins(self, result: dict) -> bool:
        compare = result.get("compare") or {}
        ci = compare.get("ci95") or [0.0, 0.0]
        return result.get("state") == "ok" and ci[0] is not None and \
            len(compare.get("ratios") or []) >= self.config.min_pairs and \
            ci[0] > 1.0 + self.config.min_effect

    def kernel_step(self, champion: Recipe, round_: int) -> dict | None:
        from optuna.trial import TrialState

        from specpilot.costmodel import GPUS
        from specpilot.kernels.tuning import cache
        from specpilot.kernels.tuning.ops import space_of
        from specpilot.search import kernel_agent as ka

        if self.config.kernel_trials == 0:
            return None
        gpu = GPUS.get(self.setting.gpu)
        m = (champion.block_size or self.features.get("block_size") or 1) \
            if champion.speculative else 1
        reps = self.config.kernel_reps
        survey_key = stable_hash({"kernel_survey": round_, "m": m, "champion": champion.hash()})
        survey = self._execute([Job(survey_key, self._job_spec(
            "kernel_survey", m=m, reps=reps, gemms=ka.target_gemms(self.target_config, champion)),
            {"round": round_, "kind": "kernel", "mechanism": "kernel-survey"})])[survey_key]
        if survey.get("state") != "ok" or not survey.get("rows"):
            return None
        worst = ka.farthest(survey["rows"], gpu.read_tb_s)
        # a survey recorded before rows named their op (a resumed campaign) timed the bf16 GEMM
        op, n, k = worst.get("op", ka.BF16_OP), worst["n"], worst["k"]
        space = space_of(op)
        bucket = space.m_bucket(m)
        kernel_key = _kernel_key(survey.get("fingerprint", {}))
        study = ka.open_study(self.optuna_journal, ka.study_name(self.config.setting, op, n, k,
                                                                 bucket, kernel_key),
                              self.config.seed)
        ka.warm_start(study, space, m, n, k, [worst["config"], *space.SWEEP])
        trials_key = stable_hash({"kernel_trials": round_, "study": study.study_name})
        if trials_key in self.done:
            return self.done[trials_key].get("entry")
        asked = ka.ask_configs(study, space, m, n, k, self.config.kernel_trials)
        if not asked:  # every proposal was invalid at this shape (each told as such)
            return None
        # each config within its share of the job's limit (a hung one is killed in the worker,
        # the rest still report), leaving two shares for the trial processes' start-ups
        config_timeout_s = self.config.trial_timeout_s / (len(asked) + 2)
        job = Job(trials_key, self._job_spec("kernel", op=op, m=m, n=n, k=k, reps=reps,
                                             configs=[c for _, c in asked],
                                             config_timeout_s=config_timeout_s),
                  {"round": round_, "kind": "kernel", "mechanism": f"kernel:{op}:{n}x{k}@m{m}"})
        result = self._execute([job])[trials_key]
        if result.get("state") != "ok":
            for trial, _ in asked:
                study.tell(trial, state=TrialState.FAIL)
            return None
        counts = ka.tell_results(study, asked, result["results"])
        entry = ka.best_entry(study, op, n, k, m, bucket, result.get("fingerprint", {}),
                              kernel_key, worst["traffic_bytes"], gpu.read_tb_s)
        if entry is not None:
            cache.store_entry(cache.entry_key(op, n, k, bucket, kernel_key), entry)
        summary = {"op": op, "shape": [n, k], "m": m, "survey": survey["rows"], "worst": worst,
                   "counts": counts, "best": entry, "study": study.study_name}
        self.records.log_event("kernel", summary)
        self.done[trials_key]["entry"] = entry
        self.log(f"  kernel sub-agent: {op} {n}x{k} at M={m} "
                 f"({worst['fraction_of_ceiling']:.2f} of the ceiling) -> {counts}")
        return entry

    # --- the loop -----------------------------------------------------------------------------
    def run(self) -> dict:
        """Run (or resume) the campaign; the workers' GPUs are released when it ends."""
        try:
            return self._run()
        finally:
            self.close()

    def close(self) -> None:
        """Release the workers (their GPUs); the records stay."""
        self.pool.close()

    def _run(self) -> dict:
        self._tried: set[str] = set()  # candidate engines evaluated so far (agents skip them)
        champion = self._start_champion()
        self.log(f"campaign {self.campaign_id} on {self.config.setting}: champion "
                 f"{champion.name}{' (resumed)' if self.records.resumed else ''}")
        stop_reason = "rounds"
        for round_ in range(1, self.config.rounds + 1):
            if time.monotonic() - self.started > self.config.time_budget_s:
                stop_reason = "time_budget"
                break
            self.log(f"round {round_}: measure {champion.name}")
            measured = self.measure(champion, round_)
            if self.records.champion() is None and measured.get("state") == "ok":
                self.records.set_champion(measured["run_id"], champion.to_dict(), {
                    "round": 0, "mechanism": "start", "speedup_vs_previous": 1.0})
            gaps = self.gap_rows(measured, champion)
            if gaps:
                self.records.log_event("gap_table", {"round": round_, "rows": gaps})
                top = gaps[0]
                predicted = (f", predicted {top['predicted_ms']:.3f} ms"
                             if "predicted_ms" in top else "")
                self.log(f"  gap table: {top['phase']} first ({top['measured_ms']:.3f} ms vs "
                         f"floor {top['floor_ms']:.3f} ms{predicted})")
                if all(r["gap"] <= 1.0 / self.config.bound_fraction for r in gaps):
                    stop_reason = "bound_reached"
                    break
            proposals = self.propose(champion, gaps, round_)
            if not proposals:
                stop_reason = "exhausted"
                break
            self.log(f"  {len(proposals)} proposals: {[p.mechanism for p in proposals]}")
            self.proposed.append({"round": round_, "mechanisms": [p.mechanism for p in proposals]})
            outcomes = self.evaluate(champion, proposals, round_)
            self._check_canaries(outcomes)
            winners = [(p, r["compare"]["median_speedup"]) for p, r in outcomes if self._wins(r)]
            merged = merge_deltas(winners)
            if merged is not None:
                merge = Proposal("merge", "merge:" + "+".join(
                    p.mechanism for p, _ in winners), merged, "compatible winners together")
                outcome = self.evaluate(champion, [merge], round_, kind="merge")
                outcomes += outcome
                if self._wins(outcome[0][1]):
                    winners.append((merge, outcome[0][1]["compare"]["median_speedup"]))
            if winners:
                best, _ = max(winners, key=lambda w: w[1])
                champion_result = next(r for p, r in outcomes if p is best)
                champion = best.recipe(champion).replace(name=f"r{round_}-{best.mechanism}")
                self.records.set_champion(champion_result["run_id"], champion.to_dict(), {
                    "round": round_, "mechanism": best.mechanism,
                    "speedup_vs_previous": champion_result["compare"]["median_speedup"]})
                self.log(f"  new champion {champion.name}: "
                         f"{champion_result['compare']['median_speedup']:.3f}x the previous")
            self.kernel_step(champion, round_)
        final = self.final(champion)
        summary = {"campaign_id": self.campaign_id, "setting": self.config.setting,
                   "stop_reason": stop_reason, "champion": champion.to_dict(),
                   "trials_run": self.trials_run, "evaluated": self.evaluated,
                   "proposed": self.proposed,
                   "tracking_uri": self.tracking_uri, "store_dir": str(self.store_dir),
                   "experiment": f"specpilot/{self.config.setting}", **final}
        self.records.finish(summary)
        self._write_final(champion)
        return summary

    def _start_champion(self) -> Recipe:
        tags = self.records.client.get_run(self.records.parent_id).data.tags
        if "start_champion" in tags:
            return Recipe.from_dict(json.loads(tags["start_champion"]))
        current = self.records.champion()
        if self.config.start_recipe is not None:
            recipe = Recipe.from_dict({**STOCK.to_dict(), "name": "start",
                                       **self.config.start_recipe})
        else:
            recipe = Recipe.from_dict(current[0]) if current else STOCK
        self.records.client.set_tag(self.records.parent_id, "start_champion",
                                    json.dumps(recipe.to_dict()))
        return recipe

    def _check_canaries(self, outcomes) -> None:
        for p, r in outcomes:
            if p.fault is not None and r.get("state") == "ok":
                raise SpecPilotError(f"the planted broken engine {p.mechanism!r} passed token "
                                     "forcing: the validation gate is not working; stopping")

    def _remember(self, job: Job, result: dict) -> None:
        """A knowledge row for a candidate or merge verdict (written once, when it is recorded)."""
        proposal = job.meta.get("proposal")
        if job.meta.get("kind") not in ("candidate", "merge") or not proposal or \
                proposal.get("fault"):
            return
        row = trial_row(self.campaign_id, self.config.setting, job.meta.get("round", 0),
                        Proposal(**proposal), result, self.features)
        if row is not None:
            self.knowledge.append([row])

    def final(self, champion: Recipe) -> dict:
        """The champion against stock, side by side (skipped when the champion is stock)."""
        if champion.hash() == STOCK.hash():
            return {"speedup_vs_stock": 1.0, "speedup_vs_stock_ci": None,
                    "final_note": "no candidate beat stock"}
        outcome = self.evaluate(STOCK, [Proposal("final", "final-vs-stock", {
            k: v for k, v in champion.to_dict().items() if k != "name"
            and v != getattr(STOCK, k)})], self.config.rounds + 1, kind="final")
        result = outcome[0][1]
        compare = result.get("compare") or {}
        ci = compare.get("ci95") or [None, None]
        if result.get("state") != "ok":
            why = f": {str(result['error'])[:200]}" if result.get("error") else ""
            return {"speedup_vs_stock": None, "speedup_vs_stock_ci": None,
                    "final_state": result.get("state"), "final_run_id": result.get("run_id"),
                    "final_note": f"the champion's A/B against stock ended "
                                  f"{result.get('state')}{why}"}
        final = {"speedup_vs_stock": compare.get("median_speedup"), "speedup_vs_stock_ci": ci,
                 "speedup_vs_stock_ci_low": ci[0], "speedup_vs_stock_ci_high": ci[1],
                 "final_state": result.get("state"), "final_run_id": result.get("run_id")}
        self.records.tag_champion({k: v for k, v in final.items() if k.startswith(
            "speedup_vs_stock") and k != "speedup_vs_stock_ci"})
        return final

    def _write_final(self, champion: Recipe) -> None:
        path = self.store_dir / "final" / f"{self.config.setting}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(champion.replace(name="final").to_dict(), indent=2))


def _kernel_key(fingerprint: dict) -> str:
    fields = ("gpu", "compute_capability", "driver", "cuda", "torch", "triton")
    return "|".join(str(fingerprint.get(f, "")) for f in fields)


def _brief(result: dict) -> str:
    compare = result.get("compare")
    if compare and compare.get("ci95"):
        lo, hi = compare["ci95"]
        return f" {compare['median_speedup']:.3f}x [{lo:.3f}, {hi:.3f}]"
    if result.get("error"):
        return f" ({str(result['error'])[:160]})"
    validation = result.get("validation")
    if validation and validation.get("failures"):
        return f" ({validation['failures'][0][:160]})"
    return ""
