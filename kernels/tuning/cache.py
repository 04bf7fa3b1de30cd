"""Disk cache of tuned kernel configs (JSON), keyed by op, shape bucket and the environment.

Default directory ``~/.cache/specpilot/kernels``, overridable with ``SPECPILOT_CACHE_DIR`` (a path:
plumbing, STYLE.md item 8). One file, ``configs.json``::

    {"version": 1, "entries": {"<op>|N=..|K=..|M=..|<kernel_key>": {"config": {...}, ...}}}

``kernel_key`` is :meth:`specpilot.fingerprint.Fingerprint.kernel_key` (GPU SKU, compute
capability, driver, CUDA, torch, triton joined by "|"). Lookups match the whole key string, so an
entry measured under any other driver, CUDA, torch, triton or GPU is stale and never returned.
"""

import contextlib
import json
import os
import tempfile
import threading
import time
from pathlib import Path

import torch

VERSION = 1
_MEMO: dict[tuple, tuple[float, dict]] = {}
_MEMO_GUARD = threading.Lock()


def cache_dir() -> Path:
    """Where tuned configs live: ``$SPECPILOT_CACHE_DIR`` or ``~/.cache/specpilot/kernels``."""
    env = os.environ.get("SPECPILOT_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "specpilot" / "kernels"


def cache_file(directory: Path | None = None) -> Path:
    """The JSON file of tuned configs in ``directory`` (default :func:`cache_dir`)."""
    return (directory or cache_dir()) / "configs.json"


def entry_key(op: str, n: int, k: int, m_bucket: int, kernel_key: str) -> str:
    """The cache key string: op, shape bucket and the fingerprint's kernel key."""
    return f"{op}|N={n}|K={k}|M={m_bucket}|{kernel_key}"


def _read(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {"version": VERSION, "entries": {}}
    if data.get("version") != VERSION or not isinstance(data.get("entries"), dict):
        raise ValueError(f"{path}: not a version-{VERSION} specpilot kernel config cache")
    return data


@contextlib.contextmanager
def _locked(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # not POSIX: single writer assumed
        yield
        return
    with open(path.with_suffix(".lock"), "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def load_entry(key: str, directory: Path | None = None) -> dict | None:
    """The cached entry for exactly ``key``, or None."""
    return _read(cache_file(directory))["entries"].get(key)


def store_entry(key: str, entry: dict, directory: Path | None = None) -> Path:
    """Write ``entry`` (must hold ``config``) under ``key``, atomically; returns the file."""
    if "config" not in entry:
        raise ValueError("a cache entry needs a 'config'")
    path = cache_file(directory)
    with _locked(path):
        data = _read(path)
        data["entries"][key] = {**entry, "stored_at": time.strftime("%Y-%m-%dT%H:%M:%S")}
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".configs.", suffix=".json")
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh, indent=1, sort_keys=True)
        os.replace(tmp, path)
    return path


def lookup_config(op: str, m: int, n: int, k: int, device: torch.device) -> dict | None:
    """The tuned config for this call on this environment, or None (memoised per file mtime)."""
    from specpilot.kernels.tuning.ops import complete_config
    from specpilot.kernels.tuning.ops import space_of

    from specpilot.fingerprint import current

    path = cache_file()
    try:
        mtime = path.stat().st_mtime
    except FileNotFoundError:
        return None
    space = space_of(op)
    key = entry_key(op, n, k, space.m_bucket(m), current(str(device)).kernel_key())
    memo_key = (str(path), key)
    with _MEMO_GUARD:
        hit = _MEMO.get(memo_key)
    if hit is not None and hit[0] == mtime:
        entry = hit[1]
    else:
        entry = load_entry(key) or {}
        with _MEMO_GUARD:
            _MEMO[memo_key] = (mtime, entry)
    config = entry.get("config")
    if config is None:
        return None
    config = complete_config(space, config)
    try:
        space.validate(config, m, n, k)
    except ValueError:
        return None
    return config
