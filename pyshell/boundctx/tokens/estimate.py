"""A conservative token estimate for remote models whose tokenizer we cannot run.

For byte-level BPE vocabularies (GPT-2 style, Llama 3, Qwen, SmolLM2, ...) every token
covers at least one byte of text, so a text's UTF-8 length is a hard upper bound on its
content tokens. The common ``bytes / 4`` rule under-counts JSON, numbers, ids and CJK by
2.5-4x, exactly what tool results hold, so it is not used. Template tokens (role
markers, BOS, the generation prompt) come on top as a per-message and per-prompt
overhead.

Calibration from what a provider reports (``usage.prompt_tokens``) may lower the ratio
below one token per byte, but only on evidence and never below the highest ratio seen
times a safety margin; an overflow error the estimate failed to predict resets it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec
import numpy as np

from boundctx._native import load
from boundctx.tokens.base import Message, TokenCounter, message_text

_tm = load("tokenmap")

__all__ = ["ByteEstimateCounter"]


class ByteEstimateCounter(TokenCounter):
    """Estimate = ``ceil(ratio * utf8_bytes)`` + template overhead; ``ratio`` starts at 1.

    Parameters
    ----------
    per_message_overhead : int
        Template tokens around each message (role markers, separators).
    per_prompt_overhead : int
        Tokens once per prompt (BOS, the generation prompt).
    margin : float
        Safety factor applied to observed ratios when calibrating (>= 1).
    min_observations : int
        Calibrations needed before the ratio may drop below 1.

    Examples
    --------
    >>> c = ByteEstimateCounter()
    >>> c.count_text("héllo")
    6
    """

    exact = False

    def __init__(self, *, per_message_overhead: int = 8, per_prompt_overhead: int = 16,
                 margin: float = 1.25, min_observations: int = 3) -> None:
        if per_message_overhead < 0 or per_prompt_overhead < 0:
            raise ValueError("overheads must be >= 0")
        if margin < 1:
            raise ValueError(f"margin must be >= 1 (a safety factor), got {margin}")
        if min_observations < 1:
            raise ValueError(f"min_observations must be >= 1, got {min_observations}")
        self.per_message_overhead = per_message_overhead
        self.per_prompt_overhead = per_prompt_overhead
        self.margin = margin
        self.min_observations = min_observations
        self.ratio = 1.0
        self._max_seen = 0.0
        self._observations = 0

    # -- counting -----------------------------------------------------------------

    def count_text(self, text: str) -> int:
        return math.ceil(self.ratio * _tm.utf8_length(text))

    def _content_bytes(self, messages: Sequence[Message],
                       tools: Sequence[Mapping[str, Any]] | None) -> int:
        n = sum(_tm.utf8_length(message_text(m)) for m in messages)
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
        sharing the text's bytes evenly (one byte each until calibration lowers the
        ratio)."""
        total = _tm.utf8_length(text)
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
        """Learn from a provider's ``usage.prompt_tokens`` for a prompt we estimated.

        The ratio only drops below 1 after ``min_observations`` reports, and never
        below ``margin`` times the highest tokens-per-byte ratio seen. A report above
        our estimate raises the ratio at once (to 1 at most: the byte bound).
        """
        if reported_prompt_tokens < 0:
            raise ValueError(f"reported_prompt_tokens must be >= 0, got {reported_prompt_tokens}")
        content = self._content_bytes(messages, tools)
        overhead = self._overhead(messages, add_generation_prompt)
        if reported_prompt_tokens - overhead > content:
            # More tokens than the byte bound allows: the template costs more than we
            # assumed. Grow the prompt overhead by the deficit; the bound holds again.
            self.per_prompt_overhead += reported_prompt_tokens - overhead - content
            overhead = self._overhead(messages, add_generation_prompt)
        if content == 0:
            return
        seen = max(0, reported_prompt_tokens - overhead) / content
        self._max_seen = max(self._max_seen, seen)
        self._observations += 1
        if self._observations >= self.min_observations or seen > self.ratio:
            self.ratio = min(1.0, self._max_seen * self.margin)

    def observe_overflow(self) -> None:
        """The provider rejected a prompt this estimate said would fit: trust only the
        byte bound again, and forget the observations that led here."""
        self.ratio = 1.0
        self._max_seen = 0.0
        self._observations = 0
