"""Chat models behind one interface: local (llama-cpp-python), remote (OpenAI-compatible
HTTP) and scripted (tests)."""

from boundctx.providers.base import ChatRequest, Finish, Provider, Reply, TextChunk, ToolCallChunk
from boundctx.providers.scripted import ScriptedProvider, ScriptedReply

# LlamaCppProvider lives in boundctx.providers.local: importing it needs llama-cpp-python.
__all__ = ["ChatRequest", "Finish", "Provider", "Reply", "ScriptedProvider", "ScriptedReply", "TextChunk",
           "ToolCallChunk"]
