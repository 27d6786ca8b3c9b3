"""``boundctx ask --transcript postgresql://...#ID``: a conversation continued in a session
of a PostgreSQL database as in a file — its newest messages sent, the exchange appended
whole, a new session started when there is none — and the database lost before the save
said, with the answer kept on screen (docs/decisions/0048). A real PostgreSQL."""

from __future__ import annotations

import pytest

from boundctx import config
from boundctx.cli import main
from boundctx.cli.ask import ask, read_transcript
from boundctx.providers import ScriptedProvider


def settings():
    return config.load(env={})


def user_texts(request):
    return [m["content"] for m in request.messages if m["role"] == "user"]


def session_texts(url: str, sid: str) -> list[str]:
    from boundctx.stores.postgres import PostgresStore

    with PostgresStore(url) as store, store.open(sid) as session:
        return [e.record["message"]["content"] for e in session.window().messages]


def test_a_conversation_goes_on_in_a_database_session(postgres_db):
    target = postgres_db.url + "#chat-1"
    provider = ScriptedProvider(lambda request: "first answer")
    started = read_transcript(target)
    assert started.new and started.style == "text"
    asked = ask("first question", provider=provider, settings=settings(), transcript=started)
    assert asked.saved and asked.not_saved is None
    assert session_texts(postgres_db.url, "chat-1") == ["first question", "first answer"]
    # The next question is asked after the session's messages, and appended after them.
    again = ScriptedProvider(lambda request: "second answer")
    ask("second question", provider=again, settings=settings(), transcript=read_transcript(target))
    assert user_texts(again.requests[0]) == ["first question", "second question"]
    assert session_texts(postgres_db.url, "chat-1") == ["first question", "first answer", "second question",
                                                        "second answer"]


def test_a_lost_database_before_the_save_is_said_and_the_answer_kept(postgres_db, postgres_server):
    target = postgres_db.url + "#chat-2"
    continuation = read_transcript(target)

    def answer(request):
        postgres_server.stop()  # gone between the question and the save
        return "the answer"

    try:
        asked = ask("a question", provider=ScriptedProvider(answer), settings=settings(), transcript=continuation)
    finally:
        postgres_server.start()
    assert asked.answer == "the answer" and asked.finish_reason == "stop"
    # Said as the session's opening says it: which database, the driver's reason, what to check.
    assert not asked.saved and "cannot connect to the database at" in asked.not_saved
    assert "check that the server runs" in asked.not_saved


def test_a_missing_session_read_only_and_a_bad_id_are_refused_with_what_to_do(postgres_db, capsys):
    assert main(["ask", "--no-save", "--transcript", postgres_db.url + "#nosuch", "--provider", "remote",
                 "--base-url", "http://127.0.0.1:9", "--model", "m", "hello"]) == 2
    err = capsys.readouterr().err
    assert "no transcript at" in err and "--no-save" in err
    assert main(["ask", "--transcript", postgres_db.url + "#not an id", "--provider", "remote",
                 "--base-url", "http://127.0.0.1:9", "--model", "m", "hello"]) == 2
    assert "URL#ID" in capsys.readouterr().err


def test_a_database_url_without_a_session_id_is_refused(postgres_db):
    with pytest.raises(ValueError, match="URL#ID"):
        read_transcript(postgres_db.url)


def test_a_database_that_does_not_answer_is_said_before_the_question_is_asked(capsys):
    """A database that is not there (nothing listens on its port): ask says so at once, with
    the URL it tried (never its password) and what to check, and asks the model nothing."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # free once closed: nothing listens there
    url = f"postgresql://me:secret@127.0.0.1:{port}/db#chat"
    code = main(["ask", "--transcript", url, "--provider", "remote", "--base-url", "http://127.0.0.1:9/v1",
                 "a question"])
    err = capsys.readouterr().err
    assert code != 0 and "cannot connect to the database at" in err and "check that the server runs" in err, err
    assert "secret" not in err
