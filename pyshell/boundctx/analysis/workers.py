"""Sequential note-taking workers: read an input too large for the context, completely.

The input is planned into sections whose whole worker prompt fits the worker context
(:func:`boundctx.sections.plan`: prompt + the worker's notes at their maximum + output
headroom). Then ``workers`` logical workers take the sections in turn — section ``k``
goes to worker ``k mod workers`` — strictly one generation at a time, on the same
provider, with no tools. A worker reports what its section says that bears on the
question, one fact per line with the characters it comes from (``key: value (characters
1200-1260)``); the engine keeps each worker's notes (:mod:`boundctx.analysis.notes`):
the latest value of every key, within ``notes_max_tokens``, with an index of the keys
whose values did not fit, so the coordinator knows what to reread.

Every section is read or the call fails: a worker error, a timeout or a limit raises
:class:`~boundctx.errors.IncompleteCoverage` naming the sections left unread. A
cancellation stops before the next section starts.

An answer cut at its budget (``length``) is never taken as complete: its unfinished last
line is dropped, and the worker reads on from the end of the last fact it cited, as
long as each call gets further (at most :data:`MAX_CONTINUATIONS` more calls a
section). What is still not noted then is kept in the notes as a range not noted
(:meth:`NoteLedger.add_unnoted`), never dropped without a word (decision 0028).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

import msgspec

from boundctx import config
from boundctx._search import longest_fitting
from boundctx.analysis.notes import NoteLedger, cited_end
from boundctx.analysis.repetition import RepetitionGuard
from boundctx.errors import GenerationTimeout, IncompleteCoverage
from boundctx.events import AnalysisProgress, CutPrompt
from boundctx.providers.base import Provider, TextChunk, noting_cuts
from boundctx.sections import plan as plan_sections

__all__ = ["MAX_CONTINUATIONS", "TIMEOUT_TOKENS", "WORKER_INSTRUCTIONS", "Notes", "iter_read_in_sections",
           "worker_messages", "worker_time_limit"]

#: The tokens of a worker call (its prompt and its notes budget) that
#: ``analysis.worker_timeout_s`` is the time limit for: a larger call gets proportionally
#: longer, so a section's time grows with its size and is still bounded by the worker
#: context (decision 0038).
TIMEOUT_TOKENS = 1000

#: Calls a worker may make on one section beyond the first, each reading on from where
#: its cut answer stopped; what is left after them is kept as not noted.
MAX_CONTINUATIONS = 8

WORKER_INSTRUCTIONS = (
    "You read one section of a long text and note what bears on a question. Write one line per fact: "
    "'key: value (characters start-end)', where the key names what the fact is about (for example 'timeout of "
    "db-7'), the value copies the exact string the text gives (ids, numbers, names, paths, error messages "
    "verbatim), and start-end are the characters it comes from, as numbered in the section's heading. "
    "Write only what this section says: your earlier notes are kept for you. When this section changes "
    "a value you noted, write the same key with the new value. If the section has nothing relevant, "
    "write 'nothing relevant'. Never invent anything the text does not say."
)


class Notes(msgspec.Struct, frozen=True):
    """One worker's notes after the analysis.

    Attributes
    ----------
    worker : int
    text : str
        The notes as the worker last saw them (within ``notes_max_tokens``).
    sections : list of int
        The sections (1-based) this worker read, in order.
    ledger : NoteLedger
        Every key the worker reported, with its latest value and range.
    """

    worker: int
    text: str
    sections: list[int]
    ledger: NoteLedger | None = None


#: Longest question a worker prompt quotes whole. A front end's user message often *is*
#: the long input (a log pasted under the question): quoted whole in every worker prompt
#: it would leave no room for the section. Its head and tail stand for it instead (the
#: question is usually written before or after what was pasted); the whole message is
#: read in sections all the same.
QUESTION_MAX_CHARS = 800


def worker_question(question: str) -> str:
    """``question`` as worker prompts quote it: whole up to :data:`QUESTION_MAX_CHARS`,
    else its first and last halves of that around a marker saying how much is left out."""
    if len(question) <= QUESTION_MAX_CHARS:
        return question
    half = QUESTION_MAX_CHARS // 2
    left = len(question) - 2 * half
    return (f"{question[:half]}\n[... {left:,} characters of this message are not quoted here: "
            f"they are read in sections ...]\n{question[-half:]}")


def worker_messages(question: str, notes: str, section: str, *, number: int, total: int, source_id: str,
                    start: int, end: int) -> list[dict[str, Any]]:
    """The prompt of one worker call. The instructions and the question come first and
    never change within a reply, so a local model's prompt cache keeps them."""
    return [
        {"role": "system", "content": WORKER_INSTRUCTIONS},
        {"role": "user", "content": (
            f"Question: {question}\n\n"
            f"Your notes so far:\n{notes if notes else '(none yet)'}\n\n"
            f"Section {number} of {total} of {source_id}, characters {start}-{end}:\n{section}")},
    ]


def worker_time_limit(seconds: float, call_tokens: int) -> float:
    """The wall-clock limit of a worker call of ``call_tokens`` tokens (its prompt and its
    notes budget): ``seconds`` (``analysis.worker_timeout_s``) for every
    :data:`TIMEOUT_TOKENS` of it, never less than ``seconds``, never more than
    ``config.MAX_SECONDS``.

    A worker's time goes into evaluating its prompt and writing its notes, both in
    proportion to their tokens, and a call is at most the worker context: the limit
    grows with the section and stays bounded (decision 0038)."""
    return min(seconds * max(1.0, call_tokens / TIMEOUT_TOKENS), config.MAX_SECONDS)


def _timeout_advice(seconds: float, call_tokens: int) -> str:
    """What a worker's timeout is and what to do about it, naming the setting."""
    limit = worker_time_limit(seconds, call_tokens)
    raised = 2 * seconds
    return (f". Each worker call may take analysis.worker_timeout_s = {seconds:g} s per {TIMEOUT_TOKENS:,} tokens "
            f"of it (this one: {call_tokens:,} tokens, {limit:.0f} s); on a slow or busy machine raise it, e.g. "
            f"BOUNDCTX_ANALYSIS_WORKER_TIMEOUT_S={raised:g} or boundctx config set analysis.worker_timeout_s "
            f"{raised:g}, or use a faster model")


def iter_read_in_sections(provider: Provider, text: str, *, question: str, source_id: str, label: str,
                          settings: config.Settings, cancel: Any = None, started: float | None = None,
                          cuts: list[CutPrompt] | None = None):
    """Read ``text`` completely with sequential note-taking workers, yielding an
    :class:`AnalysisProgress` before and after each section; the generator's return
    value is the notes (``notes = yield from iter_read_in_sections(...)``).

    Parameters
    ----------
    provider : Provider
        The model every worker runs on.
    text : str
        The input to read.
    question : str
        What the notes are for.
    source_id : str
        The name ``text`` is kept under for exact rereads (its
        :class:`~boundctx.analysis.originals.Originals` id), which the workers' prompts say.
    label : str
        Where the text came from (a file name, "tool result 2"), for the prompts.
    settings : mapping
        ``chat.analysis_workers`` and the ``analysis.*`` keys (see ``boundctx.config``).
    cancel : threading.Event, optional
        Checked before each section and passed to the provider.
    cuts : list of CutPrompt, optional
        Where a worker call whose server cut its prompt is said (decision 0043).

    Returns
    -------
    list of Notes, or None
        One entry per worker that read something; None when cancelled.

    Raises
    ------
    SourceTooLarge, TooManySections, SectionBudgetTooSmall
        Before any model call.
    IncompleteCoverage
        A worker failed or timed out; names every section left unread.
    """
    workers = settings.chat.analysis_workers
    if workers < 1:
        raise ValueError("section analysis is off (chat.analysis_workers = 0)")
    question = worker_question(question)
    analysis = settings.analysis
    context = min(analysis.worker_n_ctx, provider.context_window)
    notes_max = analysis.notes_max_tokens
    started = time.monotonic() if started is None else started

    def planning_prompt(section: str) -> list[dict[str, Any]]:
        # The widest header any section can get: numbers at their largest.
        widest = len(text)
        return worker_messages(question, "", section, number=analysis.max_sections,
                               total=analysis.max_sections, source_id=source_id,
                               start=widest, end=widest)

    planned = plan_sections(text, counter=provider.counter, prompt=planning_prompt, context=context,
                            output_tokens=notes_max, notes_tokens=notes_max,
                            overlap=analysis.overlap_chars, max_source_chars=analysis.max_source_chars,
                            max_sections=analysis.max_sections)
    total = len(planned.sections)
    notes = [""] * workers
    ledgers = [NoteLedger() for _ in range(workers)]
    read: list[list[int]] = [[] for _ in range(workers)]
    for section in planned.sections:
        number = section.index + 1
        worker = section.index % workers
        if cancel is not None and cancel.is_set():
            return None
        yield AnalysisProgress(number, total, worker, "reading", time.monotonic() - started)
        at, calls = section.start, 0
        evaluated = written = 0  # tokens of this section's calls: the paces the reply's time is estimated at
        while True:
            # A section is one prompt; a continuation is the same section from ``at`` on
            # (a part of a planned section: it fits wherever the section did).
            prompt = functools.partial(worker_messages, question, section=text[at:section.end], number=number,
                                       total=total, source_id=source_id, start=at, end=section.end)
            messages, prompt_tokens = _fit_notes(provider, notes[worker], planned.limit, prompt)
            call_tokens = prompt_tokens + notes_max
            try:
                answer, cut = _worker_call(provider, messages, notes_max, cancel,
                                           timeout_s=worker_time_limit(analysis.worker_timeout_s, call_tokens),
                                           cuts=cuts)
            except Exception as exc:  # noqa: BLE001 - any failure of the model (llama-cpp-python raises
                # RuntimeError on a failed decode; a backend may run out of memory) leaves sections unread,
                # and the reply must say which, not escape.
                unread = [(s.index + 1, s.start, s.end) for s in planned.sections[section.index:]]
                advice = (_timeout_advice(analysis.worker_timeout_s, call_tokens)
                          if isinstance(exc, GenerationTimeout) else "")
                raise IncompleteCoverage(
                    f"worker {worker} failed on section {number} of {total} ({type(exc).__name__}: {exc}); "
                    f"sections {', '.join(str(u[0]) for u in unread)} of {label} were not read, so the reply "
                    f"cannot be answered from the whole input{advice}", uncovered=unread) from exc
            if answer is None:
                return None  # cancelled
            evaluated += prompt_tokens
            written += provider.counter.count_text(answer)
            if cut:
                answer = answer.rpartition("\n")[0]  # its last line is unfinished
            ledgers[worker].add_answer(answer, section=number, start=at, end=section.end)
            notes[worker] = ledgers[worker].render(notes_max, provider.counter.count_text)
            calls += 1
            if not cut:
                break
            reached = cited_end(answer, section=number, start=at, end=section.end)
            if reached is None or reached <= at or calls > MAX_CONTINUATIONS:
                # No further on, or out of calls: what is left is said, not dropped.
                ledgers[worker].add_unnoted(number, at if reached is None or reached <= at else reached,
                                            section.end)
                notes[worker] = ledgers[worker].render(notes_max, provider.counter.count_text)
                break
            if reached >= section.end:
                break
            at = reached
        read[worker].append(number)
        yield AnalysisProgress(number, total, worker, "noted", time.monotonic() - started,
                               provider.counter.count_text(notes[worker]), evaluated, written)
    yield AnalysisProgress(total, total, (total - 1) % workers, "done", time.monotonic() - started)
    return [Notes(w, notes[w], read[w], ledgers[w]) for w in range(workers) if read[w]]


def _worker_call(provider: Provider, messages: list[dict[str, Any]], notes_max: int, cancel: Any, *,
                 timeout_s: float, cuts: list[CutPrompt] | None = None) -> tuple[str | None, bool]:
    """One worker call, within ``timeout_s``: ``(its answer, whether it was cut at its
    budget)``; ``(None, False)`` when cancelled. Notes that loop (a small model's habit) are stopped there:
    the section was read, and the rest of the budget would only repeat what they say."""
    pieces: list[str] = []
    guard = RepetitionGuard()
    cut = False
    # One-off work: a local model keeps the reply's state, not this one (decision 0030).
    stream = noting_cuts(provider.stream_chat(messages, max_tokens=notes_max, temperature=0.2,
                                              timeout_s=timeout_s, cancel=cancel, keep_state=False),
                         [] if cuts is None else cuts, "worker")
    try:
        for chunk in stream:
            if isinstance(chunk, TextChunk):
                pieces.append(guard.feed(chunk.text))
                if guard.looping:
                    break
            else:
                reason = getattr(chunk, "reason", None)
                if reason == "cancelled":
                    return None, False
                cut = reason == "length"
        pieces.append(guard.finish())
    finally:
        stream.close()  # a stopped loop ends the generation now, not at garbage collection
    return "".join(pieces), cut and not guard.looping


#: Appended to notes shortened to fit a worker's prompt.
NOTES_CUT = " [notes cut to their budget]"


def _fit_notes(provider: Provider, notes: str, limit: int,
               prompt: Callable[[str], list[dict[str, Any]]]) -> tuple[list[dict[str, Any]], int]:
    """``prompt(notes)`` and its token count, with the notes shortened from the end if
    re-tokenized notes came out longer than the allowance they were planned with (rare: a
    model's own token choices can be less compact than its tokenizer's)."""
    messages = prompt(notes)
    tokens = provider.count_prompt(messages)
    if tokens <= limit or not notes:
        return messages, tokens
    lo = longest_fitting(len(notes), lambda k: provider.count_prompt(prompt(notes[:k] + NOTES_CUT)) <= limit)
    messages = prompt(notes[:lo] + NOTES_CUT)
    return messages, provider.count_prompt(messages)
