"""HumanEval: the prompt (a signature and docstring) + the model's completion, run against the
task's ``check`` in a limited subprocess (``specpilot.scoring.code_exec``); passed = exit 0.

A completion that continues the function body (its first line is indented) is cut at a closing
fence and at the usual stop sequences (a new top-level ``def``/``class``/``if``/``print``/comment).
Otherwise its first fenced code block is appended to the prompt (a full re-definition of the
function wins over the prompt's stub).
"""

import re

from specpilot.scoring import Verdict
from specpilot.scoring.code_exec import ExecLimits
from specpilot.scoring.code_exec import extract_code
from specpilot.scoring.code_exec import run_program

NAME = "humaneval"
EXECUTES_CODE = True
_STOP = re.compile(r"\n(?:def |class |if |print\(|#)")


def rows(limit: int | None = None) -> list[dict]:
    """The 164 problems, in order."""
    from specpilot.datasets import load_rows

    return load_rows("humaneval")[:limit]


def task_id(row: dict) -> str:
    return row["task_id"]


def prompt(row: dict) -> str:
    return row["prompt"]


def solution(row: dict, completion: str) -> str:
    """The program text the model's completion stands for (prompt included)."""
    head = completion.split("```")[0]
    first_line = next((line for line in head.splitlines() if line.strip()), "")
    fenced = extract_code(completion)
    if first_line[:1] in (" ", "\t") or fenced is None:
        stop = _STOP.search(head)
        return row["prompt"] + (head[:stop.start()] if stop else head)
    return row["prompt"] + "\n" + fenced


def program(row: dict, completion: str) -> str:
    """Solution + the task's tests + the call that runs them."""
    return f"{solution(row, completion)}\n\n{row['test']}\n\ncheck({row['entry_point']})\n"


def judge(row: dict, completion: str, limits: ExecLimits = ExecLimits()) -> Verdict:
    """Run the tests on the completion; correct iff they pass within the limits."""
    result = run_program(program(row, completion), limits)
    return Verdict(result.passed, result.status, None, None, detail=result.output_tail[-500:])
