"""Per-request model state: attention KV slots, Gated-DeltaNet conv/recurrent state, and rollback.

Every forward over T new tokens leaves its rows *pending*; ``commit(num_rows)`` then keeps the first
``num_rows[b]`` rows of request b and drops the rest (rejected drafts). Attention KV needs only its
slot positions invalidated; Gated-DeltaNet state must equal the state after the last kept token, by
either strategy (DESIGN.md §3.2, a recipe option):

- ``snapshot``: the verify forward keeps the recurrent state after every token; commit picks one.
- ``replay``: the verify forward keeps its inputs (q, k, v, g, beta); the state is untouched; commit
  re-runs the recurrence with the rejected rows' log-decay g = 0 (decay 1) and beta = 0, which leaves
  the state exactly unchanged by them (``S * exp(0) + k * 0``), so the shape stays fixed.

A tree verify (``specpilot.engines.decode.tree``) runs on ``ModelCache.tree_view(tree)``: layer
views that share this cache's storage and carry the tree. ``ModelCache.keep_path`` then turns the
accepted path into an ordinary pending chain, and ``commit`` proceeds as above.
"""

import dataclasses

import torch

from specpilot.kernels.gated_delta_rule import gated_delta_rule
from specpilot.kernels.kv_write import kv_write
from specpilot.kernels.kv_write import kv_write_ref
from specpilot.kernels.stacked_select import select_rows

ROLLBACK_STRATEGIES = ("snapshot", "replay")


def visible_slots(pos: torch.Tensor, q_positions: torch.Tensor, before: torch.Tensor | None,
                  window: int | None) -> torch.Tensor:
    """:meth:`KVCache.visible` of slot positions ``pos`` [B, S] (-1: empty)."""
    key_pos = pos[:, None, :]
    q_pos = q_positions[:, :, None]
    mask = (key_pos >= 0) & (key_pos <= q_pos)
    if before is not None:
        mask &= key_pos < before[:, None, None]
    if window is not None:
        mask &= (q_pos - key_pos) < window
    return mask


class KVCache:
    """Slot-based KV for one attention layer: [rows, capacity, heads, dim] plus each slot's position.

    A slot holds position ``p`` at index ``p % capacity``; ``pos == -1`` marks an empty slot. With a
    window W the capacity only needs ``W + max_rows_per_forward`` (a ring): a new row overwrites a slot
    whose position is already out of every later query's window.

    In a :meth:`with_tree` view, ``write`` stores a tree's nodes one position each in tree order and
    ``visible`` masks by the tree (context + ancestors); one request row only.
    """

    tree = None  # the TreeLayout a tree view writes and attends by

    def __init__(self, num_rows: int, capacity: int, num_heads: int, head_dim: int,
                 dtype: torch.dtype, device, window: int | None = None):
        self.capacity, self.window = capacity, window
        self.k = torch.zeros(num_rows, capacity, num_heads, head_dim, dtype=dtype, device=device)
        self.v = torch.zeros_like(self.k)
        self.pos = torch.full((num_rows, capacity), -1, dtype=torch.long, device=device)

    def rows(self, index: slice) -> "KVCache":
        """A view of some requests' rows that shares storage with this cache."""
        view = object.__new__(KVCache)
        view.capacity, view.window = self.capacity, self.window
        view.k, view.v, view.pos = self.k[index], self.v[index], self.pos[index]
        return view

    def with_tree(self, tree) -> "KVCache":
        """A view (shared storage) that writes and attends by ``tree``."""
        view = self.rows(slice(None))
        view.tree = tree
        return view

    def write(self, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor,
              fused: bool = False) -> None:
        """Store k, v [B, T, H, D] at ``positions`` [B, T] (a tree view: at the tree's slots).
        ``fused``: one kernel (:mod:`specpilot.kernels.kv_write`) instead of five."""
        if self.tree is not None:
            positions = self.tree.slot_positions
        (kv_write if fused else kv_write_ref)(self.k, self.v, self.pos, k, v, positions)

    def visible(self, q_positions: torch.Tensor, before: torch.Tensor | None = None,
                op=None) -> torch.Tensor:
        """Boolean mask [B, T, capacity] of slots a query at ``q_positions`` [B, T] may attend to.

        Causal (slot position <= query position) and windowed. ``before`` [B] restricts to slots with
        position < before (a drafter's context rows, which never include the block being drafted).
        ``op``: a :class:`~specpilot.engines.models.layers.Fusable` block's ``op``, which runs
        :func:`visible_slots` as one fused kernel when the block is fused.
        """
        if self.tree is not None:
            return self.tree.visible(self, q_positions)
        fn = visible_slots if op is None else op(visible_slots)
        return fn(self.pos, q_positions, before, self.window)

    def move(self, src: torch.Tensor, dst: torch.Tensor) -> None:
        """Move the K/V stored at positions ``src`` [B, L] to positions ``dst`` [B, L]."""
        rows = torch.arange(src.shape[0], device=src.device)[:, None].expand_as(src)
        src_slots, dst_slots = src % self.capacity, dst % self.capacity
        self.k[rows, dst_slots] = self.k[rows, src_slots]  # the right side is gathered first
        self.v[rows, dst_slots] = self.v[rows, src_slots]
        self.pos[rows, dst_slots] = dst

    def truncate(self, lengths: torch.Tensor) -> None:
        """Forget every slot whose position is >= ``lengths`` [B] (rolled-back rows)."""
        self.pos.masked_fill_(self.pos >= lengths[:, None], -1)


@dataclasses.dataclass
class PendingRows:
    """What a not-yet-committed Gated-DeltaNet forward left behind."""

    conv_window: torch.Tensor  # [B, C, K-1+T]: the conv state followed by this forward's inputs
    steps: torch.Tensor | None = None  # snapshot: [B, T, HV, Dk, Dv] state after each row
    inputs: tuple | None = None  # replay: (q, k, v, g, beta) of the T rows

    def select(self, index: torch.Tensor) -> "PendingRows":
        """The rows of sequences ``index`` [B'] (a tree forward's accepted path)."""
        def pick(t):
            return t.index_select(0, index)

        return PendingRows(pick(self.conv_window), None if self.steps is None else pick(self.steps),
                           None if self.inputs is None else tuple(map(pick, self.inputs)))


class GDNState:
    """One Gated-DeltaNet layer's state: conv window [B, C, K-1] and recurrent state [B, HV, Dk, Dv] fp32.

    A :meth:`with_tree` view runs a tree's paths as sequences from this (one-row) state; a
    :meth:`with_lengths` view runs right-padded rows (a batched prefill).
    """

    tree = None  # the TreeLayout a tree view runs
    padding = None  # a padded view's CommitIndex of the real rows per sequence (shared by layers)
    snapshot_kernel = "per-token"  # how a verify keeps its per-token states (recipe gdn_snapshot)

    def __init__(self, num_rows: int, conv_dim: int, conv_kernel: int, num_v_heads: int,
                 k_head_dim: int, v_head_dim: int, dtype: torch.dtype, device, rollback: str):
        if rollback not in ROLLBACK_STRATEGIES:
            raise ValueError(f"gdn rollback must be one of {ROLLBACK_STRATEGIES}, got {rollback!r}")
        self.rollback = rollback
        self.conv = torch.zeros(num_rows, conv_dim, conv_kernel - 1, dtype=dtype, device=device)
        self.recurrent = torch.zeros(num_rows, num_v_heads, k_head_dim, v_head_dim,
                                     dtype=torch.float32, device=device)
        self.pending: PendingRows | None = None
        self.snapshots: torch.Tensor | None = None  # [B, T, HV, Dk, Dv] once reserved
        self.windows: torch.Tensor | None = None  # [B, C, K-1+T] once reserved (a cache's stack)

    def rows(self, index: slice) -> "GDNState":
        view = object.__new__(GDNState)
        view.rollback, view.pending = self.rollback, None
        view.snapshot_kernel = self.snapshot_kernel
        view.conv, view.recurrent = self.conv[index], self.recurrent[index]
        view.snapshots = self.snapshots[index] if self.snapshots is not None else None
        view.windows = self.windows[index] if self.windows is not None else None
        return view

    def snapshot_buffer(self, num_seqs: int, num_tokens: int) -> torch.Tensor | None:
        """Where a forward of ``num_seqs`` sequences x ``num_tokens`` rows keeps its snapshots
        (None: no reserved buffer of that shape; the forward allocates its own)."""
        buffer = self.snapshots
        if buffer is None or self.tree is not None or buffer.shape[:2] != (num_seqs, num_tokens):
            return None
        return buffer

    def window_buffer(self, num_seqs: int, num_tokens: int) -> torch.Tensor | None:
        """Where a forward of ``num_seqs`` sequences x ``num_tokens`` rows keeps its conv window
        (the conv state followed by its inputs); None: no reserved buffer of that shape."""
        buffer = self.windows
        if (buffer is None or self.tree is not None
                or buffer.shape[0] != num_seqs or buffer.shape[-1] != self.conv.shape[-1] + num_tokens):
            return None
        return buffer

    def with_lengths(self, real: "CommitIndex") -> "GDNState":
        """A view (shared state) for a forward over right-padded rows: sequence b's rows from
        ``real.num_rows[b]`` on leave its state exactly as it was (log decay 0, beta 0:
        ``S * exp(0) + k * 0``), and its conv state ends at its last real row. ``real``'s index
        tensors are shared by every layer of the forward."""
        view = self.rows(slice(None))
        view.padding = real
        return view

    def with_tree(self, tree) -> "GDNState":
        """A view (shared state) that runs ``tree``'s paths; its pending rows are per path."""
        view = self.rows(slice(None))
        view.tree = tree
        return view

    def commit(self, num_rows: torch.Tensor, pending: PendingRows | None = None,
               index: "CommitIndex | None" = None) -> None:
        """Keep the first ``num_rows`` [B] rows (>= 1) of the pending forward.

        ``pending``: commit these rows instead of ``self.pending`` (a captured CUDA graph binds the
        rows its verify graph produces). ``index``: the commit's index tensors, shared by its layers.
        """
        if pending is None:
            pending, self.pending = self.pending, None
        if pending is None:
            return
        index = index if index is not None else CommitIndex(num_rows)
        window = pending.conv_window
        self.conv.copy_(window.gather(2, index.conv_window(window, self.conv.shape[-1])))
        if pending.steps is not None:
            steps = pending.steps
            kept = index.last_step(steps.shape[1])
            if self.recurrent.is_contiguous():  # straight into the state: no temporary copy
                torch.index_select(steps.flatten(0, 1), 0, kept, out=self.recurrent)
            else:
                self.recurrent.copy_(steps.flatten(0, 1).index_select(0, kept))
            return
        q, k, v, g, beta = pending.inputs
        drop = index.dropped_rows(q.shape[1])[..., None]  # [B, T, 1]
        g, beta = g.masked_fill(drop, 0.0), beta.masked_fill(drop, 0.0)
        gated_delta_rule(q, k, v, g, beta, self.recurrent, final_out=self.recurrent)


class CommitIndex:
    """The index tensors of one commit, built on first use and shared by all its Gated-DeltaNet
    layers (they see the same rows kept out of the same forward)."""

    def __init__(self, num_rows: torch.Tensor):
        self.num_rows = num_rows
        self._built: dict = {}

    def _get(self, key, build):
        if key not in self._built:
            self._built[key] = build()
        return self._built[key]

    def conv_window(self, window: torch.Tensor, kernel_minus_1: int) -> torch.Tensor:
        """[..., B, C, K-1]: where the conv state after the kept rows sits in ``window``
        [..., B, C, K-1+T] (one layer's, or a layer-stacked [L, B, C, K-1+T])."""
        def build():
            offsets = torch.arange(kernel_minus_1, device=window.device)
            return (self.num_rows[:, None, None] + offsets).expand(*window.shape[:-1],
                                                                     kernel_minus_1)
        return self._get(("conv", tuple(window.shape[:-1]), kernel_minus_1), build)

    def last_step(self, num_steps: int) -> torch.Tensor:
        """[B]: row b's last kept step in per-step snapshots flattened to [B * T, ...]."""
        def build():
            rows = torch.arange(self.num_rows.shape[0], device=self.num_rows.device)
            return rows * num_steps + self.num_rows - 1
        return self._get(("step", num_steps), build)

    def dropped_rows(self, num_steps: int) -> torch.Tensor:
        """[B, T] bool: the rows past each request's kept ones."""
        def build():
            steps = torch.arange(num_steps, device=self.num_rows.device)
            return steps[None, :] >= self.num_rows[:, None]
        return self._get(("drop", num_steps), build)


class ModelCache:
    """All layers' state for a batch of request rows; ``layers[i]`` is a KVCache, a GDNState or None.

    The Gated-DeltaNet layers' states live in layer-stacked tensors, every layer's own being a view:
    ``recurrent`` [L, B, HV, Dk, Dv] and ``conv`` [L, B, C, K-1], and once reserved for a verify
    width T, ``snapshots`` [L, B, T, HV, Dk, Dv] and ``windows`` [L, B, C, K-1+T]. A commit of a
    forward that kept its rows there moves every layer's state in two kernels (the recurrent states
    through ``specpilot.kernels.stacked_select``, the conv states by one gather) instead of two
    small ones per layer.
    """

    def __init__(self, layers: list, stacks: dict | None = None):
        self.layers = layers
        self._gdn = [layer for layer in layers if isinstance(layer, GDNState)]
        top_level = stacks is None  # views pass their parent's stacks (maybe none) instead
        stacks = stacks or {}
        self.recurrent, self.conv = stacks.get("recurrent"), stacks.get("conv")
        self.snapshots, self.windows = stacks.get("snapshots"), stacks.get("windows")
        if top_level and self._gdn:
            self.recurrent = _stack_in_place(self._gdn, "recurrent")
            self.conv = _stack_in_place(self._gdn, "conv")

    def _stacks(self, index=slice(None)) -> dict:
        names = ("recurrent", "conv", "snapshots", "windows")
        return {n: getattr(self, n)[:, index] for n in names if getattr(self, n) is not None}

    def rows(self, index: slice) -> "ModelCache":
        return ModelCache([None if c is None else c.rows(index) for c in self.layers],
                          self._stacks(index))

    def commit(self, num_rows: torch.Tensor, new_lengths: torch.Tensor,
               pending: list | None = None) -> None:
        """Keep ``num_rows`` [B] rows of the last forward; ``new_lengths`` [B] = committed tokens after.

        ``pending``: per-layer pending rows to commit (see :meth:`pending_rows`), else each layer's own.
        """
        index = CommitIndex(num_rows)
        own = pending is None
        if own:
            pending = [getattr(layer, "pending", None) for layer in self.layers]
        stacked = self._commit_stacked(pending, index)
        for layer, rows in zip(self.layers, pending):
            if isinstance(layer, KVCache):
                layer.truncate(new_lengths)
            elif isinstance(layer, GDNState):
                if own:
                    layer.pending = None
                if not stacked:
                    layer.commit(num_rows, rows, index)

    def _commit_stacked(self, pending: list, index: "CommitIndex") -> bool:
        """Every Gated-DeltaNet layer's state in two kernels over the stacks, when every layer's
        pending rows are in its reserved buffers (False: some are not, e.g. a tree's path or replay
        rollback: commit per layer)."""
        if self.snapshots is None or self.windows is None:
            return False
        for layer, rows in zip(self.layers, pending):
            if isinstance(layer, GDNState) and not (
                    rows is not None and rows.steps is not None and layer.snapshots is not None
                    and _same_buffer(rows.steps, layer.snapshots)
                    and _same_buffer(rows.conv_window, layer.windows)):
                return False
        select_rows(self.snapshots.flatten(1, 2), index.last_step(self.snapshots.shape[2]),
                    out=self.recurrent)
        torch.gather(self.windows, 3, index.conv_window(self.windows, self.conv.shape[-1]),
                     out=self.conv)
        return True

    def reserve_snapshots(self, num_steps: int, kernel: str = "per-token",
                          share_with: "ModelCache | None" = None) -> "ModelCache":
        """Reserve the Gated-DeltaNet layers' per-row states and conv windows for ``num_steps``-row
        verifies (snapshot rollback), as layer-stacked tensors whose views each layer's forward
        writes into (:meth:`GDNState.snapshot_buffer`, :meth:`GDNState.window_buffer`), with
        ``kernel`` (the recipe's ``gdn_snapshot``) writing them; a no-op for other rollbacks.

        The buffers are scratch: a verify writes them and its commit reads them, within one step.
        ``share_with``: a cache whose reserved buffers of the same shapes this one reuses instead
        of allocating its own (two engines that never step at the same time, e.g. the two sides of
        an interleaved A/B)."""
        if not self._gdn or self._gdn[0].rollback != "snapshot":
            return self
        for layer in self._gdn:
            layer.snapshot_kernel = kernel
        if self.recurrent is None or self.conv is None:  # layers of different shapes: not stacked,
            return self  # so nothing reserved (each forward allocates its own)
        if self.snapshots is None or self.snapshots.shape[2] != num_steps:
            for layer in self._gdn:
                layer.snapshots = layer.windows = None
            self.snapshots = self.windows = None  # freed before the new ones are allocated
            r, c = self.recurrent, self.conv
            shape = (*r.shape[:2], num_steps, *r.shape[2:])
            window_shape = (*c.shape[:3], c.shape[3] + num_steps)
            if share_with is not None and _same_layout(share_with.snapshots, shape, r) \
                    and _same_layout(share_with.windows, window_shape, c):
                self.snapshots, self.windows = share_with.snapshots, share_with.windows
            else:
                self.snapshots = torch.empty(shape, dtype=r.dtype, device=r.device)
                self.windows = torch.empty(window_shape, dtype=c.dtype, device=c.device)
            for layer, steps, window in zip(self._gdn, self.snapshots, self.windows):
                layer.snapshots, layer.windows = steps, window
        return self

    def padded(self, lengths: torch.Tensor) -> "ModelCache":
        """Views (shared storage) for one forward over right-padded rows, ``lengths`` [B] real rows
        each (:meth:`GDNState.with_lengths`); attention layers write the padding rows too, and
        :meth:`truncate` then drops them. The caller keeps the padded width within every ring
        layer's capacity (a padding row must not overwrite a real one)."""
        real = CommitIndex(lengths)
        return ModelCache([c.with_lengths(real) if isinstance(c, GDNState) else c
                           for c in self.layers], self._stacks())

    def truncate(self, lengths: torch.Tensor) -> None:
        """Forget every attention slot at a position >= ``lengths`` [B] (padding rows)."""
        for layer in self.layers:
            if isinstance(layer, KVCache):
                layer.truncate(lengths)

    def min_capacity(self) -> int | None:
        """The fewest slots of any attention layer (None: no attention layers)."""
        return min((c.capacity for c in self.layers if isinstance(c, KVCache)), default=None)

    def tree_view(self, tree) -> "ModelCache":
        """Views of every layer (shared storage) for one forward over ``tree``'s nodes."""
        return ModelCache([None if c is None else c.with_tree(tree) for c in self.layers],
                          self._stacks())

    def keep_path(self, view: "ModelCache", tree, path: torch.Tensor) -> None:
        """After a forward on ``view = tree_view(tree)``: leave this cache as if that forward had
        run path ``path`` [1] of the tree alone, as a chain. Its nodes' K/V move to consecutive
        positions from the anchor's (the other nodes' stay above them, for ``commit`` to drop) and
        its Gated-DeltaNet rows become pending; ``commit`` then keeps a prefix of the path."""
        nodes = tree.paths.index_select(0, path)  # [1, D + 1]
        dst = tree.start + torch.arange(nodes.shape[1], device=nodes.device)[None]
        for layer, seen in zip(self.layers, view.layers):
            if isinstance(layer, KVCache):
                layer.move(tree.start + nodes, dst)
            elif isinstance(layer, GDNState):
                layer.pending = seen.pending.select(path)

    def pending_rows(self) -> list:
        """Each layer's pending rows (None for attention layers)."""
        return [getattr(layer, "pending", None) for layer in self.layers]

    def copy_row(self, src: int, dst: int) -> None:
        """Move request row ``src``'s state into row ``dst`` (keeps the running rows contiguous)."""
        for layer in self.layers:
            if isinstance(layer, KVCache):
                for t in (layer.k, layer.v, layer.pos):
                    t[dst].copy_(t[src])
            elif isinstance(layer, GDNState):
                layer.conv[dst].copy_(layer.conv[src])
                layer.recurrent[dst].copy_(layer.recurrent[src])

    def reset(self) -> None:
        """Empty every row (a persistent cache reused by the next request)."""
        for layer in self.layers:
            if isinstance(layer, KVCache):
                layer.pos.fill_(-1)
            elif isinstance(layer, GDNState):
                layer.conv.zero_()
                layer.recurrent.zero_()
                layer.pending = None


def _stack_in_place(states: list[GDNState], name: str) -> torch.Tensor | None:
    """Move every state's tensor ``name`` into one stacked tensor [L, ...] and leave each state
    holding its view; None (left as is) when the layers' shapes differ. One layer is copied and
    freed at a time, so the peak is the stack plus one layer."""
    first = getattr(states[0], name)
    if any(getattr(s, name).shape != first.shape or getattr(s, name).dtype != first.dtype
           for s in states):
        return None
    stack = torch.empty(len(states), *first.shape, dtype=first.dtype, device=first.device)
    for state, view in zip(states, stack):
        view.copy_(getattr(state, name))
        setattr(state, name, view)
    return stack


def request_state_bytes(target, rollback: str = "snapshot") -> int:
    """One request's Gated-DeltaNet recurrent states over all layers of ``target``, in bytes (0:
    no such layers, or layers that do not stack); nothing is allocated."""
    with torch.device("meta"):
        stacked = target.new_cache(1, 1, rollback).recurrent
    return 0 if stacked is None else stacked.numel() * stacked.element_size()


def _same_layout(buffer: torch.Tensor | None, shape: tuple, like: torch.Tensor) -> bool:
    """``buffer`` exists with ``shape`` and ``like``'s dtype and device."""
    return (buffer is not None and tuple(buffer.shape) == tuple(shape)
            and buffer.dtype == like.dtype and buffer.device == like.device)


def _same_buffer(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.data_ptr() == b.data_ptr() and a.shape == b.shape
