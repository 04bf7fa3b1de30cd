"""Bounded load test of ``specpilot serve``: N concurrent OpenAI completion streams, fixed count.

Localhost only. Prints (and with ``--json`` writes) throughput, latency percentiles and errors,
with the server's setting, recipe and fingerprint.

Against a running server::

    python experiments/load_test.py --url http://127.0.0.1:30000 --concurrency 64 \\
        --num-requests 256

Or let it start one (a subprocess on a free port, stopped at the end)::

    python experiments/load_test.py --serve cpu_c1_tiny stock --concurrency 64 --num-requests 256

Exit status 1 if any request failed.
"""

import argparse
import asyncio
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from urllib.parse import urlparse

import httpx

LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1"}
STARTUP_TIMEOUT_S = 180


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); 0 for no values."""
    if not values:
        return 0.0
    ranked = sorted(values)
    return ranked[min(len(ranked) - 1, max(0, round(q / 100 * len(ranked) + 0.5) - 1))]


async def one_stream(client: httpx.AsyncClient, model: str, prompt: str, max_tokens: int) -> dict:
    """One streamed completion; latency, time to first token, tokens, or the error."""
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
            "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
    start = time.perf_counter()
    ttft, tokens, done = None, 0, False
    try:
        async with client.stream("POST", "/v1/completions", json=body) as response:
            if response.status_code != 200:
                return {"error": f"HTTP {response.status_code}: {(await response.aread())[:200]}"}
            async for line in response.aiter_lines():
                if not line.startswith("data: "):
                    continue
                if line == "data: [DONE]":
                    done = True
                    break
                chunk = json.loads(line[len("data: "):])
                if "error" in chunk:
                    return {"error": chunk["error"]["message"]}
                if ttft is None and chunk["choices"] and chunk["choices"][0]["text"]:
                    ttft = time.perf_counter() - start
                if chunk.get("usage"):
                    tokens = chunk["usage"]["completion_tokens"]
    except httpx.HTTPError as err:
        return {"error": f"{type(err).__name__}: {err}"}
    if not done or tokens != max_tokens:
        return {"error": f"incomplete stream: done={done}, {tokens}/{max_tokens} tokens"}
    return {"latency_s": time.perf_counter() - start, "ttft_s": ttft or 0.0, "tokens": tokens}


async def run_load(url: str, concurrency: int, num_requests: int, max_tokens: int,
                   timeout_s: float) -> dict:
    """``num_requests`` streams, at most ``concurrency`` at a time."""
    from specpilot.datasets import load_prompts

    async with httpx.AsyncClient(base_url=url, timeout=timeout_s,
                                 limits=httpx.Limits(max_connections=concurrency)) as client:
        info = (await client.get("/server_info")).json()
        prompts = load_prompts("gsm8k", min(num_requests, 256))
        gate = asyncio.Semaphore(concurrency)

        async def bounded(i: int) -> dict:
            async with gate:
                return await one_stream(client, info["setting"], prompts[i % len(prompts)],
                                        max_tokens)

        start = time.perf_counter()
        results = await asyncio.gather(*(bounded(i) for i in range(num_requests)))
        wall_s = time.perf_counter() - start
        after = (await client.get("/server_info")).json()
    ok = [r for r in results if "error" not in r]
    errors = [r["error"] for r in results if "error" in r]
    latencies = [r["latency_s"] for r in ok]
    ttfts = [r["ttft_s"] for r in ok]
    num_tokens = sum(r["tokens"] for r in ok)
    return {
        "concurrency": concurrency, "num_requests": num_requests, "max_tokens": max_tokens,
        "num_ok": len(ok), "num_errors": len(errors), "errors": errors[:10],
        "wall_s": wall_s, "output_tok_s": num_tokens / wall_s, "requests_per_s": len(ok) / wall_s,
        "latency_p50_s": percentile(latencies, 50), "latency_p99_s": percentile(latencies, 99),
        "ttft_p50_s": percentile(ttfts, 50), "ttft_p99_s": percentile(ttfts, 99),
        "mean_latency_s": statistics.fmean(latencies) if latencies else 0.0,
        "server": {k: info.get(k) for k in ("setting", "setting_hash", "engine", "recipe_hash",
                                            "max_batch", "fingerprint")},
        "avg_spec_accept_length": after["avg_spec_accept_length"],
    }


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def serve(setting: str, engine: str, max_batch: int):
    """Start ``specpilot serve`` on a free localhost port; yields its URL."""
    port = _free_port()
    cmd = [sys.executable, "-m", "specpilot", "serve", setting, engine, "--port", str(port),
           "--max-batch", str(max_batch), "--log-level", "warning"]
    proc = subprocess.Popen(cmd, env=os.environ.copy())
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=0.5)
                raise SystemExit(f"server exited with {proc.returncode}")
        else:
            raise SystemExit(f"server not ready after {STARTUP_TIMEOUT_S} s")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--url", help="a running server (localhost only)")
    target.add_argument("--serve", nargs=2, metavar=("SETTING", "ENGINE"),
                        help="start `specpilot serve SETTING ENGINE` for the run")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--num-requests", type=int, default=256)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--max-batch", type=int, default=16, help="server rows (with --serve)")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per request")
    parser.add_argument("--json", help="write the result here")
    args = parser.parse_args(argv)
    if min(args.concurrency, args.num_requests, args.max_tokens, args.max_batch) < 1:
        parser.error("--concurrency, --num-requests, --max-tokens, --max-batch must be >= 1")
    if args.url and urlparse(args.url).hostname not in LOCAL_HOSTS:
        parser.error(f"localhost only: {args.url}")
    with (serve(*args.serve, args.max_batch) if args.serve else contextlib.nullcontext(args.url)) \
            as url:
        result = asyncio.run(run_load(url, args.concurrency, args.num_requests, args.max_tokens,
                                      args.timeout))
    print(json.dumps(result, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return 1 if result["num_errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
