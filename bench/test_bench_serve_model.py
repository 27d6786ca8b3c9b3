"""The pure parts of ``bench_serve_model.py``: token counts, rates, medians, the ratio
and the table, on made-up samples (no server, no model).

Not part of the default suite (``testpaths = ["tests"]``); run by name::

    python -m pytest bench/test_bench_serve_model.py -q
"""

from __future__ import annotations

import pytest

from bench import bench_serve_model as bm


def sample(first, total, chunks, usage=None, reason="length", text="x"):
    return {"first_content_s": first, "total_s": total, "content_chunks": chunks,
            "usage_completion_tokens": usage, "finish_reason": reason, "text": text}


def test_the_usage_chunk_wins_over_counted_chunks():
    assert bm.completion_tokens(sample(0.1, 1.0, 198, usage=200)) == (200, "usage")
    assert bm.completion_tokens(sample(0.1, 1.0, 198)) == (198, "content_chunks")


def test_rates_divide_tokens_by_the_decode_time_and_by_the_whole_request():
    r = bm.rates(sample(0.5, 2.5, 100, usage=100))
    assert r["tokens"] == 100 and r["token_source"] == "usage"
    assert r["decode_tok_s"] == pytest.approx(50.0)
    assert r["end_to_end_tok_s"] == pytest.approx(40.0)


def test_a_reply_without_content_has_no_decode_rate():
    r = bm.rates(sample(None, 0.2, 0, usage=0))
    assert r["decode_tok_s"] is None and r["end_to_end_tok_s"] == 0


def test_summary_takes_medians_and_keeps_every_token_count():
    rows = [bm.rates(sample(0.1, t, n, usage=n)) for t, n in ((1.1, 100), (2.1, 200), (3.1, 200))]
    s = bm.summarise(rows)
    assert s["reps"] == 3 and s["total_s"] == pytest.approx(2.1) and s["tokens"] == 200
    assert s["token_counts"] == [100, 200] and s["token_sources"] == ["usage"]
    assert s["finish_reasons"] == ["length"]


def test_compare_gives_boundctx_over_llama_cpp_and_says_when_replies_differ():
    fast = bm.summarise([bm.rates(sample(0.1, 2.1, 200, usage=200))])   # 100 decode, ~95 e2e tok/s
    slow = bm.summarise([bm.rates(sample(0.1, 4.1, 200))])              # 50 decode
    c = bm.compare({"boundctx": slow, "llama_cpp": fast}, {"boundctx": "abcd", "llama_cpp": "abXY"})
    assert c["decode_ratio"] == pytest.approx(0.5)
    assert c["same_token_counts"] and not c["same_text"] and c["common_prefix_chars"] == 2
    assert not bm.meets(c["decode_ratio"]) and bm.meets(1.0) and not bm.meets(None)


def test_the_table_has_a_row_per_server_and_the_ratio_row():
    s = bm.summarise([bm.rates(sample(0.02, 2.0, 200, usage=200))])
    llama = bm.summarise([bm.rates(sample(0.02, 2.0, 200))])
    text = bm.table({"boundctx": s, "llama_cpp": llama}, bm.compare({"boundctx": s, "llama_cpp": llama}, {}))
    lines = text.splitlines()
    assert len(lines) == 5 and "(chunks)" in lines[3] and "**1.000**" in lines[4]


def test_both_servers_get_the_same_model_window_and_loopback_address():
    b = bm.boundctx_command("/m.gguf", 2048, 1234, "/tmp/s")
    ll = bm.llama_cpp_command("/m.gguf", 2048, 4321)
    assert b[b.index("--model") + 1] == ll[ll.index("--model") + 1] == "/m.gguf"
    assert b[b.index("--n-ctx") + 1] == ll[ll.index("--n_ctx") + 1] == "2048"
    assert b[b.index("--host") + 1] == ll[ll.index("--host") + 1] == "127.0.0.1"
    assert 0 < bm.free_port() < 65536
