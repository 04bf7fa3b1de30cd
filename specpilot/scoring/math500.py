"""math500: the last ``\\boxed{...}`` answer (braces matched), normalised, against the reference.

Normalisation follows the MATH reference scorer (Hendrycks et al. ``strip_string``) plus common
extras: ``\\left``/``\\right``, ``\\dfrac``/``\\tfrac`` -> ``\\frac``, ``\\!`` and thin spaces,
degrees, dollar and percent signs, ``\\text{...}`` wrappers, trailing units (``5\\text{ cm}``,
``10 inches``), a short variable on the left (``x = 5`` -> ``5``), thousands separators,
``\\frac12`` / ``\\sqrt3`` / ``a/b`` spelled out, and spaces. Two answers are equal when their
normal forms are, or when both are plain numbers (integers, decimals, fractions) of equal value.
"""

import math
import re

from specpilot.scoring import Verdict

NAME = "math500"
EXECUTES_CODE = False


def rows(limit: int | None = None) -> list[dict]:
    """The MATH-500 split, in order."""
    from specpilot.datasets import load_rows

    return load_rows("math500")[:limit]


def task_id(row: dict) -> str:
    return row["prompt"][:40]


def prompt(row: dict) -> str:
    """The dataset's prompt (it already asks for the answer in ``\\boxed{}``)."""
    return row["prompt"] + "\n"


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` / ``\\fbox{...}`` (nested braces matched), or of a
    ``\\boxed 5`` written without braces; None if there is none or it is unterminated."""
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if start < 0:
        return None
    i = start + len("\\boxed" if text.startswith("\\boxed", start) else "\\fbox")
    if text[i:i + 1] == " ":
        match = re.match(r"\s*([^\s$]+)", text[i:])
        return match.group(1) if match else None
    if text[i:i + 1] != "{":
        return None
    depth = 0
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i + 1:j]
    return None


def _unwrap_text(s: str) -> str:
    return re.sub(r"\\(?:text|textbf|mathrm|mbox|mathbf)\{([^{}]*)\}", r"\1", s)


def _fix_fracs(s: str) -> str:
    s = re.sub(r"\\frac(\d)(\d)", r"\\frac{\1}{\2}", s)
    s = re.sub(r"\\frac(\d)\{", r"\\frac{\1}{", s)
    return re.sub(r"\\frac\{([^{}]*)\}(\d)", r"\\frac{\1}{\2}", s)


def normalize(answer: str) -> str:
    """The normal form of one answer string (see the module docstring)."""
    s = answer.strip().replace("\n", "")
    for old, new in (("\\!", ""), ("\\dfrac", "\\frac"), ("\\tfrac", "\\frac"), ("\\left", ""),
                     ("\\right", ""), ("^{\\circ}", ""), ("^\\circ", ""), ("°", ""),
                     ("\\$", ""), ("$", ""), ("\\%", ""), ("%", ""), ("\\,", ""), ("\\;", ""),
                     ("\\:", ""), ("\\ ", " ")):
        s = s.replace(old, new)
    s = re.sub(r"\\(?:text|mbox|mathrm)\{\s+[^{}]*\}(\^\d)?$", "", s)  # "5\text{ cm}^2"
    s = _unwrap_text(s)
    s = re.sub(r"^(-?[\d.,]+)\s*(?:[a-zA-Z]+\.?\s*)+$", r"\1", s)  # "10 inches", "90 degrees"
    if s.count("=") == 1 and len(s.split("=")[0].strip()) <= 2:
        s = s.split("=")[1]
    s = s.replace(" ", "")
    s = re.sub(r"\\sqrt(\w)", r"\\sqrt{\1}", s)
    s = _fix_fracs(s)
    s = re.sub(r"^(-?\d+)/(\d+)$", r"\\frac{\1}{\2}", s)
    if re.fullmatch(r"-?\d{1,3}(,\d{3})+(\.\d+)?", s):
        s = s.replace(",", "")
    s = re.sub(r"(^|[{(\[,])\.(\d)", r"\g<1>0.\2", s)
    return s.rstrip(".")


def _as_number(s: str) -> float | None:
    match = re.fullmatch(r"(-?)\\frac\{(-?\d+(?:\.\d+)?)\}\{(-?\d+(?:\.\d+)?)\}", s)
    try:
        if match:
            sign = -1.0 if match.group(1) else 1.0
            return sign * float(match.group(2)) / float(match.group(3))
        return float(s) if re.fullmatch(r"-?\d+(?:\.\d+)?", s) else None
    except ZeroDivisionError:
        return None


def is_equiv(predicted: str, reference: str) -> bool:
    """Equal normal forms, or equal values when both are plain numbers."""
    a, b = normalize(predicted), normalize(reference)
    if a == b:
        return True
    x, y = _as_number(a), _as_number(b)
    return x is not None and y is not None and math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-12)


def judge(row: dict, completion: str) -> Verdict:
    """Correct iff the last boxed answer is equivalent to the reference answer."""
    got = last_boxed(completion)
    if got is None:
        return Verdict(False, "no_answer", None, row["answer"])
    correct = is_equiv(got, row["answer"])
    return Verdict(correct, "correct" if correct else "wrong", got, row["answer"],
                   detail=f"{normalize(got)} vs {normalize(row['answer'])}")
