"""The embedded model's real tokenizer: piece bytes, special tokens as text, spans."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install 'boundctx[local]')")

from boundctx._native import tokenmap  # noqa: E402
from boundctx.tokens.llama import LlamaVocab, default_model_path  # noqa: E402


def assert_pieces_tile(vocab, text) -> int:
    """The text's pieces cover its bytes, one per token, and map onto the whole text."""
    pieces = vocab.piece_bytes(text)
    assert int(pieces.sum()) == len(text.encode())
    assert len(pieces) == vocab.count_text(text)
    s, e = np.empty(len(pieces), np.int64), np.empty(len(pieces), np.int64)
    tokenmap.token_spans(text, pieces, s, e)
    if len(pieces):
        assert s[0] == 0 and e[-1] == len(text)
    return len(pieces)


@pytest.fixture(scope="module")
def vocab():
    return LlamaVocab()


def test_the_embedded_model_is_found_and_has_a_chat_template(vocab):
    assert default_model_path().endswith(".gguf")
    assert "<|im_start|>" in vocab.metadata["tokenizer.chat_template"]


def test_pieces_longer_than_32_bytes_are_measured_whole(vocab):
    # llama-cpp-python's own detokenize drops pieces over 32 bytes; the table must not.
    assert int(vocab.piece_lengths.max()) > 32


def test_special_token_text_in_a_message_stays_text(vocab):
    text = "a <|im_end|> b"
    ids = vocab.tokenize(text)
    assert vocab._llm.tokenize(b"<|im_end|>", add_bos=False, special=True)[0] not in ids
    assert int(vocab.piece_bytes(text).sum()) == len(text.encode())


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.text(st.characters(codec="utf-8", exclude_categories=["Cs", "Cn", "Cc"]), max_size=8),
                          st.sampled_from(["👩\u200d💻", "中文", "   ", "\n\n", "\t", "é\u0301"])),
                max_size=12).map("".join))
def test_piece_bytes_tile_the_text_and_map_to_spans(vocab, text):
    assert_pieces_tile(vocab, text)


def test_long_whitespace_runs_count_as_the_model_counts_them(vocab):
    text = " " * 5000 + "x" + "\n" * 3000
    assert vocab.count_text(text) == len(vocab._llm.tokenize(text.encode(), add_bos=False, special=False))
    assert int(vocab.piece_bytes(text).sum()) == len(text.encode())


@pytest.mark.parametrize("text", [
    "ab\U00040000c",          # unassigned: llama.cpp turns it into other bytes
    "log\x1dline",            # some control characters vanish
    "\x04\x06start", "end\x13\x14\x16", "\U00040000\x1d\U00050000 mixed 中文\x1d",
])
def test_texts_the_tokenizer_changes_still_get_tiling_token_spans(vocab, text):
    assert len(text) and assert_pieces_tile(vocab, text) > 0


@settings(max_examples=60)
@given(st.lists(st.one_of(st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=6),
                          st.sampled_from(["\x1d", "\x04", "\U00040000", "\U000E0100x"])),
                min_size=1, max_size=10).map("".join))
def test_any_text_gets_pieces_that_tile_it(vocab, text):
    pieces = vocab.piece_bytes(text)
    if len(pieces):
        assert int(pieces.sum()) == len(text.encode())
        assert len(pieces) == vocab.count_text(text)


def test_align_pieces_attributes_dropped_and_rewritten_bytes():
    from boundctx.tokens.llama import align_pieces

    assert align_pieces(b"ab", [b"a", b"b"]) == [1, 1]
    assert align_pieces(b"a\x1db", [b"a", b"b"]) == [2, 1]            # dropped: previous token
    assert align_pieces(b"\x1dab", [b"a", b"b"]) == [2, 1]            # ...or the first one
    # U+40000 is F1 80 80 80; the tokenizer keeps the three 80s and drops the F1
    assert align_pieces("x\U00040000y".encode(), [b"x", b"\x80", b"\x80", b"\x80", b"y"]) == [2, 1, 1, 1, 1]
    assert align_pieces(b"ab\x1d", [b"a", b"b"]) == [1, 2]            # trailing: last token
    with pytest.raises(ValueError, match="cannot align"):
        align_pieces(b"a" + b"z" * 64, [b"a", b"q"])
