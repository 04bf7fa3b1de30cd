"""Quality sanity checks on the bundled datasets (DESIGN.md §5): gsm8k (final number), math500
(boxed answer, normalised), humaneval and mbpp (generated code run against the tests in a limited
subprocess). Scores are sanity checks only; token forcing is the correctness proof.

Every task module has the same surface: ``NAME``, ``EXECUTES_CODE``, ``rows(limit)``,
``task_id(row)``, ``prompt(row)`` and ``judge(row, completion[, limits]) -> Verdict`` (``limits``
only where ``EXECUTES_CODE``).
"""

import dataclasses
import importlib

TASKS = {
    "gsm8k": "specpilot.scoring.gsm8k",
    "math500": "specpilot.scoring.math500",
    "humaneval": "specpilot.scoring.humaneval",
    "mbpp": "specpilot.scoring.mbpp",
}


@dataclasses.dataclass(frozen=True)
class Verdict:
    """One judged answer. ``status``: correct | wrong | no_answer (math), or the code run's status
    passed | failed | timeout | killed (humaneval, mbpp)."""

    correct: bool
    status: str
    extracted: str | None
    reference: str | None
    detail: str = ""

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def load_task(name: str):
    """The task module for a dataset name (see ``TASKS``)."""
    from specpilot.errors import SpecPilotError

    if name not in TASKS:
        raise SpecPilotError(f"no scorer for dataset {name!r}; known: {', '.join(TASKS)}")
    return importlib.import_module(TASKS[name])


__all__ = ["TASKS", "Verdict", "load_task"]
