"""Engine overhead as a share of model time, on the embedded model.

One reply of the README's first command (examples/build.log, 2,048-token context, two
workers): the time spent inside the provider's generations (prompt evaluation and
decoding) against the whole reply. The rest is boundctx: fitting, planning, exact
counts, notes, events.

Run: ``python -m bench.bench_engine_overhead`` (writes bench/results/engine_overhead.json;
``--json-out`` elsewhere).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time

from boundctx import config
from boundctx.analysis import Engine
from boundctx.events import Done

from bench._harness import ROOT, run_facts


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json-out", default=str(ROOT / "bench" / "results" / "engine_overhead.json"))
    args = ap.parse_args(argv)
    from boundctx.providers.local import LlamaCppProvider

    provider = LlamaCppProvider(n_ctx=2048)
    model_s = [0.0]
    calls = [0]
    stream = provider._stream

    def clocked(request, **kw):  # time spent inside each generation, chunk by chunk
        calls[0] += 1
        it = stream(request, **kw)
        while True:
            t = time.perf_counter()
            try:
                chunk = next(it)
            except StopIteration:
                model_s[0] += time.perf_counter() - t
                return
            model_s[0] += time.perf_counter() - t
            yield chunk

    provider._stream = clocked
    settings = config.load(env={}, overrides={"chat.n_ctx": 2048, "chat.analysis_workers": 2})
    text = (ROOT / "examples" / "build.log").read_text()
    provider.count_prompt([{"role": "user", "content": "warm"}])
    started = time.perf_counter()
    events = list(Engine(provider, settings=settings, max_reply_tokens=128).reply(
        [{"role": "user", "content": "Which step failed, and what is its job id?"}], files=[("build.log", text)]))
    total = time.perf_counter() - started
    provider.close()
    report = {"total_s": total, "model_s": model_s[0], "engine_s": total - model_s[0],
              "engine_share": (total - model_s[0]) / total, "model_calls": calls[0],
              "finished": isinstance(events[-1], Done), "versions": run_facts(("boundctx", "llama_cpp_python"))}
    out = pathlib.Path(args.json_out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))
    print(f"reply {total:.1f} s, inside the model {model_s[0]:.1f} s over {calls[0]} calls, "
          f"engine {total - model_s[0]:.2f} s = {100 * report['engine_share']:.2f}% [json] {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
