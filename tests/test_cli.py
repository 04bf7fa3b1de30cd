"""Every command answers --help; bad arguments and unknown settings are clear errors."""

import subprocess
import sys

import pytest

from specpilot import cli


def _run(*args):
    return subprocess.run([sys.executable, "-m", "specpilot", *args], capture_output=True,
                          text=True, timeout=120)


def test_top_level_help():
    out = _run("--help")
    assert out.returncode == 0
    for name in cli.COMMANDS:
        assert name in out.stdout


@pytest.mark.parametrize("name", sorted(cli.COMMANDS))
def test_command_help(name):
    out = _run(name, "--help")
    assert out.returncode == 0 and "usage:" in out.stdout


def test_unknown_setting_is_a_clear_error():
    out = _run("validate", "no_such_setting")
    assert out.returncode == 2
    assert "unknown setting 'no_such_setting'; available:" in out.stderr
    assert "Traceback" not in out.stderr


def test_bad_value_is_rejected():
    out = _run("generate", "cpu_c1_tiny", "--prompt", "x", "--max-new-tokens", "0")
    assert out.returncode == 2 and "max-new-tokens must be >= 1" in out.stderr


def test_generate_prints_text_and_tau(capsys):
    assert cli.main(["generate", "cpu_c1_tiny", "--prompt", "Natalia sold clips",
                     "--max-new-tokens", "8"]) == 0
    assert "acceptance length tau" in capsys.readouterr().out
