"""The OpenAI API through the official ``openai`` client: completions, chat, streaming, usage."""

import openai
import pytest

from specpilot.engines.server.chat import ChatTemplate

PROMPT = "Natalia sold clips to 48 of her friends in April"


def test_models_lists_the_setting(openai_client, model_name):
    assert [m.id for m in openai_client.models.list().data] == [model_name]


def test_completion_usage_and_finish(openai_client, model_name):
    out = openai_client.completions.create(model=model_name, prompt=PROMPT, max_tokens=12,
                                           temperature=0, extra_body={"ignore_eos": True})
    choice = out.choices[0]
    assert out.object == "text_completion" and out.model == model_name
    assert choice.finish_reason == "length" and choice.text
    assert out.usage.completion_tokens == 12
    assert out.usage.total_tokens == out.usage.prompt_tokens + 12


def test_default_max_tokens_is_16(openai_client, model_name):
    out = openai_client.completions.create(model=model_name, prompt=PROMPT, temperature=0,
                                           extra_body={"ignore_eos": True})
    assert out.usage.completion_tokens == 16


def test_stream_equals_non_stream(openai_client, model_name):
    kwargs = {"model": model_name, "prompt": PROMPT, "max_tokens": 20, "temperature": 0}
    whole = openai_client.completions.create(**kwargs)
    chunks = list(openai_client.completions.create(
        **kwargs, stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    reasons = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert text == whole.choices[0].text
    assert reasons[-1] == whole.choices[0].finish_reason and set(reasons[:-1]) == {None}
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens


def test_chat_uses_the_template(openai_client, model_name, tiny_tokenizer):
    messages = [{"role": "system", "content": "You are terse."},
                {"role": "user", "content": PROMPT}]
    out = openai_client.chat.completions.create(model=model_name, messages=messages,
                                                max_tokens=10, temperature=0)
    prompt = ChatTemplate().render(messages)
    assert prompt.endswith("<|im_start|>assistant\n")
    prompt_ids = tiny_tokenizer.encode(prompt, add_special_tokens=False).ids
    assert out.usage.prompt_tokens == len(prompt_ids)
    assert out.choices[0].message.role == "assistant"
    assert out.choices[0].finish_reason in ("stop", "length")


def test_chat_stream(openai_client, model_name):
    kwargs = {"model": model_name, "messages": [{"role": "user", "content": PROMPT}],
                  "max_tokens": 15, "temperature": 0}
    whole = openai_client.chat.completions.create(**kwargs)
    chunks = list(openai_client.chat.completions.create(**kwargs, stream=True))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert text == whole.choices[0].message.content
    assert chunks[-1].choices[0].finish_reason == whole.choices[0].finish_reason


def test_stop_string_cuts_the_text(openai_client, model_name):
    kwargs = {"model": model_name, "prompt": PROMPT, "max_tokens": 24, "temperature": 0,
                  "extra_body": {"ignore_eos": True}}
    full = openai_client.completions.create(**kwargs).choices[0].text
    stop = _plain_slice(full)
    cut = openai_client.completions.create(**kwargs, stop=[stop]).choices[0]
    assert cut.text == full[:full.find(stop)] and cut.finish_reason == "stop"
    streamed = openai_client.completions.create(**kwargs, stop=stop, stream=True)
    assert "".join(c.choices[0].text for c in streamed) == cut.text


def test_seed_makes_sampling_reproducible(openai_client, model_name):
    kwargs = {"model": model_name, "prompt": PROMPT, "max_tokens": 16, "temperature": 0.9,
              "top_p": 0.95}
    first = openai_client.completions.create(**kwargs, seed=7).choices[0].text
    assert openai_client.completions.create(**kwargs, seed=7).choices[0].text == first


def _plain_slice(text: str, length: int = 3) -> str:
    """A slice of ``text`` from its second half made of plain ASCII letters/digits/spaces."""
    for start in range(len(text) // 2, len(text) - length):
        piece = text[start:start + length]
        if all(c.isascii() and (c.isalnum() or c == " ") for c in piece):
            return piece
    raise AssertionError(f"no plain slice in {text!r}")


@pytest.mark.parametrize("kwargs, error, param", [
    ({"max_tokens": 0}, openai.BadRequestError, "max_tokens"),
    ({"max_tokens": 10**6}, openai.BadRequestError, "max_tokens"),
    ({"temperature": -0.5}, openai.BadRequestError, "temperature"),
    ({"n": 2}, openai.BadRequestError, "n"),
    ({"top_p": 0}, openai.BadRequestError, "top_p"),
    ({"model": "gpt-4o"}, openai.NotFoundError, "model"),
])
def test_bad_requests_raise_client_errors(openai_client, model_name, kwargs, error, param):
    with pytest.raises(error) as info:
        openai_client.completions.create(**{"model": model_name, "prompt": PROMPT, **kwargs})
    assert info.value.body["param"] == param and info.value.body["message"]
    if error is openai.NotFoundError:
        assert info.value.code == "model_not_found"


def test_chat_without_messages_is_400(openai_client, model_name):
    with pytest.raises(openai.BadRequestError, match="messages"):
        openai_client.chat.completions.create(model=model_name, messages=[])
