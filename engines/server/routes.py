"""Generation routes: SGLang ``POST /generate``, OpenAI ``POST /v1/completions`` and
``POST /v1/chat/completions``, each non-streaming or as server-sent events ending in ``[DONE]``."""

import contextlib
import time
from collections.abc import AsyncIterator
from collections.abc import Callable

from fastapi import FastAPI
from fastapi import Request
from fastapi.responses import StreamingResponse

from specpilot.engines.server.chat import ChatTemplateError
from specpilot.engines.server.generation import Generation
from specpilot.engines.server.generation import ServerState
from specpilot.engines.server.protocol import APIError
from specpilot.engines.server.protocol import AssistantMessage
from specpilot.engines.server.protocol import ChatChoice
from specpilot.engines.server.protocol import ChatCompletionResponse
from specpilot.engines.server.protocol import CompletionChoice
from specpilot.engines.server.protocol import CompletionResponse
from specpilot.engines.server.protocol import ErrorResponse
from specpilot.engines.server.protocol import GenerateResponse
from specpilot.engines.server.protocol import Usage
from specpilot.engines.server.streaming import SSE_DONE
from specpilot.engines.server.streaming import SSE_HEADERS
from specpilot.engines.server.streaming import sse

ERRORS = {400: {"model": ErrorResponse}, 404: {"model": ErrorResponse},
          500: {"model": ErrorResponse}}


def _stops(stop: str | list[str] | None) -> list[str]:
    return [stop] if isinstance(stop, str) else list(stop or [])


def _watch(request: Request, stream: bool | None):
    """How a non-streaming request notices its client left; a closed stream is cancelled by the
    response machinery instead (the SSE generator is closed)."""
    return None if stream else request.is_disconnected


def _usage(gen: Generation) -> Usage:
    num_prompt, num_out = len(gen.prompt_ids), len(gen.output_ids)
    return Usage(prompt_tokens=num_prompt, completion_tokens=num_out,
                 total_tokens=num_prompt + num_out)


def meta_info(state: ServerState, gen: Generation, rid: str | None) -> dict:
    """SGLang ``meta_info``; ``spec_accept_length`` = completion_tokens / verify steps."""
    reason = {"stop": {"type": "stop", "matched": gen.matched},
              "length": {"type": "length", "length": len(gen.output_ids)},
              "abort": {"type": "abort", "message": "request cancelled"},
              "error": {"type": "abort", "message": gen.error}}.get(gen.finish_reason)
    meta = {"id": rid or gen.request_id, "finish_reason": reason,
            "prompt_tokens": len(gen.prompt_ids), "completion_tokens": len(gen.output_ids),
            "cached_tokens": 0, "e2e_latency": gen.latency_s}
    if state.engine.drafter is not None and gen.num_verify_steps > 0:
        meta["spec_verify_ct"] = gen.num_verify_steps
        meta["spec_accept_length"] = len(gen.output_ids) / gen.num_verify_steps
    return meta


async def _events(gen: Generation, on_piece: Callable, on_finish: Callable,
                  first: dict | None = None) -> AsyncIterator[str]:
    """SSE text of one request: ``first``, a chunk per piece, the closing chunks, ``[DONE]``.
    Closing this stream early (client gone) closes the generation, which cancels the request."""
    if first is not None:
        yield sse(first)
    async with contextlib.aclosing(gen.pieces()) as pieces:
        async for piece in pieces:
            chunk = on_piece(piece)
            if chunk is not None:
                yield sse(chunk)
    if gen.finish_reason == "error":
        yield sse(APIError(500, f"generation failed: {gen.error}", type="server_error").body())
    else:
        for chunk in on_finish():
            yield sse(chunk)
    yield SSE_DONE


def _streaming(events: AsyncIterator[str]) -> StreamingResponse:
    return StreamingResponse(events, media_type="text/event-stream", headers=SSE_HEADERS)


def add_generation_routes(app: FastAPI, state: ServerState) -> None:
    """Register the three generation routes on ``app``."""
    proto = state.protocol

    def prompt_ids(prompt: str | list[int], param: str) -> list[int]:
        if isinstance(prompt, str):
            return state.encode(prompt)
        state.check_ids(prompt, param)
        return list(prompt)

    def check_model(name: str) -> None:
        if name != state.model_name:
            raise APIError(404, f"The model '{name}' does not exist; this server serves "
                                f"'{state.model_name}'", param="model", code="model_not_found")

    @app.post("/generate", response_model=GenerateResponse, responses=ERRORS)
    async def generate(body: proto.generate, request: Request):
        """SGLang generate: ``text`` or ``input_ids`` plus ``sampling_params``; ``stream`` for SSE
        chunks carrying the cumulative ``text`` and ``output_ids``."""
        sp = body.sampling_params
        ids = prompt_ids(body.text if body.input_ids is None else body.input_ids, "input_ids")
        params = state.params(sp.max_new_tokens, sp.temperature, sp.top_p, sp.sampling_seed,
                              sp.stop_token_ids, sp.ignore_eos, ids,
                              "text" if body.input_ids is None else "input_ids")
        gen = Generation(state, "generate", ids, params, _stops(sp.stop),
                         _watch(request, body.stream))

        def result() -> dict:
            return {"text": gen.text, "output_ids": list(gen.output_ids),
                    "meta_info": meta_info(state, gen, body.rid)}

        if not body.stream:
            await gen.run()
            return result()
        return _streaming(_events(gen, lambda piece: None if gen.finish_reason else result(),
                                  lambda: [result()]))

    @app.post("/v1/completions", response_model=CompletionResponse, responses=ERRORS)
    async def completions(body: proto.completion, request: Request):
        """OpenAI completions for one prompt (text or token ids)."""
        check_model(body.model)
        ids = prompt_ids(body.prompt, "prompt")
        max_tokens = body.max_tokens or min(16, proto.max_tokens_limit)
        params = state.params(max_tokens, body.temperature, body.top_p, body.seed,
                              body.stop_token_ids, body.ignore_eos, ids)
        gen = Generation(state, "completions", ids, params, _stops(body.stop),
                         _watch(request, body.stream))
        rid, created = f"cmpl-{gen.request_id}", int(time.time())

        def chunk(text: str, finish_reason: str | None) -> dict:
            return {"id": rid, "object": "text_completion", "created": created,
                    "model": state.model_name, "choices": [CompletionChoice(
                        text=text, finish_reason=finish_reason).model_dump()]}

        if not body.stream:
            await gen.run()
            return CompletionResponse(id=rid, created=created, model=state.model_name,
                                      choices=[CompletionChoice(text=gen.text,
                                                                finish_reason=gen.finish_reason)],
                                      usage=_usage(gen))
        return _streaming(_events(
            gen, lambda piece: chunk(piece.text, None) if piece.text else None,
            lambda: _closing(chunk("", gen.finish_reason), gen, body.stream_options)))

    @app.post("/v1/chat/completions", response_model=ChatCompletionResponse, responses=ERRORS)
    async def chat_completions(body: proto.chat, request: Request):
        """OpenAI chat completions: the messages go through the checkpoint's chat template."""
        check_model(body.model)
        try:
            text = state.chat_template.render([{"role": m.role, "content": m.text()}
                                               for m in body.messages])
        except ChatTemplateError as err:
            raise APIError(400, str(err), param="messages") from err
        ids = state.encode(text, add_special_tokens=False)
        max_tokens = body.max_completion_tokens or body.max_tokens
        if max_tokens is None:  # as OpenAI: up to the context
            max_tokens = min(proto.max_tokens_limit, state.context - len(ids))
            if max_tokens < 1:
                raise APIError(400, f"the messages ({len(ids)} tokens) fill the context of "
                                    f"{state.context} tokens", param="messages")
        params = state.params(max_tokens, body.temperature, body.top_p, body.seed,
                              body.stop_token_ids, body.ignore_eos, ids, "messages")
        gen = Generation(state, "chat", ids, params, _stops(body.stop),
                         _watch(request, body.stream))
        rid, created = f"chatcmpl-{gen.request_id}", int(time.time())

        def chunk(delta: dict, finish_reason: str | None) -> dict:
            return {"id": rid, "object": "chat.completion.chunk", "created": created,
                    "model": state.model_name, "choices": [
                        {"index": 0, "delta": delta, "logprobs": None,
                         "finish_reason": finish_reason}]}

        if not body.stream:
            await gen.run()
            return ChatCompletionResponse(
                id=rid, created=created, model=state.model_name,
                choices=[ChatChoice(message=AssistantMessage(content=gen.text),
                                    finish_reason=gen.finish_reason)],
                usage=_usage(gen))
        return _streaming(_events(
            gen, lambda piece: chunk({"content": piece.text}, None) if piece.text else None,
            lambda: _closing(chunk({}, gen.finish_reason), gen, body.stream_options),
            first=chunk({"role": "assistant", "content": ""}, None)))


def _closing(last: dict, gen: Generation, options) -> list[dict]:
    """The chunk with the finish reason, and (``stream_options.include_usage``) the usage chunk."""
    if options is None or not options.include_usage:
        return [last]
    usage = {**last, "choices": [], "usage": _usage(gen).model_dump()}
    return [{**last, "usage": None}, usage]
