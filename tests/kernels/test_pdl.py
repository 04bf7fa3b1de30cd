"""Programmatic dependent launch is a GPU launch option: off on CPU tensors and under the Triton
interpreter (griddepcontrol is PTX), and ``pdl_disabled`` turns it off for a scope and back."""

import torch

from specpilot.kernels.common import pdl


def test_off_on_cpu_and_under_the_interpreter():
    assert pdl.pdl_launch(torch.device("cpu")) == {"PDL": False, "launch_pdl": False}
    # the kernel tests run interpreted: a CUDA device would not get PDL either
    assert pdl.pdl_launch(torch.device("cuda", 0)) == {"PDL": False, "launch_pdl": False}


def test_disabled_scope_restores_the_setting(monkeypatch):
    monkeypatch.setattr(pdl, "_ENABLED", [True])
    with pdl.pdl_disabled():
        assert pdl._ENABLED == [False]
    assert pdl._ENABLED == [True]
