"""A model that answers every understanding task with random output its schema allows.

It reads only the request's schema (what a grammar-constrained decoder would enforce)
and the message's words, never the task's instructions, so whatever it answers is
schema-valid and may be wrong in every way a schema cannot rule out: a span backwards,
a value from nowhere, a verdict of "supported" for anything. It leans towards answers
that are not refused outright (spans in order, a value from its own quote) so that
turns get as far as extract and verify. A pipeline that stays safe against it is safe
against any model that keeps to its grammar.

``RandomModel(seed)`` is deterministic per prompt: the n-th call with the same messages
gets the same answer whatever the order threads make the calls in.
"""

from __future__ import annotations

import json
import random
import threading
from typing import Any

#: Values a model might make up: names, times and numbers no message here contains.
STRANGERS = ["Zebra", "Quentin", "19:00", "tomorrow", "N/A", "42", "-7", "3.75", "twelve", "[8, 9]", '["Zebra"]',
             '{"who": "Zebra"}', "yes", "no", "high", "urgent now"]


def _message(request) -> str:
    body = request.messages[1]["content"]
    return body.split("<<<\n", 1)[1].split("\n>>>", 1)[0]


class RandomModel:
    """``RandomModel(seed)(request)``: a random answer in ``request.schema``."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.seen: dict[str, int] = {}
        self.lock = threading.Lock()

    def __call__(self, request) -> str:
        key = json.dumps(request.messages, sort_keys=True)
        with self.lock:
            self.seen[key] = n = self.seen.get(key, 0) + 1
        rng = random.Random(f"{self.seed}|{n}|{key}")
        words = _message(request).split()
        return json.dumps(self.answer(request.schema, rng, words))

    def text(self, rng: random.Random, words: list[str]) -> str:
        """A value's text: the message's own words as often as not, else made up."""
        pick = rng.random()
        if pick < 0.35 and words:
            return rng.choice(words)
        if pick < 0.55 and words:
            i = rng.randrange(len(words))
            return " ".join(words[i:i + rng.randint(1, 3)])
        if pick < 0.65 and words:
            word = rng.choice(words)
            return rng.choice([word.upper(), word.lower(), f'"{word}"', word + ",", ", ".join(rng.sample(
                words, min(2, len(words))))])
        if pick < 0.8:
            return str(rng.randint(-20, 120))
        return rng.choice(STRANGERS)

    def answer(self, schema: dict[str, Any], rng: random.Random, words: list[str]) -> Any:
        if "anyOf" in schema:
            return self.answer(rng.choice(schema["anyOf"]), rng, words)
        if "enum" in schema:
            return rng.choice(schema["enum"])
        kind = schema.get("type")
        if kind == "object":
            props = schema["properties"]
            if set(props) == {"evidence", "value"} and rng.random() < 0.8:
                # Mostly both given or both null (one without the other is refused and
                # repaired, which the other 20 % try).
                if rng.random() < 0.3:
                    return {"evidence": None, "value": None}
                given = {k: next(s for s in props[k]["anyOf"] if s.get("type") != "null") for k in props}
                out = {k: self.answer(given[k], rng, words) for k in ("evidence", "value")}
                span = out["evidence"]
                quoted = words[span["first"] - 1:span["last"]] if 1 <= span["first"] <= span["last"] else []
                if given["value"] == {"type": "string"} and quoted and rng.random() < 0.4:
                    # a value read from its own quote: the whole of it, or one word
                    out["value"] = " ".join(quoted) if rng.random() < 0.5 else rng.choice(quoted)
                return out
            out = {k: self.answer(sub, rng, words) for k, sub in props.items()}
            if set(out) == {"first", "last"} and all(isinstance(v, int) for v in out.values()) \
                    and rng.random() < 0.8:
                out["first"], out["last"] = sorted((out["first"], out["last"]))  # mostly a real span
            return out
        if kind == "array":
            lo = schema.get("minItems", 0)
            hi = min(schema.get("maxItems", lo + 3), lo + 3)
            ends = self._span_ends(schema["items"])
            if ends and rng.random() < 0.5:
                return self._partition(ends, rng, lo, schema.get("maxItems", len(ends)))
            items = [self.answer(schema["items"], rng, words) for _ in range(rng.randint(lo, hi))]
            if rng.random() < 0.8:
                items = self._tidy(items) or items[:1]
            return items
        if kind == "string":
            return self.text(rng, words)
        if kind == "integer":  # span ends of a message over 400 words: any integer
            return rng.randint(-2, len(words) + 2)
        if kind == "null":
            return None
        raise AssertionError(f"the random model meets a schema it does not know: {schema}")

    @staticmethod
    def _span_ends(schema: dict[str, Any]) -> list[int]:
        """The word numbers a span may end on, when ``schema`` is a span's."""
        props = schema.get("properties", {})
        if set(props) == {"first", "last"} and "enum" in props["first"]:
            return sorted(props["first"]["enum"])
        return []

    @staticmethod
    def _partition(ends: list[int], rng: random.Random, lo: int, most: int) -> list[dict[str, int]]:
        """Every word in some span: the answer that lets a segmentation through
        coverage (its cuts still random)."""
        count = rng.randint(max(lo, 1), max(1, min(most, len(ends), 4)))
        cuts = sorted(rng.sample(range(1, len(ends)), count - 1)) if count > 1 else []
        bounds = [0] + cuts + [len(ends)]
        return [{"first": ends[a], "last": ends[b - 1]} for a, b in zip(bounds, bounds[1:])]

    @staticmethod
    def _tidy(items: list[Any]) -> list[Any]:
        """Mostly a choice that is not refused outright (so later tasks get to run):
        ids once each and "none" only alone; spans in order, not overlapping."""
        if all(isinstance(i, str) for i in items):
            items = list(dict.fromkeys(items))
            return [i for i in items if i != "none"] or items
        if all(isinstance(i, dict) and set(i) == {"first", "last"} for i in items):
            out: list[Any] = []
            for span in sorted(items, key=lambda s: s["first"]):
                if span["first"] <= span["last"] and (not out or span["first"] > out[-1]["last"]):
                    out.append(span)
            return out
        return items
