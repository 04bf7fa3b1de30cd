"""The --url client's stream parsing and the concurrency sweep. The HTTP requests themselves are
not exercised here (no fake servers): they are to be tested against the real SpecPilot server."""

import json

from specpilot.bench.remote import RemoteServer
from specpilot.bench.remote import _tokens_and_tau
from specpilot.bench.remote import iter_sse
from specpilot.bench.workload import concurrency_levels


def _sse(*events) -> list[bytes]:
    lines = []
    for event in events:
        lines += [f"data: {json.dumps(event)}\n".encode(), b"\n"]
    return lines + [b"data: [DONE]\n", b"data: {\"after\": \"done\"}\n"]


def test_iter_sse_stops_at_done_and_skips_other_lines():
    events = list(iter_sse([b": keep-alive\n"] + _sse({"text": "a"}, {"text": "ab"})))
    assert events == [{"text": "a"}, {"text": "ab"}]


def test_sglang_counts_and_tau_from_meta_info():
    server = RemoteServer("http://x", "sglang")
    event = {"text": "abc", "meta_info": {"completion_tokens": 7, "spec_verify_ct": 2}}
    assert _tokens_and_tau(server, event, 3) == (7, 3.5, True)


def test_openai_usage_chunk_is_a_count_not_a_token():
    server = RemoteServer("http://x", "openai", "m")
    assert _tokens_and_tau(server, {"choices": [{"text": "a"}]}, 4) == (5, None, True)
    usage = {"choices": [], "usage": {"completion_tokens": 9}}
    assert _tokens_and_tau(server, usage, 5) == (9, None, False)


def test_concurrency_levels():
    assert concurrency_levels(1) == [1]
    assert concurrency_levels(8) == [1, 2, 4, 8]
    assert concurrency_levels(6) == [1, 2, 4, 6]
