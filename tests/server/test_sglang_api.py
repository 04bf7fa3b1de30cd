"""SGLang ``/generate`` and the info endpoints (``/server_info``, ``/metrics``) over plain HTTP."""

import json

import httpx
from prometheus_client.parser import text_string_to_metric_families

from specpilot.engines.engine import SamplingParams
from specpilot.recipe import STOCK

PROMPT = "Weng earns $12 an hour for babysitting."


def _generate(http, **body) -> dict:
    response = http.post("/generate", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def _sse(response: httpx.Response) -> list:
    events = [line[len("data: "):] for line in response.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    return [json.loads(e) for e in events[:-1]]


def test_generate_meta_info(http):
    out = _generate(http, text=PROMPT, sampling_params={"max_new_tokens": 20, "temperature": 0,
                                                        "ignore_eos": True})
    meta = out["meta_info"]
    assert len(out["output_ids"]) == meta["completion_tokens"] == 20
    assert meta["finish_reason"] == {"type": "length", "length": 20}
    assert meta["prompt_tokens"] > 0 and meta["e2e_latency"] > 0
    # SGLang: spec_accept_length = completion_tokens / verify steps (the first token is prefill's)
    assert meta["spec_verify_ct"] >= 1
    assert meta["spec_accept_length"] == 20 / meta["spec_verify_ct"] >= 1


def test_server_tokens_equal_the_engine_alone(http, served_models, tiny_prompts):
    ids = tiny_prompts[3]
    out = _generate(http, input_ids=ids, sampling_params={"max_new_tokens": 24,
                                                          "temperature": 0})
    alone = served_models.engine(STOCK).generate(ids, SamplingParams(max_new_tokens=24))
    assert out["output_ids"] == alone.tokens
    assert out["text"] == served_models.tokenizer.decode(alone.tokens)


def test_generate_stream_is_cumulative(http):
    body = {"text": PROMPT, "sampling_params": {"max_new_tokens": 12, "temperature": 0}}
    whole = _generate(http, **body)
    with http.stream("POST", "/generate", json={**body, "stream": True}) as response:
        chunks = _sse(response)
    assert chunks[-1]["text"] == whole["text"]
    assert chunks[-1]["output_ids"] == whole["output_ids"]
    assert chunks[-1]["meta_info"]["finish_reason"] == whole["meta_info"]["finish_reason"]
    assert all(c["meta_info"]["finish_reason"] is None for c in chunks[:-1])
    lengths = [len(c["output_ids"]) for c in chunks]
    assert lengths == sorted(lengths)


def test_stop_token_ids(http):
    params = {"max_new_tokens": 24, "temperature": 0, "ignore_eos": True}
    full = _generate(http, text=PROMPT, sampling_params=params)["output_ids"]
    stop_id = full[5]
    out = _generate(http, text=PROMPT, sampling_params={**params, "stop_token_ids": [stop_id]})
    assert out["output_ids"] == full[:full.index(stop_id) + 1]
    assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": stop_id}


def test_server_info(http):
    _generate(http, text=PROMPT, sampling_params={"max_new_tokens": 8, "temperature": 0})
    info = http.get("/server_info").json()
    assert info["setting"] == "cpu_c1_tiny" and info["engine"] == "stock"
    assert info["recipe"]["name"] == "stock" and info["recipe_hash"] == STOCK.hash()
    assert {"gpu", "torch", "commit"} <= set(info["fingerprint"])
    assert info["internal_states"][0]["avg_spec_accept_length"] >= 1.0
    assert info["avg_spec_accept_length"] == info["internal_states"][0]["avg_spec_accept_length"]


def test_metrics(http):
    _generate(http, text=PROMPT, sampling_params={"max_new_tokens": 8, "temperature": 0})
    response = http.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(response.text)}
    for name in ("specpilot_requests", "specpilot_prompt_tokens", "specpilot_completion_tokens",
                 "specpilot_queue_depth", "specpilot_num_running_requests", "specpilot_steps",
                 "specpilot_step_seconds", "specpilot_request_latency_seconds"):
        assert name in families, name
    accept = families["specpilot_accept_length"]
    assert accept.type == "histogram"
    count = next(s.value for s in accept.samples if s.name == "specpilot_accept_length_count")
    assert count >= 7
    done = [s for s in families["specpilot_requests"].samples
            if s.labels.get("endpoint") == "generate" and s.name.endswith("_total")]
    assert sum(s.value for s in done) >= 1
    admissions = next(s.value for s in families["specpilot_admissions"].samples
                      if s.name == "specpilot_admissions_total")
    assert admissions >= 1  # the request above joined the batch in a prefill round
