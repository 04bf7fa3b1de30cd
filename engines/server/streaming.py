"""Scheduler-thread callbacks to asyncio, token ids to final text deltas, and SSE framing."""

import asyncio
import json

from specpilot.engines.scheduler import Event


class EventBridge:
    """The ``on_event`` callback of one request: hands each :class:`Event` from the scheduler
    thread to an :class:`asyncio.Queue` on the server's event loop (``loop.call_soon_threadsafe``).

    It never raises into the scheduler thread: once the loop is closed (server shutting down)
    events are dropped.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self._loop = loop
        self.queue: asyncio.Queue[Event] = asyncio.Queue()

    def __call__(self, event: Event) -> None:
        try:
            self._loop.call_soon_threadsafe(self.queue.put_nowait, event)
        except RuntimeError:  # the loop is closed: nobody is waiting any more
            pass


class TextTracker:
    """Decodes a growing list of token ids into text deltas that are final, and finds stop strings.

    A delta never contains text that may still change: a trailing U+FFFD (an incomplete UTF-8
    sequence of byte-level BPE) is held back, and so are the last ``len(longest stop) - 1``
    characters, which could be the start of a stop string. A stop string is cut from the text
    (OpenAI and SGLang do not return it).
    """

    def __init__(self, tokenizer, stop: list[str] = ()):
        self._tokenizer = tokenizer
        self._stop = [s for s in stop if s]
        self._hold = max((len(s) for s in self._stop), default=1) - 1
        self.text = ""  # the text sent so far
        self.matched: str | None = None

    def update(self, token_ids: list[int], final: bool = False) -> str:
        """The new final text after ``token_ids`` (all tokens so far); sets ``matched`` on a stop.
        ``final``: the request is over, nothing is held back."""
        full = self._tokenizer.decode(token_ids)
        if not final:  # a trailing U+FFFD may become a character with the next token
            full = full.rstrip("\ufffd")
        hits = [(full.find(s), s) for s in self._stop]
        hits = [(i, s) for i, s in hits if i >= 0]
        if hits:
            cut, self.matched = min(hits)
            return self._advance(full, cut)
        return self._advance(full, len(full) if final else len(full) - self._hold)

    def flush(self, token_ids: list[int]) -> str:
        """The rest of the text once the request is finished."""
        return "" if self.matched is not None else self.update(token_ids, final=True)

    def _advance(self, full: str, end: int) -> str:
        if end <= len(self.text):
            return ""
        delta = full[len(self.text):end]
        self.text += delta
        return delta


def sse(data: dict | str) -> str:
    """One server-sent event: ``data: <json>\\n\\n`` (a string is sent as is, e.g. ``[DONE]``)."""
    payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    return f"data: {payload}\n\n"


SSE_DONE = sse("[DONE]")
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
