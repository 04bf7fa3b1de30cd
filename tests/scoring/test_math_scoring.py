"""gsm8k and math500 scoring with known-correct and known-wrong answers."""

import pytest

from specpilot.scoring import gsm8k
from specpilot.scoring import math500

JANET = gsm8k.rows(1)[0]  # reference answer 18


@pytest.mark.parametrize("completion", [
    "She sells 16 - 3 - 4 = 9 eggs for $2 each.\n#### 18",
    "9 eggs * $2 = $18. The answer is 18.",
    "So she makes $18.00 every day.",
    "The answer is \\boxed{18}.",
])
def test_gsm8k_correct(completion):
    verdict = gsm8k.judge(JANET, completion)
    assert (verdict.correct, verdict.status, verdict.extracted, verdict.reference) == \
        (True, "correct", "18", "18")


@pytest.mark.parametrize("completion,extracted", [
    ("16 - 3 = 13 eggs, 13 * 2 = 26\n#### 26", "26"),
    ("The answer is 1,800.", "1800"),
    ("She makes 18 dollars, wait, no: 20", "20"),  # the last number counts
])
def test_gsm8k_wrong(completion, extracted):
    verdict = gsm8k.judge(JANET, completion)
    assert (verdict.correct, verdict.status, verdict.extracted) == (False, "wrong", extracted)


def test_gsm8k_no_number():
    assert gsm8k.judge(JANET, "I do not know.").status == "no_answer"


def test_gsm8k_prompt_asks_for_the_dataset_format():
    assert JANET["question"] in gsm8k.prompt(JANET) and "####" in gsm8k.prompt(JANET)


@pytest.mark.parametrize("text,boxed", [
    ("so \\boxed{\\frac{14}{3}}.", "\\frac{14}{3}"),
    ("first \\boxed{1} then \\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}",
     "\\left( 3, \\frac{\\pi}{2} \\right)"),
    ("\\fbox{7}", "7"),
    ("$\\boxed 5$", "5"),
    ("\\boxed{5", None),
    ("no box", None),
])
def test_last_boxed_matches_braces(text, boxed):
    assert math500.last_boxed(text) == boxed


@pytest.mark.parametrize("reference,answer", [
    ("\\left( 3, \\frac{\\pi}{2} \\right)", "(3, \\dfrac{\\pi}{2})"),
    ("\\frac{14}{3}", "14/3"),
    ("\\frac{14}{3}", "\\tfrac{14}{3}"),
    ("90^\\circ", "90"),
    ("90^\\circ", "90 degrees"),
    ("\\text{Evelyn}", "Evelyn"),
    ("x=5", "5"),
    ("11\\sqrt2", "11\\sqrt{2}"),
    ("2220", "2,\\!220"),
    ("5", "5\\text{ cm}"),
    ("\\$42", "42"),
    ("0.5", "\\frac12"),
    ("p - q", "p-q"),
])
def test_math500_equivalent(reference, answer):
    assert math500.is_equiv(answer, reference)


@pytest.mark.parametrize("reference,answer", [
    ("\\left( 3, \\frac{\\pi}{2} \\right)", "(3, \\pi)"),
    ("\\frac{14}{3}", "\\frac{3}{14}"),
    ("p - q", "q - p"),
    ("6 - 5i", "6 + 5i"),
])
def test_math500_not_equivalent(reference, answer):
    assert not math500.is_equiv(answer, reference)


def test_math500_judge():
    row = math500.rows(1)[0]
    right = math500.judge(row, "r = 3 and theta = pi/2, so \\boxed{(3, \\frac{\\pi}{2})}")
    wrong = math500.judge(row, "\\boxed{(3, 0)}")
    missing = math500.judge(row, "(3, pi/2)")
    assert (right.correct, right.status) == (True, "correct")
    assert (wrong.correct, wrong.status, wrong.extracted) == (False, "wrong", "(3, 0)")
    assert (missing.correct, missing.status) == (False, "no_answer")
