"""Host-side launch helpers: split-K plan, reusable counter buffers, config resolution."""

import dataclasses
import logging
import math
import threading

import torch

log = logging.getLogger("specpilot.kernels")

_LOCKS: dict[torch.device, torch.Tensor] = {}
# Outgrown counter buffers stay alive: a captured CUDA graph may still point at them.
_RETIRED: list[torch.Tensor] = []
_LOCKS_GUARD = threading.Lock()
_LOGGED: set = set()


def cdiv(a: int, b: int) -> int:
    """Ceiling division."""
    return -(-a // b)


def splitk_plan(k_len: int, split_k: int, block_k: int) -> tuple[int, int]:
    """``(k_per_split, num_splits)``: splits of whole ``block_k`` multiples, none empty."""
    k_per_split = max(block_k, cdiv(cdiv(max(k_len, 1), split_k), block_k) * block_k)
    return k_per_split, max(1, cdiv(k_len, k_per_split))


def lock_buffer(device: torch.device, num_tiles: int) -> torch.Tensor:
    """An int32 zero counter per output tile, reused across calls (the kernel leaves it zero).

    Not safe for two split-K launches running concurrently on different streams of one device.
    """
    with _LOCKS_GUARD:
        buf = _LOCKS.get(device)
        if buf is None or buf.numel() < num_tiles:
            if buf is not None:
                _RETIRED.append(buf)
            buf = torch.zeros(max(num_tiles, 1 << 16), dtype=torch.int32, device=device)
            _LOCKS[device] = buf
    return buf


def workspace(num_splits: int, m: int, n: int, device: torch.device) -> torch.Tensor:
    """fp32 ``[num_splits, M, N]`` split-K partials (a 1-element dummy when there is no split)."""
    if num_splits == 1:
        return torch.empty(1, dtype=torch.float32, device=device)
    return torch.empty((num_splits, m, n), dtype=torch.float32, device=device)


def num_sms(device: torch.device) -> int:
    """Streaming multiprocessors of ``device`` (132, an H200, when there is no CUDA device)."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 132


def resolve_config(op: str, config: dict | None, m: int, n: int, k: int, device: torch.device,
                   space) -> dict:
    """The config to launch: ``config`` if given, else the tuned cache entry, else the space
    default.

    The chosen config and its source are logged once per (op, shape bucket), so no heuristic choice
    is hidden (STYLE.md item 10).
    """
    if config is not None:
        space.validate(config, m, n, k)
        return config
    from specpilot.kernels.tuning.cache import lookup_config

    found = lookup_config(op, m, n, k, device)
    source = "tuned cache"
    if found is None:
        found, source = space.default_config(m, n, k, num_sms(device)), "space.default_config"
    key = (op, space.m_bucket(m), n, k, str(device))
    if key not in _LOGGED:
        _LOGGED.add(key)
        log.info("%s M<=%d N=%d K=%d on %s: %s from %s", op, space.m_bucket(m), n, k, device,
                 found, source)
    return found


def next_pow2(x: int) -> int:
    """The smallest power of two >= ``x`` (1 for x <= 1)."""
    return 1 << max(0, math.ceil(math.log2(max(x, 1))))


@dataclasses.dataclass(frozen=True)
class SkinnyPlan:
    """What every skinny-GEMM launcher (bf16 and W12) derives from its config before launching."""

    cfg: dict
    k_per_split: int
    splits: int
    workspace: torch.Tensor
    locks: torch.Tensor
    grid_n: int
    grid_t: int
    block_t: int | None  # None for the GEMV kernel (one program covers every row)


@dataclasses.dataclass(frozen=True)
class StreamKPlan:
    """A stream-K launch (:mod:`specpilot.kernels.common.streamk`): ``programs`` take the first
    ``dp_tiles`` tiles whole, round-robin, then share the ``units = (tiles - dp_tiles) * steps``
    K steps of ``BLOCK_K`` of the rest, ``per`` each (the last ones fewer or none). A tile is
    ``rows`` x ``BLOCK_N`` outputs: 1 row for the GEMVs, the token tile for the swap-AB kernel."""

    cfg: dict
    programs: int
    dp_tiles: int
    per: int
    steps: int
    units: int
    rows: int
    workspace: torch.Tensor  # fp32 [programs, 2, rows, BLOCK_N]
    locks: torch.Tensor

    @property
    def schedule(self) -> tuple[int, int, int, int]:
        """The stream-K kernels' schedule arguments ``(steps, dp_tiles, units, per)``."""
        return self.steps, self.dp_tiles, self.units, self.per

    @property
    def options(self) -> dict:
        """Launch keywords: the kernel's ``PDL`` flag, ``launch_pdl`` and any register cap."""
        pdl = bool(self.cfg["PDL"])
        cap = {"maxnreg": self.cfg["MAX_REGS"]} if self.cfg["MAX_REGS"] else {}
        return {"PDL": pdl, "launch_pdl": pdl, **cap}


def plan_streamk(cfg: dict, n: int, k_len: int, device: torch.device,
                 rows: int = 1) -> StreamKPlan:
    """Size the grid, workspace and counters of a stream-K launch over ``k_len`` K positions,
    ``rows`` output rows per tile."""
    from specpilot.kernels.common.streamk import streamk_split

    tiles = cdiv(n, cfg["BLOCK_N"])
    steps = cdiv(max(k_len, 1), cfg["BLOCK_K"])
    slots = num_sms(device) * cfg["PROGRAMS_PER_SM"]
    if cfg.get("_test_programs"):  # test-only: ranges that span tiles on a small shape
        slots = cfg["_test_programs"]
    if tiles * steps + slots >= 2**31:
        raise ValueError(f"stream-K indexes K steps in int32: {tiles} tiles x {steps} steps")
    dp_tiles, programs, per = streamk_split(tiles, steps, slots)
    ws = torch.empty((programs, 2, rows, cfg["BLOCK_N"]), dtype=torch.float32, device=device)
    return StreamKPlan(cfg, programs, dp_tiles, per, steps, (tiles - dp_tiles) * steps, rows, ws,
                       lock_buffer(device, tiles - dp_tiles))


def plan_skinny(op: str, config: dict | None, m: int, n: int, k: int, k_split_len: int,
                device: torch.device, space) -> SkinnyPlan | StreamKPlan:
    """Resolve the config and size the split-K workspace, locks and grid of a skinny GEMM launch
    (a :class:`StreamKPlan` for a stream-K config)."""
    cfg = resolve_config(op, config, m, n, k, device, space)
    if cfg["kernel"] == "gemv_sk":
        return plan_streamk(cfg, n, k_split_len, device)
    if cfg["kernel"] in ("dot_sk", "tma_sk"):
        return plan_streamk(cfg, n, k_split_len, device, rows=space.token_tile(cfg, m))
    k_per_split, splits = splitk_plan(k_split_len, cfg["SPLIT_K"], cfg["BLOCK_K"])
    grid_n = cdiv(n, cfg["BLOCK_N"])
    block_t = None if cfg["kernel"] == "gemv" else space.token_tile(cfg, m)
    grid_t = 1 if block_t is None else cdiv(m, block_t)
    return SkinnyPlan(cfg, k_per_split, splits, workspace(splits, m, n, device),
                      lock_buffer(device, grid_n * grid_t), grid_n, grid_t, block_t)
