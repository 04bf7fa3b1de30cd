"""Benchmark a running server over HTTP (``specpilot bench --url``): ours, SGLang, or any
OpenAI-compatible one, so a real SGLang deployment can be measured against a SpecPilot engine.

Requests stream, so time to first token (TTFT) and inter-token latency (ITL) are measured on the
client. APIs: SGLang ``POST /generate`` (``meta_info.completion_tokens``; tau from
``meta_info.spec_accept_length`` or ``completion_tokens / spec_verify_ct`` when the server reports
them) and OpenAI ``POST /v1/completions`` (token count from the final ``usage`` chunk). Prompts are
sent as text, so the server uses its own tokenizer. Standard library only (urllib, threads).
"""

import dataclasses
import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterable
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

from specpilot.bench.batched import summarize_level
from specpilot.errors import SpecPilotError


@dataclasses.dataclass(frozen=True)
class RemoteServer:
    """Where to send requests: base URL, API (``sglang`` | ``openai``), model name for OpenAI."""

    url: str
    api: str = "sglang"
    model: str | None = None
    timeout_s: float = 600.0

    def __post_init__(self):
        if self.api not in ("sglang", "openai"):
            raise ValueError(f"api must be 'sglang' or 'openai', got {self.api!r}")


def _get_json(url: str, timeout_s: float = 10.0) -> dict | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            return json.loads(resp.read())
    except (urllib.error.URLError, OSError, ValueError):
        return None


def connect(url: str, api: str = "auto", model: str | None = None) -> tuple[RemoteServer, dict]:
    """Probe the server; returns the server handle and what it says about itself.

    ``auto`` picks SGLang when ``/server_info`` (or ``/get_server_info``) answers, else OpenAI.
    """
    base = url.rstrip("/")
    info = _get_json(f"{base}/server_info") or _get_json(f"{base}/get_server_info")
    models = _get_json(f"{base}/v1/models")
    if info is None and models is None:
        raise SpecPilotError(f"no server answers at {base} (tried /server_info, /get_server_info, "
                             "/v1/models)")
    if api == "auto":
        api = "sglang" if info is not None else "openai"
    if model is None and models and models.get("data"):
        model = models["data"][0].get("id")
    return RemoteServer(base, api, model), {"server_info": info, "models": models}


def iter_sse(lines: Iterable[bytes]) -> Iterator[dict]:
    """JSON payloads of a server-sent-event stream (``data: {...}`` lines; stops at ``[DONE]``)."""
    for raw in lines:
        line = raw.decode("utf-8").strip()
        if not line.startswith("data:"):
            continue
        data = line[len("data:"):].strip()
        if data == "[DONE]":
            return
        yield json.loads(data)


def _payload(server: RemoteServer, text: str, params) -> tuple[str, dict]:
    if server.api == "sglang":
        return f"{server.url}/generate", {
            "text": text, "stream": True,
            "sampling_params": {"max_new_tokens": params.max_new_tokens,
                                "temperature": params.temperature,
                                "ignore_eos": params.ignore_eos}}
    return f"{server.url}/v1/completions", {
        "model": server.model, "prompt": text, "max_tokens": params.max_new_tokens,
        "temperature": params.temperature, "ignore_eos": params.ignore_eos, "stream": True,
        "stream_options": {"include_usage": True}}


def _tokens_and_tau(server: RemoteServer, event: dict,
                    num_tokens: int) -> tuple[int, float | None, bool]:
    """(cumulative output tokens after ``event``, the server's tau if reported, event has text)."""
    if server.api == "sglang":
        meta = event.get("meta_info", {})
        tau = meta.get("spec_accept_length")
        if tau is None and meta.get("spec_verify_ct"):
            tau = meta["completion_tokens"] / meta["spec_verify_ct"]
        return int(meta.get("completion_tokens", num_tokens)), tau, bool(event.get("text"))
    has_text = any(c.get("text") for c in event.get("choices") or [])
    usage = event.get("usage")
    if usage and usage.get("completion_tokens") is not None:
        return int(usage["completion_tokens"]), None, has_text
    return num_tokens + (1 if has_text else 0), None, has_text  # no usage: a token per chunk


def stream_request(server: RemoteServer, text: str, params, prompt_index: int = 0) -> dict:
    """Send one streaming request; returns its measurements (the keys of a local bench prompt)."""
    url, body = _payload(server, text, params)
    request = urllib.request.Request(url, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    start = time.perf_counter()
    first_s, last_s, num_tokens, tau, gaps_ms = None, None, 0, None, []
    try:
        with urllib.request.urlopen(request, timeout=server.timeout_s) as resp:
            for event in iter_sse(resp):
                now = time.perf_counter()
                total, tau_now, has_text = _tokens_and_tau(server, event, num_tokens)
                tau = tau_now if tau_now is not None else tau
                if not has_text:  # e.g. OpenAI's final usage chunk: a count, not a token arrival
                    num_tokens = max(num_tokens, total)
                    continue
                if total <= num_tokens:
                    continue
                if first_s is None:
                    first_s = now - start
                else:  # one chunk may carry several tokens (a verify step): spread the gap
                    gaps_ms.extend([(now - last_s) * 1e3 / (total - num_tokens)]
                                   * (total - num_tokens))
                last_s, num_tokens = now, total
    except urllib.error.HTTPError as err:
        raise SpecPilotError(f"{url}: HTTP {err.code}: {err.read()[:300]!r}") from err
    except (urllib.error.URLError, OSError) as err:
        raise SpecPilotError(f"{url}: {err}") from err
    e2e_s = time.perf_counter() - start
    if first_s is None:
        raise SpecPilotError(f"{url}: the stream carried no output tokens")
    decode_s = e2e_s - first_s
    return {"prompt_index": prompt_index, "tokens": num_tokens, "decode_s": decode_s,
            "e2e_s": e2e_s, "prefill_ms": first_s * 1e3, "ttft_ms": first_s * 1e3,
            "ms_per_token": decode_s * 1e3 / (num_tokens - 1) if num_tokens > 1 else None,
            "itl_ms": gaps_ms, "tau": tau, "accept_lengths": []}


def run_level(server: RemoteServer, texts: list[str], params, concurrency: int,
              progress=None) -> dict:
    """All prompts with ``concurrency`` requests in flight; ``summarize_level``'s dict."""
    def one(index: int) -> dict:
        result = stream_request(server, texts[index], params, index)
        if progress is not None:
            progress()
        return result

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        per_prompt = list(pool.map(one, range(len(texts))))
    return summarize_level(concurrency, time.perf_counter() - start, per_prompt)
