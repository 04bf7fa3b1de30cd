"""Per-request model state: attention KV slots, Gated-DeltaNet conv/recurrent state, and rollback.

Every forward over T new tokens leaves its rows *pending*; ``commit(num_rows)`` then keeps the first
``num_rows[b]`` rows of request b and drops the rest (rejected drafts). Attention KV needs only its
slot positions invalidated; Gated-DeltaNet state must equal the state after the last kept token, by
either strategy (DESIGN.md §3.2, a recipe option):

- ``snapshot``: the verify forward keeps the recurrent state after every token; commit picks one.
- ``replay``: the verify forward keeps its inputs (q, k, v, g, beta); the state is untouched; commit
  re-runs the recurrence with the rejected rows' log-decay g = 0 (decay 1) and beta = 0, which leaves
  the state exactly unchanged by them (``S * exp(0) + k * 0``), so the shape stays fixed.
"""

import dataclasses

import torch

from specpilot.kernels.gated_delta_rule import gated_delta_rule

ROLLBACK_STRATEGIES = ("snapshot", "replay")


class KVCache:
    """Slot-based KV for one attention layer: [rows, capacity, heads, dim] plus each slot's position.

    A slot holds position ``p`` at index ``p % capacity``; ``pos == -1`` marks an empty slot. With a
    window W the capacity only needs ``W + max_rows_per_forward`` (a ring): a new row overwrites a slot
    whose position is already out of every later query's window.
    """

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

    def write(self, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor) -> None:
        """Store k, v [B, T, H, D] at ``positions`` [B, T]."""
        slots = positions % self.capacity
        rows = torch.arange(k.shape[0], device=k.device)[:, None].expand_as(slots)
        self.k[rows, slots] = k
        self.v[rows, slots] = v
        self.pos[rows, slots] = positions

    def visible(self, q_positions: torch.Tensor, before: torch.Tensor | None = None) -> torch.Tensor:
        """Boolean mask [B, T, capacity] of slots a query at ``q_positions`` [B, T] may attend to.

        Causal (slot position <= query position) and windowed. ``before`` [B] restricts to slots with
        position < before (a drafter's context rows, which never include the block being drafted).
        """
        key_pos = self.pos[:, None, :]
        q_pos = q_positions[:, :, None]
        mask = (key_pos >= 0) & (key_pos <= q_pos)
        if before is not None:
            mask &= key_pos < before[:, None, None]
        if self.window is not None:
            mask &= (q_pos - key_pos) < self.window
        return mask

    def truncate(self, lengths: torch.Tensor) -> None:
        """Forget every slot whose position is >= ``lengths`` [B] (rolled-back rows)."""
        self.pos.masked_fill_(self.pos >= lengths[:, None], -1)


@dataclasses.dataclass
class PendingRows:
    """What a not-yet-committed Gated-DeltaNet forward left behind."""

    conv_window: torch.Tensor  # [B, C, K-1+T]: the conv state followed by this forward's inputs
    steps: torch.Tensor | None = None  # snapshot: [B, T, HV, Dk, Dv] state after each row
    inputs: tuple | None = None  # replay: (q, k, v, g, beta) of the T rows


class GDNState:
    """One Gated-DeltaNet layer's state: conv window [B, C, K-1] and recurrent state [B, HV, Dk, Dv] fp32."""

    def __init__(self, num_rows: int, conv_dim: int, conv_kernel: int, num_v_heads: int,
                 k_head_dim: int, v_head_dim: int, dtype: torch.dtype, device, rollback: str):
        if rollback not in ROLLBACK_STRATEGIES:
            raise ValueError(f"gdn rollback must be one of {ROLLBACK_STRATEGIES}, got {rollback!r}")
        self.rollback = rollback
        self.conv = torch.zeros(num_rows, conv_dim, conv_kernel - 1, dtype=dtype, device=device)
        self.recurrent = torch.zeros(num_rows, num_v_heads, k_head_dim, v_head_dim,
                                     dtype=torch.float32, device=device)
        self.pending: PendingRows | None = None

    def rows(self, index: slice) -> "GDNState":
        view = object.__new__(GDNState)
        view.rollback, view.pending = self.rollback, None
        view.conv, view.recurrent = self.conv[index], self.recurrent[index]
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
            self.recurrent.copy_(steps.flatten(0, 1).index_select(0, index.last_step(steps.shape[1])))
            return
        q, k, v, g, beta = pending.inputs
        drop = index.dropped_rows(q.shape[1])[..., None]  # [B, T, 1]
        g, beta = g.masked_fill(drop, 0.0), beta.masked_fill(drop, 0.0)
        _, final, _ = gated_delta_rule(q, k, v, g, beta, self.recurrent)
        self.recurrent.copy_(final)


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
        """[B, C, K-1]: where the conv state after the kept rows sits in ``window`` [B, C, K-1+T]."""
        def build():
            offsets = torch.arange(kernel_minus_1, device=window.device)
            return (self.num_rows[:, None, None] + offsets).expand(*window.shape[:2], -1)
        return self._get(("conv", tuple(window.shape[:2]), kernel_minus_1), build)

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
    """All layers' state for a batch of request rows; ``layers[i]`` is a KVCache, a GDNState or None."""

    def __init__(self, layers: list):
        self.layers = layers

    def rows(self, index: slice) -> "ModelCache":
        return ModelCache([None if c is None else c.rows(index) for c in self.layers])

    def commit(self, num_rows: torch.Tensor, new_lengths: torch.Tensor,
               pending: list | None = None) -> None:
        """Keep ``num_rows`` [B] rows of the last forward; ``new_lengths`` [B] = committed tokens after.

        ``pending``: per-layer pending rows to commit (see :meth:`pending_rows`), else each layer's own.
        """
        index = CommitIndex(num_rows)
        for i, layer in enumerate(self.layers):
            if isinstance(layer, KVCache):
                layer.truncate(new_lengths)
            elif isinstance(layer, GDNState):
                layer.commit(num_rows, None if pending is None else pending[i], index)

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
