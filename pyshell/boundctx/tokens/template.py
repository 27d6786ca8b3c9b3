"""A model's own chat template, rendered the way llama-cpp-python renders it.

llama-cpp-python turns a GGUF's ``tokenizer.chat_template`` into a Jinja2 formatter: a
sandboxed environment with ``trim_blocks``, ``lstrip_blocks`` and loop controls, an
HF-compatible ``tojson`` (non-ASCII kept, key order kept), ``strftime_now``,
``raise_exception``, the vocabulary's BOS/EOS texts, and ``add_generation_prompt``. The
rendered prompt is then tokenized *with special tokens parsed* and without an extra BOS
(the template adds its own). Rendering the same way here is what makes local counts exact.

Parsing special tokens across the whole prompt has a trap: a user or tool message that
contains the text ``<|im_end|>`` would become a real control token. :meth:`ChatTemplate.
render_marked` therefore reports where each special-token string that came from message
or tool *data* (not from the template) lies, so the tokenizer can keep it as text.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from boundctx.errors import PromptTemplateError

__all__ = ["ChatTemplate"]


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    # What Hugging Face templates expect from `tojson` (and what llama-cpp-python
    # gives them): non-ASCII kept, key order kept, no HTML escaping.
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent,
                      separators=separators, sort_keys=sort_keys)


def _raise_exception(message: str) -> None:
    raise PromptTemplateError(f"the model's chat template refused the messages: {message}")


def _environment():
    try:
        import jinja2
        import jinja2.ext
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError as exc:  # pragma: no cover - jinja2 comes with llama-cpp-python
        raise ImportError("rendering a model's chat template needs jinja2: pip install jinja2") from exc

    class _GenerationTag(jinja2.ext.Extension):
        # HF templates may wrap assistant turns in {% generation %} (for training
        # masks); it renders its body unchanged.
        tags = {"generation"}

        def parse(self, parser):
            parser.stream.skip(1)
            return parser.parse_statements(("name:endgeneration",), drop_needle=True)

    env = ImmutableSandboxedEnvironment(loader=jinja2.BaseLoader(), trim_blocks=True,
                                        lstrip_blocks=True,
                                        extensions=[_GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    return env


class ChatTemplate:
    """A compiled Jinja chat template.

    Parameters
    ----------
    source : str
        The template text (``tokenizer.chat_template`` of a GGUF).
    bos_token, eos_token : str
        The vocabulary's BOS and EOS texts, as the template sees them.
    special_tokens : Iterable[str]
        Texts of the tokens the tokenizer parses as special; used to find those that
        come from message data in :meth:`render_marked`.
    """

    def __init__(self, source: str, *, bos_token: str = "", eos_token: str = "",
                 special_tokens: Iterable[str] = ()) -> None:
        self.source = source
        self.bos_token = bos_token
        self.eos_token = eos_token
        self.special_tokens = tuple(sorted({s for s in special_tokens if s}, key=len, reverse=True))
        # The characters special tokens are built from besides letters, digits and "_"
        # (``<``, ``|``, ``>``, ``[`` ...), one private stand-in for each, and the special
        # tokens that hold none of them: worked out once per template, not per prompt.
        self._delimiters = frozenset(c for t in self.special_tokens for c in t
                                     if not (c.isalnum() or c == "_" or c.isspace()))
        self._stand_ins = {c: chr(0xF0000 + i) for i, c in enumerate(sorted(self._delimiters))}
        self._plain_specials = [t for t in self.special_tokens if self._delimiters.isdisjoint(t)]
        try:
            import jinja2
            self._template = _environment().from_string(source)
        except jinja2.TemplateError as exc:
            raise PromptTemplateError(f"the chat template does not compile: {exc}") from exc

    def render(self, messages: Sequence[Mapping[str, Any]], *,
               tools: Sequence[Mapping[str, Any]] | None = None,
               add_generation_prompt: bool = True, now: datetime | None = None) -> str:
        """The prompt text for ``messages`` (and ``tools``), as llama-cpp-python renders it.

        Raises
        ------
        PromptTemplateError
            The template raised (for example on roles that do not alternate) or failed.
        """
        import jinja2
        clock = now if now is not None else datetime.now()
        try:
            return self._template.render(
                messages=[dict(m) for m in messages], tools=list(tools) if tools is not None else None,
                add_generation_prompt=add_generation_prompt, bos_token=self.bos_token,
                eos_token=self.eos_token, raise_exception=_raise_exception,
                strftime_now=lambda fmt: clock.strftime(fmt),
                functions=None, function_call=None, tool_choice=None)
        except PromptTemplateError:
            raise
        except (jinja2.TemplateError, TypeError, ValueError, KeyError, AttributeError) as exc:
            raise PromptTemplateError(
                f"the model's chat template failed on these messages ({type(exc).__name__}: {exc}); "
                "check each message has the fields the template reads (role, content as text)") from exc

    def render_marked(self, messages: Sequence[Mapping[str, Any]], *,
                      tools: Sequence[Mapping[str, Any]] | None = None,
                      add_generation_prompt: bool = True) -> tuple[str, list[tuple[int, int]]]:
        """The prompt, and ``[start, end)`` character ranges that came from message or
        tool data where a special-token text could form (the tokenizer must keep any
        special-token match touching them as text).

        Special-token texts are made of delimiters (``<``, ``|``, ``>``, ``[`` ...) and
        letters. The template is rendered a second time with every delimiter character
        in the data (values and keys, so a special split across two strings or hidden in
        a key is caught too) replaced by a private stand-in of the same length; the
        positions where the two renders differ are the data's delimiters. Identifiers
        the template compares (roles, key names) hold no delimiters and are untouched.
        A special token with no delimiter at all is found whole inside data strings.

        Raises
        ------
        PromptTemplateError
            Data holds special-token characters and the template treats data in a way
            neither method can follow (its output changes shape with them).
        """
        now = datetime.now()  # one clock for every render of this prompt
        plain = self.render(messages, tools=tools, add_generation_prompt=add_generation_prompt, now=now)
        ranges: list[tuple[int, int]] = []
        if self._delimiters and _any_char_in(self._delimiters, messages, tools):
            swap = self._stand_ins
            neutral_messages = [_swap_chars(m, swap) for m in messages]
            neutral_tools = _swap_chars(list(tools), swap) if tools is not None else None
            neutral = self.render(neutral_messages, tools=neutral_tools,
                                  add_generation_prompt=add_generation_prompt, now=now)
            back = {v: k for k, v in swap.items()}
            differ = [i for i, (a, b) in enumerate(zip(plain, neutral)) if a != b]
            if len(neutral) != len(plain) or any(back.get(neutral[i]) != plain[i] for i in differ):
                raise PromptTemplateError(
                    "a message contains characters of special tokens (such as "
                    f"{self.special_tokens[0]!r}) and this chat template changes its output with them, "
                    "so they cannot be kept as plain text safely; remove them from the message")
            for i in differ:
                if ranges and ranges[-1][1] == i:
                    ranges[-1] = (ranges[-1][0], i + 1)
                else:
                    ranges.append((i, i + 1))
        whole = [t for t in self._plain_specials if _appears_in(t, messages, tools)]
        if whole:
            ranges = sorted(ranges + self._whole_occurrences(plain, whole, messages, tools,
                                                             add_generation_prompt, now))
        return plain, ranges

    def _whole_occurrences(self, plain: str, specials: list[str], messages, tools, add_generation_prompt: bool,
                           now: datetime) -> list[tuple[int, int]]:
        """Ranges of whole special-token texts inside data strings, found by wrapping each
        in unique markers and rendering once more."""
        nonce = secrets.token_hex(8)
        opener, closer = f"\ue000{nonce}\ue001", f"\ue002{nonce}\ue003"

        def wrap(value: Any) -> Any:
            if isinstance(value, str):
                if any(s in value for s in specials):
                    return _wrap_occurrences(value, specials, opener, closer)
                return value
            if isinstance(value, Mapping):
                return {k: wrap(v) for k, v in value.items()}
            if isinstance(value, (list, tuple)):
                return [wrap(v) for v in value]
            return value

        marked = self.render([wrap(m) for m in messages], tools=wrap(list(tools)) if tools is not None else None,
                             add_generation_prompt=add_generation_prompt, now=now)
        ranges: list[tuple[int, int]] = []
        out: list[str] = []
        pos = length = 0
        while True:
            i = marked.find(opener, pos)
            if i < 0:
                out.append(marked[pos:])
                break
            j = marked.find(closer, i)
            if j < 0:
                break
            out.append(marked[pos:i])
            length += i - pos
            inner = marked[i + len(opener):j]
            ranges.append((length, length + len(inner)))
            out.append(inner)
            length += len(inner)
            pos = j + len(closer)
        if "".join(out) != plain:
            raise PromptTemplateError(
                f"a message contains special-token text (such as {specials[0]!r}) and this chat template "
                "transforms message text, so it cannot be kept as plain text safely; remove that text")
        return ranges


def _any_char_in(chars: frozenset[str], messages, tools) -> bool:
    stack: list[Any] = [list(messages), list(tools or ())]
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            if not chars.isdisjoint(value):
                return True
        elif isinstance(value, Mapping):
            stack.extend(value.keys())
            stack.extend(value.values())
        elif isinstance(value, (list, tuple)):
            stack.extend(value)
    return False


def _swap_chars(value: Any, swap: dict[str, str]) -> Any:
    """``value`` with every character in ``swap`` replaced in its strings and keys."""
    if isinstance(value, str):
        if frozenset(swap).isdisjoint(value):
            return value
        table: dict[str, str | int | None] = dict(swap)
        return value.translate(str.maketrans(table))
    if isinstance(value, Mapping):
        return {_swap_chars(k, swap): _swap_chars(v, swap) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_swap_chars(v, swap) for v in value]
    return value


def _appears_in(special: str, messages: Sequence[Mapping[str, Any]],
                tools: Sequence[Mapping[str, Any]] | None) -> bool:
    stack: list[Any] = [list(messages), list(tools or ())]
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            if special in value:
                return True
        elif isinstance(value, Mapping):
            stack.extend(value.values())
        elif isinstance(value, (list, tuple)):
            stack.extend(value)
    return False


def _wrap_occurrences(text: str, specials: Sequence[str], opener: str, closer: str) -> str:
    """``text`` with every occurrence of a special-token string wrapped in markers,
    scanning left to right and preferring the longest special at each position."""
    out: list[str] = []
    i = 0
    n = len(text)
    while i < n:
        for s in specials:
            if text.startswith(s, i):
                out.append(opener + s + closer)
                i += len(s)
                break
        else:
            j = min((k for k in (text.find(s, i + 1) for s in specials) if k >= 0), default=n)
            out.append(text[i:j])
            i = j
    return "".join(out)
