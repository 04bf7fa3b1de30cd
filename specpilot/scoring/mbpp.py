"""MBPP: the model writes a function from a description and three example asserts; the code plus
the task's setup code and asserts run in a limited subprocess (``specpilot.scoring.code_exec``).

The prompt is the MBPP paper's ("You are an expert Python programmer, and here is your task: ...
Your code should pass these tests: ...") and opens a ```python block, so the completion is code up
to the closing fence (a fenced block inside the completion is used when there is one). Scored on
the test split (task ids 11-510).
"""

from specpilot.scoring import Verdict
from specpilot.scoring.code_exec import ExecLimits
from specpilot.scoring.code_exec import extract_code
from specpilot.scoring.code_exec import run_program

NAME = "mbpp"
EXECUTES_CODE = True
TEST_TASK_IDS = range(11, 511)


def rows(limit: int | None = None) -> list[dict]:
    """The test split (task ids 11-510), in order."""
    from specpilot.datasets import load_rows

    return [r for r in load_rows("mbpp") if r["task_id"] in TEST_TASK_IDS][:limit]


def task_id(row: dict) -> str:
    return f"mbpp/{row['task_id']}"


def prompt(row: dict) -> str:
    tests = "\n".join(row["test_list"])
    return (f"You are an expert Python programmer, and here is your task: {row['text']} "
            f"Your code should pass these tests:\n\n{tests}\n\n```python\n")


def solution(completion: str) -> str:
    """The code of a completion: the text up to the closing fence of the prompt's ```python block,
    or, if the model opened a block of its own first, that block."""
    head = completion.split("```")[0].split("[DONE]")[0]
    if head.strip():
        return head
    return extract_code(completion) or ""


def program(row: dict, completion: str) -> str:
    """Solution + the task's setup code (it may use the solution's classes) + its asserts."""
    tests = "\n".join(row["test_list"])
    return f"{solution(completion)}\n\n{row.get('test_setup_code', '')}\n{tests}\n"


def judge(row: dict, completion: str, limits: ExecLimits = ExecLimits()) -> Verdict:
    """Run the asserts on the completion; correct iff all pass within the limits."""
    result = run_program(program(row, completion), limits)
    return Verdict(result.passed, result.status, None, None, detail=result.output_tail[-500:])
