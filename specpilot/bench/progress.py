"""Progress bars (rich) on stderr for anything that takes more than a few seconds.

Shown only when stderr is a terminal, so logs, pipes and tests stay clean.
"""

import contextlib
from collections.abc import Callable
from collections.abc import Iterator


@contextlib.contextmanager
def progress_bar(description: str, total: int | None) -> Iterator[Callable[..., None]]:
    """Yield ``advance(n=1, description=None)``; the bar disappears when the block ends.

    Example:
        >>> with progress_bar("prompts", total=3) as advance:
        ...     for _ in range(3):
        ...         advance()
    """
    from rich.console import Console
    from rich.progress import BarColumn
    from rich.progress import MofNCompleteColumn
    from rich.progress import Progress
    from rich.progress import TextColumn
    from rich.progress import TimeElapsedColumn

    console = Console(stderr=True)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True,
                  disable=not console.is_terminal) as bar:
        task = bar.add_task(description, total=total)

        def advance(n: int = 1, description: str | None = None) -> None:
            if description is not None:
                bar.update(task, description=description)
            bar.advance(task, n)

        yield advance
