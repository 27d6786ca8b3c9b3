"""Token counters: one interface, exact where the tokenizer is at hand, a conservative
estimate where it is not."""

from boundctx.tokens.base import Message, TokenCounter, message_text
from boundctx.tokens.cache import PromptCountCache
from boundctx.tokens.estimate import ByteEstimateCounter

__all__ = ["ByteEstimateCounter", "Message", "PromptCountCache", "TokenCounter", "message_text"]
