"""Chat templates and stop-string / UTF-8-safe text deltas (in process, no server)."""

import json

import pytest

from specpilot.engines.server.chat import ChatTemplate
from specpilot.engines.server.chat import ChatTemplateError
from specpilot.engines.server.streaming import TextTracker

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]


def test_default_chatml():
    text = ChatTemplate.for_checkpoint(None).render(MESSAGES)
    assert text == ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                    "<|im_start|>assistant\n")


def test_checkpoint_template(tmp_path):
    template = ("{{ bos_token }}{% for m in messages %}"
                "{% if m['role'] == 'system' %}{{ raise_exception('no system role') }}{% endif %}"
                "[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"
                "{% if add_generation_prompt %}[assistant] {% endif %}")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(
        {"chat_template": template, "bos_token": {"content": "<s>"}, "eos_token": "</s>"}))
    chat = ChatTemplate.for_checkpoint(tmp_path)
    assert chat.render(MESSAGES[1:]) == "<s>[user] Hi\n[assistant] "
    with pytest.raises(ChatTemplateError, match="no system role"):
        chat.render(MESSAGES)


def test_checkpoint_without_template_uses_chatml(tmp_path):
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<s>"}))
    assert ChatTemplate.for_checkpoint(tmp_path).origin == "default ChatML"


def _deltas(tracker: TextTracker, ids: list[int]) -> list[str]:
    out = [tracker.update(ids[:n]) for n in range(1, len(ids) + 1)]
    return out + [tracker.flush(ids)]


def test_deltas_add_up_to_the_text(tiny_tokenizer):
    ids = tiny_tokenizer.encode("Natalia sold clips to 48 of her friends in April.").ids
    tracker = TextTracker(tiny_tokenizer)
    assert "".join(_deltas(tracker, ids)) == tiny_tokenizer.decode(ids) == tracker.text


def test_incomplete_utf8_is_held_back(tiny_tokenizer):
    ids = tiny_tokenizer.encode("a 🙂 日本").ids  # multi-byte characters span several tokens
    assert any("\ufffd" in tiny_tokenizer.decode(ids[:n]) for n in range(len(ids)))
    tracker = TextTracker(tiny_tokenizer)
    deltas = _deltas(tracker, ids)
    assert all("\ufffd" not in d for d in deltas)
    assert "".join(deltas) == "a 🙂 日本"


def test_stop_string_across_tokens(tiny_tokenizer):
    ids = tiny_tokenizer.encode("She had 12 apples and 7 pears").ids
    tracker = TextTracker(tiny_tokenizer, ["es and", "zzz"])
    deltas = _deltas(tracker, ids)
    assert tracker.matched == "es and"
    assert "".join(deltas) == tracker.text == "She had 12 appl"
