"""Torch reference for :mod:`specpilot.kernels.stacked_select`."""

import torch


def select_rows_ref(src: torch.Tensor, index: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """``out [L, B, ...] = src [L, R, ...][:, index [B]]`` (``out`` may be a strided view)."""
    return torch.index_select(src, 1, index, out=out)
