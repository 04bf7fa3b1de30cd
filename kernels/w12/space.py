"""Tuning space of the W12 encode/decode plane kernels (pack on load, unpack for checks)."""

import itertools
from collections.abc import Iterator

from specpilot.kernels.skinny_gemm.space import check_launch

KEY = ("R", "K")

PARAMS = {"BLOCK_R": [1, 2, 4, 8], "BLOCK_J": [128, 256, 512], "num_warps": [4, 8],
          "DECODE": ["int", "prmt"]}



def configs() -> Iterator[dict]:
    """Every config of the space, as the GEMM spaces give theirs."""
    for values in itertools.product(*PARAMS.values()):
        yield dict(zip(PARAMS, values))


def validate(config: dict) -> None:
    """Raise ValueError naming the field if ``config`` is not a usable encode/decode config."""
    unknown = set(config) - set(PARAMS)
    missing = set(PARAMS) - set(config)
    if unknown or missing:
        raise ValueError(f"w12 config: unknown keys {sorted(unknown)}, missing {sorted(missing)}")
    for name in ("BLOCK_R", "BLOCK_J", "num_warps"):
        v = config[name]
        if not isinstance(v, int) or v < 1 or v & (v - 1):
            raise ValueError(f"config[{name!r}] must be a positive power of two, got {v!r}")
    if config["DECODE"] not in PARAMS["DECODE"]:
        raise ValueError(f"config['DECODE'] must be one of {PARAMS['DECODE']}")
    check_launch(config)


def default_config(block_pairs: int = 512) -> dict:
    """Untuned plane-kernel config (pack/unpack run once per weight load, so rarely tuned); its
    ``BLOCK_J`` divides the planes' ``block_pairs``-pair blocks."""
    return {"BLOCK_R": 4, "BLOCK_J": min(512, block_pairs), "num_warps": 4, "DECODE": "int"}
