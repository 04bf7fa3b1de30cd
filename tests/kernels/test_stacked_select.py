"""The stacked row select (the Gated-DeltaNet snapshot commit's copy) equals its torch reference
under the Triton interpreter, into a strided view of the first rows (a batch bucket), leaving the
other rows untouched."""

import pytest
import torch

from specpilot.kernels.stacked_select.reference import select_rows_ref
from specpilot.kernels.stacked_select.triton import select_rows_triton


@pytest.mark.parametrize("layers,rows,steps,state,view_rows", [
    (3, 1, 5, (2, 3, 7), 1), (2, 4, 3, (5, 11), 3), (1, 2, 1, (37,), 2)])
def test_select_rows_equals_reference(layers, rows, steps, state, view_rows):
    g = torch.Generator().manual_seed(rows * 10 + steps)
    snapshots = torch.randn(layers, rows, steps, *state, generator=g)
    picked = torch.randint(0, steps, (view_rows,), generator=g)
    index = torch.arange(view_rows) * steps + picked  # row b's kept step, flattened
    src = snapshots[:, :view_rows].flatten(1, 2)
    outs = []
    for kernel in (select_rows_triton, select_rows_ref):
        full = torch.full((layers, rows, *state), -7.0)
        kernel(src, index, full[:, :view_rows], **({"block": 16} if kernel is select_rows_triton
                                                   else {}))
        outs.append(full)
    assert torch.equal(outs[0], outs[1])
    for b in range(view_rows):
        assert torch.equal(outs[0][:, b], snapshots[:, b, picked[b]])
    assert (outs[0][:, view_rows:] == -7.0).all()


def test_select_rows_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match="do not match"):
        select_rows_triton(torch.zeros(2, 6, 4), torch.zeros(3, dtype=torch.long),
                           torch.zeros(2, 2, 4))
