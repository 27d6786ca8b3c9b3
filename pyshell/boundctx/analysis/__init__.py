"""Section analysis: inputs too large for the context are read completely, in sections,
by sequential note-taking workers, with exact rereads of the originals."""

from boundctx.analysis.engine import Engine
from boundctx.analysis.originals import READ_TOOL_NAME, Originals

__all__ = ["READ_TOOL_NAME", "Engine", "Originals"]
