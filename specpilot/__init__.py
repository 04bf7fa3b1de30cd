"""SpecPilot: find, prove lossless and ship the fastest speculative-decoding engine for a deployment.

Layout (DESIGN.md §1): ``specpilot`` holds settings, recipes, validation (token forcing), the CLI and
the other core services; ``specpilot.engines`` the model code, caches and decode loops;
``specpilot.kernels`` the Triton kernels with their torch references; ``specpilot.search`` and
``specpilot.workers`` the campaign.
"""

__version__ = "0.1.0"

# From a source checkout used in place (a Ray job's working_dir, ``python -m`` in the repository
# root) ``specpilot`` is this folder, while its subpackages live beside it (engines/, kernels/,
# search/, workers/: the mapping in pyproject.toml). Let them resolve the same way they do when
# installed. An installed package has them inside and skips this.
from pathlib import Path as _Path

_root = _Path(__file__).resolve().parent.parent
if not (_Path(__file__).parent / "engines").is_dir() and (_root / "engines").is_dir() and \
        (_root / "pyproject.toml").is_file():
    __path__.append(str(_root))  # noqa: F821 - the package's own __path__
del _Path, _root
