"""Continuous batching: many requests in one cache, one draft forward and one verify forward per step.

Running requests occupy rows ``0 .. n-1`` of a fixed-size cache (a finished request's row is refilled
by moving the last running row into it), so every step runs on contiguous row views with batch = n.
Requests join between steps (prefill into their row) and leave between steps. Each row has its own
positions and its own sampling rule; batching changes no request's tokens: rows never attend to,
or mix state with, other rows.

A step reads the host once. Each row's pending token, committed length, token budget and stop ids
live on the device (:class:`~specpilot.engines.batch_rows.RowState`), so the draft and verify inputs,
greedy acceptance, the stop/budget clip and the cache commit are tensor ops over all rows, written
into buffers sized for ``max_batch``; the step ends with one device->host copy of every row's kept
tokens. Only requests that sample are visited one by one, still without reading the host: each
draws from its own generator. A replay plan (benchmarks) takes its draws when its request joins
(one per step it may take); its reference continuation and draws live on the device, where each
step builds the replayed rows' drafts and drawn counts (as ``ReplayPlan.override`` would); the
host records the draws as it reads the steps.

CUDA graphs per batch bucket: a step of n requests runs on the smallest bucket (1, 2, 4, .. up to
``max_batch``) that holds them, verifying the recipe's width for that bucket (``verify_widths``:
fewer positions per request once many rows share the forward; the whole block by default); rows n
.. bucket-1 are inert (no token budget: they keep nothing, and a row is reset when a request is
prefilled into it). The step is two fixed-shape parts, each captured once per bucket when the
engine is built (the batch is empty then, so capture disturbs nothing): the draft (rows' verify
windows -> drafts) and the rest (verify, greedy acceptance with the replayed rows' forced counts,
the stop/budget clip, the commit -> the table the host reads). Between them the replayed rows'
drafts are overwritten on the device. Requests that sample run the same parts eagerly.

The confidence budget (the recipe's ``verify_budget='sps'``, any drafter family) sizes each step's
verify from the drafts: the draft part also writes each row's confidence per draft (DSpark's
confidence head, else the drafter's own probability of its draft); the host reads, per candidate
width, the tokens the rows are expected to keep (DSpark's survival estimate: the products of their
confidences, none past a row's remaining budget; a second read per step) and verifies the captured
width with the most expected tokens per second, priced by the recipe's measured steps/s at the
forward's real shape (bucket rows x width). Every row verifies that width and keeps what it
accepts, so the output is the greedy one whatever the width. Per-request lengths would need ragged
verify rows; in this padded layout the budget is per step, over every request's confidences. Fewer
positions pay only where the verify forward is compute-bound.

Two-stage verification (the recipe's ``two_stage`` for a bucket) splits the rest in two: the first
stage verifies a prefix of every row's window and marks the rows whose drafts all passed through
it; the host reads how many (a second read per step) and runs the second stage, captured per
bucket of passing rows, on the rest of the window, with the linear layers on the passing rows'
tokens alone (``row_subset``; attention runs on every row, and the others keep nothing, so their
pending KV is dropped at the commit). Attention-only targets: a hybrid target's recurrent state
has no keep-nothing commit.
"""

import collections
import dataclasses

import torch

from specpilot.engines.batch_rows import ReplayRows
from specpilot.engines.batch_rows import RowState
from specpilot.engines.batch_rows import Transfers
from specpilot.engines.batch_rows import batch_buckets
from specpilot.engines.cache import GDNState
from specpilot.engines.cache import request_state_bytes
from specpilot.engines.decode.accept import rejection_accept
from specpilot.engines.decode.accept import sampling_probs
from specpilot.engines.decode.budget import steps_per_second
from specpilot.engines.drafters.replay import ReplayPlan
from specpilot.engines.engine import Engine
from specpilot.engines.engine import SamplingParams
from specpilot.engines.models.layers import Fusable
from specpilot.engines.models.layers import Linear
from specpilot.engines.models.layers import row_subset
from specpilot.engines.models.layers import set_fused_elementwise
from specpilot.engines.models.layers import set_gemm
from specpilot.errors import SpecPilotError


@dataclasses.dataclass
class Running:
    """One request in the batch."""

    request_id: str
    prompt_ids: list[int]
    params: SamplingParams
    stops: set[int]
    tokens: list[int] = dataclasses.field(default_factory=list)
    accept_lengths: list[int] = dataclasses.field(default_factory=list)
    committed: int = 0
    generator: torch.Generator | None = None
    finish_reason: str | None = None
    replay: ReplayPlan | None = None  # benchmark-only simulated acceptance (see ReplayPlan)
    forcer: object | None = None
    """Token forcing (``specpilot.validation``): sees what each step would keep (clipped to the
    budget and the first stop) and may cut it and replace its last token, as in
    ``Engine.generate`` (but without the logits); forced requests run the step's parts eagerly,
    with a host round trip per verify stage."""


class BatchEngine:
    """Steps all running requests together; ``max_batch`` rows of ``max_len`` tokens each."""

    def __init__(self, engine: Engine, max_batch: int, pad_to_buckets: bool | None = None,
                 share_scratch: "BatchEngine | None" = None, min_rows: int = 1,
                 capture: bool = True):
        """``pad_to_buckets``: run each step on its bucket's rows (default: when graphs are on;
        tests turn it on eagerly to check that padding rows change nothing). ``share_scratch``:
        another batch engine that never steps while this one does (the other side of an
        interleaved A/B), whose per-step scratch (the snapshot buffers) this one reuses.
        ``min_rows`` (with padding): every step runs on at least this many rows' bucket, so that
        a few requests go through the verify shape (widths, stages) of a fuller batch (token
        forcing at a batch setting's occupancy). ``capture=False``: no CUDA graphs even if the
        engine uses them (token forcing steps eagerly anyway)."""
        self.min_rows, self._capture_graphs = min_rows, capture
        recipe = engine.recipe
        if recipe.draft_sampling != "greedy":
            raise ValueError(f"recipe {recipe.name!r}: batched decoding runs greedy drafts only "
                             "(sampled drafts are single-request for now)")
        if recipe.verify_budget == "sps" and recipe.two_stage:
            raise ValueError(f"recipe {recipe.name!r}: the confidence budget "
                             "(verify_budget='sps') chooses one verify width per step; it does "
                             "not combine with two_stage")
        if recipe.tree_verify:
            raise ValueError(f"recipe {recipe.name!r}: tree verification is single-request for "
                             "now; batched decoding verifies one chain per request")
        if recipe.draft_depth > 1:
            raise ValueError(f"recipe {recipe.name!r}: deeper drafting is single-request for now; "
                             "batched decoding drafts one block per request")
        self.engine, self.max_batch = engine, max_batch
        try:
            self._build(engine, max_batch, pad_to_buckets, share_scratch)
        except torch.OutOfMemoryError as err:
            self.__dict__.clear()  # drop what was allocated before re-raising
            raise SpecPilotError(_out_of_memory(engine, max_batch, err)) from err

    def _build(self, engine: Engine, max_batch: int, pad_to_buckets: bool | None,
               share_scratch: "BatchEngine | None" = None) -> None:
        """Caches, step buffers and (on CUDA) the captured graphs of every batch bucket."""
        self.engine, self.max_batch = engine, max_batch
        self.cache = engine.target.new_cache(max_batch, engine.max_len, engine.recipe.gdn_rollback)
        if engine.drafter is not None:  # one snapshot buffer for every bucket's verify
            self.cache.reserve_snapshots(
                engine.block_size, engine.recipe.gdn_snapshot,
                share_with=share_scratch.cache if share_scratch is not None else None)
        if engine.recipe.two_stage and any(isinstance(c, GDNState) for c in self.cache.layers):
            raise ValueError(f"recipe {engine.recipe.name!r}: two-stage verification runs on "
                             "attention-only targets; for a hybrid target a request left out of "
                             "the second stage needs a keep-nothing commit of its recurrent "
                             "state, which is not built")
        self.draft_cache = (engine.drafter.new_cache(max_batch, engine.max_len)
                            if engine.drafter is not None else None)
        self.running: list[Running] = []
        device, block = engine.device, engine.block_size
        self.rows = RowState(max_batch, device)
        self.replay_rows = None  # replayed acceptance per row (speculative engines)
        self.transfers = Transfers(max_batch, block + 2, device)
        self._ones = torch.ones(max_batch, dtype=torch.long, device=device)
        if engine.drafter is not None:  # draft windows [pending, MASK x (D-1)] at committed ..
            draft = engine.draft_block  # the drafter's own block; a step verifies <= block of it
            self._block_ids = torch.full((max_batch, draft), engine.drafter.mask_token_id,
                                         dtype=torch.long, device=device)
            self._offsets = torch.arange(draft, device=device)
            self._positions = torch.zeros(max_batch, draft, dtype=torch.long, device=device)
            self._drafts = torch.zeros(max_batch, draft - 1, dtype=torch.long, device=device)
            # replayed rows' drawn counts (-1: the target's own acceptance); the captured second
            # part reads this buffer, so it is cleared whenever no row is replayed
            self._forced = torch.full((max_batch,), -1, dtype=torch.long, device=device)
            self._forced_dirty = False
            self.replay_rows = ReplayRows(max_batch, engine.max_len, device)
            # two-stage verify: the rows whose first stage passed (written by the first stage)
            self._passed = torch.zeros(max_batch, dtype=torch.bool, device=device)
            self._agrees_through = torch.zeros(max_batch, dtype=torch.bool, device=device)
            # the confidence budget: each row's confidence per draft (written by the draft part)
            self._conf = torch.zeros(max_batch, draft - 1, device=device)
        # per-row device state that moves with a request when rows are compacted
        self._row_states = tuple(s for s in (self.rows, self.replay_rows) if s is not None)
        self._budget = engine.drafter is not None and engine.recipe.verify_budget == "sps"
        self.budget_steps: collections.Counter = collections.Counter()  # width -> budgeted steps
        self._views: dict[int, tuple] = {}
        # a budgeted step's width is chosen on the host: one graph per (bucket, width)
        use_graphs = engine.use_graphs or (self._budget and engine.recipe.cuda_graphs
                                           and device.type == "cuda")
        self.pad = use_graphs if pad_to_buckets is None else pad_to_buckets
        self.buckets = batch_buckets(max_batch)
        self._graphs: dict[int, tuple] = {}  # bucket -> (first part, second part)
        self._stage2_graphs: dict[tuple[int, int], object] = {}  # (bucket, passed bucket) -> graph
        self._budget_graphs: dict[tuple[int, int], object] = {}  # (bucket, width) -> verify graph
        self._num_sampled = self._num_replayed = self._num_forced = 0
        # overlapped scheduling: the step queued but not yet read, (read handle, its rows' requests)
        self._in_flight = None
        self.overlapped_steps = 0
        self._step_kept: list[int] = []  # tokens forcing let each row keep so far this step
        self._probes = [(model, next((m for m in model.modules() if isinstance(m, Fusable)), None),
                         next((m for m in model.modules() if isinstance(m, Linear)), None))
                        for model in (engine.target, engine.drafter) if model is not None]
        if use_graphs and self._capture_graphs:
            self._capture()

    @property
    def free_rows(self) -> int:
        return self.max_batch - len(self.running)

    def _rows(self, n: int):
        """Views of rows ``0 .. n-1`` of both caches (kept: building them walks every layer)."""
        if n not in self._views:
            draft = self.draft_cache.rows(slice(0, n)) if self.draft_cache is not None else None
            self._views[n] = (self.cache.rows(slice(0, n)), draft)
        return self._views[n]

    def _apply_recipe(self) -> None:
        """Set this engine's kernel switches on the (shared) models if another engine changed them.

        The setters switch every module of a model alike, so one module of each kind tells.
        """
        e = self.engine
        for model, fusable, linear in self._probes:
            if ((fusable is not None and fusable.fused != e.fused)
                    or (linear is not None and linear.kernel != e.recipe.gemm)):
                set_fused_elementwise(model, e.fused)
                set_gemm(model, e.recipe.gemm)

    def _count(self, req: Running, sign: int) -> None:
        self._num_sampled += sign * (req.params.temperature > 0)
        self._num_replayed += sign * (req.replay is not None)
        self._num_forced += sign * (req.forcer is not None)

    def _check(self, req: Running) -> None:
        """A request that can never fit a row raises ValueError (before anything is run)."""
        e = self.engine
        if len(req.prompt_ids) + req.params.max_new_tokens > e.context:
            raise ValueError(f"prompt ({len(req.prompt_ids)}) + max_new_tokens "
                             f"({req.params.max_new_tokens}) exceeds the context of {e.max_len}")

    def _row_views(self, rows: slice):
        """Both caches' views of ``rows``, emptied for new requests."""
        cache, draft = self.cache.rows(rows), None
        cache.reset()
        if self.draft_cache is not None:
            draft = self.draft_cache.rows(rows)
            draft.reset()
        return cache, draft

    def _start(self, req: Running, row: int, logits: torch.Tensor) -> None:
        """``req`` prefilled into ``row``: pick its first token from its last prompt row's
        ``logits`` [1, V] and make it a running row."""
        e = self.engine
        if req.params.temperature > 0:
            req.generator = torch.Generator(device=e.device)
            req.generator.manual_seed(req.params.seed if req.params.seed is not None else 0)
        req.tokens = [int(e._pick(logits, req.params, req.generator)[0])]
        if req.forcer is not None:  # the first token is forced too, as in Engine.generate
            req.tokens = req.forcer.filter(0, req.tokens, None)
        req.committed = len(req.prompt_ids)
        self._maybe_finish(req)
        remaining = 0 if req.finish_reason else req.params.max_new_tokens - len(req.tokens)
        self.rows.set_row(row, req.tokens[-1], req.committed, remaining, req.stops)
        if req.replay is not None and self.replay_rows is not None:
            self.replay_rows.set_row(row, req.replay, len(req.prompt_ids), remaining)
        self.running.append(req)
        self._count(req, +1)

    @torch.inference_mode()
    def add(self, req: Running) -> None:
        """Prefill ``req`` into the next free row; its first token is produced here."""
        e, row = self.engine, len(self.running)
        if row >= self.max_batch:
            raise RuntimeError("no free row")
        self._check(req)
        self._apply_recipe()
        cache, draft = self._row_views(slice(row, row + 1))
        ids = torch.tensor([req.prompt_ids], device=e.device)
        positions = torch.arange(len(req.prompt_ids), device=e.device)[None]
        out = e.target.prefill(ids, positions, cache, capture=e.capture)
        if draft is not None:
            e.drafter.commit_context(out.aux, positions, draft)
        self._start(req, row, out.logits[:, -1])

    @torch.inference_mode()
    def add_many(self, reqs: list[Running]) -> list[tuple[Running, Exception]]:
        """Prefill ``reqs`` into the next free rows; returns the (request, error) pairs of those
        that could not join (the others are running).

        With the recipe's ``batched_prefill`` the requests go through one target forward,
        right-padded to the longest prompt (:meth:`ModelCache.padded`), when that width fits every
        attention layer's slots without wrapping and needs no chunking; otherwise, and if that
        forward fails, one prefill each (:meth:`add`).
        """
        if len(reqs) > self.free_rows:
            raise RuntimeError(f"{len(reqs)} requests for {self.free_rows} free rows")
        failed, ready = [], []
        for req in reqs:
            try:
                self._check(req)
                ready.append(req)
            except ValueError as err:
                failed.append((req, err))
        if len(ready) > 1 and self.engine.recipe.batched_prefill and self._fits_padded(ready):
            try:
                self._prefill_padded(ready)
                return failed
            except Exception:  # noqa: BLE001 - e.g. out of memory at this width: one at a time
                running = {id(r) for r in self.running}
                ready = [r for r in ready if id(r) not in running]
        for req in ready:
            try:
                self.add(req)
            except Exception as err:  # noqa: BLE001 - this request alone fails
                failed.append((req, err))
        return failed

    def _fits_padded(self, reqs: list[Running]) -> bool:
        width = max(len(r.prompt_ids) for r in reqs)
        chunk = self.engine.target.max_rows_per_forward
        slots = [c.min_capacity() for c in (self.cache, self.draft_cache) if c is not None]
        return (chunk is None or width <= chunk) and all(s is None or width <= s for s in slots)

    def _prefill_padded(self, reqs: list[Running]) -> None:
        """One target forward over every prompt of ``reqs`` (right-padded), into new rows."""
        e, first = self.engine, len(self.running)
        self._apply_recipe()
        rows = slice(first, first + len(reqs))
        cache, draft = self._row_views(rows)
        width = max(len(r.prompt_ids) for r in reqs)
        ids = torch.tensor([r.prompt_ids + [r.prompt_ids[-1]] * (width - len(r.prompt_ids))
                            for r in reqs], device=e.device)
        lengths = torch.tensor([len(r.prompt_ids) for r in reqs], device=e.device)
        positions = torch.arange(width, device=e.device)[None].expand(len(reqs), -1)
        out = e.target(ids, positions, cache.padded(lengths), capture=e.capture,
                       last_index=lengths - 1)
        cache.truncate(lengths)
        if draft is not None:
            e.drafter.commit_context(out.aux, positions, draft)
            draft.truncate(lengths)
        for i, req in enumerate(reqs):
            self._start(req, first + i, out.logits[i:i + 1, -1])

    def _maybe_finish(self, req: Running) -> None:
        if req.tokens and req.tokens[-1] in req.stops:
            req.finish_reason = "stop"
        elif len(req.tokens) >= req.params.max_new_tokens:
            req.finish_reason = "length"

    def remove(self, req: Running) -> None:
        """Drop ``req``; the last running row moves into its row."""
        row, last = self.running.index(req), len(self.running) - 1
        if row != last:
            self.cache.copy_row(last, row)
            if self.draft_cache is not None:
                self.draft_cache.copy_row(last, row)
            for state in self._row_states:
                state.copy_row(last, row)
            self.running[row] = self.running[last]
        for state in self._row_states:
            state.vacate(last)
        self.running.pop()
        self._count(req, -1)

    @torch.inference_mode()
    def step(self, width: int | None = None) -> list[tuple[Running, list[int]]]:
        """One decode step for every running request; returns (request, new tokens) pairs.

        With the recipe's ``overlap_schedule`` a step that needs no host read mid-step is queued
        and the pairs returned are the previous step's (none for the first of a run of such
        steps): the host reads step k while step k+1 runs. :meth:`flush` reads the last one.
        ``width`` (confidence budget only): verify this many positions per row instead of the
        budget's choice, one of :meth:`budget_widths` (measuring the steps/s table)."""
        if not self.running:
            return self.flush()
        self._apply_recipe()
        n = len(self.running)
        size = next((b for b in self.buckets if b >= max(n, self.min_rows)), self.max_batch) \
            if self.pad else n
        if width is not None and not (self._budget and width in self.budget_widths(size)):
            raise ValueError(f"a step of {size} rows verifies a width of "
                             f"{self.budget_widths(size) if self._budget else 'the recipe'}; "
                             f"{width} is not one (widths are chosen per step only with "
                             "verify_budget='sps')")
        graphs = self._graphs.get(size) if not (self._num_sampled or self._num_forced) else None
        self._step_kept = [0] * n
        num_drafts = self._width(size) - 1 if self.engine.drafter is not None else 0
        if self._can_overlap(size):
            try:
                table = self._queue(size, graphs, width)
            except BaseException:
                self._in_flight = None  # the caller fails these requests; nothing to read
                raise
            queued, self._in_flight = self._in_flight, (
                self.transfers.start_fetch(table[:n]), list(self.running), num_drafts)
            self.overlapped_steps += 1
            return [] if queued is None else self._deliver(
                self.transfers.finish_fetch(queued[0]), *queued[1:])
        delivered = self.flush()
        table = self.transfers.fetch(self._queue(size, graphs, width)[:n])
        return delivered + self._deliver(table, None, num_drafts)

    def flush(self) -> list[tuple[Running, list[int]]]:
        """Read the overlapped step still queued, if any; its (request, new tokens) pairs."""
        queued, self._in_flight = self._in_flight, None
        if queued is None:
            return []
        return self._deliver(self.transfers.finish_fetch(queued[0]), *queued[1:])

    def wait_in_flight(self) -> bool:
        """Wait until the overlapped step still queued, if any, has run on the device, without
        reading it (a caller that times what comes next, e.g. a prefill, counts that wait as the
        step's); whether there was one."""
        if self._in_flight is None:
            return False
        done = self._in_flight[0][1]
        if done is not None:
            done.synchronize()
        return True

    def _can_overlap(self, size: int) -> bool:
        """Whether this step may be queued before the previous one is read: the recipe asks for
        it and the step reads nothing from the host mid-way."""
        recipe = self.engine.recipe
        return (recipe.overlap_schedule and not (self._num_sampled or self._num_forced
                                                 or self._budget)
                and (self.engine.drafter is None or self._stages(size)[1] is None))

    def _queue(self, size: int, graphs, width: int | None = None) -> torch.Tensor:
        """Queue one step over ``size`` rows (its captured ``graphs``, or eagerly); the table
        [size, 2 + W] of every row's kept tokens. ``width``: a budgeted step's verify width
        (default: the budget's choice)."""
        if self.engine.drafter is None:
            table = graphs[0]() if graphs else self._decode(size)
        else:
            drafts = graphs[0]() if graphs else self._draft(size)
            if self._num_replayed:
                self._forced[:size] = self.replay_rows.drafts(drafts, self.rows,
                                                              self.engine.target.vocab_size)
                self._forced_dirty = True
            elif self._forced_dirty:
                self._forced.fill_(-1)
                self._forced_dirty = False
            if self._budget:
                width = width or self._budget_width(len(self.running), size)
                table = (self._budget_graphs[(size, width)]() if graphs
                         else self._verify(size, self._forced, width))
            else:
                table = graphs[1]() if graphs else self._verify(size, self._forced)
            if self._stages(size)[1] is not None:
                table = self._second_stage(size, table, graphs is not None)
        return table

    def budget_widths(self, size: int) -> list[int]:
        """The verify widths a budgeted step over ``size`` rows may take (each captured): about
        geometric steps up to the bucket's window."""
        window = self._width(size)
        return sorted({w for w in (1, 2, 3, 4, 6, 8, 12, 16, 24, 32) if w < window} | {window})

    def _budget_width(self, n: int, size: int) -> int:
        """The confidence budget (``verify_budget='sps'``): of :meth:`budget_widths`, the width
        ``w`` with the most expected tokens per second, ``E(w) * SPS(size * w)``, where ``E(w)``
        sums over the live rows 1 + the survival probabilities (products of the draft
        confidences) of their first ``w - 1`` drafts, none past a row's remaining budget, and
        ``SPS`` is the recipe's measured steps/s by verify tokens (at this bucket, where the
        table is measured per bucket). Ties go to the narrower width.
        One host read."""
        window = self._width(size)
        surv = torch.cumprod(self._conf[:n, :window - 1].float(), dim=1)
        remaining = self.rows.remaining[:n]
        keepable = torch.arange(window - 1, device=surv.device)[None, :] < remaining[:, None] - 1
        surv = torch.where(keepable, surv, 0.0)
        expected = torch.cat([(remaining > 0).sum()[None].float(),
                              surv.sum(dim=0)]).cumsum(0).tolist()  # expected[w - 1]: E(w)
        table = self.engine.recipe.sps_table
        width = max(self.budget_widths(size),
                    key=lambda w: (expected[w - 1] * steps_per_second(table, size * w, size),
                                   -w))
        self.budget_steps[width] += 1
        return width

    def _second_stage(self, size: int, table: torch.Tensor, captured: bool) -> torch.Tensor:
        """After a first stage: the second over the rows that passed it (one host read of their
        count; none passed: the first stage's table is the step's)."""
        passed = int(self._passed[:size].sum())
        if not passed:
            return table
        rows = min(next(b for b in self.buckets if b >= passed), size)
        if captured:
            return self._stage2_graphs[(size, rows)](table1=table)
        return self._stage2(size, rows, table)

    def _finish(self, size: int, proposed, num_proposed, agreed, active=None) -> torch.Tensor:
        """Clip, advance and commit rows ``0 .. size-1`` (those ``active`` [size] leaves out keep
        nothing); the table [size, 2 + W] the host reads."""
        if self._num_forced:
            proposed, num_proposed = self._force(proposed, num_proposed, active)
        kept = self.rows.keep(proposed, num_proposed, active)
        cache, draft = self._rows(size)
        if draft is not None:  # a finished row (kept 0) commits its pending row again: any count
            self.engine._commit_fn(cache, draft, kept.clamp(min=1), self.rows.committed[:size])
        return torch.cat([kept[:, None], agreed[:, None], proposed], 1)

    def _force(self, proposed: torch.Tensor, num_proposed: torch.Tensor, active):
        """Each forced row's proposal, clipped as :meth:`RowState.keep` will clip it (budget,
        first stop), through its forcer, which may cut it and replace its last token (the new
        pending token, not yet in the cache, so the commit of that many rows stays exact)."""
        table, counts = proposed.tolist(), num_proposed.tolist()
        remaining = self.rows.remaining[:len(table)].tolist()
        live = active.tolist() if active is not None else [True] * len(table)
        for i, r in enumerate(self.running):
            if r.forcer is None or not live[i] or remaining[i] <= 0:
                continue
            clipped = Engine._clip(table[i][:counts[i]], r.stops, remaining[i])
            kept = r.forcer.filter(len(r.tokens) + self._step_kept[i], clipped, None)
            self._step_kept[i] += len(kept)
            table[i][:len(kept)], counts[i] = kept, len(kept)
        device = proposed.device
        return (torch.tensor(table, dtype=proposed.dtype).to(device),
                torch.tensor(counts, dtype=num_proposed.dtype).to(device))

    def _decode(self, size: int) -> torch.Tensor:
        """AR: one target forward of every row's pending token (proposed [size, 1])."""
        e = self.engine
        cache, _ = self._rows(size)
        logits = e._decode_fn(cache, self.rows.pending[:size, None],
                              self.rows.committed[:size, None])
        tokens = logits.argmax(dim=-1)
        if self._num_sampled:
            for i, r in enumerate(self.running):
                if r.params.temperature > 0:  # the row's own rule and generator
                    tokens[i:i + 1] = e._pick(logits[i:i + 1], r.params, r.generator)
        ones = self._ones[:size]
        return self._finish(size, tokens[:, None], ones, ones)

    def _stages(self, size: int) -> tuple[int, int | None]:
        """``(window, prefix)`` of a step over ``size`` rows: the positions per request it verifies
        of the drafter's whole block (the recipe's ``two_stage`` or ``verify_widths`` for that
        bucket, else the whole block), and where its first stage ends (None: one stage)."""
        return self.engine.recipe.stages_for(size, self.engine.block_size)

    def _width(self, size: int) -> int:
        return self._stages(size)[0]

    def _draft(self, size: int) -> torch.Tensor:
        """First part: every row's draft window (the drafter's whole block) -> the drafts this
        step verifies [size, W-1], W = :meth:`_width` (a view of a persistent buffer)."""
        _, draft = self._rows(size)
        block_ids, positions = self._block_ids[:size], self._positions[:size]
        block_ids[:, 0] = self.rows.pending[:size]
        torch.add(self.rows.committed[:size, None], self._offsets, out=positions)
        e = self.engine
        drafts, _ = e._draft_fn(draft, block_ids, positions)
        if self._budget:  # DSpark's confidence head, else the drafter's own draft probability
            conf = e._confidence if e._own_confidence else e.drafter.last_confidence
            self._conf[:size, :conf.shape[1]].copy_(conf[:, :self._conf.shape[1]])
        return self._drafts[:size].copy_(drafts)[:, :self._width(size) - 1]

    def _verify(self, size: int, forced: torch.Tensor, width: int | None = None) -> torch.Tensor:
        """Second part: verify every row's window (:meth:`_width` positions; ``width``: a budgeted
        step's), or with two stages its first stage (the window's first ``prefix`` positions),
        marking in ``_passed`` the rows whose drafts all passed through position ``prefix``: their
        first ``prefix - 1`` drafts were accepted and the target's token after them is draft
        ``prefix`` (a replayed row: its drawn count reaches ``prefix``, and it keeps draft
        ``prefix`` there, as one verify of the window would), with nothing clipped (stop token,
        budget)."""
        if width is not None:
            return self._verify_window(size, forced, 0, width)[0]
        window, prefix = self._stages(size)
        if prefix is None:
            return self._verify_window(size, forced, 0, window)[0]
        table, num_accepted, bonus, force, target_bonus = self._verify_window(
            size, forced, 0, prefix, follows=True)
        next_draft = self._drafts[:size, prefix - 1]
        passed = torch.where(force >= 0, force >= prefix,
                             (num_accepted == prefix - 1) & (bonus == next_draft))
        # kept whole (no stop, budget or token forcing cut it), its last token draft ``prefix``
        # (a forcer may substitute it)
        whole = (table[:, 0] == prefix) & (table[:, 1 + prefix] == next_draft)
        self._passed[:size] = passed & whole & (self.rows.remaining[:size] > 0)
        # the target's own agreement runs on into the second stage (replay bookkeeping)
        self._agrees_through[:size] = (table[:, 1] == prefix - 1) & (target_bonus == next_draft)
        return table

    def _stage2(self, size: int, num_rows: int, table1: torch.Tensor) -> torch.Tensor:
        """The second stage: positions ``prefix .. window-1`` of the rows that passed the first
        (``table1`` its table), the linear layers on the first ``num_rows`` rows in ``_passed``
        order (the passed ones, then others as padding) alone; the step's table."""
        e = self.engine
        window, prefix = self._stages(size)
        width = window - prefix
        passed = self._passed[:size]
        order = torch.argsort((~passed).to(torch.int32), stable=True)[:num_rows]
        token_rows = (order[:, None] * width + self._offsets[:width]).flatten()
        with row_subset((e.target, e.drafter), token_rows):
            table2 = self._verify_window(size, self._forced, prefix, width, passed)[0]
        kept = table1[:, :1] + table2[:, :1]
        through = (passed & self._agrees_through[:size])[:, None]
        agreed = table1[:, 1:2] + torch.where(through, 1 + table2[:, 1:2], 0)
        return torch.cat([kept, agreed, table1[:, 2:], table2[:, 2:]], 1)

    def _verify_window(self, size: int, forced: torch.Tensor, offset: int, width: int,
                       active: torch.Tensor | None = None, follows: bool = False):
        """Verify ``width`` positions of every row from draft ``offset`` on: ``[pending,
        d_(offset+1) .. d_(offset+width-1)]``; row i proposes ``[d .., bonus]``. Returns the table,
        the accepted counts, the bonus tokens, the rows' forced counts at this offset and the
        target's own bonus tokens (before any forced count).

        ``forced`` [max_batch]: a replayed row's drawn count (``Engine._replayed`` for all rows at
        once: its first min(k, W-1) drafts are kept, then the target's token there; with
        ``follows`` a count past this window keeps the next draft instead, as one verify of the
        whole window would); -1: the target's own greedy acceptance. ``active`` [size] (bool):
        rows that may keep tokens.
        """
        e = self.engine
        cache, draft = self._rows(size)
        drafts = self._drafts[:size, offset:offset + width - 1]
        positions = self.rows.committed[:size, None] + self._offsets[:width]
        verify_ids = torch.cat([self.rows.pending[:size, None], drafts], dim=1)
        logits, num_accepted, bonus = e._verify_fn(cache, draft, verify_ids, positions)
        agreed, target_bonus = num_accepted, bonus
        force = forced[:size]
        if offset:
            force = torch.where(force >= 0, force - offset, -1)
        # a replayed count past this step's width is cut there: the drafter's profile truncated
        take = force.clamp(min=0, max=width - 1)
        at_take = logits.gather(1, take[:, None, None].expand(-1, 1, logits.shape[-1]))[:, 0]
        num_accepted = torch.where(force >= 0, take, num_accepted)
        bonus = torch.where(force >= 0, at_take.argmax(dim=-1), bonus)
        if follows:
            bonus = torch.where(force >= width, self._drafts[:size, offset + width - 1], bonus)
        if self._num_sampled:
            num_accepted, bonus = num_accepted.clone(), bonus.clone()
            for i, r in enumerate(self.running):
                if r.params.temperature > 0 and (active is None or bool(active[i])):
                    # rejection sampling with the row's rule and generator
                    probs = sampling_probs(logits[i:i + 1], r.params.temperature, r.params.top_p)
                    a, b = rejection_accept(drafts[i:i + 1], probs, None, r.generator)
                    num_accepted[i:i + 1], bonus[i:i + 1] = a, b
        proposed = torch.cat([drafts, bonus[:, None]], dim=1)
        proposed.scatter_(1, num_accepted[:, None], bonus[:, None])
        table = self._finish(size, proposed, num_accepted + 1, agreed, active)
        return table, num_accepted, bonus, force, target_bonus

    def _capture(self) -> None:
        """Both parts of the step as CUDA graphs, once per bucket (the batch is still empty)."""
        from specpilot.engines.graphs import CapturedStep

        self._apply_recipe()  # the kernels this engine's recipe names are the ones captured
        pool = torch.cuda.graph_pool_handle() if self.engine.device.type == "cuda" else None
        for size in self.buckets:
            if self.engine.drafter is None:
                self._graphs[size] = (CapturedStep(lambda s=size: self._decode(s), {}, pool),)
            elif self._budget:
                self._graphs[size] = (CapturedStep(lambda s=size: self._draft(s), {}, pool),)
                for w in self.budget_widths(size):
                    self._budget_graphs[(size, w)] = CapturedStep(
                        lambda s=size, w=w: self._verify(s, self._forced, w), {}, pool)
            else:
                self._graphs[size] = (
                    CapturedStep(lambda s=size: self._draft(s), {}, pool),
                    CapturedStep(lambda s=size: self._verify(s, self._forced), {}, pool))
                prefix = self._stages(size)[1]
                if prefix is not None:  # the second stage, per bucket of rows that passed
                    first = torch.zeros(size, 2 + prefix, dtype=torch.long,
                                        device=self._ones.device)
                    for rows in (b for b in self.buckets if b <= size):
                        self._stage2_graphs[(size, rows)] = CapturedStep(
                            lambda table1, s=size, r=rows: self._stage2(s, r, table1),
                            {"table1": first}, pool)
        self.cache.reset()
        if self.draft_cache is not None:
            self.draft_cache.reset()

    def _deliver(self, table: list[list[int]], running: list[Running] | None = None,
                 num_drafts: int = 0) -> list[tuple[Running, list[int]]]:
        """Host bookkeeping from the step's one read: rows of [kept, agreed, proposed ..] of the
        requests ``running`` held the rows of when the step was queued (default: now; a request
        removed since then gets nothing). ``num_drafts``: the step's drafts per row (a replayed
        row's draw is recorded capped to it, as its drafts were built)."""
        speculative = self.engine.drafter is not None
        now = {id(r) for r in self.running} if running is not None else None
        out = []
        for r, (kept, agreed, *proposed) in zip(running or self.running, table):
            if r.finish_reason is not None or (now is not None and id(r) not in now):
                continue  # a finished row waiting for removal, or one removed since
            if speculative and r.replay is not None:
                r.replay.record(num_drafts)
                r.replay.agreed.append(agreed)
            new = proposed[:kept]
            r.tokens.extend(new)
            r.accept_lengths.append(kept)
            r.committed += kept
            self._maybe_finish(r)
            out.append((r, new))
        return out


def generate_all(batch: BatchEngine, prompts: list[list[int]], params: SamplingParams,
                 on_done=None) -> list[list[int]]:
    """Every prompt through ``batch`` with continuous batching (no scheduler thread); returns
    each prompt's tokens, in order. ``on_done(i)`` is called as request ``i`` finishes."""
    stops = set(params.stop_token_ids)
    if not params.ignore_eos:
        stops.update(batch.engine.target.eos_token_ids)
    requests = [Running(str(i), list(p), params, set(stops)) for i, p in enumerate(prompts)]
    run_requests(batch, requests,
                 None if on_done is None else lambda req: on_done(int(req.request_id)))
    return [r.tokens for r in requests]


def run_requests(batch: BatchEngine, requests: list[Running], on_done=None) -> int:
    """Decode ``requests`` on ``batch``: they join in order as rows free up and leave when
    finished (``on_done(request)``); returns the number of decode steps."""
    waiting, steps = list(reversed(requests)), 0
    while waiting or batch.running:
        for req in [r for r in batch.running if r.finish_reason is not None]:
            batch.remove(req)
            if on_done is not None:
                on_done(req)
        joining = [waiting.pop() for _ in range(min(len(waiting), batch.free_rows))]
        for req, err in batch.add_many(joining):
            raise err
        if any(r.finish_reason is None for r in batch.running):
            batch.step()
            steps += 1
    batch.flush()  # an overlapped step queued after the last request finished keeps nothing
    return steps


def release_memory(device: torch.device) -> None:
    """After dropping batched engines: their captured graphs hold them in reference cycles, so
    collect those, then hand the device's cached blocks back (for the next engine's caches)."""
    import gc

    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def _out_of_memory(engine: Engine, max_batch: int, err: Exception) -> str:
    """Why a batch of ``max_batch`` rows does not fit, and what to change."""
    recipe = engine.recipe
    state = request_state_bytes(engine.target, recipe.gdn_rollback)
    rows = engine.block_size if recipe.gdn_rollback == "snapshot" and engine.drafter else 1
    hint = (f"; its snapshot rollback keeps {rows} recurrent states per row in every verify "
            f"({rows * state * max_batch / 2**30:.1f} GiB at {max_batch} rows): "
            "gdn_rollback='replay' keeps the step inputs instead" if rows > 1 and state else "")
    first_line = str(err).splitlines()[0] if str(err) else type(err).__name__
    return (f"recipe {recipe.name!r}: a batch of {max_batch} rows of {engine.max_len} tokens does "
            f"not fit on {engine.device} ({first_line}){hint}; lower the concurrency or the "
            "setting's max_len")

