"""tiktoken and Hugging Face tokenizers behind the TokenCounter interface."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from boundctx._native import tokenmap

from tests._support.strategies import hard_texts


def assert_tiles(counter, text):
    pieces = counter.piece_bytes(text)
    assert pieces.dtype == np.int64 and (pieces >= 0).all()
    assert int(pieces.sum()) == len(text.encode("utf-8", "surrogatepass"))
    assert len(pieces) == counter.count_text(text)
    s, e = np.empty(len(pieces), np.int64), np.empty(len(pieces), np.int64)
    tokenmap.token_spans(text, pieces, s, e)


@given(hard_texts(surrogates=True))
def test_tiktoken_pieces_tile_any_text(cl100k, text):
    assert_tiles(cl100k, text)


def test_tiktoken_counts_special_text_as_text(cl100k):
    enc = cl100k.encoding
    text = "end <|endoftext|> here"
    assert cl100k.count_text(text) == len(enc.encode(text, disallowed_special=()))
    assert enc.eot_token not in cl100k.tokenize(text)


def test_tiktoken_prompt_count_follows_the_published_recipe(cl100k):
    messages = [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "hi there"}]
    content = sum(cl100k.count_text(m["role"]) + cl100k.count_text(m["content"]) for m in messages)
    assert cl100k.count_prompt(messages) == content + 3 * len(messages) + 3
    assert cl100k.exact is False  # the server's framing is not ours to see


def test_an_encoding_that_cannot_load_says_how_to_get_it():
    pytest.importorskip("tiktoken")
    from boundctx.tokens.adapters import TiktokenCounter
    with pytest.raises((ValueError, KeyError)) as info:
        TiktokenCounter("no_such_encoding")
    assert "no_such_encoding" in str(info.value)


@pytest.fixture(scope="module")
def hf_counter():
    tokenizers = pytest.importorskip("tokenizers", reason="tokenizers is not installed")
    from tokenizers import decoders, models, pre_tokenizers, trainers

    from boundctx.tokens.adapters import HFTokenizerCounter
    # A real byte-level BPE, trained here on a little text (no download needed).
    tok = tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(["hello world, the quick brown fox " * 20, "\u4E2D\u6587 \u30C6\u30AD\u30B9\u30C8 " * 10],
                            trainer=trainer)
    return HFTokenizerCounter(tok)


@given(hard_texts(surrogates=True))
def test_hf_pieces_tile_any_text(hf_counter, text):
    assert_tiles(hf_counter, text)


def test_hf_counter_loads_a_tokenizer_json(hf_counter, tmp_path):
    from boundctx.tokens.adapters import HFTokenizerCounter
    path = tmp_path / "tokenizer.json"
    hf_counter.tokenizer.save(str(path))
    again = HFTokenizerCounter(str(path))
    assert again.count_text("hello world") == hf_counter.count_text("hello world")


@given(hard_texts(surrogates=True), st.data())
def test_cl100k_counts_add_up_across_newline_sync_points(cl100k, text, data):
    # The claim behind TokenCounter.newline_sync, checked against full counts.
    assert cl100k.newline_sync
    syncs = [i for i in range(1, len(text)) if text[i - 1] == "\n" and not text[i].isspace()]
    if not syncs:
        return
    i = data.draw(st.sampled_from(syncs))
    a = data.draw(st.integers(0, i))
    b = data.draw(st.integers(i, len(text)))
    assert cl100k.count_text(text[a:b]) == cl100k.count_text(text[a:i]) + cl100k.count_text(text[i:b])


def test_only_the_analysed_pattern_claims_newline_sync(cl100k):
    import tiktoken

    from boundctx.tokens.adapters import TiktokenCounter
    # The same vocabulary behind another pre-tokenizer (GPT-2's) makes no such claim.
    other = tiktoken.Encoding("other",
                              pat_str=r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""",
                              mergeable_ranks=cl100k.encoding._mergeable_ranks, special_tokens={})
    assert not TiktokenCounter(other).newline_sync


def test_surrogate_pairs_stay_two_code_points(cl100k):
    text = "a\ud83d\ude00b"  # two lone surrogates that UTF-16 would join into one emoji
    assert int(cl100k.piece_bytes(text).sum()) == len(text.encode("utf-8", "surrogatepass"))
