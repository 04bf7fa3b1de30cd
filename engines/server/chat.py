"""Chat template: messages -> prompt text.

The checkpoint's ``tokenizer_config.json`` ``chat_template`` (a Jinja template, as Hugging Face
renders it: sandboxed, with ``messages``, ``add_generation_prompt``, ``bos_token``, ``eos_token``
and ``raise_exception``) when present; otherwise the default ChatML template::

    <|im_start|>{role}\\n{content}<|im_end|>\\n   (one per message)
    <|im_start|>assistant\\n                      (the generation prompt)
"""

import json
from pathlib import Path

DEFAULT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


class ChatTemplateError(ValueError):
    """The messages cannot be rendered (the template raised or failed): the request's fault."""


def _special(config: dict, name: str) -> str:
    value = config.get(name)
    if isinstance(value, dict):  # AddedToken serialised as {"content": ...}
        value = value.get("content")
    return value if isinstance(value, str) else ""


class ChatTemplate:
    """Renders chat messages to the prompt text the model was trained on."""

    def __init__(self, source: str = DEFAULT_TEMPLATE, bos_token: str = "", eos_token: str = "",
                 origin: str = "default ChatML"):
        from jinja2 import TemplateError
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                            extensions=["jinja2.ext.loopcontrols"])
        env.globals["raise_exception"] = self._raise
        env.filters["tojson"] = lambda value, indent=None: json.dumps(value, indent=indent)
        self._template = env.from_string(source)
        self._template_error = TemplateError
        self.source, self.origin = source, origin
        self.bos_token, self.eos_token = bos_token, eos_token

    @staticmethod
    def _raise(message: str):
        raise ChatTemplateError(message)

    @classmethod
    def for_checkpoint(cls, directory: Path | None) -> "ChatTemplate":
        """The template of ``directory/tokenizer_config.json``, else the default ChatML one."""
        path = directory / "tokenizer_config.json" if directory is not None else None
        if path is None or not path.is_file():
            return cls()
        config = json.loads(path.read_text())
        source = config.get("chat_template")
        if isinstance(source, list):  # named templates: [{"name": "default", "template": ...}]
            named = {t.get("name"): t.get("template") for t in source if isinstance(t, dict)}
            source = named.get("default")
        if not isinstance(source, str) or not source:
            return cls()
        return cls(source, _special(config, "bos_token"), _special(config, "eos_token"),
                   origin=str(path))

    def render(self, messages: list[dict]) -> str:
        """Prompt text for ``messages`` (dicts with ``role`` and string ``content``), ending with
        the generation prompt; raises :class:`ChatTemplateError` if the template rejects them."""
        try:
            return self._template.render(messages=messages, add_generation_prompt=True,
                                         bos_token=self.bos_token, eos_token=self.eos_token)
        except ChatTemplateError:
            raise
        except (self._template_error, TypeError, ValueError, KeyError, IndexError) as err:
            raise ChatTemplateError(f"chat template ({self.origin}) failed: {err}") from err
