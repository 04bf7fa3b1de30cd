"""The engine: one target, an optional block drafter, and a recipe; ``generate`` runs one request.

Per request the engine keeps: ``committed`` tokens whose K/V and recurrent state are in the cache, and
one *pending* token (the last output, not yet fed to the target). A step feeds
``[pending, d_1 .. d_{B-1}]`` (speculative) or ``[pending]`` (AR) to the target, decides which output
tokens to keep, and commits as many input rows as tokens kept: keeping ``[d_1 .. d_a, bonus]`` means
rows ``[pending, d_1 .. d_a]`` are now context and ``bonus`` is the new pending token.

A forcer (token forcing, ``specpilot.validation``) may shorten what a step keeps and replace its last
token; the commit rule above makes that exact, so one divergence never cascades.

The step is four fixed-shape functions (decode | draft, verify, commit); on CUDA with
``recipe.cuda_graphs`` each is captured once as a CUDA graph over a persistent cache and replayed.
Greedy requests use the graphs; sampled requests run the same functions eagerly.

With ``recipe.tree_branches > 1`` a step verifies a tree of candidate paths instead of one chain
(``_tree_step``, see ``specpilot.engines.decode.tree``): greedy only, and the commit rule above holds
along the accepted path. Its draft, verify and commit are captured too: the host builds each step's
tree from one read of the drafter's candidates, padded to the recipe's node and path counts.
"""

import contextlib
import dataclasses
import functools
import time

import torch

from specpilot.engines.decode.accept import greedy_accept
from specpilot.engines.decode.accept import rejection_accept
from specpilot.engines.decode.accept import sampling_probs
from specpilot.engines.decode.accept import tree_greedy_accept
from specpilot.engines.decode.budget import choose_verify_lengths
from specpilot.engines.decode.tree import TreeLayout
from specpilot.engines.decode.tree import draft_candidates
from specpilot.engines.decode.tree import tree_arrays
from specpilot.engines.drafters.replay import ReplayPlan
from specpilot.engines.models.layers import set_fused_elementwise
from specpilot.engines.models.layers import set_gemm
from specpilot.engines.timing import PhaseTimer
from specpilot.errors import SpecPilotError
from specpilot.recipe import Recipe


@dataclasses.dataclass(frozen=True)
class SamplingParams:
    max_new_tokens: int = 64
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False

    def __post_init__(self):
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")


@dataclasses.dataclass
class GenerationResult:
    tokens: list[int]
    accept_lengths: list[int]  # tokens kept per decode step, bonus included (tau = their mean)
    finish_reason: str  # "stop" | "length"
    decode_s: float = 0.0
    verify_widths: list[int] = dataclasses.field(default_factory=list)  # rows verified per step
    # tree recipes: the accepted path per step (0 = the drafter's first choices; > 0 = the step
    # accepted at least one alternative token)
    tree_paths: list[int] = dataclasses.field(default_factory=list)

    @property
    def tau(self) -> float:
        return sum(self.accept_lengths) / len(self.accept_lengths) if self.accept_lengths else 0.0


class Engine:
    """Give it loaded models (see ``specpilot.build``) and a recipe."""

    def __init__(self, target, drafter, recipe: Recipe, max_len: int = 4096):
        self.target, self.recipe, self.max_len = target, recipe, max_len
        self.drafter = drafter if recipe.speculative else None
        if recipe.speculative and drafter is None:
            raise ValueError(f"recipe {recipe.name!r} is speculative but no drafter was given")
        if self.drafter is not None:
            self.drafter.check_target(target)
        self.block_size = (recipe.block_size or drafter.block_size) if self.drafter else 1
        if self.drafter is not None and self.block_size > self.drafter.block_size:
            raise ValueError(f"recipe {recipe.name!r}: block_size {self.block_size} exceeds the "
                             f"drafter's verify window of {self.drafter.block_size}")
        # A chain step always drafts the drafter's own block and verifies its first block_size
        # positions: a parallel drafter attends across its block, so a narrower draft window would
        # change even the first drafts (and leave the block it was trained on); cut after drafting,
        # the verified drafts are exactly the full block's first ones (the replay's truncation).
        self.draft_block = self.drafter.block_size if self.drafter is not None else 1
        # deeper drafting: the draft window spans draft_depth blocks, all verified together
        self.draft_window = recipe.draft_depth * (self.draft_block - 1) + 1
        if recipe.draft_depth > 1 and self.drafter is not None:
            if self.drafter.query_rows(self.draft_block) != self.draft_block:
                raise SpecPilotError(f"recipe {recipe.name!r}: deeper drafting needs a drafter "
                                     f"that decodes every row of its block after the anchor; "
                                     f"{type(self.drafter).__name__} drafts from the anchor's row "
                                     "(not built)")
            limit = target.max_rows_per_forward  # a ring KV cache holds one forward of at most this
            if limit is not None and self.draft_window > limit:
                raise SpecPilotError(f"recipe {recipe.name!r}: draft_depth {recipe.draft_depth} "
                                     f"verifies {self.draft_window} rows, more than the {limit} one "
                                     f"forward of {type(target).__name__} may write")
            self.block_size = self.draft_window
        self.device = target.lm_head.weight.device
        if recipe.tree_verify:
            self._check_tree(recipe, target)
        # a ragged (budgeted) verify width has no fixed shape to capture; a tree is padded to one
        self.use_graphs = (recipe.cuda_graphs and self.device.type == "cuda"
                           and recipe.verify_budget == "static")
        if recipe.verify_budget == "sps" and self.drafter is None:
            raise ValueError(f"recipe {recipe.name!r}: verify_budget 'sps' needs a drafter")
        # the budget's survival estimate: DSpark's confidence head, else the drafter's own
        # probability of each draft (DFlash, DFlash2, the Muse assistant)
        self._own_confidence = (recipe.verify_budget == "sps" and
                                getattr(self.drafter, "confidence_head", None) is None)
        self._confidence = None  # [B, Q-1] of the last draft, when the budget reads it
        self.fused = recipe.fused_elementwise and self.device.type == "cuda"
        self._persistent = None  # (cache, draft_cache, graphs) once captured
        self._last_width = self.block_size  # rows the last step verified
        self._last_path = 0  # the path the last tree step accepted
        self._timer = None

    def _check_tree(self, recipe: Recipe, target) -> None:
        """What a tree recipe needs of this drafter and target (the recipe checked the rest)."""
        def fail(message: str):
            raise SpecPilotError(f"recipe {recipe.name!r}: {message}")

        if recipe.tree_fit_error(self.block_size):  # the drafter's block, when the recipe has none
            fail(recipe.tree_fit_error(self.block_size))
        limit = target.max_rows_per_forward  # a ring KV cache holds one forward of at most this
        if limit is not None and recipe.tree_max_nodes > limit:
            fail(f"tree_max_nodes {recipe.tree_max_nodes} exceeds the {limit} rows one forward of "
                 f"{type(target).__name__} may write")

    @property
    def context(self) -> int:
        """Largest prompt + max_new_tokens a request may ask for: a step drafts up to
        ``draft_window`` rows past the committed tokens (a tree step up to its nodes)."""
        rows = max(self.draft_window, self.recipe.tree_max_nodes if self.recipe.tree_verify else 0)
        return self.max_len - rows - 1

    @property
    def capture(self) -> tuple[int, ...]:
        return tuple(self.drafter.target_layer_ids) if self.drafter is not None else ()

    # -- the four step functions (fixed shapes: capturable) ------------------------------------
    def _decode_fn(self, cache, ids, positions):
        return self.target(ids, positions, cache, commit_all=True).logits[:, 0]

    def _decode_next_fn(self, cache, ids, positions):
        """A greedy AR step that feeds itself: (logits [1, V], token [1]), and the token becomes
        ``ids`` and ``positions`` moves on by one, so the step can run again before the host has
        read its token (:meth:`_ar_chain`)."""
        logits = self._decode_fn(cache, ids, positions)
        token = logits.argmax(dim=-1)
        ids.copy_(token[:, None])
        positions.add_(1)
        return logits, token

    def _draft_fn(self, draft_cache, block_ids, positions, temperature=0.0, generator=None):
        """Drafts [B, W-1] (and q) for draft windows ``block_ids``/``positions`` [B, W]: one block
        (W = the drafter's), or ``recipe.draft_depth`` blocks, each drafted by a pass over the
        anchor, the drafts before it and its own masks (W = ``draft_window``)."""
        if self.recipe.draft_depth > 1:
            return self._deep_draft_fn(draft_cache, block_ids, positions, temperature, generator)
        rows = self.drafter.query_rows(block_ids.shape[1])
        hidden = self.drafter(self.target.draft_embed(block_ids[:, :rows]), positions[:, :rows],
                              draft_cache)
        if self._own_confidence and temperature <= 0:  # the budget reads _confidence after
            drafts, logits = self.drafter.draft_logits(hidden, block_ids[:, 0], self.target.lm_head)
            self._confidence = _probability_of(torch.softmax(logits.float(), dim=-1), drafts)
            return drafts, None
        drafts, q = self.drafter.propose(hidden, block_ids[:, 0], self.target.lm_head, temperature,
                                         generator)
        if self._own_confidence:
            self._confidence = _probability_of(q, drafts)
        return drafts, q

    def _deep_draft_fn(self, draft_cache, block_ids, positions, temperature=0.0, generator=None):
        """Deeper drafting (``recipe.draft_depth`` > 1): pass d drafts block d from
        ``[anchor, the d - 1 blocks' drafts, MASK x (B-1)]``, decoding its last B rows (their
        first row, the last earlier draft, acting as the anchor), as if the earlier drafts had been
        accepted. The drafter's context is the committed tokens' only: the earlier drafts enter as
        tokens in its block. Returns the drafts [B, depth * (B-1)] and q (or None: greedy)."""
        block, lm_head = self.draft_block, self.target.lm_head
        drafts, qs = block_ids[:, :1], []
        for depth in range(1, self.recipe.draft_depth + 1):
            width = depth * (block - 1) + 1
            ids = torch.cat([drafts, block_ids[:, drafts.shape[1]:width]], dim=1)
            hidden = self.drafter(self.target.draft_embed(ids), positions[:, :width], draft_cache)
            new, q = self.drafter.propose(hidden[:, width - block:], ids[:, width - block],
                                          lm_head, temperature, generator)
            drafts = torch.cat([drafts, new], dim=1)
            qs.append(q)
        return drafts[:, 1:], None if qs[0] is None else torch.cat(qs, dim=1)

    def _verify_fn(self, cache, draft_cache, verify_ids, positions):
        out = self.target(verify_ids, positions, cache, commit_all=False, capture=self.capture)
        self.drafter.commit_context(out.aux, positions, draft_cache)
        num_accepted, bonus = greedy_accept(verify_ids[:, 1:], out.logits)
        return out.logits, num_accepted, bonus

    def _tree_draft_fn(self, draft_cache, block_ids, positions, override):
        """A tree step's draft: [2, 1, D, k] = the candidates (as float64, exact) and the drafter's
        probabilities of them (``tree.draft_candidates``); ``override`` [1, D] replaces the first
        choices where >= 0 (a benchmark's replayed drafts)."""
        rows = self.drafter.query_rows(block_ids.shape[1])
        hidden = self.drafter(self.target.draft_embed(block_ids[:, :rows]), positions[:, :rows],
                              draft_cache)
        drafts, logits = self.drafter.draft_logits(hidden, block_ids[:, 0], self.target.lm_head)
        drafts = torch.where(override >= 0, override, drafts)
        candidates, probs = draft_candidates(drafts, logits, self.recipe.tree_branches)
        return torch.stack([candidates.double(), probs.double()])

    def _tree_verify_fn(self, cache, draft_cache, tokens, depth, ancestors, paths, node_path,
                        start, accept_paths):
        """Verify a (padded) tree in one forward, keep its best path among ``accept_paths`` as the
        cache's pending chain (``ModelCache.keep_path``) and give its rows to the drafter.

        Returns [path, num_accepted, bonus, the path's D drafts] and the target's logits along the
        path [D + 1, V]."""
        tree = TreeLayout(tokens, depth, ancestors, paths, node_path, start)
        view = cache.tree_view(tree)
        out = self.target(tokens[None], tree.positions, view, commit_all=False,
                          capture=self.capture)
        path, num_accepted, bonus = tree_greedy_accept(tokens, accept_paths, out.logits[0])
        nodes = paths.index_select(0, path)[0]  # [D + 1]: the accepted path from the anchor
        cache.keep_path(view, tree, path)
        positions = start[:, None] + torch.arange(paths.shape[1], device=start.device)
        self.drafter.commit_context(out.aux[:, nodes], positions, draft_cache)
        return torch.cat([path, num_accepted, bonus, tokens[nodes[1:]]]), out.logits[0, nodes]

    @staticmethod
    def _commit_fn(cache, draft_cache, num_rows, new_len, pending=None):
        cache.commit(num_rows, new_len, pending)
        if draft_cache is not None:
            draft_cache.commit(num_rows, new_len)

    # -- state ---------------------------------------------------------------------------------
    def _new_state(self, capacity: int):
        cache = self.target.new_cache(1, capacity, self.recipe.gdn_rollback)
        if self.drafter is not None and not self.recipe.tree_verify:
            # the verify's per-row states, kept in place
            cache.reserve_snapshots(self.block_size, self.recipe.gdn_snapshot)
        draft_cache = (self.drafter.new_cache(1, capacity, self.block_size)
                       if self.drafter is not None else None)
        return cache, draft_cache

    def _graphs(self):
        """Persistent cache + captured step graphs (built on first use)."""
        if self._persistent is None:
            from specpilot.engines.graphs import CapturedStep

            cache, draft_cache = self._new_state(self.max_len)
            pool = torch.cuda.graph_pool_handle()
            dev, block = self.device, self.block_size
            one = torch.ones(1, dtype=torch.long, device=dev)
            if self.drafter is None:
                graphs = {"decode": CapturedStep(  # graphs serve greedy requests only
                    lambda ids, positions: self._decode_next_fn(cache, ids, positions),
                    {"ids": one[None], "positions": one[None]}, pool)}
            elif self.recipe.tree_verify:
                graphs = self._tree_graphs(cache, draft_cache, pool)
            else:
                ids = torch.ones(1, self.draft_window, dtype=torch.long, device=dev)
                pos = torch.arange(self.draft_window, device=dev)[None]
                graphs = {"draft": CapturedStep(
                    lambda block_ids, positions: self._draft_fn(draft_cache, block_ids, positions)[0],
                    {"block_ids": ids, "positions": pos}, pool)}
                graphs["verify"] = CapturedStep(
                    lambda verify_ids, positions: self._verify_fn(cache, draft_cache, verify_ids,
                                                                  positions),
                    {"verify_ids": ids[:, :block], "positions": pos[:, :block]}, pool)
                pending = cache.pending_rows()
                graphs["commit"] = CapturedStep(
                    lambda num_rows, new_len: self._commit_fn(cache, draft_cache, num_rows, new_len,
                                                              pending),
                    {"num_rows": one, "new_len": one * block}, pool)
            self._persistent = (cache, draft_cache, graphs)
        cache, draft_cache, graphs = self._persistent
        cache.reset()
        if draft_cache is not None:
            draft_cache.reset()
        return cache, draft_cache, graphs

    def _tree_graphs(self, cache, draft_cache, pool) -> dict:
        """A tree step's draft, verify and commit, captured on a placeholder chain padded to the
        recipe's node and path counts (every tree has those shapes: ``tree.tree_arrays``)."""
        from specpilot.engines.graphs import CapturedStep

        block, dev = self.block_size, self.device
        ids = torch.ones(1, block, dtype=torch.long, device=dev)
        pos = torch.arange(block, device=dev)[None]
        graphs = {"draft": CapturedStep(
            lambda block_ids, positions, override: self._tree_draft_fn(draft_cache, block_ids,
                                                                       positions, override),
            {"block_ids": ids, "positions": pos, "override": -ids[:, 1:]}, pool)}
        branches = self.recipe.tree_branches
        placeholder = self._tree_inputs(1, [[1] * branches] * (block - 1),
                                        [[1.0 / branches] * branches] * (block - 1), None)
        graphs["verify"] = CapturedStep(
            lambda **inputs: self._tree_verify_fn(cache, draft_cache, **inputs),
            {**placeholder, "start": pos[0, 1:2]}, pool)
        pending = cache.pending_rows()  # the accepted path's rows the verify graph leaves
        one = pos[0, 1:2]
        graphs["commit"] = CapturedStep(
            lambda num_rows, new_len: self._commit_fn(cache, draft_cache, num_rows, new_len,
                                                      pending),
            {"num_rows": one, "new_len": one * block}, pool)
        return graphs

    def _tree_inputs(self, anchor: int, candidates, probs, replay) -> dict[str, torch.Tensor]:
        """The verify's tree tensors on the device, and the paths acceptance chooses from: all of
        them, or a replayed step's first-choice path alone. Padded to fixed shapes with or
        without graphs, so that an eager step (the CPU tests) runs the layout a graph captures."""
        recipe = self.recipe
        arrays = tree_arrays(anchor, candidates, probs, recipe.tree_positions, recipe.tree_max_nodes)
        paths = arrays["paths"]
        arrays["accept_paths"] = paths if replay is None else paths[:1].expand_as(paths).clone()
        flat = self._upload(torch.cat([t.flatten().long() for t in arrays.values()]))  # one copy
        inputs = dict(zip(arrays, flat.split([t.numel() for t in arrays.values()])))
        inputs = {name: t.view(arrays[name].shape) for name, t in inputs.items()}
        inputs["ancestors"] = inputs["ancestors"].bool()
        return inputs

    def _pick(self, logits: torch.Tensor, params: SamplingParams, generator) -> torch.Tensor:
        if params.temperature <= 0:
            return logits.argmax(dim=-1)
        probs = sampling_probs(logits, params.temperature, params.top_p)
        return torch.multinomial(probs, 1, generator=generator)[:, 0]

    # -- one request ---------------------------------------------------------------------------
    @torch.inference_mode()
    def generate(self, prompt_ids: list[int], params: SamplingParams, forcer=None,
                 replay: ReplayPlan | None = None, timer: PhaseTimer | None = None
                 ) -> GenerationResult:
        """Generate up to ``params.max_new_tokens`` tokens after ``prompt_ids``.

        ``timer``: a :class:`PhaseTimer` that marks every decode step's draft / verify / accept /
        commit sections (synchronising once per step, so only for benchmarks).
        """
        self._timer = timer
        num_prompt = len(prompt_ids)
        if num_prompt == 0:
            raise ValueError("the prompt is empty")
        use_tree = self.recipe.tree_verify
        if use_tree and params.temperature > 0:
            raise SpecPilotError(f"recipe {self.recipe.name!r}: tree verification is greedy-only "
                                 f"(temperature 0), got temperature {params.temperature}")
        if num_prompt + params.max_new_tokens > self.context:
            raise ValueError(f"prompt ({num_prompt}) + max_new_tokens ({params.max_new_tokens}) "
                             f"exceeds the engine's context of {self.max_len} tokens")
        # the rows one step may reach past the request's tokens (see ``context``)
        capacity = num_prompt + params.max_new_tokens + self.max_len - self.context
        for model in (self.target, self.drafter):
            if model is not None:  # models may be shared by engines of different recipes
                set_fused_elementwise(model, self.fused)
                set_gemm(model, self.recipe.gemm)
        generator = None
        if params.temperature > 0:
            generator = torch.Generator(device=self.device)
            generator.manual_seed(params.seed if params.seed is not None else 0)
        stops = set(params.stop_token_ids)
        if not params.ignore_eos:
            stops.update(self.target.eos_token_ids)
        graphs = None
        if self.use_graphs and params.temperature <= 0:
            cache, draft_cache, graphs = self._graphs()
        else:
            cache, draft_cache = self._new_state(capacity)

        ids = torch.tensor([prompt_ids], device=self.device)
        positions = torch.arange(num_prompt, device=self.device)[None]
        out = self.target.prefill(ids, positions, cache, capture=self.capture)
        if draft_cache is not None:
            self.drafter.commit_context(out.aux, positions, draft_cache)
        first = [int(self._pick(out.logits[:, -1], params, generator)[0])]
        kept = forcer.filter(0, first, out.logits[0, -1:]) if forcer is not None else first
        tokens, accept_lengths, verify_widths, tree_paths = list(kept), [], [], []
        committed = num_prompt
        start = time.perf_counter()
        if self.drafter is None and params.temperature <= 0 and forcer is None and timer is None:
            step = graphs["decode"] if graphs is not None else self._eager_step(cache)
            steps = self._ar_chain(tokens, committed, step, stops, params.max_new_tokens)
            accept_lengths, verify_widths = [1] * steps, [1] * steps
        while len(tokens) < params.max_new_tokens and tokens[-1] not in stops:
            with timer.step() if timer is not None else contextlib.nullcontext():
                if self.drafter is None:
                    proposed, logits = self._ar_step(tokens[-1], committed, cache, params,
                                                     generator, graphs)
                elif use_tree:
                    proposed, logits = self._tree_step(tokens[-1], committed, len(tokens), cache,
                                                       draft_cache, replay, graphs)
                    tree_paths.append(self._last_path)
                else:
                    proposed, logits = self._spec_step(tokens[-1], committed, len(tokens), cache,
                                                       draft_cache, params, generator, replay,
                                                       graphs)
                proposed = self._clip(proposed, stops, params.max_new_tokens - len(tokens))
                if forcer is not None:
                    proposed = forcer.filter(len(tokens), proposed, logits)
                verify_widths.append(1 if self.drafter is None else self._last_width)
                committed += len(proposed)
                with self._phase("commit"):
                    self._commit(cache, draft_cache, len(proposed), committed, graphs)
                accept_lengths.append(len(proposed))
                tokens.extend(proposed)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        finish = "stop" if tokens[-1] in stops else "length"
        return GenerationResult(tokens, accept_lengths, finish, time.perf_counter() - start,
                                verify_widths, tree_paths)

    def _phase(self, name: str):
        timer = self._timer
        return timer.phase(name) if timer is not None else contextlib.nullcontext()

    @staticmethod
    def _clip(proposed: list[int], stops: set[int], budget: int) -> list[int]:
        """Drop what a step proposed past the token budget or after a stop token."""
        proposed = proposed[:budget]
        for i, token in enumerate(proposed):
            if token in stops:
                return proposed[:i + 1]
        return proposed

    def _scalar(self, value: int) -> torch.Tensor:
        """``[value]`` on the engine's device (see :meth:`_upload`)."""
        return self._upload([value])

    def _upload(self, values) -> torch.Tensor:
        """``values`` (a list, or a host tensor) on the engine's device. On CUDA through
        page-locked memory without waiting: a blocking upload would synchronise the stream
        (PyTorch waits after a blocking host->device copy), and a step makes several (anchor,
        position, commit counts, a tree); the caching host allocator keeps each staging buffer
        alive until its copy ran. A list is built straight into page-locked memory."""
        if self.device.type != "cuda":
            return torch.as_tensor(values).to(self.device)
        staged = (values.pin_memory() if isinstance(values, torch.Tensor)
                  else torch.tensor(values, pin_memory=True))
        return staged.to(self.device, non_blocking=True)

    def _commit(self, cache, draft_cache, num_rows: int, committed: int, graphs=None) -> None:
        """Keep ``num_rows`` rows of the last forward; ``committed`` tokens are now context."""
        if self.drafter is None:
            return  # AR decode committed its single row already
        rows, new_len = self._scalar(num_rows), self._scalar(committed)
        if graphs is not None:
            graphs["commit"](num_rows=rows, new_len=new_len)
        else:
            self._commit_fn(cache, draft_cache, rows, new_len)

    def _ar_step(self, pending, committed, cache, params, generator, graphs=None):
        """One target forward of [pending]; returns ([next token], its logits [1, V])."""
        ids, positions = self._scalar(pending)[None], self._scalar(committed)[None]
        with self._phase("verify"):  # an AR step is one target forward
            if graphs is not None:  # greedy: the captured step picked the token
                logits, token = graphs["decode"](ids=ids, positions=positions)
            else:
                logits = self._decode_fn(cache, ids, positions)
        with self._phase("accept"):
            if graphs is None:
                token = self._pick(logits, params, generator)
            token = int(token[0])
        return [token], logits

    def _eager_step(self, cache):
        """:meth:`_decode_next_fn` over its own input tensors, called as a captured step is:
        with new inputs, or with none to run on from where the last call left them."""
        inputs = {}

        def step(**new_inputs):
            inputs.update((name, value.clone()) for name, value in new_inputs.items())
            return self._decode_next_fn(cache, **inputs)
        return step

    def _ar_chain(self, tokens: list[int], committed: int, step, stops: set[int],
                  max_new_tokens: int) -> int:
        """Greedy AR decode one step ahead of the host; appends to ``tokens``, returns the steps.

        ``step`` feeds itself (:meth:`_decode_next_fn`), so step k + 1 is queued before step k's
        token is read: the GPU does not wait for the host between steps (the host's wake-up,
        bookkeeping and next launch hide behind a step). A stop token is seen one step late:
        the step queued after it is dropped (it advanced only this request's cache, which the
        next request resets). Same tokens as :meth:`_ar_step`'s loop: the same forward and argmax.
        """
        total = max_new_tokens - len(tokens) if tokens[-1] not in stops else 0
        cuda = self.device.type == "cuda"
        staged = [torch.empty(1, dtype=torch.long, pin_memory=cuda) for _ in range(2)]
        ready = [torch.cuda.Event() if cuda else None for _ in range(2)]
        feed = {"ids": self._scalar(tokens[-1])[None], "positions": self._scalar(committed)[None]}
        launched = read = 0
        while read < total:
            while launched < total and launched - read < 2:
                token = step(**feed)[1]
                feed = {}
                staged[launched % 2].copy_(token, non_blocking=cuda)
                if cuda:
                    ready[launched % 2].record()
                launched += 1
            if cuda:
                ready[read % 2].synchronize()
            tokens.append(int(staged[read % 2][0]))
            read += 1
            if tokens[-1] in stops:
                break
        return read

    def _accept(self, drafts, logits, draft_probs, params, generator):
        """(num_accepted [B], next token [B]) under the request's sampling rule."""
        if params.temperature <= 0:
            return greedy_accept(drafts, logits)
        probs = sampling_probs(logits, params.temperature, params.top_p)
        return rejection_accept(drafts, probs, draft_probs, generator)

    def _spec_step(self, pending, committed, num_generated, cache, draft_cache, params, generator,
                   replay, graphs=None):
        """Draft a block, verify it; returns (kept tokens, the target's logits for them [n, V])."""
        block = self.block_size
        block_ids, positions = self._block(self._scalar(pending), self._scalar(committed))
        temperature = params.temperature if self.recipe.draft_sampling == "sample" else 0.0
        with self._phase("draft"):
            if graphs is not None:
                drafts, draft_probs = graphs["draft"](block_ids=block_ids, positions=positions), None
            else:
                drafts, draft_probs = self._draft_fn(draft_cache, block_ids, positions, temperature,
                                                     generator)
        # the drafter's whole block was drafted; the step verifies its first ``block`` positions
        drafts, positions = drafts[:, :block - 1], positions[:, :block]
        if draft_probs is not None:
            draft_probs = draft_probs[:, :block - 1]
        if replay is not None:
            drafts = torch.tensor([replay.override(num_generated, block - 1)], device=self.device)
            draft_probs = None
        verify_ids = torch.cat([block_ids[:, :1], drafts], dim=1)
        if self.recipe.verify_budget == "sps":
            confidence = self._confidence if self._own_confidence else self.drafter.last_confidence
            _, lengths = choose_verify_lengths(confidence[:, :block - 1], self.recipe.sps_table)
            verify_ids, positions = verify_ids[:, :lengths[0]], positions[:, :lengths[0]]
            draft_probs = draft_probs[:, :lengths[0] - 1] if draft_probs is not None else None
        self._last_width = verify_ids.shape[1]
        with self._phase("verify"):
            if graphs is not None:
                logits, num_accepted, bonus = graphs["verify"](verify_ids=verify_ids,
                                                               positions=positions)
            else:
                logits, num_accepted, bonus = self._verify_fn(cache, draft_cache, verify_ids,
                                                              positions)
        with self._phase("accept"):
            if graphs is None and params.temperature > 0:
                num_accepted, bonus = self._accept(verify_ids[:, 1:], logits, draft_probs, params,
                                                   generator)
            tail = torch.cat([num_accepted, bonus, verify_ids[0, 1:]]).tolist()  # one device sync
        a, bonus = tail[0], tail[1]
        if replay is not None:
            a, bonus = self._replayed(replay, a, logits[0], verify_ids.shape[1])
        return tail[2:2 + a] + [bonus], logits[0, :a + 1]

    def _tree_step(self, pending, committed, num_generated, cache, draft_cache, replay,
                   graphs=None):
        """Draft a block with alternatives, verify the tree in one forward, keep its best path;
        returns (kept tokens, the target's logits for them [n, V]). Greedy only."""
        block = self.block_size
        anchor, start = self._scalar(pending), self._scalar(committed)
        block_ids, positions = self._block(anchor, start, block)  # a tree drafts its own width
        override = self._upload([-1] * (block - 1) if replay is None
                                else replay.override(num_generated, block - 1))[None]
        with self._phase("draft"):
            draft = graphs["draft"] if graphs is not None else functools.partial(
                self._tree_draft_fn, draft_cache)
            candidates, probs = draft(block_ids=block_ids, positions=positions,
                                      override=override)[:, 0].tolist()  # one device sync
            inputs = self._tree_inputs(pending, [[int(t) for t in row] for row in candidates],
                                       probs, replay)
        self._last_width = inputs["tokens"].shape[0]
        with self._phase("verify"):
            verify = graphs["verify"] if graphs is not None else functools.partial(
                self._tree_verify_fn, cache, draft_cache)
            tail, logits = verify(**inputs, start=start)
        with self._phase("accept"):
            tail = tail.tolist()
        self._last_path, a, bonus = tail[:3]
        if replay is not None:
            a, bonus = self._replayed(replay, a, logits, block)
        return tail[3:3 + a] + [bonus], logits[:a + 1]

    def _block(self, pending: torch.Tensor, start: torch.Tensor, width: int | None = None):
        """Draft windows ``[pending, MASK x (W-1)]`` at ``start ..`` for rows pending/start [R];
        ``width`` W defaults to ``draft_window`` (the drafter's block, or deeper drafting's
        blocks)."""
        width = width or self.draft_window
        positions = start[:, None] + torch.arange(width, device=self.device)
        block_ids = torch.full((pending.shape[0], width), self.drafter.mask_token_id,
                               device=self.device)
        block_ids[:, 0] = pending
        return block_ids, positions

    @staticmethod
    def _replayed(plan: ReplayPlan, agreed: int, logits: torch.Tensor, width: int):
        """Benchmark-only simulated acceptance (see ReplayPlan): the profile's draw sets how many
        drafts are kept, the target's own token after them is the bonus; the target's real
        agreement is recorded. Returns (num_accepted, bonus)."""
        plan.agreed.append(agreed)
        num_accepted = min(plan.drawn[-1], width - 1)
        return num_accepted, int(logits[num_accepted].argmax())


def _probability_of(probs: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """probs [B, Q, V], tokens [B, Q] -> the probability of each token [B, Q]."""
    return probs.gather(-1, tokens[..., None])[..., 0]
