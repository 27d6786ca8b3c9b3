"""Seeded generated text for the benchmarks: the same seed gives the same text.

* :func:`generate_text`: exactly ``n`` code points of mixed content (prose, logs with
  verbatim repeats, code, CRLF paragraphs, tables, CJK, emoji clusters, combining marks,
  long lines without spaces), the section splitters' input (``bench_sections.py``);
* :func:`shape_text`: one hard shape (:data:`SHAPES`) repeated, for scaling runs;
* :func:`chat`: an alternating user/assistant conversation after a system message, for
  fitting and serving a long history (``bench_fitting.py``, ``bench_serve.py``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
import unicodedata

__all__ = ["LONG_LINES", "SEED", "SHAPES", "TEXT_CHARS", "chat", "generate_text", "shape_text"]

SEED = 1234
TEXT_CHARS = 1_000_000

#: Lines without a single space, at their size in a 1,000,000-character text (scaled
#: with the text). They are where splitters fall back to hard cuts.
LONG_LINES = (
    ("base64", 30_000),
    ("minified JSON", 26_000),
    ("URL", 15_000),
    ("CJK run", 12_000),
    ("'=' run", 9_000),
    ("emoji run", 6_000),
    ("concatenated words", 13_000),
    ("'x' run", 7_000),
)



# -- the seeded text ------------------------------------------------------------------

WORDS = (
    "the of and to in a is that for it as was with be by on not he this are or his from "
    "at which but have an they you were her she there been one all we their has would when "
    "if so no will more can out up who about time into only other new some could these two "
    "may first then do any like my now over such our man me even most made after also did "
    "many before must through back years where much your way well down should because each "
    "just those people how too little state good very make world still own see men work "
    "long get here between both life being under never day same another know while last "
    "might us great old year off come since against go came right used take three buffer "
    "section token budget offset overlap boundary cursor window encoder splitter transcript "
    "compaction message context latency throughput allocation invariant monotonic unicode"
).split()

#: Emoji that are one extended grapheme cluster each, in the shapes that splitters cut:
#: ZWJ sequences, skin-tone modifiers, VS16 presentation, flags (regional-indicator
#: pairs and a tag sequence) and keycaps.
ZWJ = ["👨\u200d👩\u200d👧\u200d👦", "👩\u200d💻", "🏳\ufe0f\u200d🌈", "🧑\u200d🚀",
       "👁\ufe0f\u200d🗨\ufe0f", "🐻\u200d❄\ufe0f", "👩🏽\u200d🔬", "🧑🏿\u200d🤝\u200d🧑🏻"]
SKIN = [base + chr(0x1F3FB + k) for base in "👍👋🙌🤝🧑✋" for k in range(5)]
VS16 = ["❤\ufe0f", "☺\ufe0f", "✔\ufe0f", "☀\ufe0f", "✈\ufe0f", "⚠\ufe0f"]
FLAGS = ["".join(chr(0x1F1E6 + ord(c) - ord("A")) for c in cc)
         for cc in ("JP", "FR", "US", "DE", "KR", "BR", "IN", "GB", "UA", "ZA")]
FLAGS.append("🏴\U000E0067\U000E0062\U000E0065\U000E006E\U000E0067\U000E007F")  # England
KEYCAPS = ["1\ufe0f\u20e3", "#\ufe0f\u20e3", "7\ufe0f\u20e3"]
PLAIN_EMOJI = list("😀🎉🚀🔥✨🤖📦🧪")
EMOJI = ZWJ + SKIN + VS16 + FLAGS + KEYCAPS + PLAIN_EMOJI

#: Words with combining marks (NFD), a Zalgo stack, Devanagari conjuncts (virama) and
#: conjoining Hangul jamo: clusters of several code points without any emoji.
COMBINING = [unicodedata.normalize("NFD", w) for w in
             ("café", "naïve", "Ångström", "Tiếng Việt", "phở", "façade", "résumé", "Đà Nẵng")]
COMBINING += ["Z\u0351\u0352\u0353\u035b\u0358o\u0300\u0301\u0302\u0303", "क्षत्रिय", "स्त्री",
              "\u1100\u1161\u11a8\u1102\u1165\u11ab"]

HIRAGANA = [chr(c) for c in range(0x3041, 0x3097)]
KATAKANA = [chr(c) for c in range(0x30A1, 0x30FB)]
#: Everyday characters, so that CJK text costs what real text does (about one cl100k
#: token per character); random code points from the whole blocks cost two or three.
HANZI = list(
    "的一是不了人我在有他这中大来上个国到说们为子和你地出道也时年得就那要下以生会自着去之过"
    "家学对可她里后小么心多天而能好都然没日于起还发成事只作当想看文无开手十用主行方又如前所"
    "本见经头面公同三已老从动两长知民样现分将外但身些与高意进把法此实回二理美点月明其种声全"
    "工己话儿者向情部正名定女问力机给等几很业最间新什打便位因重被走电四第门相次东政海口使教"
    "西再平真听世气信北少关并内加化由却代军产入先山五太水万市眼体别处总才场师书比住员九笑性"
    "通目华报立马命张活难神数件安表原车白应路期叫死常提感金何更反合放做系计或司利受光王果亲"
    "界及今京务制解各任至清物台象记边共风战干接它许八特觉望直服毛林题建南度统色字请交爱让认"
    "算论百吃义科怎元社术结六功指思非流每青管夫连远资队跟带花快条院变联言权往展该领传近留红")
HANGUL = list(
    "가나다라마바사아자차카타파하는이을를에의고서도로와과한있었것들그수지게면만기대제시여주해"
    "보요니어람우리말글생각사랑시간오늘내일학교회사집물밥친구마음세상사람문제경우정도국가부분")

LOG_COMPONENTS = ["api", "db", "worker-1", "worker-2", "scheduler", "cache", "auth"]
LOG_MESSAGES = ["request completed", "cache miss for key", "retrying connection",
                "heartbeat ok", "slow query detected", "token refreshed",
                "queue depth", "GC pause", "upstream timeout", "special marker <|endoftext|> seen"]


def _sentence(rng: random.Random, *, flourish: bool = True) -> str:
    words = rng.choices(WORDS, k=rng.randint(6, 20))
    words[0] = words[0].capitalize()
    if rng.random() < 0.3:
        words[rng.randrange(1, len(words))] += ","
    if flourish and rng.random() < 0.12:  # an emoji or a combining-mark word in prose
        words.insert(rng.randrange(len(words)), rng.choice(EMOJI + COMBINING))
    return " ".join(words) + rng.choice(".....?!")


def _prose(rng):
    return " ".join(_sentence(rng) for _ in range(rng.randint(3, 9))) + "\n\n"


def _wrap(text: str, width: int) -> list[str]:
    lines, line = [], ""
    for w in text.split(" "):
        if line and len(line) + 1 + len(w) > width:
            lines.append(line)
            line = w
        else:
            line = f"{line} {w}" if line else w
    return lines + [line] if line else lines


def _crlf_paragraph(rng):
    body = " ".join(_sentence(rng) for _ in range(rng.randint(2, 6)))
    return "\r\n".join(_wrap(body, 72)) + "\r\n\r\n"


def _logs(rng, pool: list[str]):
    """Log lines; about a third repeat an earlier line verbatim, sometimes several times
    in a row (a retry loop), so chunk texts recur in the source."""
    out = []
    for _ in range(rng.randint(4, 16)):
        if pool and rng.random() < 0.35:
            line = rng.choice(pool)
            out.extend([line] * (rng.randint(2, 8) if rng.random() < 0.2 else 1))
            continue
        ts = (f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:"
              f"{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}.{rng.randint(0, 999):03d}Z")
        level = rng.choice(["INFO ", "INFO ", "DEBUG", "WARN ", "ERROR"])
        line = (f"{ts} {level} [{rng.choice(LOG_COMPONENTS)}] {rng.choice(LOG_MESSAGES)} "
                f"id={rng.getrandbits(48):012x} took={rng.randint(1, 9999)}ms")
        pool.append(line)
        out.append(line)
    return "\n".join(out) + "\n"


def _code(rng):
    name = "_".join(rng.choices(WORDS, k=2))
    n, m = rng.randint(1, 999), rng.randint(2, 9)
    lines = [
        f"def handle_{name}(self, request, *args, limit={n}):",
        f'\t"""{_sentence(rng, flourish=False)}"""',
        "\tresult = []",
        "\tfor i, item in enumerate(request.items):",
        f"\t\tif item.value > {n} and i % {m} == 0:",
        f"\t\t\tresult.append(item.value * {m})  # {' '.join(rng.choices(WORDS, k=5))}",
        "\t\telif item.kind == \"<|endoftext|>\":" if rng.random() < 0.2 else "\t\telse:",
        "\t\t\tcontinue",
        f"\treturn {{'{name}': result, 'count': len(result)}}",
    ]
    return "\n".join(lines) + "\n\n"


def _table(rng):
    cols = rng.randint(3, 6)
    rows = [" | ".join(w.capitalize() for w in rng.choices(WORDS, k=cols)),
            " | ".join("---" for _ in range(cols))]
    for _ in range(rng.randint(3, 12)):
        cells = []
        for _ in range(cols):
            r = rng.random()
            cells.append(f"{rng.uniform(0, 1e4):.2f}" if r < 0.4 else
                         rng.choice(EMOJI + HANZI[:200]) if r < 0.5 else rng.choice(WORDS))
        rows.append(" | ".join(cells))
    return "\n".join(f"| {r} |" for r in rows) + "\n\n"


def _cjk(rng):
    kind = rng.choice(("zh", "ja", "ko"))
    sentences = []
    for _ in range(rng.randint(4, 12)):
        n = rng.randint(12, 60)
        if kind == "zh":
            s = "".join(rng.choices(HANZI, k=n))
        elif kind == "ja":
            s = "".join(rng.choice(HIRAGANA + KATAKANA if rng.random() < 0.6 else HANZI)
                        for _ in range(n))
        else:  # Korean separates words with spaces
            s = " ".join("".join(rng.choices(HANGUL, k=rng.randint(1, 4)))
                         for _ in range(n // 3 + 1))
        sentences.append(s + rng.choice("。。、！？") if kind != "ko" else s + ". ")
    return "".join(sentences).rstrip() + "\n\n"


def _emoji_chat(rng):
    lines = []
    for _ in range(rng.randint(3, 10)):
        parts = [_sentence(rng, flourish=False)]
        parts += rng.choices(EMOJI, k=rng.randint(1, 6))
        lines.append(" ".join(parts) + (" " + rng.choice(COMBINING) if rng.random() < 0.3 else ""))
    return "\n".join(lines) + "\n\n"


BLOCKS = ((_prose, 40), (_logs, 12), (_code, 12), (_crlf_paragraph, 6), (_table, 6),
          (_cjk, 14), (_emoji_chat, 6))


def _long_line(kind: str, n: int, rng: random.Random) -> str:
    """One line of about ``n`` code points without spaces (then a newline)."""
    if kind == "base64":
        s = base64.b64encode(rng.randbytes(n)).decode()[:n]
    elif kind == "minified JSON":
        items, size = [], 2
        while size < n:  # whole records, so the line is valid JSON
            rec = {"id": rng.getrandbits(32), "name": "_".join(rng.choices(WORDS, k=3)),
                   "tags": rng.choices(WORDS, k=rng.randint(1, 4)),
                   "score": round(rng.random(), 4), "ok": rng.random() < 0.5,
                   "note": rng.choice(["naïve", "中文", "ok", "", "\u00e9t\u00e9"])}
            items.append(rec)
            size += len(json.dumps(rec, separators=(",", ":"), ensure_ascii=False)) + 1
        s = json.dumps(items, separators=(",", ":"), ensure_ascii=False)
    elif kind == "URL":
        parts = ["https://example.com/api/v2"]
        while sum(map(len, parts)) < n:
            parts.append(f"/{rng.choice(WORDS)}%20{rng.getrandbits(20):x}?"
                         f"{rng.choice(WORDS)}={rng.getrandbits(40):x}&utm_{rng.choice(WORDS)}=1")
        s = "".join(parts)[:n]
    elif kind == "CJK run":
        s = "".join(rng.choices(HANZI + HIRAGANA, k=n))
    elif kind == "'=' run":
        s = "=" * n
    elif kind == "emoji run":
        parts, size = [], 0
        while size < n:  # whole clusters only
            e = rng.choice(EMOJI)
            parts.append(e)
            size += len(e)
        s = "".join(parts)
    elif kind == "concatenated words":
        s = ""
        while len(s) < n:
            s += "".join(rng.choices(WORDS, k=50))
        s = s[:n]
    elif kind == "'x' run":
        s = "x" * n
    else:
        raise ValueError(kind)
    assert " " not in s
    return s + "\n"


def generate_text(n_chars: int = TEXT_CHARS, seed: int = SEED) -> tuple[str, dict]:
    """Exactly ``n_chars`` code points of mixed content, the same for the same seed.

    Blocks (prose, logs with verbatim repeats, tab-indented code, CRLF paragraphs,
    markdown tables, CJK/kana/Hangul, emoji-heavy lines) are drawn by weight; the long
    lines without spaces (``LONG_LINES``, scaled by ``n_chars / 1e6``) are inserted
    between blocks at seeded positions; an ASCII tail pads to the exact length (so the
    end is never a cut cluster). Returns (text, facts about its parts).
    """
    rng = random.Random(seed)
    scale = n_chars / TEXT_CHARS
    longs = [(kind, _long_line(kind, max(1, round(n * scale)), rng)) for kind, n in LONG_LINES]
    budget = n_chars - sum(len(s) for _, s in longs)
    makers, weights = zip(*BLOCKS, strict=True)
    blocks: list[tuple[str, str]] = []
    log_pool: list[str] = []
    size = 0
    while True:
        make = rng.choices(makers, weights)[0]
        b = make(rng, log_pool) if make is _logs else make(rng)
        if size + len(b) > budget:
            break
        blocks.append((make.__name__.strip("_"), b))
        size += len(b)
    for kind, s in longs:
        blocks.insert(rng.randint(0, len(blocks)), (kind, s))
    pad = budget - size
    tail = ""
    while len(tail) < pad:
        tail += " ".join(rng.choices(WORDS, k=40)) + "\n"
    if pad:
        blocks.append(("ascii tail", tail[: pad - 1] + "\n"))
    text = "".join(b for _, b in blocks)
    assert len(text) == n_chars, (len(text), n_chars)
    assert "\ufffd" not in text  # so every U+FFFD in a chunk was introduced by a splitter
    counts: dict[str, int] = {}
    for kind, b in blocks:
        counts[kind] = counts.get(kind, 0) + len(b)
    facts = {
        "seed": seed,
        "chars": len(text),
        "utf8_bytes": len(text.encode("utf-8")),
        "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
        "newlines": text.count("\n"),
        "crlf": text.count("\r\n"),
        "tabs": text.count("\t"),
        "non_bmp_code_points": sum(1 for ch in text if ord(ch) > 0xFFFF),
        "special_looking_<|endoftext|>": text.count("<|endoftext|>"),
        "chars_by_kind": counts,
        "long_lines": {kind: len(s) - 1 for kind, s in longs},
    }
    return text, facts


# -- one shape repeated ---------------------------------------------------------------

#: One hard shape each, repeated into a text of any size (:func:`shape_text`): a splitter
#: that is linear in the text takes k times as long on a text k times as long.
SHAPES = {
    "prose lines": lambda rng: _sentence(rng) + "\n",
    "line without spaces": lambda rng: base64.b64encode(rng.randbytes(3000)).decode(),
    "'=' run": lambda rng: "=" * 5000,
    "CJK run": lambda rng: "".join(chr(rng.randrange(0x4E00, 0x9FA5)) for _ in range(500)),
    "emoji ZWJ/flags run": lambda rng: rng.choice(["\U0001F469\u200D\U0001F4BB", "\U0001F1EB\U0001F1F7",
                                                   "\U0001F44D\U0001F3FD"]),
    "combining marks (zalgo)": lambda rng: "Z" + "\u0300\u0316\u0301" * 400,
}


def shape_text(shape: str, n: int, seed: int) -> str:
    """``n`` code points of ``SHAPES[shape]`` repeated, the same for the same seed."""
    rng = random.Random(seed)
    parts, size = [], 0
    while size < n:
        parts.append(SHAPES[shape](rng))
        size += len(parts[-1])
    return "".join(parts)[:n]


# -- a conversation ------------------------------------------------------------------

CHAT_WORDS = ("the of and to in is that for it as was with be by on not he this are or his from at which "
              "but have an they you were her she there would their we him been has when who will more no if "
              "out so said what up its about into than them can only other new some could time these two may "
              "then do first any my now such like our over man me even most made after also did many before "
              "must through back years where much your way well down should because each just those people").split()


def chat(n: int, seed: int) -> list[dict]:
    """``n`` messages of about 60 words, alternating user and assistant, a system first."""
    rng = random.Random(seed)
    msgs = [{"role": "system", "content": "You are a careful assistant."}]
    for i in range(n - 1):
        words = " ".join(rng.choice(CHAT_WORDS) for _ in range(rng.randint(40, 80)))
        msgs.append({"role": "user" if i % 2 == 0 else "assistant", "content": words})
    if msgs[-1]["role"] != "user":
        msgs.append({"role": "user", "content": "and what follows from that?"})
    return msgs
