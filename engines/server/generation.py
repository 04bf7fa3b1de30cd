"""One request on the scheduler as an async stream of text pieces, and what every route shares."""

import asyncio
import dataclasses
import secrets
import time
import uuid
from collections.abc import AsyncIterator
from collections.abc import Awaitable
from collections.abc import Callable

from specpilot.engines.engine import SamplingParams
from specpilot.engines.server.chat import ChatTemplate
from specpilot.engines.server.metrics import ServerMetrics
from specpilot.engines.server.protocol import APIError
from specpilot.engines.server.protocol import Protocol
from specpilot.engines.server.streaming import EventBridge
from specpilot.engines.server.streaming import TextTracker

GREEDY_BELOW = 1e-5  # temperatures below this decode greedily (as SGLang): 1/T would overflow
# A smaller top_p rounds to 0 in fp32 and keeps no token; any top_p below the top token's
# probability (>= 1/vocab) keeps exactly that token, so raising it to this changes nothing.
TOP_P_MIN = 1e-6
DISCONNECT_POLL_S = 1.0  # how often a waiting non-streaming request checks for its client


@dataclasses.dataclass
class ServerState:
    """Everything the routes need: the models, the engine and its scheduler, the served name."""

    models: object  # specpilot.build.Models
    engine: object  # specpilot.engines.engine.Engine
    scheduler: object  # specpilot.engines.scheduler.Scheduler
    engine_name: str
    model_name: str  # the served model id (the setting name)
    protocol: Protocol
    chat_template: ChatTemplate
    metrics: ServerMetrics
    info: dict  # static part of /server_info
    created: int = dataclasses.field(default_factory=lambda: int(time.time()))

    @property
    def context(self) -> int:
        """Largest prompt + max_tokens a request may ask for."""
        return self.engine.context

    @property
    def vocab_size(self) -> int:
        return self.models.target.vocab_size

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return self.models.tokenizer.encode(text, add_special_tokens=add_special_tokens).ids

    def check_ids(self, ids: list[int], param: str) -> None:
        """400 unless every id is in the model's vocabulary."""
        bad = [i for i in ids if i >= self.vocab_size]
        if bad:
            raise APIError(400, f"token id {bad[0]} is outside the vocabulary "
                                f"(size {self.vocab_size})", param=param)

    def params(self, max_tokens: int, temperature: float | None, top_p: float | None,
               seed: int | None, stop_token_ids: list[int] | None, ignore_eos: bool,
               prompt_ids: list[int], prompt_param: str = "prompt") -> SamplingParams:
        """Validated engine sampling parameters; 400 if the request can never run
        (``prompt_param`` names the prompt's field in the error)."""
        temperature = 1.0 if temperature is None else temperature
        if temperature < GREEDY_BELOW:
            temperature = 0.0
        if temperature > 0 and seed is None:
            seed = secrets.randbits(63)  # unseeded sampling differs between requests
        self.check_ids(stop_token_ids or [], "stop_token_ids")
        try:
            params = SamplingParams(max_new_tokens=max_tokens, temperature=temperature,
                                    top_p=1.0 if top_p is None else max(top_p, TOP_P_MIN),
                                    seed=seed,
                                    stop_token_ids=tuple(stop_token_ids or ()),
                                    ignore_eos=ignore_eos)
            self.scheduler.check(prompt_ids, params)
        except ValueError as err:
            prompt_at_fault = not prompt_ids or len(prompt_ids) >= self.context
            param = prompt_param if prompt_at_fault else "max_tokens"
            raise APIError(400, str(err), param=param) from err
        return params


@dataclasses.dataclass
class Piece:
    """New output: final text and the token ids that arrived with it."""

    text: str
    token_ids: list[int]


class Generation:
    """Runs one request on the scheduler and yields :class:`Piece` s until it finishes.

    Stop strings are matched on the decoded text; a match cuts the text and cancels the request. If
    the consumer stops early (client gone: the streaming response is closed, or ``disconnected()``
    says so) the request is cancelled on the scheduler.
    """

    def __init__(self, state: ServerState, endpoint: str, prompt_ids: list[int],
                 params: SamplingParams, stop: list[str] | None = None,
                 disconnected: Callable[[], Awaitable[bool]] | None = None):
        self.state, self.endpoint = state, endpoint
        self.request_id = uuid.uuid4().hex
        self.prompt_ids, self.params = prompt_ids, params
        self.output_ids: list[int] = []
        self.accept_lengths: tuple[int, ...] = ()
        self.finish_reason: str | None = None  # "stop" | "length" | "abort" | "error"
        self.matched: int | str | None = None
        self.error: str | None = None
        self._tracker = TextTracker(state.models.tokenizer, stop or [])
        self._disconnected = disconnected
        self._start = time.perf_counter()
        self._end: float | None = None
        self._checked = self._start  # last check for a disconnected client

    @property
    def latency_s(self) -> float:
        """Seconds from submission to the last token (so far, while running)."""
        return (self._end or time.perf_counter()) - self._start

    @property
    def text(self) -> str:
        return self._tracker.text

    @property
    def num_verify_steps(self) -> int:
        return len(self.accept_lengths)

    async def _next_event(self, bridge: EventBridge):
        """The next event, or None once the client is gone (checked every DISCONNECT_POLL_S)."""
        while True:  # bounded by the request: it finishes, or its client goes away
            if self._disconnected is not None and \
                    time.perf_counter() - self._checked >= DISCONNECT_POLL_S:
                self._checked = time.perf_counter()
                if await self._disconnected():
                    return None
            try:
                return await asyncio.wait_for(bridge.queue.get(), DISCONNECT_POLL_S)
            except TimeoutError:
                continue

    async def pieces(self) -> AsyncIterator[Piece]:
        """Submit the request and yield its output as it arrives."""
        bridge = EventBridge(asyncio.get_running_loop())
        scheduler = self.state.scheduler
        scheduler.submit(self.request_id, self.prompt_ids, self.params, bridge)
        try:
            while self.finish_reason is None:
                event = await self._next_event(bridge)
                if event is None:  # client gone
                    self.finish_reason = "abort"
                    break
                self.accept_lengths = event.accept_lengths or self.accept_lengths
                self.output_ids.extend(event.new_tokens)
                text = self._tracker.update(self.output_ids) if event.new_tokens else ""
                if self._tracker.matched is not None:
                    self.finish_reason, self.matched = "stop", self._tracker.matched
                    scheduler.cancel(self.request_id)
                elif event.finished:
                    text += self._tracker.flush(self.output_ids)
                    self.finish_reason, self.error = event.finish_reason, event.error
                    if self._tracker.matched is not None and event.error is None:  # last chars
                        self.finish_reason, self.matched = "stop", self._tracker.matched
                    elif self.finish_reason == "stop" and self.output_ids:
                        self.matched = self.output_ids[-1]  # EOS or a stop token id
                if text or event.new_tokens:
                    yield Piece(text, list(event.new_tokens))
        finally:
            if self.finish_reason is None or self.finish_reason == "abort":
                self.finish_reason = "abort"
                scheduler.cancel(self.request_id)
            self._end = time.perf_counter()
            self.state.metrics.request_done(self)

    async def run(self) -> "Generation":
        """Consume the whole request (non-streaming routes); raises 500 if the engine failed."""
        async for _ in self.pieces():
            pass
        if self.finish_reason == "error":
            raise APIError(500, f"generation failed: {self.error}", type="server_error")
        return self
