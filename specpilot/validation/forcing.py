"""Token forcing against the AR reference on the same weights.

1. Reference: the ``ar`` engine generates each prompt greedily, recording at every position its token
   and its top-1/top-2 logit gap. At a few seeded *canary* positions the reference commits its
   runner-up token instead of its choice and continues from there.
2. Candidate: generated with a forcer. Every token it commits is compared with the reference at that
   position; on a mismatch the pair is recorded and the reference token is committed instead, so one
   divergence cannot cascade and every position is compared. At canary positions the canary token is
   injected without comparison. An engine that replays stored outputs instead of computing (a cache
   keyed by prompt, a copy of the reference) cannot follow a canary and fails right after it.
3. Verdict: pass iff every mismatch is a near-tie (reference gap <= epsilon), the mismatch rate is at
   most ``max_mismatch_rate``, every output has the reference's length and finish reason (EOS
   handling), and the engine returned exactly the tokens the gate saw.
"""

import dataclasses
import random

import torch


@dataclasses.dataclass
class Mismatch:
    prompt: int
    position: int
    candidate_token: int
    reference_token: int
    reference_gap: float
    explained_by_shape: bool | None = None
    """The candidate's own forward, kept to one token a step on the reference's prefix (AR decoding
    in the candidate's verify shape), chose the candidate's token here too: the mismatch comes
    from the shape of the forward (batched GEMMs round differently), not from the mechanism.
    None: not probed."""


@dataclasses.dataclass
class Reference:
    tokens: list[int]
    gaps: list[float]
    canaries: dict[int, int]
    finish_reason: str


class _RecordingForcer:
    """Used on the reference run: records gaps and injects the runner-up at canary positions."""

    def __init__(self, canary_positions: set[int]):
        self.canary_positions, self.canaries = canary_positions, {}
        self.tokens, self.gaps = [], []

    def filter(self, index: int, proposed: list[int], logits: torch.Tensor) -> list[int]:
        kept = []
        for j, token in enumerate(proposed):
            top2 = torch.topk(logits[j].float(), 2)
            self.gaps.append(float(top2.values[0] - top2.values[1]))
            if index + j in self.canary_positions:
                token = int(top2.indices[1])
                self.canaries[index + j] = token
                kept.append(token)
                break
            kept.append(token)
        self.tokens.extend(kept)
        return kept


class _Forcer:
    """Used on the candidate run: compare with the reference, record, substitute."""

    def __init__(self, prompt: int, reference: Reference):
        self.prompt, self.reference = prompt, reference
        self.mismatches: list[Mismatch] = []
        self.seen: list[int] = []
        self.overrun = 0

    def filter(self, index: int, proposed: list[int], logits=None) -> list[int]:
        ref = self.reference.tokens
        kept = []
        for j, token in enumerate(proposed):
            pos = index + j
            if pos >= len(ref):
                self.overrun += len(proposed) - j
                break
            if pos in self.reference.canaries:
                kept.append(self.reference.canaries[pos])
                break
            if token != ref[pos]:
                self.mismatches.append(Mismatch(self.prompt, pos, token, ref[pos],
                                                self.reference.gaps[pos]))
                kept.append(ref[pos])
                break
            kept.append(token)
        if not kept:  # past the reference's end: keep the engine's token so it can finish
            kept = [proposed[0]]
        self.seen.extend(kept)
        return kept


class _ShapeProbe:
    """Used on a second candidate run: commit the reference's token at every position, one per
    step, and note the candidate's first proposal (its AR decision in its own verify shape) at the
    probed positions."""

    def __init__(self, reference: Reference, positions: set[int]):
        self.reference, self.positions, self.choices = reference, positions, {}

    def filter(self, index: int, proposed: list[int], logits=None) -> list[int]:
        if index in self.positions:
            self.choices[index] = proposed[0]
        ref = self.reference.tokens
        return [ref[index]] if index < len(ref) else [proposed[0]]


@dataclasses.dataclass
class Report:
    passed: bool
    num_prompts: int
    num_tokens: int
    num_mismatches: int
    max_mismatch_gap: float
    mismatches: list[dict]
    failures: list[str]
    epsilon: float
    max_mismatch_rate: float
    engine: str = ""
    tau: float = 0.0
    num_explained_by_shape: int | None = None  # diagnostic only: the verdict does not read it
    concurrency: int = 1  # the largest batch bucket the candidate was forced on (1: alone)
    buckets: list[int] = dataclasses.field(default_factory=list)  # every bucket forced, batched

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def reference_run(engine, prompt_ids: list[int], params, canary_positions: set[int]) -> Reference:
    forcer = _RecordingForcer(canary_positions)
    result = engine.generate(prompt_ids, params, forcer=forcer)
    return Reference(result.tokens, forcer.gaps[:len(result.tokens)], forcer.canaries,
                     result.finish_reason)


def validate_engine(reference_engine, candidate, prompts: list[list[int]], params,
                    epsilon: float = 1e-4, max_mismatch_rate: float = 0.001,
                    num_canaries: int = 1, seed: int = 0, name: str = "",
                    probe_shape: bool = True, concurrency: int = 1) -> Report:
    """Token-force ``candidate`` against ``reference_engine`` (the AR engine) on tokenised prompts.

    ``concurrency`` > 1 (a batch setting): a recipe's engine decodes the prompts together through
    the batched engine, each request with its own forcer, in one pass per distinct verify shape of
    the setting's buckets (:func:`_run_batched`), so the shapes its batches run (widths and stages
    by occupancy, batched prefill) are the ones forced. A subclass of the engine (the deliberately
    broken ones, which break its single-request loop) and a recipe the batched engine refuses are
    forced one request at a time.

    ``probe_shape``: for each prompt with mismatches, run the candidate once more (alone) with the
    reference's tokens committed one per step (:class:`_ShapeProbe`) and mark each mismatch
    ``explained_by_shape`` when that run chose the candidate's token too. A diagnostic for bf16
    near-ties (the verify's batched forward rounds differently from the AR step's); the verdict
    below does not read it."""
    rng = random.Random(seed)
    refs = []
    for prompt_ids in prompts:
        canaries = {rng.randrange(1, params.max_new_tokens - 1) for _ in range(num_canaries)} \
            if params.max_new_tokens > 2 else set()
        refs.append(reference_run(reference_engine, prompt_ids, params, canaries))
    forcers = [_Forcer(i, ref) for i, ref in enumerate(refs)]
    results, buckets = _run_batched(candidate, concurrency, prompts, params, forcers)
    if results is None:
        results = [candidate.generate(p, params, forcer=f) for p, f in zip(prompts, forcers)]
    mismatches, failures = [], []
    num_tokens, accept = 0, []
    for i, (prompt_ids, ref, forcer, result) in enumerate(zip(prompts, refs, forcers, results)):
        num_tokens += len(ref.tokens)
        if probe_shape and forcer.mismatches:
            _probe_shape(candidate, prompt_ids, params, ref, forcer.mismatches)
        mismatches.extend(forcer.mismatches)
        accept.extend(result.accept_lengths)
        if result.tokens != forcer.seen[:len(result.tokens)] or len(result.tokens) < len(forcer.seen):
            failures.append(f"prompt {i}: the engine returned tokens the gate did not see")
        if len(result.tokens) != len(ref.tokens) or forcer.overrun:
            failures.append(f"prompt {i}: output length {len(result.tokens)} (+{forcer.overrun} past "
                            f"the end) != reference length {len(ref.tokens)}")
        elif result.finish_reason != ref.finish_reason:
            failures.append(f"prompt {i}: finish reason {result.finish_reason!r} != reference "
                            f"{ref.finish_reason!r}")
    wide = [m for m in mismatches if m.reference_gap > epsilon]
    if wide:
        failures.append(f"{len(wide)} mismatch(es) where the reference's top-2 gap exceeds "
                        f"epsilon={epsilon} (not near-ties)")
    rate = len(mismatches) / max(num_tokens, 1)
    if rate > max_mismatch_rate:
        failures.append(f"mismatch rate {rate:.4%} > {max_mismatch_rate:.4%}")
    return Report(
        passed=not failures, num_prompts=len(prompts), num_tokens=num_tokens,
        num_mismatches=len(mismatches),
        max_mismatch_gap=max((m.reference_gap for m in mismatches), default=0.0),
        mismatches=[dataclasses.asdict(m) for m in mismatches], failures=failures,
        epsilon=epsilon, max_mismatch_rate=max_mismatch_rate, engine=name,
        tau=sum(accept) / len(accept) if accept else 0.0,
        num_explained_by_shape=sum(bool(m.explained_by_shape) for m in mismatches)
        if probe_shape else None, concurrency=max(buckets, default=1), buckets=buckets)


def _run_batched(candidate, concurrency: int, prompts: list[list[int]], params,
                 forcers: list) -> tuple[list | None, list[int]]:
    """The prompts through the batched engine with continuous batching, each with its forcer: the
    finished requests in prompt order (tokens, finish reason, accept lengths) and the buckets
    forced; ``(None, [])`` when ``candidate`` is forced one request at a time instead (no batch,
    a subclassed engine, a recipe or a batch the batched engine refuses).

    A batch step's verify shape depends on its bucket (``Recipe.stages_for``: widths and stages by
    occupancy), so the prompts are split among one pass per distinct shape, each pass stepping on
    the largest bucket with that shape (``min_rows``), and every shape the setting's batches run
    is forced on some prompts."""
    from specpilot.engines.batch import BatchEngine
    from specpilot.engines.batch import Running
    from specpilot.engines.batch import release_memory
    from specpilot.engines.batch import run_requests
    from specpilot.engines.engine import Engine
    from specpilot.errors import SpecPilotError

    if concurrency <= 1 or type(candidate) is not Engine:
        return None, []
    stops = set(params.stop_token_ids)
    if not params.ignore_eos:
        stops.update(candidate.target.eos_token_ids)
    passes = _forcing_buckets(candidate, concurrency)[:len(prompts)]
    requests = [Running(str(i), list(p), params, set(stops), forcer=f)
                for i, (p, f) in enumerate(zip(prompts, forcers))]
    for k, rows in enumerate(passes):
        try:
            batch = BatchEngine(candidate, concurrency, pad_to_buckets=True, min_rows=rows,
                                capture=False)  # forced steps run eagerly
        except (ValueError, SpecPilotError):  # tree, sampled drafts, out of memory
            if k:  # every pass builds the same engine: this one ran out of memory only now
                raise
            return None, []
        run_requests(batch, requests[k::len(passes)])
        del batch
        release_memory(candidate.device)  # before anything captures graphs on this device
    return requests, passes


def _forcing_buckets(candidate, concurrency: int) -> list[int]:
    """The largest batch bucket of each distinct verify shape up to ``concurrency``, largest
    first."""
    from specpilot.engines.batch_rows import batch_buckets

    recipe, block = candidate.recipe, candidate.block_size
    largest = {recipe.stages_for(b, block): b for b in batch_buckets(concurrency)}
    return sorted(largest.values(), reverse=True)


def _probe_shape(candidate, prompt_ids, params, reference: Reference,
                 mismatches: list[Mismatch]) -> None:
    probe = _ShapeProbe(reference, {m.position for m in mismatches})
    try:
        candidate.generate(prompt_ids, params, forcer=probe)
    except Exception:  # noqa: BLE001 - a diagnostic: a candidate that cannot run it stays unprobed
        return
    for m in mismatches:
        m.explained_by_shape = probe.choices.get(m.position) == m.candidate_token
