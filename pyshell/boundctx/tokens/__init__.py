"""Token counters: one interface, exact where the tokenizer is at hand, a conservative
estimate where it is not."""

from boundctx.tokens.adapters import HFTokenizerCounter, TiktokenCounter
from boundctx.tokens.base import Message, TokenCounter, message_text
from boundctx.tokens.estimate import ByteEstimateCounter
from boundctx.tokens.server import LlamaServerCounter, LlamaServerProps

# LlamaCounter lives in boundctx.tokens.llama: importing it needs llama-cpp-python.
__all__ = ["ByteEstimateCounter", "HFTokenizerCounter", "LlamaServerCounter", "LlamaServerProps",
           "Message", "TiktokenCounter", "TokenCounter", "message_text"]
