"""``specpilot report``: render the README's results tables from ``experiments/results/*.json``.

Writes the tables between ``<!-- results:begin -->`` and ``<!-- results:end -->``; with ``--check``
writes nothing and exits 1 if the README differs from what the records say (for CI).
"""

import dataclasses
from typing import Annotated


@dataclasses.dataclass(frozen=True)
class Args:
    results_dir: Annotated[str | None, "folder of committed JSON records "
                           "(default: experiments/results)"] = None
    readme: Annotated[str | None, "README to update (default: the repository's README.md)"] = None
    check: Annotated[bool, "only check that the README is up to date; exit 1 if stale"] = False


def run(args: Args) -> int:
    from pathlib import Path

    from specpilot.bench import store
    from specpilot.bench.report import render_readme

    readme = Path(args.readme) if args.readme else store.REPO_ROOT / "README.md"
    results_dir = Path(args.results_dir) if args.results_dir else store.COMMITTED_RESULTS_DIR
    current, fresh = render_readme(readme, results_dir)
    if args.check:
        if current != fresh:
            print(f"{readme} is stale: run `specpilot report` to regenerate its results tables")
            return 1
        print(f"{readme} is up to date with {results_dir}")
        return 0
    if current != fresh:
        readme.write_text(fresh)
        print(f"updated the results tables in {readme} from {results_dir}")
    else:
        print(f"{readme} already up to date with {results_dir}")
    return 0
