"""A conservative token estimate for remote models whose tokenizer we cannot run.

For byte-level BPE vocabularies (GPT-2 style, Llama 3, Qwen, SmolLM2, ...) every token
covers at least one byte of text, so a text's UTF-8 length is a hard upper bound on its
content tokens. The common ``bytes / 4`` rule under-counts JSON, numbers, ids and CJK by
2.5-4x, exactly what tool results hold, so it is not used. Template tokens (role
markers, BOS, the generation prompt) come on top as a per-message and per-prompt
overhead.

Calibration from what a provider reports (``usage.prompt_tokens``) only ever makes the
estimate safer (decision 0016): a report above the estimate grows the template overhead;
a report below it changes nothing. A server that reports 0, or far too few, once brought
the ratio down to nothing, and after that no bound held. An overflow error the estimate
failed to predict resets a ratio lowered by hand to the byte bound.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec
import numpy as np

from boundctx._native import tokenmap
from boundctx.tokens.base import Message, TokenCounter, message_text

__all__ = ["ByteEstimateCounter"]


class ByteEstimateCounter(TokenCounter):
    """Estimate = ``ceil(ratio * utf8_bytes)`` + template overhead; ``ratio`` starts at 1.

    Parameters
    ----------
    per_message_overhead : int
        Template tokens around each message (role markers, separators).
    per_prompt_overhead : int
        Tokens once per prompt (BOS, the generation prompt).

    Attributes
    ----------
    ratio : float
        Tokens per byte of content, 1 (the byte bound) unless set lower by a caller who
        knows the tokenizer; calibration never lowers it.

    Examples
    --------
    >>> c = ByteEstimateCounter()
    >>> c.count_text("héllo")
    6
    """

    exact = False

    def __init__(self, *, per_message_overhead: int = 8, per_prompt_overhead: int = 16) -> None:
        if per_message_overhead < 0 or per_prompt_overhead < 0:
            raise ValueError("overheads must be >= 0")
        self.per_message_overhead = per_message_overhead
        self.per_prompt_overhead = per_prompt_overhead
        self.ratio = 1.0

    # -- counting -----------------------------------------------------------------

    def count_text(self, text: str) -> int:
        return math.ceil(self.ratio * tokenmap.utf8_length(text))

    def _content_bytes(self, messages: Sequence[Message],
                       tools: Sequence[Mapping[str, Any]] | None) -> int:
        n = sum(tokenmap.utf8_length(message_text(m)) for m in messages)
        if tools:
            # Tools are rendered as JSON schemas into the prompt.
            n += len(msgspec.json.encode(list(tools)))
        return n

    def _overhead(self, messages: Sequence[Message], add_generation_prompt: bool) -> int:
        return self.per_message_overhead * len(messages) + (
            self.per_prompt_overhead if add_generation_prompt else self.per_prompt_overhead // 2)

    def count_prompt(self, messages: Sequence[Message], *,
                     tools: Sequence[Mapping[str, Any]] | None = None,
                     add_generation_prompt: bool = True) -> int:
        return (math.ceil(self.ratio * self._content_bytes(messages, tools))
                + self._overhead(messages, add_generation_prompt))

    def piece_bytes(self, text: str) -> np.ndarray:
        """Token boundaries as this estimate sees them: ``count_text(text)`` pieces
        sharing the text's bytes evenly (one byte each unless the ratio was set lower)."""
        total = tokenmap.utf8_length(text)
        n = self.count_text(text)
        if n <= 0:
            return np.empty(0, dtype=np.int64)
        pieces = np.full(n, total // n, dtype=np.int64)
        pieces[: total % n] += 1
        return pieces

    # -- calibration --------------------------------------------------------------

    def observe(self, messages: Sequence[Message], reported_prompt_tokens: int, *,
                tools: Sequence[Mapping[str, Any]] | None = None,
                add_generation_prompt: bool = True) -> None:
        """Learn from a provider's ``usage.prompt_tokens`` for a prompt we estimated:
        a report above the estimate raises it (the ratio towards the byte bound, then
        the per-prompt overhead) so that prompt would be counted at least as reported;
        a report below it is no evidence the next prompt will be as cheap, and changes
        nothing."""
        if reported_prompt_tokens < 0:
            raise ValueError(f"reported_prompt_tokens must be >= 0, got {reported_prompt_tokens}")
        deficit = reported_prompt_tokens - self.count_prompt(messages, tools=tools,
                                                             add_generation_prompt=add_generation_prompt)
        if deficit <= 0:
            return
        self.ratio = 1.0  # the byte bound first
        deficit = reported_prompt_tokens - self.count_prompt(messages, tools=tools,
                                                             add_generation_prompt=add_generation_prompt)
        if deficit > 0:  # more tokens than bytes: the template costs more than assumed
            self.per_prompt_overhead += deficit

    def observe_overflow(self) -> None:
        """The provider rejected a prompt this estimate said would fit: trust only the
        byte bound again."""
        self.ratio = 1.0
