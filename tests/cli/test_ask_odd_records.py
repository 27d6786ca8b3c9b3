"""``boundctx ask --transcript`` on a transcript with a valid JSON line of another shape
(issue 22, item 5): it answers, prints the line's notice, and sends the model every other
message; no traceback."""

import pytest

from boundctx.cli import main
from boundctx.transcript import Transcript

from tests._support import assert_well_formed
from tests._support.servers import delta
from tests.faults.odd_records import ISSUE_EXAMPLES, write


@pytest.mark.parametrize("name", sorted(ISSUE_EXAMPLES))
def test_ask_answers_on_a_transcript_with_an_odd_line_and_prints_its_notice(tmp_path, scripted_server, capsys,
                                                                            name):
    records, notice, texts = ISSUE_EXAMPLES[name]
    path = write(tmp_path / "odd.jsonl", records)
    writable = records[-1]["type"] == "message"  # boundctx's own format is continued; the others only read
    server = scripted_server((200, [delta("ok"), delta(finish="stop")]))
    code = main(["ask", "--provider", "remote", "--base-url", server.url, "--transcript", str(path),
                 *([] if writable else ["--no-save"]), "go on"])
    out, err = capsys.readouterr()
    assert (code, out) == (0, "ok\n"), err
    assert f"boundctx ask: transcript: {notice}" in err and "Traceback" not in err
    sent = server.requests[0]["messages"]
    assert_well_formed(sent)
    assert [m["content"] for m in sent if m["content"]] == [*texts, "go on"]
    if writable:  # and the exchange is written after the odd line
        with Transcript.open(path) as t:
            assert t.message_count == len(records) + 2
