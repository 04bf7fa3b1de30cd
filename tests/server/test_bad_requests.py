"""Bad input is a 4xx with an OpenAI error body, never a 5xx; a client that leaves is cancelled."""

import json
import subprocess
import time

import pytest

CASES = [  # (path, raw body or JSON, status, param)
    ("/v1/completions", b"{not json", 400, None),
    ("/v1/completions", b"[1, 2]", 400, None),
    ("/v1/completions", {"prompt": "hi"}, 400, "model"),
    ("/v1/completions", {"model": "nope", "prompt": "hi"}, 404, "model"),
    ("/v1/completions", {"model": "cpu_c1_tiny", "prompt": "hi", "max_tokens": 0}, 400,
     "max_tokens"),
    ("/v1/completions", {"model": "cpu_c1_tiny", "prompt": "hi", "max_tokens": 5000}, 400,
     "max_tokens"),
    ("/v1/completions", {"model": "cpu_c1_tiny", "prompt": "hi", "temperature": -1}, 400,
     "temperature"),
    ("/v1/completions", {"model": "cpu_c1_tiny", "prompt": "hi", "logprobs": 3}, 400, "logprobs"),
    ("/v1/completions", {"model": "cpu_c1_tiny", "prompt": ""}, 400, "prompt"),
    ("/v1/completions", {"model": "cpu_c1_tiny", "prompt": "a\ud800b"}, 400, "prompt"),
    ("/v1/completions", {"model": "cpu_c1_tiny", "prompt": [1, 2, 10**6]}, 400, "prompt"),
    ("/v1/completions", {"model": "cpu_c1_tiny", "prompt": [3] * 2040}, 400, "prompt"),
    ("/v1/completions", {"model": "cpu_c1_tiny", "prompt": [3] * 2030}, 400, "max_tokens"),
    ("/v1/chat/completions", {"model": "cpu_c1_tiny"}, 400, "messages"),
    ("/v1/chat/completions", {"model": "cpu_c1_tiny", "messages": [{"role": "robot",
                                                                     "content": "x"}]},
     400, "messages"),
    ("/v1/chat/completions", {"model": "cpu_c1_tiny", "messages": [{"role": "user",
                                                                     "content": "x " * 2100}]},
     400, "messages"),
    ("/generate", {}, 400, None),
    ("/generate", {"text": "a", "input_ids": [1]}, 400, None),
    ("/generate", {"input_ids": [-1]}, 400, "input_ids"),
    ("/generate", {"input_ids": [5000]}, 400, "input_ids"),
    ("/generate", {"input_ids": "abc"}, 400, "input_ids"),
    ("/generate", {"text": "a", "sampling_params": {"top_k": 5}}, 400, "sampling_params"),
    ("/generate", {"text": "a", "sampling_params": {"n": 3}}, 400, "sampling_params"),
    ("/generate", {"input_ids": [7] * 2000, "sampling_params": {"max_new_tokens": 100}}, 400,
     "max_tokens"),
]


@pytest.mark.parametrize("path, body, status, param", CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_bad_request_is_a_clear_4xx(http, path, body, status, param):
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    response = http.post(path, content=raw, headers={"content-type": "application/json"})
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["message"] and error["type"] == "invalid_request_error"
    assert error["param"] == param
    assert (error["code"] == "model_not_found") == (status == 404)


def test_unknown_route_and_method(http):
    assert http.get("/v2/nothing").json()["error"]["message"] == "Not Found"
    assert http.delete("/generate").status_code == 405


def test_server_keeps_serving_after_bad_requests(http):
    for path, body, _, _ in CASES:
        http.post(path, content=body if isinstance(body, bytes) else json.dumps(body).encode(),
                  headers={"content-type": "application/json"})
    assert http.get("/health").status_code == 200
    out = http.post("/generate", json={"text": "ok", "sampling_params": {"max_new_tokens": 3}})
    assert out.status_code == 200 and len(out.json()["output_ids"]) >= 1


def _wait_for(server, label: str, at_least: float, timeout_s: float = 20) -> float:
    deadline = time.monotonic() + timeout_s
    value = 0.0
    while time.monotonic() < deadline:  # bounded poll; each scrape takes a few ms
        value = server.metric("specpilot_requests_total", label)
        if value >= at_least and server.metric("specpilot_num_running_requests") == 0:
            return value
        try:
            server.proc.wait(timeout=0.1)
            break  # the server died
        except subprocess.TimeoutExpired:  # still running: poll again
            continue
    return value


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "non-stream"])
def test_client_disconnect_cancels_the_request(server, http, stream):
    label = 'endpoint="generate",finish_reason="abort"'
    before = server.metric("specpilot_requests_total", label)
    body = {"text": "go on", "stream": stream,
            "sampling_params": {"max_new_tokens": 2000, "ignore_eos": True, "temperature": 0}}
    if stream:
        with http.stream("POST", "/generate", json=body) as response:
            assert next(response.iter_lines()).startswith("data: ")
    else:
        import httpx

        with pytest.raises(httpx.ReadTimeout):
            httpx.post(f"{server.url}/generate", json=body, timeout=1.5)
    assert _wait_for(server, label, before + 1) == before + 1
    assert server.metric("specpilot_num_running_requests") == 0
