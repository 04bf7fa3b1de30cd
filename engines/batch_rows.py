"""Device-side per-row state of the batched engine, and its host transfers.

A batched step needs, per running request: the pending token (last output, not yet fed), the
committed length, how many tokens it may still emit, and its stop ids. :class:`RowState` keeps them
on the device, so a step reads nothing from the host and the stop/budget clip of every row is a few
tensor ops (:meth:`RowState.keep`). :class:`ReplayRows` keeps replayed benchmark rows' references
and draws there too. :class:`Transfers` moves what must cross: one device->host read per step
(every row's kept tokens). An overlapped step's read is started without waiting and finished after
the next step is queued.
"""

import torch


def batch_buckets(max_batch: int) -> list[int]:
    """The batch buckets (CUDA-graph shapes) for up to ``max_batch`` rows: 1, 2, 4, .. and
    ``max_batch`` itself."""
    return sorted({min(1 << i, max_batch) for i in range(max_batch.bit_length() + 1)})


class RowState:
    """Per-row decode state ``[max_batch]`` on the device; row i belongs to running request i."""

    def __init__(self, max_batch: int, device):
        self.pending = torch.zeros(max_batch, dtype=torch.long, device=device)
        self.committed = torch.zeros(max_batch, dtype=torch.long, device=device)
        self.remaining = torch.zeros(max_batch, dtype=torch.long, device=device)  # 0: finished
        self.stops = torch.full((max_batch, 1), -1, dtype=torch.long, device=device)  # -1: none

    def set_row(self, row: int, pending: int, committed: int, remaining: int,
                stops: set[int]) -> None:
        """State of a request just prefilled into ``row`` (admission only: one host->device copy)."""
        if len(stops) > self.stops.shape[1]:
            grown = torch.full((self.stops.shape[0], len(stops)), -1, dtype=torch.long,
                               device=self.stops.device)
            grown[:, :self.stops.shape[1]] = self.stops
            self.stops = grown
        values = [pending, committed, remaining] + sorted(stops)
        values += [-1] * (3 + self.stops.shape[1] - len(values))
        row_values = torch.tensor(values, dtype=torch.long).to(self.stops.device)
        self.pending[row], self.committed[row], self.remaining[row] = row_values[:3]
        self.stops[row] = row_values[3:]

    def copy_row(self, src: int, dst: int) -> None:
        for t in (self.pending, self.committed, self.remaining, self.stops):
            t[dst] = t[src]

    def vacate(self, row: int) -> None:
        """Mark a row no request holds as finished (rows >= n stay inert if a step covers them)."""
        self.remaining[row] = 0

    def keep(self, proposed: torch.Tensor, num_proposed: torch.Tensor,
             active: torch.Tensor | None = None) -> torch.Tensor:
        """Clip each row's proposal and advance rows ``0 .. n-1``; returns kept counts [n].

        ``proposed`` [n, W]: row i proposes its first ``num_proposed[i]`` (>= 1) tokens. A row keeps
        them up to its token budget and through its first stop token (``Engine._clip``); a finished
        row (budget 0), and a row that ``active`` [n] (bool) leaves out, keeps none. Kept tokens
        become committed, the last one pending.
        """
        n = proposed.shape[0]
        remaining = self.remaining[:n]
        budget = torch.minimum(num_proposed, remaining)
        if active is not None:
            budget = torch.where(active, budget, 0)
        is_stop = (proposed[:, :, None] == self.stops[:n, None, :]).any(-1)  # [n, W]
        first_stop = (~is_stop).int().cumprod(1).sum(1)  # W when the row has none
        kept = torch.minimum(budget, first_stop + 1)
        last = proposed.gather(1, (kept - 1).clamp(min=0)[:, None])[:, 0]
        self.pending[:n] = torch.where(kept > 0, last, self.pending[:n])
        self.committed[:n] += kept
        self.remaining[:n] = torch.where(first_stop < budget, 0, remaining - kept)
        return kept


class ReplayRows:
    """Replayed acceptance (benchmarks) per row ``[max_batch]`` on the device, kept like
    :class:`RowState`: each replayed request's reference continuation and its draws (one per step
    it may take, taken when it joins), the steps it has replayed, and its prompt length - 1, so
    that a step builds every replayed row's drafts without the host (:meth:`drafts`)."""

    def __init__(self, max_batch: int, max_len: int, device):
        self.reference = torch.zeros(max_batch, max_len, dtype=torch.long, device=device)
        self.draws = torch.zeros(max_batch, max_len, dtype=torch.long, device=device)
        self.steps = torch.zeros(max_batch, dtype=torch.long, device=device)
        self.base = torch.zeros(max_batch, dtype=torch.long, device=device)
        self.active = torch.zeros(max_batch, dtype=torch.bool, device=device)
        self._offsets = torch.arange(max_len, device=device)

    def set_row(self, row: int, plan, num_prompt: int, remaining: int) -> None:
        """Replay ``plan`` (a ``ReplayPlan``) in ``row``, for a request of ``num_prompt`` prompt
        tokens that may take ``remaining`` more steps (one host->device copy)."""
        width = self.reference.shape[1]
        draws, reference = plan.draw_ahead(remaining)[:width], plan.reference[:width]
        values = torch.zeros(2, width, dtype=torch.long)
        values[0, :len(reference)] = torch.tensor(reference, dtype=torch.long)
        values[1, :len(draws)] = torch.tensor(draws, dtype=torch.long)
        values = values.to(self.reference.device)
        self.reference[row], self.draws[row] = values[0], values[1]
        self.steps[row], self.base[row], self.active[row] = 0, num_prompt - 1, True

    def copy_row(self, src: int, dst: int) -> None:
        for t in (self.reference, self.draws, self.steps, self.base, self.active):
            t[dst] = t[src]

    def vacate(self, row: int) -> None:
        self.active[row] = False

    def drafts(self, drafts: torch.Tensor, rows: RowState, vocab_size: int) -> torch.Tensor:
        """Overwrite the live replayed rows of ``drafts`` [n, D] with their replayed drafts
        (``ReplayPlan.override`` for all of them at once): the reference continuation from the
        row's next token for the first k drafts, then tokens that are certainly not the target's
        choice. Returns the forced counts [n]: k for those rows, -1 for the others."""
        n, num_drafts = drafts.shape
        live = self.active[:n] & (rows.remaining[:n] > 0)
        steps = self.steps[:n]
        k = self.draws[:n].gather(1, steps[:, None])[:, 0].clamp(max=num_drafts)
        offsets = self._offsets[:num_drafts]
        generated = rows.committed[:n] - self.base[:n]
        # (a row that does not replay may hold a former request's base: any index will do there)
        at = (generated[:, None] + offsets).clamp(0, self.reference.shape[1] - 1)
        reference = self.reference[:n].gather(1, at)
        tokens = torch.where(offsets < k[:, None], reference, (reference + 1) % vocab_size)
        drafts.copy_(torch.where(live[:, None], tokens, drafts))
        steps += live.long()
        return torch.where(live, k, -1)


class Transfers:
    """The batched engine's device->host reads, through page-locked buffers on CUDA.

    ``fetch`` is the step's one read (it waits for the step); ``start_fetch`` / ``finish_fetch``
    split an overlapped step's read around the queueing of the next. ``num_fetches`` counts the
    reads.
    """

    def __init__(self, max_rows: int, width: int, device):
        self.device = torch.device(device)
        pinned = self.device.type == "cuda"
        self._down = torch.empty(max_rows, width, dtype=torch.long, pin_memory=pinned)
        # overlapped steps: a step's table is read while the next step runs, so two slots
        self._slots = [torch.empty_like(self._down, pin_memory=pinned) for _ in range(2)]
        self._next_slot = 0
        self.num_fetches = 0

    def start_fetch(self, table: torch.Tensor):
        """Begin reading ``table`` [n, w] without waiting (an overlapped step's read); returns
        the handle :meth:`finish_fetch` takes. At most two reads may be outstanding."""
        self.num_fetches += 1
        if self.device.type != "cuda":
            return table.clone(), None
        slot, self._next_slot = self._slots[self._next_slot], 1 - self._next_slot
        host = slot.view(-1)[:table.numel()].view(table.shape)
        host.copy_(table, non_blocking=True)
        done = torch.cuda.Event()
        done.record(torch.cuda.current_stream(self.device))
        return host, done

    @staticmethod
    def finish_fetch(handle) -> list[list[int]]:
        """The rows a :meth:`start_fetch` read, once its copy has run."""
        host, done = handle
        if done is not None:
            done.synchronize()
        return host.tolist()

    def fetch(self, table: torch.Tensor) -> list[list[int]]:
        """``table`` [n, w] (int) as Python lists: one copy, one wait."""
        self.num_fetches += 1
        if self.device.type != "cuda":
            return table.tolist()
        host = self._down.view(-1)[:table.numel()].view(table.shape)  # contiguous, page-locked
        host.copy_(table, non_blocking=True)
        torch.cuda.current_stream(self.device).synchronize()
        return host.tolist()
