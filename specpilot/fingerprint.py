"""The environment fingerprint every result and every tuned config carries (DESIGN.md §5)."""

import dataclasses
import functools
import hashlib
import json
import os
import platform
import subprocess
from pathlib import Path

import torch


@dataclasses.dataclass(frozen=True)
class Fingerprint:
    """Where a number was measured: GPU SKU and compute capability, driver, CUDA, torch, triton, commit."""

    gpu: str
    compute_capability: str
    driver: str
    cuda: str
    torch: str
    triton: str
    python: str
    commit: str

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def kernel_key(self) -> str:
        """Fields that invalidate a tuned kernel config when they change (commit excluded)."""
        fields = (self.gpu, self.compute_capability, self.driver, self.cuda, self.torch, self.triton)
        return "|".join(fields)


def _nvidia_driver() -> str:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20, check=True,
        )
        return out.stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        return "none"


def _git_commit() -> str:
    if os.environ.get("SPECPILOT_COMMIT"):  # a copy of the tree without .git (a GPU box) says which
        return os.environ["SPECPILOT_COMMIT"]
    root = Path(__file__).resolve().parent.parent
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True, text=True, timeout=10, check=True,
        )
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, timeout=10,
        ).stdout.strip()
        return out.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


FAKE_ENV = "SPECPILOT_FAKE_FINGERPRINT"
"""Test/ops hook, never for production serving: a JSON object of field overrides, e.g.
``SPECPILOT_FAKE_FINGERPRINT='{"torch": "9.9"}'``, applied by :func:`current`. It lets the tests
and an operator rehearse what ``specpilot retune`` and ``specpilot serve --bundle`` do after a stack
upgrade without upgrading anything. Every fingerprint a faked process records carries the fake."""


def _fake_overrides() -> dict:
    text = os.environ.get(FAKE_ENV)
    if not text:
        return {}
    try:
        overrides = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"{FAKE_ENV} must be a JSON object of fingerprint fields: "
                         f"{err}") from None
    fields = {f.name for f in dataclasses.fields(Fingerprint)}
    if not isinstance(overrides, dict) or not set(overrides) <= fields:
        raise ValueError(f"{FAKE_ENV} must be a JSON object with keys from {sorted(fields)}, "
                         f"got {text!r}")
    return {k: str(v) for k, v in overrides.items()}


@functools.lru_cache(maxsize=None)
def current(device: str = "cuda") -> Fingerprint:
    """The fingerprint of this process's environment for ``device`` ("cuda" or "cpu").

    ``$SPECPILOT_FAKE_FINGERPRINT`` (:data:`FAKE_ENV`, a test/ops hook) overrides fields.
    """
    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = "none"
    if device.startswith("cuda") and torch.cuda.is_available():
        props = torch.cuda.get_device_properties(torch.device(device))
        gpu, cc = props.name, f"{props.major}.{props.minor}"
        driver, cuda = _nvidia_driver(), str(torch.version.cuda)
    else:
        gpu, cc, driver, cuda = f"cpu:{platform.machine()}", "none", "none", "none"
    found = Fingerprint(
        gpu=gpu, compute_capability=cc, driver=driver, cuda=cuda, torch=torch.__version__,
        triton=triton_version, python=platform.python_version(), commit=_git_commit(),
    )
    return dataclasses.replace(found, **_fake_overrides())


def stable_hash(obj) -> str:
    """A short content hash of a JSON-serialisable object (recipe hash, setting hash)."""
    blob = json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:16]
