"""Lossless JSONL transcripts opened in bounded windows (decision record 1)."""

from boundctx.transcript.entries import Entry, History, RawLine, Window
from boundctx.transcript.lineformat import encode_record
from boundctx.transcript.reindex import ReindexReport, reindex
from boundctx.transcript.store import RENDERER_PRESET, Transcript, iter_transcripts

__all__ = [
    "RENDERER_PRESET",
    "Entry",
    "History",
    "RawLine",
    "ReindexReport",
    "Transcript",
    "Window",
    "encode_record",
    "iter_transcripts",
    "reindex",
]
