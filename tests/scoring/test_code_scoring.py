"""humaneval / mbpp scoring: right and wrong solutions, and solutions that must be contained (an
endless loop, writing outside the run's directory, spawning a process, opening a socket)."""

import os
import tempfile
import time
import uuid

import pytest

from specpilot.scoring import humaneval
from specpilot.scoring import mbpp
from specpilot.scoring.code_exec import ExecLimits
from specpilot.scoring.code_exec import extract_code
from specpilot.scoring.code_exec import run_program

FAST = ExecLimits(timeout_s=2.0)
HE0 = humaneval.rows(1)[0]  # has_close_elements(numbers, threshold)
MBPP11 = mbpp.rows(1)[0]  # remove_Occ(s, ch)


@pytest.fixture
def outside(tmp_path):
    """Two paths outside any sandbox directory: one absolute, one reached by '..'."""
    name = f"specpilot-escape-{uuid.uuid4().hex}.txt"
    absolute, relative = tmp_path / name, os.path.join("..", name)
    yield absolute, relative
    assert not absolute.exists(), "the candidate wrote outside its directory"
    assert not os.path.exists(os.path.join(tempfile.gettempdir(), name))


def _body(*lines: str) -> str:
    return "".join(f"    {line}\n" for line in lines)


def test_humaneval_canonical_solution_passes():
    verdict = humaneval.judge(HE0, HE0["canonical_solution"], FAST)
    assert (verdict.correct, verdict.status) == (True, "passed")


def test_humaneval_fenced_full_function_passes():
    code = HE0["prompt"] + HE0["canonical_solution"]
    verdict = humaneval.judge(HE0, f"Here it is:\n```python\n{code}```\nDone.", FAST)
    assert verdict.correct


def test_humaneval_wrong_solution_fails():
    verdict = humaneval.judge(HE0, _body("return False"), FAST)
    assert (verdict.correct, verdict.status) == (False, "failed")
    assert "AssertionError" in verdict.detail


def test_humaneval_endless_loop_is_stopped():
    start = time.monotonic()
    verdict = humaneval.judge(HE0, _body("while True:", "    pass"), FAST)
    assert (verdict.correct, verdict.status) == (False, "timeout")
    assert time.monotonic() - start < FAST.timeout_s + 3


def test_humaneval_writing_outside_is_refused(outside):
    absolute, relative = outside
    body = _body(f"open({str(absolute)!r}, 'w').write('pwned')",
                 f"open({relative!r}, 'w').write('pwned')") + HE0["canonical_solution"]
    verdict = humaneval.judge(HE0, body, FAST)
    assert (verdict.correct, verdict.status) == (False, "failed")
    assert "sandbox: writing" in verdict.detail


def test_mbpp_reference_code_passes():
    verdict = mbpp.judge(MBPP11, MBPP11["code"] + "\n```\nThis removes the first and last.", FAST)
    assert (verdict.correct, verdict.status) == (True, "passed")


def test_mbpp_wrong_solution_fails():
    verdict = mbpp.judge(MBPP11, "def remove_Occ(s, ch):\n    return s[1:-1]\n", FAST)
    assert (verdict.correct, verdict.status) == (False, "failed")


def test_mbpp_endless_loop_is_stopped():
    verdict = mbpp.judge(MBPP11, "def remove_Occ(s, ch):\n    while True:\n        pass\n", FAST)
    assert (verdict.correct, verdict.status) == (False, "timeout")


def test_mbpp_writing_outside_is_refused(outside):
    absolute, relative = outside
    code = (f"import pathlib, os\npathlib.Path({str(absolute)!r}).write_text('pwned')\n"
            + MBPP11["code"])
    assert mbpp.judge(MBPP11, code, FAST).status == "failed"
    code = f"import os\nos.open({relative!r}, os.O_WRONLY | os.O_CREAT)\n" + MBPP11["code"]
    assert mbpp.judge(MBPP11, code, FAST).status == "failed"


@pytest.mark.parametrize("source,refused", [
    ("import os\nos.system('touch {path}')", "os.system"),
    ("import subprocess\nsubprocess.run(['touch', '{path}'])", "subprocess.Popen"),
    ("import os\nos.remove('{path}')", "os.remove"),
    ("import socket\nsocket.socket()", "socket.__new__"),
    ("import ctypes", "ctypes.dlopen"),
    ("import resource\nresource.setrlimit(resource.RLIMIT_CPU, (10**6, 10**6))",
     "resource.setrlimit"),
])
def test_guard_refuses(source, refused, outside):
    absolute, _ = outside
    result = run_program(source.format(path=absolute), FAST)
    assert result.status == "failed" and f"sandbox: {refused}" in result.output_tail


def test_limits_memory_and_file_size():
    assert "MemoryError" in run_program("x = bytearray(8 << 30)", FAST).output_tail
    big = run_program("open('big.bin', 'wb').write(b'0' * (64 << 20))", FAST)
    assert big.status == "failed" and "File too large" in big.output_tail


def test_writing_inside_the_run_directory_works():
    source = "open('notes.txt', 'w').write('ok')\nassert open('notes.txt').read() == 'ok'"
    assert run_program(source, FAST).passed


def test_extract_code():
    assert extract_code("text\n```python\nx = 1\n```\nmore") == "x = 1\n"
    assert extract_code("no code") is None


def test_exiting_before_the_tests_is_a_failure():
    verdict = humaneval.judge(HE0, _body("import sys", "sys.exit(0)"), FAST)
    assert (verdict.correct, verdict.status) == (False, "failed")
    code = MBPP11["code"] + "\nif __name__ == '__main__':\n    exit()\n"
    verdict = mbpp.judge(MBPP11, code, FAST)
    assert (verdict.correct, verdict.status) == (False, "failed")
    assert "exited before the tests finished" in verdict.detail
