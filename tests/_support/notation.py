"""What of the engine's own notation an answer carries: the forms its prompts once used
and a small model copied into answers (issue 27), and the references its notes give.

An answer is *made of engine notation* when it holds any form in :data:`FORMS`, or a
character range the notes it was answered from cite (``references``): a person reads
either as a fault of boundctx. A range written as a reference in words ("characters
2089-4144") is still counted when the notes cite it, so the count is strict.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from boundctx.analysis.engine import AS_THE_TEXT_HAS_IT, REREAD_HEADER
from boundctx.analysis.notes import ANSWER_INDEX_HEADER, ANSWER_UNNOTED

__all__ = ["FORMS", "notation_in"]

# The lines the engine writes around the notes today, as written (so a rewording is
# counted too): a model that copies one into its answer copies the engine, not the text.
_TODAY = "|".join(re.escape(line.rstrip(":.")) for line in (ANSWER_INDEX_HEADER, ANSWER_UNNOTED, REREAD_HEADER))

FORMS = {
    # the section citations the notes used to give: [S2 2089-4144]
    "section citation": re.compile(r"\[S\d+\s+\d+\s*-\s*\d+\]"),
    # the compact index's section labels: "S3: key 10-40"
    "section label": re.compile(r"(?:^|[\s(\[])S\d+:", re.M),
    # the worker form's placeholders, copied as they stand
    "placeholder": re.compile(r"S<k>|start-end"),
    # the random ids originals were kept under
    "original id": re.compile(r"\bsrc-[0-9a-f]{8}-\d+\b"),
    # the notes' own headings (those once written, and today's), the line an index ends
    # with when keys are left out, and the placeholder an analysed item becomes
    "notes heading": re.compile(r"Values not kept here|Not noted \(reread|read completely by note-taking workers"
                                r"|Notes on .{1,60}? \(\d[\d,]* characters|more keys, at characters|" + _TODAY),
    # the lines of the reread step's results, as they were once written and as they are
    "reread line": re.compile(r"(?:key '[^']*'|characters \d+-\d+): (?:not read \(|«)"
                              r"|exactly: «|read again exactly|could not be read again|No exact text was read again"
                              r"|passages? of .{1,60}? holds? words of|" + re.escape(AS_THE_TEXT_HAS_IT)),
    # the constrained reread step's JSON
    "reread request": re.compile(r"\{\s*\"reread\"\s*:"),
}


def notation_in(answer: str, references: Iterable[tuple[int, int]] = ()) -> list[str]:
    """The names of the notation forms ``answer`` holds (empty: none), with
    ``"cited range"`` when it repeats a range of ``references`` (the (start, end) pairs
    the notes cited)."""
    found = [name for name, form in FORMS.items() if form.search(answer)]
    if any(re.search(rf"(?<!\d){a}\s*[-–]\s*{b}(?!\d)", answer) for a, b in set(references)):
        found.append("cited range")
    return found
