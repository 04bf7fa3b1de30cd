"""Under 16 concurrent clients every output equals the same request run alone (batching changes no
token), and the requests really were batched (fewer steps than run one by one)."""

import asyncio

import httpx

from specpilot.datasets import load_prompts

NUM_CLIENTS = 16


def _requests() -> list[dict]:
    prompts = load_prompts("gsm8k", NUM_CLIENTS)
    out = []
    for i, prompt in enumerate(prompts):
        # requests leave at different steps
        params = {"max_new_tokens": 8 + 2 * i, "temperature": 0}
        if i % 4 == 3:  # seeded sampling is per request too
            params.update(temperature=0.8, sampling_seed=i)
        out.append({"text": prompt[:60 + 10 * i], "sampling_params": params})  # ragged prompts
    return out


async def _run_all(url: str, bodies: list[dict]) -> list[dict]:
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        responses = await asyncio.gather(*(client.post("/generate", json=b) for b in bodies))
    assert all(r.status_code == 200 for r in responses), [r.text for r in responses]
    return [r.json() for r in responses]


def test_concurrent_equals_alone(server, http):
    bodies = _requests()
    steps_before = http.get("/server_info").json()["steps_total"]
    alone = [http.post("/generate", json=b).json() for b in bodies]
    steps_alone = http.get("/server_info").json()["steps_total"] - steps_before
    together = asyncio.run(_run_all(server.url, bodies))
    steps_together = http.get("/server_info").json()["steps_total"] - steps_before - steps_alone
    for i, (a, b) in enumerate(zip(alone, together)):
        assert b["output_ids"] == a["output_ids"], f"request {i}"
        assert b["text"] == a["text"], f"request {i}"
        assert b["meta_info"]["finish_reason"] == a["meta_info"]["finish_reason"]
    assert steps_together < steps_alone / 2, (steps_together, steps_alone)


def test_streams_under_concurrency(server, openai_client, model_name):
    """16 concurrent OpenAI streams: each equals its non-streamed, alone answer."""
    from openai import AsyncOpenAI

    prompts = load_prompts("gsm8k", NUM_CLIENTS)
    kwargs = [{"model": model_name, "prompt": p[:80], "max_tokens": 6 + i, "temperature": 0}
              for i, p in enumerate(prompts)]
    alone = [openai_client.completions.create(**k).choices[0].text for k in kwargs]

    async def stream_all() -> list[str]:
        async with AsyncOpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0,
                               timeout=120) as client:
            async def one(k) -> str:
                chunks = [c async for c in await client.completions.create(**k, stream=True)]
                return "".join(c.choices[0].text for c in chunks)

            return await asyncio.gather(*(one(k) for k in kwargs))

    assert asyncio.run(stream_all()) == alone
