"""What a bench or an A/B comparison runs: tokenised prompts, sampling, replayed acceptance.

Settings whose scenario names an ``acceptance_profile`` (seed scale: random weights, DESIGN.md
§3.3) are benchmarked with the replay drafter: the AR engine's greedy continuation of each prompt
is computed first, then every speculative run gets a ``ReplayPlan`` drawing acceptance lengths
from the profile. Such records are labelled ``replayed(<profile>)``; all others ``measured``.

Profile specs: ``tau:<mean>`` (``AcceptanceProfile.parametric`` at the engine's block size) or a
JSON file, relative to the setting's directory, holding a ``tau_histogram`` ({accept length:
count}, bonus token included), e.g. a bench record of a trained pair (``summary.tau_histogram``).
"""

import dataclasses
import json
from pathlib import Path

from specpilot.errors import SpecPilotError
from specpilot.fingerprint import stable_hash


@dataclasses.dataclass(frozen=True)
class Workload:
    """Tokenised prompts and the sampling parameters every engine of one run uses."""

    dataset: str
    prompts: tuple[tuple[int, ...], ...]
    params: object  # specpilot.engines.engine.SamplingParams
    texts: tuple[str, ...] = ()  # the prompt text (what a remote server is sent)

    def to_dict(self) -> dict:
        return {"dataset": self.dataset, "num_prompts": len(self.prompts),
                "num_input_tokens": [len(p) for p in self.prompts],
                "hash": stable_hash([list(p) for p in self.prompts]),
                "max_new_tokens": self.params.max_new_tokens,
                "temperature": self.params.temperature, "ignore_eos": self.params.ignore_eos}


def workload_for(setting, tokenizer, dataset: str | None = None, num_prompts: int | None = None,
                 max_new_tokens: int | None = None, ignore_eos: bool = True) -> Workload:
    """The setting's prompt mix (bundled dataset, count, output length), overridable per run.

    ``ignore_eos`` (default) gives every prompt the same output length, so runs and engines compare
    on equal work, as SGLang's and vLLM's serving benchmarks do.
    """
    from specpilot.datasets import load_prompts
    from specpilot.engines.engine import SamplingParams

    scenario = setting.scenario
    name = dataset or scenario.dataset
    texts = load_prompts(name, num_prompts or scenario.num_prompts)
    params = SamplingParams(max_new_tokens=max_new_tokens or scenario.max_new_tokens,
                            temperature=scenario.temperature, ignore_eos=ignore_eos)
    if params.max_new_tokens < 2:
        raise SpecPilotError("bench needs max_new_tokens >= 2 (decode time starts after the "
                             "first token)")
    ids = tuple(tuple(tokenizer.encode(t).ids) for t in texts)
    return Workload(name, ids, params, tuple(texts))


PROFILES_DIR = Path(__file__).resolve().parent.parent / "data" / "profiles"
"""Measured acceptance profiles shipped with the package (Parquet, one row per accept length)."""


def measured_profile(spec: str, block_size: int):
    """``profile:NAME#DATASET``: the accept-length histogram of pair NAME on DATASET, measured with
    the stock engine and stored in ``specpilot/data/profiles/NAME.parquet``."""
    import pyarrow.parquet as pq

    from specpilot.engines.drafters.replay import AcceptanceProfile

    name, _, dataset = spec[len("profile:"):].partition("#")
    path = PROFILES_DIR / f"{name}.parquet"
    if not name or not dataset:
        raise SpecPilotError(f"acceptance profile {spec!r}: expected profile:NAME#DATASET")
    if not path.is_file():
        known = sorted(p.stem for p in PROFILES_DIR.glob("*.parquet"))
        raise SpecPilotError(f"acceptance profile {spec!r}: no {path.name} (shipped: {known})")
    rows = [r for r in pq.read_table(path).to_pylist() if r["dataset"] == dataset]
    if not rows:
        raise SpecPilotError(f"acceptance profile {spec!r}: no rows for dataset {dataset!r}")
    measured_block = rows[0]["block_size"]
    if measured_block != block_size:
        raise SpecPilotError(f"acceptance profile {spec!r} was measured at block size "
                             f"{measured_block}, not {block_size}")
    counts = [0] * block_size
    for r in rows:
        if not 1 <= r["accept_length"] <= block_size:
            raise SpecPilotError(f"acceptance profile {spec!r}: accept length "
                                 f"{r['accept_length']} outside 1..{block_size}")
        counts[r["accept_length"] - 1] += r["count"]  # k drafts accepted + the bonus token
    return AcceptanceProfile.from_histogram(counts, name=spec)


def load_profile(spec: str, block_size: int, setting_dir: Path, native_block: int | None = None):
    """An ``AcceptanceProfile`` for ``block_size`` from ``tau:<mean>``, ``profile:NAME#DATASET``
    (a shipped measured profile) or a histogram JSON file next to the setting.

    ``native_block``: the drafter's own block size, at which ``spec`` is defined (default
    ``block_size``). A recipe verifying fewer positions gets that profile truncated: the engine
    drafts the drafter's whole block and verifies its first positions, so those are the same
    drafts and only the tail is cut. More positions than the profile knows cannot be replayed.
    """
    native = native_block or block_size
    if block_size > native:
        raise SpecPilotError(f"acceptance profile {spec!r} is defined at the drafter's block size "
                             f"{native}; a block of {block_size} cannot be replayed from it")
    profile = _load_native_profile(spec, native, setting_dir)
    return profile if block_size == native else profile.truncated(block_size)


def _load_native_profile(spec: str, block_size: int, setting_dir: Path):
    from specpilot.engines.drafters.replay import AcceptanceProfile

    if spec.startswith("tau:"):
        try:
            return AcceptanceProfile.parametric(float(spec[4:]), block_size)
        except ValueError as err:
            raise SpecPilotError(f"acceptance profile {spec!r}: {err}") from err
    if spec.startswith("profile:"):
        return measured_profile(spec, block_size)
    path = Path(setting_dir) / spec
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise SpecPilotError(f"acceptance profile {path}: {err}") from err
    hist = data.get("summary", data).get("tau_histogram")
    if not isinstance(hist, dict) or not hist:
        raise SpecPilotError(f"acceptance profile {path}: no 'tau_histogram' "
                             "(or summary.tau_histogram)")
    lengths = {int(k): int(v) for k, v in hist.items()}
    if min(lengths) < 1 or max(lengths) > block_size:
        raise SpecPilotError(f"acceptance profile {path}: accept lengths {sorted(lengths)} do not "
                             f"fit block size {block_size}")
    counts = [lengths.get(k + 1, 0) for k in range(block_size)]  # k drafts accepted + bonus
    return AcceptanceProfile.from_histogram(counts, name=path.name)


class Replay:
    """Reference continuations and per-engine profiles for replayed acceptance (benchmark only)."""

    def __init__(self, spec: str, setting_dir: Path, references: list[list[int]], vocab_size: int,
                 native_block: int | None = None):
        self.spec, self.setting_dir = spec, setting_dir
        self.references, self.vocab_size = references, vocab_size
        self.native_block = native_block  # the drafter's block size, where spec is defined
        self._profiles = {}

    @property
    def label(self) -> str:
        return f"replayed({self.spec})"

    def profile(self, block_size: int):
        if block_size not in self._profiles:
            self._profiles[block_size] = load_profile(self.spec, block_size, self.setting_dir,
                                                      self.native_block)
        return self._profiles[block_size]

    def plan(self, engine, prompt_index: int, seed: int):
        """A fresh ``ReplayPlan`` for one run of ``engine`` on one prompt; None for AR engines."""
        from specpilot.engines.drafters.replay import ReplayPlan

        if engine.drafter is None:
            return None
        # deeper drafting verifies past the drafter's block, which the profile knows nothing of:
        # it replays the one-block profile (its later blocks are never kept), so a replayed run
        # measures what the extra blocks cost, not what they gain
        block = min(engine.block_size, engine.draft_block)
        return ReplayPlan(self.references[prompt_index], self.profile(block), self.vocab_size,
                          seed=seed)


REFERENCE_BATCH = 32  # rows of the batched AR engine that writes the replay references on a GPU


def replay_for(models, workload: Workload, spec: str | None = None,
               progress=None, batched: bool | None = None) -> Replay | None:
    """``Replay`` for the setting's ``acceptance_profile`` (or ``spec``); None if measured.

    Computes the AR engine's continuation of every prompt first (that is what the replayed drafts
    copy), with the workload's sampling parameters; with the batched AR engine when ``batched``
    (default: on a GPU).
    """
    from specpilot.recipe import AR

    spec = spec or models.setting.scenario.acceptance_profile
    if spec is None:
        return None
    if models.setting.scenario.temperature > 0:
        raise SpecPilotError("replayed acceptance is defined for greedy decoding only "
                             f"(setting {models.setting.name} has temperature > 0)")
    block_size = models.drafter.block_size if models.drafter is not None else 2
    load_profile(spec, block_size, models.setting.directory)  # a bad spec fails before the work
    ar = models.engine(AR)
    if batched is None:
        batched = ar.device.type == "cuda"
    if batched and len(workload.prompts) > 1:
        # all prompts at once through the batched AR engine (its CUDA graphs): seconds instead
        # of a minute at seed scale; greedy either way (a bf16 near-tie may round otherwise)
        from specpilot.engines.batch import BatchEngine
        from specpilot.engines.batch import generate_all
        from specpilot.engines.batch import release_memory

        batch = BatchEngine(ar, min(REFERENCE_BATCH, len(workload.prompts)))
        references = generate_all(batch, [list(p) for p in workload.prompts], workload.params,
                                  on_done=(lambda _: progress()) if progress else None)
        del batch
        release_memory(ar.device)  # its caches go before the bench builds its own
    else:
        references = []
        for prompt in workload.prompts:
            references.append(ar.generate(list(prompt), workload.params).tokens)
            if progress is not None:
                progress()
    vocab_size = int(models.target.lm_head.weight.shape[0])
    return Replay(spec, models.setting.directory, references, vocab_size, block_size)


def concurrency_levels(max_concurrency: int) -> list[int]:
    """1, 2, 4, ... up to and including ``max_concurrency``."""
    levels, c = [], 1
    while c < max_concurrency:
        levels.append(c)
        c *= 2
    return levels + [max_concurrency]
