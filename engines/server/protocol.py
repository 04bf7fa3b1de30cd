"""Request and response bodies of the HTTP API (OpenAI and SGLang shapes), validated by pydantic.

Every request model forbids unknown fields (a typo or an unsupported option such as ``logprobs``
is a 400, never silently ignored) and bounds its numbers, so the OpenAPI schema states exactly
what the server accepts. ``max_tokens`` / ``max_new_tokens`` are bounded by the server's limit,
which is why the request classes are built per server by :func:`make_protocol`.
"""

import dataclasses
from typing import Annotated
from typing import Literal

from pydantic import AfterValidator
from pydantic import BaseModel
from pydantic import ConfigDict
from pydantic import Field
from pydantic import model_validator


class APIError(Exception):
    """An error the server answers with an OpenAI-style body (see :class:`ErrorResponse`)."""

    def __init__(self, status: int, message: str, param: str | None = None,
                 code: str | None = None, type: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.type = (
            status, message, param, code, type)

    def body(self) -> dict:
        """``{"error": {"message", "type", "param", "code"}}``."""
        return {"error": {"message": self.message, "type": self.type, "param": self.param,
                          "code": self.code}}


class ErrorDetail(BaseModel):
    """The ``error`` object of an OpenAI error body."""

    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(BaseModel):
    """Every 4xx/5xx answer: ``{"error": {...}}``."""

    error: ErrorDetail


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _only_one(n: int | None) -> int | None:
    if n not in (None, 1):
        raise ValueError("only n=1 is supported")
    return n


def _unicode(text: str) -> str:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise ValueError(f"not valid Unicode text ({err.reason} at {err.start})") from None
    return text


Text = Annotated[str, AfterValidator(_unicode)]  # JSON may carry lone surrogates; UTF-8 may not
Temperature = Annotated[float, Field(ge=0.0, allow_inf_nan=False)]
TopP = Annotated[float, Field(gt=0.0, le=1.0, allow_inf_nan=False)]
Seed = Annotated[int, Field(ge=0, le=2**63 - 1)]
TokenId = Annotated[int, Field(ge=0)]  # the vocabulary bound is checked by the server
TokenIds = Annotated[list[TokenId], Field(min_length=1)]
StopString = Annotated[Text, Field(min_length=1, max_length=256)]
Stop = StopString | Annotated[list[StopString], Field(max_length=4)]
StopTokenIds = Annotated[list[TokenId], Field(max_length=64)]
N = Annotated[int, AfterValidator(_only_one)]


class TextPart(_Strict):
    """One part of a chat message's content (only text is supported)."""

    type: Literal["text"]
    text: Text


class ChatMessage(_Strict):
    """One chat turn."""

    role: Literal["system", "user", "assistant"]
    content: Text | list[TextPart]

    def text(self) -> str:
        """The content as one string (text parts joined)."""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


class StreamOptions(_Strict):
    """``stream_options``: ``include_usage`` adds a last chunk with the usage."""

    include_usage: bool = False


class Usage(BaseModel):
    """Token counts of one request."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class CompletionChoice(BaseModel):
    """One choice of a text completion (always index 0: n = 1)."""

    index: int = 0
    text: str
    logprobs: None = None
    finish_reason: str | None


class CompletionResponse(BaseModel):
    """``POST /v1/completions`` (non-streaming)."""

    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage


class AssistantMessage(BaseModel):
    """The generated chat turn."""

    role: Literal["assistant"] = "assistant"
    content: str


class ChatChoice(BaseModel):
    """One choice of a chat completion (always index 0: n = 1)."""

    index: int = 0
    message: AssistantMessage
    logprobs: None = None
    finish_reason: str | None


class ChatCompletionResponse(BaseModel):
    """``POST /v1/chat/completions`` (non-streaming)."""

    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage


class GenerateResponse(BaseModel):
    """``POST /generate`` (SGLang).

    ``meta_info`` holds ``prompt_tokens``, ``completion_tokens``, ``finish_reason``
    (``{"type": "length", "length": N}`` | ``{"type": "stop", "matched": id or string}``),
    ``e2e_latency`` and, on speculative engines, ``spec_accept_length`` (completion_tokens / verify
    steps) and ``spec_verify_ct``.
    """

    text: str
    output_ids: list[int]
    meta_info: dict


class ModelCard(BaseModel):
    """One entry of ``GET /v1/models``."""

    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "specpilot"
    max_model_len: int


class ModelList(BaseModel):
    """``GET /v1/models``."""

    object: Literal["list"] = "list"
    data: list[ModelCard]


@dataclasses.dataclass(frozen=True)
class Protocol:
    """The request classes of one server (their token bounds depend on its limit)."""

    max_tokens_limit: int
    generate: type[BaseModel]
    completion: type[BaseModel]
    chat: type[BaseModel]


def make_protocol(max_tokens_limit: int, model_name: str) -> Protocol:
    """Request classes whose ``max_tokens`` / ``max_new_tokens`` are at most ``max_tokens_limit``.

    The schema lists ``model_name`` as the one ``model`` value; any other name is answered 404
    ``model_not_found`` by the route, as OpenAI does (so it is not a validation error here).
    """
    MaxTokens = Annotated[int, Field(ge=1, le=max_tokens_limit)]
    Model = Annotated[str, Field(json_schema_extra={"enum": [model_name]})]

    class SamplingParamsBody(_Strict):
        """SGLang ``sampling_params`` (defaults as SGLang: 128 new tokens, temperature 1.0)."""

        max_new_tokens: MaxTokens = min(128, max_tokens_limit)
        temperature: Temperature = 1.0
        top_p: TopP = 1.0
        sampling_seed: Seed | None = None
        stop: Stop | None = None
        stop_token_ids: StopTokenIds | None = None
        ignore_eos: bool = False
        n: N = 1

    class GenerateRequest(_Strict):
        """SGLang ``POST /generate``: exactly one of ``text`` and ``input_ids``."""

        text: Text | None = None
        input_ids: TokenIds | None = None
        sampling_params: SamplingParamsBody = Field(default_factory=SamplingParamsBody)
        stream: bool = False
        rid: Annotated[str, Field(max_length=128)] | None = None

        @model_validator(mode="after")
        def _one_input(self):
            if (self.text is None) == (self.input_ids is None):
                raise ValueError("give exactly one of 'text' and 'input_ids'")
            return self

    class _OpenAISampling(_Strict):
        model: Model
        temperature: Temperature | None = 1.0
        top_p: TopP | None = 1.0
        seed: Seed | None = None
        stop: Stop | None = None
        n: N | None = 1
        stream: bool | None = False
        stream_options: StreamOptions | None = None
        user: Annotated[str, Field(max_length=256)] | None = None
        ignore_eos: bool = False
        stop_token_ids: StopTokenIds | None = None

    class CompletionRequest(_OpenAISampling):
        """OpenAI ``POST /v1/completions``: one prompt (text or token ids), ``max_tokens`` 16."""

        prompt: Text | TokenIds
        max_tokens: MaxTokens | None = min(16, max_tokens_limit)

    class ChatCompletionRequest(_OpenAISampling):
        """OpenAI ``POST /v1/chat/completions``; without ``max_tokens`` it runs to the context."""

        messages: Annotated[list[ChatMessage], Field(min_length=1)]
        max_tokens: MaxTokens | None = None
        max_completion_tokens: MaxTokens | None = None

    return Protocol(max_tokens_limit, GenerateRequest, CompletionRequest, ChatCompletionRequest)
