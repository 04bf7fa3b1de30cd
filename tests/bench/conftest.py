"""Shared bench fixtures: saved bench records made through the real CLI on cpu_c1_tiny."""

import pytest

from specpilot import cli

TINY = ("--num-prompts", "2", "--max-new-tokens", "10")


@pytest.fixture(scope="session")
def specpilot_cli():
    """``specpilot(*argv)`` runs the CLI in this process and returns its exit status."""
    return lambda *argv: cli.main([str(a) for a in argv])


@pytest.fixture(scope="session")
def tiny_args():
    """Arguments that keep a cpu_c1_tiny run to a couple of seconds."""
    return TINY


@pytest.fixture(scope="session")
def results_dir(tmp_path_factory):
    """A results store of its own (never the repository's experiments/results)."""
    return tmp_path_factory.mktemp("results")


@pytest.fixture(scope="session")
def saved_benches(specpilot_cli, results_dir):
    """Paths of two bench JSON records (engines ar and stock) of the same two prompts."""
    paths = {}
    for engine in ("ar", "stock"):
        path = results_dir / f"bench-cpu_c1_tiny-{engine}.json"
        assert specpilot_cli("bench", "cpu_c1_tiny", "--engine", engine, *TINY, "--json", path,
                             "--results-dir", results_dir) == 0
        paths[engine] = path
    return paths
