"""The table of transcript formats: one object each, ``auto`` their union with no type
value claimed twice, each line read and shown by the format its type belongs to."""

import pytest

from boundctx.transcript import dialects
from boundctx.transcript.dialects.base import Dialect
from boundctx.transcript.store import Transcript


def test_no_two_formats_claim_a_type_value_so_auto_is_their_exact_union():
    claimed = [value for d in dialects.FORMATS for value in d.kinds]
    assert len(claimed) == len(set(claimed))
    assert dict(dialects.dialect_kinds("auto")) == {v: k for d in dialects.FORMATS for v, k in d.kinds.items()}
    assert set(dialects.NAMES) == {"auto", *dialects.DIALECTS}
    for d in dialects.FORMATS:
        assert dialects.DIALECTS[d.name] is d


def test_a_format_claiming_another_formats_type_is_refused():
    class Clash(Dialect):
        name = "clash"
        kinds = {"response_item": dialects.MESSAGE}

    with pytest.raises(RuntimeError, match="codex and clash both claim lines of type 'response_item'"):
        dialects._union((*dialects.FORMATS, Clash()))


def test_an_unknown_name_lists_every_known_one():
    with pytest.raises(ValueError) as caught:
        dialects.dialect_kinds("nope")
    for name in dialects.NAMES:
        assert name in str(caught.value)


LINES = {
    "boundctx": b'{"type":"message","id":"a","message":{"role":"user","content":[{"type":"text","text":"hi"}]}}\n',
    "claude-code": b'{"type":"assistant","message":{"role":"assistant","content":[{"type":"text","text":"yo"},'
                   b'{"type":"tool_use","id":"t1","name":"ls","input":{}}]}}\n',
    "codex": b'{"type":"response_item","payload":{"type":"message","role":"user",'
             b'"content":[{"type":"input_text","text":"why"}]}}\n',
}
SHOWN = {"boundctx": ("user", "hi"), "claude-code": ("assistant", "yo\nls: {}"),  # a call as its tool and arguments
         "codex": ("user", "why")}


@pytest.mark.parametrize("name", sorted(LINES))
def test_each_line_is_read_and_shown_by_its_own_format_in_its_dialect_and_in_auto(tmp_path, name):
    path = tmp_path / f"{name}.jsonl"
    path.write_bytes(LINES[name] + b"not json\n")
    for dialect in (name, "auto"):
        with Transcript.open(str(path), dialect=dialect) as t:
            entries = t.window().messages
        assert dialects.dialect_of(entries[0].record) is dialects.DIALECTS[name]
        assert dialects.display(entries[0]) == SHOWN[name]
    assert dialects.display(entries[1])[0] == "corrupt"


def test_only_boundctx_lines_are_written_into():
    assert [d.name for d in dialects.FORMATS if d.writable] == ["boundctx"]
