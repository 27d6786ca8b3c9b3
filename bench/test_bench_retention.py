"""The retention benchmark's scripted model gives the table its construction promises."""

from __future__ import annotations

import bench_retention as br
from boundctx import config
from boundctx.tokens import ByteEstimateCounter


def test_conditions_keep_what_they_should_on_a_small_document():
    counter = ByteEstimateCounter()
    settings = config.load(env={}, overrides={"chat.n_ctx": br.WINDOW, "analysis.worker_n_ctx": br.WINDOW,
                                              "analysis.notes_max_tokens": br.NOTES_TOKENS})
    doc, questions = br.make_document(11, br.WINDOW * 3)  # 3x the window in bytes, so > the window in tokens
    assert counter.count_text(doc) > br.WINDOW
    late = [q for q in questions if q["bucket"] == "late"]
    corrected = next(q for q in questions if q["bucket"] == "corrected")
    for q in late + [corrected]:
        assert br.ask("O", doc, q, counter, settings)[0] == q["answer"]
        assert br.ask("Z", doc, q, counter, settings)[0] == "unknown"
        answer, info = br.ask("C", doc, q, counter, settings)
        assert answer == q["answer"] and info["ok"] and info["max_active"] == 1
        assert br.ask("A", doc, q, counter, settings)[0] != q["answer"]  # clipped away (or stale)
    assert br.ask("A", doc, corrected, counter, settings)[0] in (corrected["stale"], "unknown")
