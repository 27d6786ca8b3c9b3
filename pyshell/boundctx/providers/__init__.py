"""Chat models behind one interface: local (llama-cpp-python), remote (OpenAI-compatible
HTTP) and scripted (tests). :data:`PROVIDERS` names the ones settings choose between
(``chat.provider``), and :func:`from_settings` builds the chosen one.

The names below are imported when first used: the command line reads the registry to
describe ``--provider``, and the contract's modules bring in the tokenizers (numpy).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from boundctx.providers.registry import PROVIDERS, ProviderKind, from_settings

if TYPE_CHECKING:
    from boundctx.providers.base import ChatRequest, Finish, Provider, Reply, TextChunk, ToolCallChunk
    from boundctx.providers.scripted import ScriptedProvider, ScriptedReply

#: name -> the module it lives in (LlamaCppProvider lives in boundctx.providers.local:
#: importing it needs llama-cpp-python).
_LAZY = {
    "ChatRequest": "boundctx.providers.base",
    "Finish": "boundctx.providers.base",
    "Provider": "boundctx.providers.base",
    "Reply": "boundctx.providers.base",
    "TextChunk": "boundctx.providers.base",
    "ToolCallChunk": "boundctx.providers.base",
    "ScriptedProvider": "boundctx.providers.scripted",
    "ScriptedReply": "boundctx.providers.scripted",
}

__all__ = ["PROVIDERS", "ChatRequest", "Finish", "Provider", "ProviderKind", "Reply", "ScriptedProvider",
           "ScriptedReply", "TextChunk", "ToolCallChunk", "from_settings"]


def __getattr__(name: str):
    home = _LAZY.get(name)
    if home is None:
        raise AttributeError(f"module 'boundctx.providers' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
