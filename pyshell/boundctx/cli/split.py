"""``boundctx split PATH``: cut a text file into sections that fit a token budget."""

from __future__ import annotations

import os
import sys

import msgspec

from boundctx._files import read_bytes

__all__ = ["add_parser", "counter_for", "split_file"]

TOKENIZERS = "smollm2 (the embedded model, default), estimate, tiktoken:NAME, hf:TOKENIZER.json, gguf:MODEL.gguf"


def add_parser(sub, summary: str) -> None:
    p = sub.add_parser(
        "split", help=summary,
        description="Cut a text file (UTF-8; '-' reads stdin) into contiguous sections of at most "
                    "--max-tokens tokens that overlap by --overlap characters, and list them.")
    p.add_argument("path", metavar="PATH")
    p.add_argument("--tokenizer", default="smollm2", help=f"one of: {TOKENIZERS}")
    p.add_argument("--max-tokens", type=int, default=512, help="tokens per section (default 512)")
    p.add_argument("--overlap", type=int, default=64, help="characters repeated between sections (default 64)")
    p.add_argument("--json", action="store_true", help="print JSON: the sections and their offsets")
    p.set_defaults(run=run)


def counter_for(spec: str):
    """A TokenCounter from a command-line name (see ``TOKENIZERS``)."""
    kind, _, arg = spec.partition(":")
    if kind == "smollm2" and not arg:
        from boundctx.tokens.llama import LlamaCounter
        return LlamaCounter()
    if kind == "gguf" and arg:
        from boundctx.tokens.llama import LlamaCounter
        return LlamaCounter(arg)
    if kind == "estimate" and not arg:
        from boundctx.tokens import ByteEstimateCounter
        return ByteEstimateCounter()
    if kind == "tiktoken":
        from boundctx.tokens import TiktokenCounter
        return TiktokenCounter(arg or "cl100k_base")
    if kind == "hf" and arg:
        from boundctx.tokens import HFTokenizerCounter

        if not os.path.isfile(arg):  # tokenizers' own error is a bare "Exception"
            raise FileNotFoundError(f"no tokenizer file at {arg!r} (hf: takes a tokenizer.json)")
        return HFTokenizerCounter(arg)
    raise ValueError(f"unknown tokenizer {spec!r}; use one of: {TOKENIZERS}")


def split_file(path: str, *, tokenizer: str, max_tokens: int, overlap: int):
    """(text, sections) for a file; bytes that are not UTF-8 are kept (as surrogate
    escapes), never dropped."""
    from boundctx.sections import split

    if path == "-":
        data = sys.stdin.buffer.read()
    else:
        data = read_bytes(path, what="text file")  # never a FIFO or a device
    text = data.decode("utf-8", "surrogateescape")
    return text, split(text, counter=counter_for(tokenizer), max_tokens=max_tokens, overlap=overlap)


def run(args) -> int:
    from boundctx.errors import BoundctxError

    try:
        text, sections = split_file(args.path, tokenizer=args.tokenizer, max_tokens=args.max_tokens,
                                    overlap=args.overlap)
    except (OSError, ValueError, ImportError, BoundctxError) as exc:
        print(f"boundctx split: {exc}", file=sys.stderr)
        return 2
    if args.json:
        sys.stdout.buffer.write(msgspec.json.encode(
            {"path": args.path, "chars": len(text), "max_tokens": args.max_tokens,
             "overlap": args.overlap, "tokenizer": args.tokenizer, "sections": sections}) + b"\n")
        return 0
    for s in sections:
        head = text[s.start:min(s.end, s.start + 40)]
        print(f"{s.index:5d}  {s.start:>9d}-{s.end:<9d} {s.tokens:6d} tok  {s.cut:<10s} {head!r}")
    print(f"{len(sections)} sections over {len(text):,} characters", file=sys.stderr)
    return 0
