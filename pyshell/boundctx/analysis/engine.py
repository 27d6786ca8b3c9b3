"""One reply, bounded: fit the conversation, analyse what cannot fit, answer.

:meth:`Engine.reply` yields typed events. Analysis progress
(:class:`~boundctx.events.AnalysisProgress`) and reply text
(:class:`~boundctx.events.ReplyDelta`) never mix, so a voice route that speaks only
``ReplyDelta`` never speaks notes. Every model call is counted against its window
before it is made; a failure that would leave part of the input unread ends the reply
with :class:`~boundctx.events.Failed` rather than an answer from part of it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from boundctx import config
from boundctx.analysis.fitting import fit_conversation
from boundctx.analysis.originals import READ_TOOL_NAME, Originals
from boundctx.analysis.repetition import RepetitionGuard
from boundctx.analysis.workers import Notes, iter_read_in_sections
from boundctx.errors import BoundctxError, ContextOverflow, GenerationError, SectionReadError
from boundctx.events import Done, Event, Failed, Fitted, ReplyDelta, Stage, ToolCall, ToolResult
from boundctx.providers.base import Finish, Provider, TextChunk, ToolCallChunk

__all__ = ["COORDINATOR_NOTES", "Engine"]

COORDINATOR_NOTES = (
    "Part of this conversation was too long to show you whole. It was read completely, section by section, "
    "by note-taking workers; their notes follow. Notes cite sections as [S<k> start-end], character ranges "
    "of the original named by its id."
)
_REREAD = (" When an exact string matters (an id, a number, a quote), call read_chat_section with the "
           "original's id and a range the notes cite, and answer from what it returns.")

#: Tokens kept for the headers around each worker's notes in the coordinator prompt.
_NOTES_HEADER_TOKENS = 48


def _files_as_messages(files: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
    return [{"role": "user", "content": f"File {label}:\n{text}"} for label, text in files]


class Engine:
    """Replies from one provider within its bounds.

    Parameters
    ----------
    provider : Provider
    settings : mapping, optional
        Settings: resolved ones, or a partial mapping such as
        ``{"chat.analysis_workers": 0}`` applied over :func:`boundctx.config.load`
        (checked here, so a bad key fails at construction, not mid-reply).
    max_reply_tokens : int
        The reply's own output budget; always kept free in the window.
    max_tool_rounds : int
        Most ``read_chat_section`` rounds in one reply.
    """

    def __init__(self, provider: Provider, *, settings: Mapping[str, Any] | None = None,
                 max_reply_tokens: int = 512, max_tool_rounds: int = 4) -> None:
        self.provider = provider
        self.settings = config.resolve(settings)
        if max_reply_tokens < 1:
            raise ValueError(f"max_reply_tokens must be >= 1, got {max_reply_tokens}")
        self.max_reply_tokens = max_reply_tokens
        self.max_tool_rounds = max_tool_rounds

    def reply(self, messages: Sequence[Mapping[str, Any]], *, files: Sequence[tuple[str, str]] = (),
              cancel: Any = None) -> Iterator[Event]:
        """Answer the last user message of ``messages`` (with ``files`` attached to it).

        Yields
        ------
        Event
            ``Fitted`` first (what is sent, dropped, clipped or analysed),
            ``AnalysisProgress`` while inputs are read, ``Stage`` when the answer (or a
            reread) starts, ``ReplyDelta`` for the answer, ``ToolCall``/``ToolResult``
            around rereads, then ``Done`` or ``Failed``.
        """
        started = time.monotonic()
        messages = list(map(dict, messages))
        system = str(self.settings["chat.system_prompt"])
        if system and not (messages and messages[0].get("role") == "system"):
            messages.insert(0, {"role": "system", "content": system})
            shift = 1  # Fitted.dropped names indexes of the caller's messages
        else:
            shift = 0
        try:
            yield from self._reply(messages, files, cancel, started, shift)
        except BoundctxError as exc:
            yield Failed(str(exc), type(exc).__name__)

    def _reply(self, messages: list[dict[str, Any]], files: Sequence[tuple[str, str]], cancel: Any,
               started: float, shift: int) -> Iterator[Event]:
        s = self.settings
        provider = self.provider
        workers = int(s["chat.analysis_workers"])
        limit = provider.context_window - self.max_reply_tokens
        if limit < 1:
            raise ContextOverflow(f"max_reply_tokens ({self.max_reply_tokens}) leaves no room in the "
                                  f"{provider.context_window}-token window", context_window=provider.context_window)
        question_at = len(messages) - 1
        while question_at >= 0 and messages[question_at].get("role") != "user":
            question_at -= 1
        if question_at < 0:
            raise ValueError("the conversation has no user message to answer")
        question = str(messages[question_at].get("content") or "")
        convo = messages[:question_at] + _files_as_messages(files) + messages[question_at:]
        turn_start = question_at
        tools_room = 0
        if workers and provider.supports_tools:
            probe = Originals()
            for k in range(len(files) + len(convo) - question_at):
                probe.add("", str(k))
            tools_room = provider.count_prompt([], tools=[probe.tool_schema()]) - provider.count_prompt([])
        notes_room = workers * (int(s["analysis.notes_max_tokens"]) + _NOTES_HEADER_TOKENS) + tools_room
        fit = fit_conversation(convo, count=provider.count_prompt, limit=limit, analysis_on=workers > 0,
                               notes_room=notes_room, clip_chars=int(s["chat.tool_result_clip_chars"]),
                               turn_start=turn_start)
        final = list(fit.messages)
        originals = Originals()
        blocks: list[str] = []
        attached = {m["content"]: (label, text) for m, (label, text) in zip(_files_as_messages(files), files)}

        dropped = set(fit.dropped_at)
        kept = [i for i in range(len(convo)) if i not in dropped]  # final[j] is convo[kept[j]]

        def callers_index(index: int) -> int:
            """The index in the caller's messages of final[index] (not a file)."""
            c = kept[index]
            return c - shift if c < question_at else c - len(files) - shift

        def label_of(index: int) -> tuple[str, str]:
            item = final[index]
            content = str(item.get("content") or "")
            # An attached file is kept (and reread) as the file itself, without its header.
            return attached.get(content) or (
                "the user's message" if item.get("role") == "user" else f"tool result {callers_index(index)}",
                content)

        # An inserted system prompt is never dropped (the first system message is kept)
        # and is not one of the caller's messages.
        yield Fitted(len(convo) - shift, len(final) - len(fit.analyse) - shift, [i - shift for i in fit.dropped_at],
                     fit.dropped_research, len(fit.clipped), [label_of(i)[0] for i in fit.analyse], limit)
        for index in fit.analyse:
            item = final[index]
            label, text = label_of(index)
            notes = yield from iter_read_in_sections(provider, text, question=question, originals=originals,
                                                     label=label, settings=s, cancel=cancel, started=started)
            if notes is None:
                yield Done("cancelled")
                return
            oid = list(originals)[-1]
            final[index] = {**item, "content": f"[{label}: {len(text):,} characters, read completely by "
                                               f"note-taking workers; see the notes on {oid}]"}
            blocks.append(self._notes_block(oid, label, len(text), notes))
        tools = None
        if blocks:
            instructions = COORDINATOR_NOTES + (_REREAD if provider.supports_tools else "")
            notes = instructions + "\n\n" + "\n\n".join(blocks)
            if final and final[0].get("role") == "system" and isinstance(final[0].get("content"), str):
                # One system message: many chat templates refuse a second one.
                final[0] = {**final[0], "content": final[0]["content"] + "\n\n" + notes}
            else:
                final.insert(0, {"role": "system", "content": notes})
            if provider.supports_tools:
                tools = [originals.tool_schema()]
        yield from self._coordinate(final, tools, originals, limit, cancel, started)

    @staticmethod
    def _notes_block(oid: str, label: str, length: int, notes: list[Notes]) -> str:
        parts = [f"Notes on {label} (id {oid}, {length:,} characters):"]
        for n in notes:
            parts.append(f"Worker {n.worker + 1} (sections {', '.join(map(str, n.sections))}):\n"
                         f"{n.text or '(nothing relevant)'}")
        return "\n".join(parts)

    def _coordinate(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                    originals: Originals, limit: int, cancel: Any, started: float) -> Iterator[Event]:
        provider = self.provider
        temperature = float(self.settings["chat.temperature"])
        for round_ in range(self.max_tool_rounds + 1):
            # The provider counts this prompt against its window (with max_tokens = the
            # reply budget, the same bound as `limit`) before any model call.
            calls: list[ToolCallChunk] = []
            finish = Finish("stop")
            offered = tools if round_ < self.max_tool_rounds else None
            yield Stage("rereading" if round_ else "answering", time.monotonic() - started, round_)
            guard = RepetitionGuard()
            stream = provider.stream_chat(messages, tools=offered, max_tokens=self.max_reply_tokens,
                                          temperature=temperature, cancel=cancel)
            try:
                for chunk in stream:
                    if isinstance(chunk, TextChunk):
                        text = guard.feed(chunk.text)
                        if text:
                            yield ReplyDelta(text)
                        if guard.looping:
                            break
                    elif isinstance(chunk, ToolCallChunk):
                        calls.append(chunk)
                    else:
                        finish = chunk
            except BoundctxError:
                raise
            except Exception as exc:  # noqa: BLE001 - a backend's own failure ends the reply as Failed
                raise GenerationError(f"the model call failed ({type(exc).__name__}: {exc}); the reply is "
                                      "not complete") from exc
            finally:
                close = getattr(stream, "close", None)
                if close is not None:
                    close()  # a loop stops the model now, not at garbage collection
            if guard.looping:
                yield Done("repetition", {"prompt_tokens": finish.prompt_tokens,
                                          "completion_tokens": finish.completion_tokens,
                                          "withheld_chars": guard.withheld_chars})
                return
            rest = guard.finish()
            if rest:
                yield ReplyDelta(rest)
            if finish.reason == "cancelled" or not calls:
                yield Done(finish.reason, {"prompt_tokens": finish.prompt_tokens,
                                           "completion_tokens": finish.completion_tokens})
                return
            messages = messages + [{"role": "assistant", "content": "", "tool_calls": [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in calls]}]
            for c in calls:
                yield ToolCall(c.id, c.name, c.arguments)
                result = self._run_tool(c, originals)
                trial = messages + [{"role": "tool", "tool_call_id": c.id, "content": result}]
                if provider.count_prompt(trial, tools=tools) > limit:
                    result = (f"error: {len(result)} characters do not fit the remaining context; "
                              "ask for a narrower range")
                    trial = messages + [{"role": "tool", "tool_call_id": c.id, "content": result}]
                yield ToolResult(c.id, result)
                messages = trial
        yield Done("tool_rounds_exhausted")

    @staticmethod
    def _run_tool(call: ToolCallChunk, originals: Originals) -> str:
        if call.name != READ_TOOL_NAME:
            return f"error: no tool named {call.name!r}; the only tool is {READ_TOOL_NAME}"
        try:
            return originals.call(call.arguments)
        except SectionReadError as exc:
            return f"error: {exc}"
