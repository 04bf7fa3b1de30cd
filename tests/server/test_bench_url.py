"""``specpilot bench --url`` measures a running OpenAI/SGLang-compatible server: ours, started here."""

import json

import pytest

from specpilot import cli


@pytest.mark.parametrize("api", ["sglang", "openai"])
def test_bench_url_against_our_server(server, tmp_path, api, capsys):
    out = tmp_path / f"remote-{api}.json"
    code = cli.main(["bench", "cpu_c1_tiny", "--url", server.url, "--api", api, "--num-prompts", "2",
                     "--max-new-tokens", "8", "--json", str(out), "--results-dir", str(tmp_path)])
    assert code == 0, capsys.readouterr()
    record = json.loads(out.read_text())
    assert record["kind"] == "bench"
    assert len(record["per_prompt"]) == 2
    assert all(p["tokens"] > 0 for p in record["per_prompt"])
    assert record["fingerprint"]["gpu"].startswith("remote:")
