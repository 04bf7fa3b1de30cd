"""Recipes: frozen, JSON-serialisable descriptions of one engine (DESIGN.md §2).

A recipe is data: the decode loops read its fields; nothing else (no environment variable) changes
tokens or timing. ``stock`` is what the released drafter system does, ``ar`` is plain decoding, and
``final`` is a campaign's champion. Unknown keys and bad values are errors.
"""

import dataclasses
import json
from pathlib import Path
from typing import Literal

from specpilot.errors import SpecPilotError
from specpilot.fingerprint import stable_hash

_CHOICES = {
    "gdn_rollback": ("snapshot", "replay"),
    "draft_sampling": ("greedy", "sample"),
    "gemm": ("torch", "triton"),
    "verify_budget": ("static", "sps"),
    "gdn_snapshot": ("per-token", "fused"),
    "w12_order": ("rows", "frag"),
}
W12_GROUPS = ("target", "drafter", "lm_head")
MAX_TREE_NODES = 256  # verify rows of one tree step; also a ring KV's rows per forward (Muse: 256)
MAX_TREE_PATHS = 4096  # tree_branches ** tree_positions: candidate paths enumerated per step


@dataclasses.dataclass(frozen=True)
class Recipe:
    """One engine. Every field is a mechanism the search may change."""

    name: str = "stock"
    speculative: bool = True
    """False: plain autoregressive decoding (the reference engine)."""
    block_size: int | None = None
    """Verify window incl. the anchor; None = the drafter checkpoint's (DFlash 16, DFlash2 8). A
    chain step drafts the drafter's whole block and verifies its first ``block_size`` positions."""
    gdn_rollback: Literal["snapshot", "replay"] = "snapshot"
    """How Gated-DeltaNet state returns to the last accepted token (DESIGN.md §3.2)."""
    gdn_snapshot: Literal["per-token", "fused"] = "per-token"
    """Snapshot rollback's verify on a GPU: fla-core's recurrent kernel once per token plus a stack
    of the T states, or one Triton launch that writes each token's state into the reserved buffer
    (``kernels/gated_delta_rule/steps.py``: one state read and T writes)."""
    draft_sampling: Literal["greedy", "sample"] = "greedy"
    """At T > 0: greedy point-mass drafts (SGLang) or drafts sampled from the drafter (z-lab)."""
    cuda_graphs: bool = True
    """Capture the decode and verify steps as CUDA graphs (GPU only)."""
    fused_elementwise: bool = True
    """Norms, gates and activations as torch.compile'd fused kernels (GPU only)."""
    gemm: Literal["torch", "triton"] = "torch"
    """Linear layers (target and drafter): cuBLAS, or the tuned skinny Triton GEMM for <= 64 rows."""
    verify_budget: Literal["static", "sps"] = "static"
    """static: verify the whole window; sps: DSpark's confidence x steps-per-second budget, for
    every drafter family: DSpark's confidence head, else the drafter's own probability of each
    draft, is the survival estimate. One request: eager, the verify cut to the budget's length. A
    batch: each step verifies the captured width with the most expected tokens per second over all
    running requests (a per-step budget: the padded batch has no ragged verify rows)."""
    sps_table: tuple[tuple[float, ...], ...] = ()
    """Measured steps/s by verify tokens per step on this GPU and engine, for verify_budget=sps:
    points of (tokens, steps/s), or of (rows, tokens, steps/s) measured per batch bucket
    (``specpilot sps-table`` writes these: a padded batch step's rate depends on its bucket as
    well as on its verify tokens, bucket x width)."""
    w12: tuple[str, ...] = ()
    """Weight groups stored as lossless 12-bit W12 (``target`` linears, ``drafter`` linears,
    ``lm_head``); their GEMMs decode W12 in registers whatever ``gemm`` says. bf16 engines only."""
    w12_order: str = "rows"
    """Byte order of the W12 planes (``specpilot.kernels.w12.format``): ``rows`` (the GEMMs of
    ``kernels/w12_gemm``) or ``frag``, blocks in mma fragment order read straight into registers
    (``kernels/w12f_gemm``: faster at M = 2-16, not at M = 1 on narrow projections). One order
    for every group in ``w12``."""
    tree_branches: int = 1
    """Tree verification: candidates (the drafter's top-k) at each branching draft position; 1 = a
    chain (no tree). Greedy (temperature 0) and single-request only (``engines/decode/tree.py``)."""
    tree_positions: int = 0
    """How many draft positions branch: the drafter's least confident ones (smallest probability of
    its own draft). 0 = no tree; set together with ``tree_branches``."""
    batched_prefill: bool = False
    """Batch scenarios: the requests that join at one step are prefilled in one target forward,
    right-padded to the longest prompt (Gated-DeltaNet rows past a prompt's end leave its state
    exactly as it was, attention rows past it are dropped), instead of one forward each."""
    admit_ratio: float = 0.0
    """Batch scenarios: queued requests join the running batch only once at least this many of
    them per running request could join together (TGI's waiting-served ratio), so that requests
    finishing at different steps share one prefill forward instead of each stalling every running
    row for one of its own; 0 = join as soon as a row is free (``engines/admission.py``)."""
    admit_max_wait_steps: int = 0
    """With ``admit_ratio``: the most decode steps a request that could join waits for its group."""
    draft_depth: int = 1
    """Deeper drafting: blocks drafted per step, each conditioned on the ones before it as if they
    were accepted (a drafter pass of ``[anchor, earlier drafts, MASK x (B-1)]``), all verified in
    one forward of ``draft_depth * (B - 1) + 1`` rows. 1 = one block. Single-request, a chain (no
    tree, no budget) with the drafter's own block (``block_size`` unset)."""
    overlap_schedule: bool = False
    """Batch scenarios: queue step k+1 on the GPU before the host reads step k's kept tokens, so
    the host's bookkeeping of step k (tokens, stops, streaming, removals) runs while step k+1
    does. Each row's state lives on the device, so step k+1 needs nothing from that read; a
    request that finished at step k keeps nothing in step k+1 and leaves one step later. An
    admission still waits for the queued step (its first token is read on the host). Steps with
    sampled or forced rows read the host mid-step and run unoverlapped, so token forcing runs this
    recipe's steps unoverlapped (replayed benchmark rows do overlap: their drafts are built on the
    device). Not with the confidence budget or two stages, which read the host in every step."""
    tree_max_nodes: int = 32
    """Node budget of a tree step = verify rows, the anchor included: the first-choice path always
    fits (it must be >= the block size); alternative paths are added best-first while they fit."""
    verify_widths: tuple[tuple[int, int], ...] = ()
    """Batch scenarios: ``(rows, width)`` pairs, rows >= 2 increasing. A batched step over at least
    ``rows`` rows (its CUDA-graph bucket) verifies ``width`` positions of each drafted block (the
    anchor included) instead of the whole block: once the verify forward is compute-bound, fewer
    rows per request cost less and lose only the tokens past them. Chosen per setting from the
    cost model (``search.gaps.occupancy_widths``); () = the whole block at every occupancy. Without
    CUDA-graph padding (graphs off) a step's rows are its running requests."""
    two_stage: tuple[tuple[int, int, int], ...] = ()
    """Batch scenarios: ``(rows, window, prefix)`` triples, rows >= 2 increasing. A batched step
    over at least ``rows`` rows verifies ``window`` positions of each drafted block (instead of
    ``verify_widths``) in two forwards: the first ``prefix`` for every request, then the remaining
    ``window - prefix`` only for the requests whose drafts all passed through position ``prefix``
    (its linear layers run on those requests' rows alone). Lossless as one verify of the window;
    the cost model bounds it above fewer positions in one stage only for very large batches
    (``costmodel.phases.two_stage_bound``), and where it did (Muse-Glimmer-30B, 64 requests) it
    measured 0.84x of them, so the search does not offer it (``search/catalog.toml``).
    Attention-only targets (a hybrid target's recurrent state has no keep-nothing commit yet)."""

    def __post_init__(self):
        for field, choices in _CHOICES.items():
            if getattr(self, field) not in choices:
                raise SpecPilotError(f"recipe {self.name!r}: {field} must be one of {choices}, "
                                     f"got {getattr(self, field)!r}")
        if self.verify_budget == "sps" and not self.sps_table:
            raise SpecPilotError(f"recipe {self.name!r}: verify_budget 'sps' needs an sps_table")
        object.__setattr__(self, "sps_table", tuple(tuple(p) for p in self.sps_table))
        if self.sps_table and (why := check_sps_table(self.sps_table)):
            raise SpecPilotError(f"recipe {self.name!r}: sps_table {why}")
        groups = self.w12
        if (not isinstance(groups, (list, tuple)) or not all(isinstance(g, str) for g in groups)
                or not set(groups) <= set(W12_GROUPS) or len(set(groups)) != len(groups)):
            raise SpecPilotError(f"recipe {self.name!r}: w12 must be a list of distinct weight "
                                 f"groups from {W12_GROUPS}, got {groups!r}")
        object.__setattr__(self, "w12", tuple(g for g in W12_GROUPS if g in groups))
        if self.w12_order != "rows" and not self.w12:
            raise SpecPilotError(f"recipe {self.name!r}: w12_order {self.w12_order!r} orders W12 "
                                 "planes, but w12 packs no weight group")
        if "drafter" in self.w12 and not self.speculative:
            raise SpecPilotError(f"recipe {self.name!r}: w12 'drafter' needs a speculative recipe "
                                 "(autoregressive decoding runs no drafter)")
        if type(self.batched_prefill) is not bool:
            raise SpecPilotError(f"recipe {self.name!r}: batched_prefill must be true or false, "
                                 f"got {self.batched_prefill!r}")
        if type(self.overlap_schedule) is not bool:
            raise SpecPilotError(f"recipe {self.name!r}: overlap_schedule must be true or false, "
                                 f"got {self.overlap_schedule!r}")
        if self.overlap_schedule and (self.verify_budget != "static" or self.two_stage):
            raise SpecPilotError(f"recipe {self.name!r}: overlap_schedule queues a step before "
                                 "the last is read; the confidence budget and two_stage read "
                                 "the host in every step")
        self._check_admission()
        if self.block_size is not None and not 2 <= self.block_size <= 64:
            raise SpecPilotError(f"recipe {self.name!r}: block_size must be in 2..64, "
                                 f"got {self.block_size}")
        self._check_tree()
        self._check_depth()
        self._check_widths()
        self._check_two_stage()

    def _check_two_stage(self) -> None:
        self._check_table("two_stage", 3, lambda w, p: 1 <= p < w <= 64,
                          "(rows, window, prefix) integer triples with rows >= 2 strictly "
                          "increasing and 1 <= prefix < window <= 64")

    def stages_for(self, rows: int, block_size: int) -> tuple[int, int | None]:
        """``(window, prefix)`` of a batched step over ``rows`` rows: the positions per request it
        verifies, and where its first stage ends (None: one stage)."""
        window, prefix = self.width_for(rows, block_size), None
        for min_rows, w, p in self.two_stage:
            if rows >= min_rows:
                window, prefix = min(w, block_size), p
        if prefix is not None and prefix >= window:
            prefix = None
        return window, prefix

    def _check_widths(self) -> None:
        self._check_table("verify_widths", 2, lambda w: 2 <= w <= 64,
                          "(rows, width) integer pairs with rows >= 2 strictly increasing and "
                          "widths in 2..64")

    def _check_table(self, field: str, arity: int, entry_ok, shape: str) -> None:
        """A per-bucket table: ``arity``-tuples of ints, the first a row count >= 2 (strictly
        increasing), the rest passing ``entry_ok``; only for a speculative chain recipe."""
        value = getattr(self, field)
        try:
            table = tuple(tuple(int(v) for v in entry) for entry in value)
            ok = all(type(v) is int for entry in value for v in entry)
        except (TypeError, ValueError):
            ok = False
        ok = ok and all(len(entry) == arity and entry_ok(*entry[1:]) for entry in table)
        rows = [entry[0] for entry in table] if ok else []
        if not ok or any(r < 2 for r in rows) or rows != sorted(set(rows)):
            raise SpecPilotError(f"recipe {self.name!r}: {field} must be {shape}, got {value!r}")
        if table and (not self.speculative or self.tree_verify):
            raise SpecPilotError(f"recipe {self.name!r}: {field} needs a speculative chain "
                                 "recipe (no tree)")
        object.__setattr__(self, field, table)

    def width_for(self, rows: int, block_size: int) -> int:
        """Positions per request a batched step over ``rows`` rows verifies."""
        width = block_size
        for min_rows, w in self.verify_widths:
            if rows >= min_rows:
                width = min(w, block_size)
        return width

    def _check_admission(self) -> None:
        ratio, wait = self.admit_ratio, self.admit_max_wait_steps
        if type(ratio) not in (int, float) or not 0 <= ratio <= 4:
            raise SpecPilotError(f"recipe {self.name!r}: admit_ratio must be a number in 0..4, "
                                 f"got {ratio!r}")
        if type(wait) is not int or not 0 <= wait <= 64:
            raise SpecPilotError(f"recipe {self.name!r}: admit_max_wait_steps must be an integer "
                                 f"in 0..64, got {wait!r}")
        if (ratio > 0) != (wait > 0):
            raise SpecPilotError(f"recipe {self.name!r}: admit_ratio ({ratio}) and "
                                 f"admit_max_wait_steps ({wait}) go together: both > 0 to group "
                                 "admissions, or both 0 to admit at once")
        object.__setattr__(self, "admit_ratio", float(ratio))

    @property
    def tree_verify(self) -> bool:
        """Whether this engine verifies a tree of candidate paths instead of one chain."""
        return self.tree_branches > 1

    def _check_tree(self) -> None:
        def fail(message: str):
            raise SpecPilotError(f"recipe {self.name!r}: {message}")

        for field, low, high in (("tree_branches", 1, 16), ("tree_positions", 0, 63),
                                 ("tree_max_nodes", 2, MAX_TREE_NODES)):
            value = getattr(self, field)
            if type(value) is not int or not low <= value <= high:
                fail(f"{field} must be an integer in {low}..{high}, got {value!r}")
        if (self.tree_branches > 1) != (self.tree_positions > 0):
            fail(f"tree_branches ({self.tree_branches}) and tree_positions ({self.tree_positions}) "
                 "go together: both > 1 and > 0 for tree verification, or 1 and 0 for none")
        if not self.tree_verify:
            return
        if not self.speculative:
            fail("tree verification needs a speculative recipe (a drafter proposes the tree)")
        if self.tree_branches ** self.tree_positions > MAX_TREE_PATHS:
            fail(f"tree_branches ** tree_positions = {self.tree_branches ** self.tree_positions} "
                 f"candidate paths per step exceeds {MAX_TREE_PATHS}")
        if self.block_size is not None and self.tree_fit_error(self.block_size):
            fail(self.tree_fit_error(self.block_size))
        if self.verify_budget != "static":
            fail("tree verification verifies the whole tree: verify_budget must be 'static'")
        if self.draft_sampling != "greedy":
            fail("tree verification is greedy-only (temperature 0): draft_sampling must be "
                 "'greedy'")

    def _check_depth(self) -> None:
        depth = self.draft_depth
        if type(depth) is not int or not 1 <= depth <= 4:
            raise SpecPilotError(f"recipe {self.name!r}: draft_depth must be an integer in 1..4, "
                                 f"got {depth!r}")
        clashes = [why for why, clash in (
            ("a speculative recipe", not self.speculative), ("no tree", self.tree_verify),
            ("verify_budget 'static'", self.verify_budget != "static"),
            ("block_size unset (the drafter's own block)", self.block_size is not None),
            ("no batch verify tables (it is single-request)",
             bool(self.verify_widths or self.two_stage))) if clash]
        if depth > 1 and clashes:
            raise SpecPilotError(f"recipe {self.name!r}: draft_depth {depth} needs "
                                 + ", ".join(clashes))

    def tree_fit_error(self, block_size: int) -> str | None:
        """Why this tree does not fit a ``block_size``-wide verify window (None: it fits)."""
        if self.tree_positions > block_size - 1:
            return (f"tree_positions {self.tree_positions} exceeds the {block_size - 1} draft "
                    f"positions of a {block_size}-wide block")
        if self.tree_max_nodes < block_size:
            return (f"tree_max_nodes {self.tree_max_nodes} cannot hold the first-choice path of "
                    f"a {block_size}-wide block")
        return None

    @classmethod
    def from_dict(cls, data: dict) -> "Recipe":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise SpecPilotError(f"unknown recipe key(s) {unknown}; known: {sorted(known)}")
        return cls(**data)

    @classmethod
    def from_json(cls, path: str | Path) -> "Recipe":
        try:
            return cls.from_dict(json.loads(Path(path).read_text()))
        except (OSError, json.JSONDecodeError) as err:
            raise SpecPilotError(f"cannot read recipe {path}: {err}") from err

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def hash(self) -> str:
        data = {k: v for k, v in self.to_dict().items() if k != "name"}
        # recipes that predate a field keep their hash while they leave it at its default
        for field, default in _ADDED_FIELDS.items():
            if data[field] == default:
                del data[field]
        if not self.tree_verify:  # ... and tree verification's fields while it is off
            for field in ("tree_branches", "tree_positions", "tree_max_nodes"):
                del data[field]
        return stable_hash(data)

    def replace(self, **changes) -> "Recipe":
        return dataclasses.replace(self, **changes)

    def with_delta(self, delta: dict, **changes) -> "Recipe":
        """This recipe with a mechanism's ``delta`` applied (then ``changes``): a group field
        (``GROUP_FIELDS``) gains the delta's groups, so ``w12-target`` then ``w12-lm-head`` packs
        both; every other field takes the delta's value."""
        applied = {k: merge_field(k, getattr(self, k), v) for k, v in delta.items()}
        return self.replace(**applied, **changes)


GROUP_FIELDS = ("w12",)
"""Recipe fields that hold a set of groups: mechanisms add to them instead of overwriting."""


def merge_field(field: str, old, new):
    """``new`` as a delta's value for ``field`` on top of ``old``: the union (old's order first)
    for a group field, else ``new`` (lists as tuples)."""
    if field in GROUP_FIELDS:
        return tuple(dict.fromkeys((*old, *new)))
    return tuple(new) if isinstance(new, list) else new


_ADDED_FIELDS = {"w12": (), "batched_prefill": False, "gdn_snapshot": "per-token",
                 "admit_ratio": 0.0, "admit_max_wait_steps": 0, "verify_widths": (),
                 "two_stage": (), "draft_depth": 1,
                 "overlap_schedule": False, "w12_order": "rows"}
"""Fields added after recipes were first hashed, with the default that leaves them out of it."""

STOCK = Recipe(name="stock")
AR = Recipe(name="ar", speculative=False)


def check_sps_table(sps_table) -> str | None:
    """Why ``sps_table`` is not a steps/s table (None if it is): points of ``(tokens, steps/s)``
    or all of ``(rows, tokens, steps/s)``, positive numbers."""
    sizes = {len(p) for p in sps_table}
    if not sps_table or len(sizes) != 1 or sizes - {2, 3}:
        return "needs points of (tokens, steps/s) or, per batch bucket, (rows, tokens, steps/s)"
    if any(not isinstance(v, (int, float)) or isinstance(v, bool) or not 0 < v < float("inf")
           for p in sps_table for v in p):
        return "needs positive finite numbers"
    return None
