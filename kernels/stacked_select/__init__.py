"""Row select over a layer-stacked state: ``out[l, b] = src[l, index[b]]`` for every layer l.

The Gated-DeltaNet snapshot commit: ``src`` is every layer's per-row recurrent states flattened to
[L, B * T, ...] (row b's step t at b * T + t), ``index`` [B] each request's last kept step, ``out``
the states [L, B, ...]. One launch moves all layers' states.

Engine entry point::

    from specpilot.kernels import stacked_select
    stacked_select.select_rows(snapshots.flatten(1, 2), kept, out=recurrent)
"""

import torch

from specpilot.kernels.stacked_select.reference import select_rows_ref

__all__ = ["select_rows", "select_rows_ref"]


def select_rows(src: torch.Tensor, index: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """``out [L, B, ...] = src [L, R, ...][:, index [B]]``: the Triton kernel on a GPU when every
    row's elements are contiguous (the states are), else the torch reference."""
    if src.device.type == "cuda" and _rows_contiguous(src) and _rows_contiguous(out):
        from specpilot.kernels.stacked_select.triton import select_rows_triton

        return select_rows_triton(src, index, out)
    return select_rows_ref(src, index, out)


def _rows_contiguous(t: torch.Tensor) -> bool:
    return t.dim() >= 2 and t[0, 0].is_contiguous()
