"""gsm8k: the final number of the answer, compared exactly as a decimal (1,234.0 == 1234)."""

import re
from decimal import Decimal
from decimal import InvalidOperation

from specpilot.scoring import Verdict

NAME = "gsm8k"
EXECUTES_CODE = False
_NUMBER = r"-?\$?\s?\d[\d,]*(?:\.\d+)?|-?\.\d+"


def rows(limit: int | None = None) -> list[dict]:
    """The test split, in order."""
    from specpilot.datasets import load_rows

    return load_rows("gsm8k")[:limit]


def task_id(row: dict) -> str:
    return row["question"][:40]


def prompt(row: dict) -> str:
    """Zero-shot, asking for the dataset's own ``#### <number>`` ending."""
    return (f"Question: {row['question']}\nSolve it step by step, then give the final answer "
            "on its own line as '#### <number>'.\nAnswer:")


def normalize_number(text: str) -> str | None:
    """Canonical decimal string of a number written with $, thousands commas or a trailing dot."""
    cleaned = text.replace("$", "").replace(",", "").strip().rstrip(".")
    try:
        value = Decimal(cleaned)
    except InvalidOperation:
        return None
    return format(value.normalize(), "f")


def extract_answer(completion: str) -> str | None:
    """The answer number: after ``####``, else after "answer is", else in ``\\boxed{}``, else
    the last number in the text."""
    for pattern in (r"####\s*(" + _NUMBER + ")", r"answer is\s*:?\s*(" + _NUMBER + ")",
                    r"\\boxed\{\s*(" + _NUMBER + r")\s*\}"):
        match = re.search(pattern, completion, flags=re.IGNORECASE)
        if match:
            return normalize_number(match.group(1))
    numbers = re.findall(_NUMBER, completion)
    return normalize_number(numbers[-1]) if numbers else None


def reference(row: dict) -> str:
    return normalize_number(row["answer"].split("####")[-1])


def judge(row: dict, completion: str) -> Verdict:
    """Correct iff the extracted number equals the reference number."""
    got, want = extract_answer(completion), reference(row)
    if got is None:
        return Verdict(False, "no_answer", None, want)
    correct = Decimal(got) == Decimal(want)
    return Verdict(correct, "correct" if correct else "wrong", got, want)
