#!/usr/bin/env python
"""The web front end opening a session: a ~1 MB transcript against a generated 1 GiB one.

The issue says a generated 1 GiB transcript must open as fast as a small one. A session
view asks for the newest 100 messages at a 64 KiB display budget each, so the work of
opening should depend on the window, not on the file. This run checks that, side by
side: both transcripts in one sessions folder, served by one ``boundctx serve``
(in-process, the scripted provider; no model is involved in reading a session).

For each transcript:

* **API, cold**: the first ``GET /boundctx/v1/sessions/{id}/messages?message_limit=100
  &content_limit=65536`` with no sidecar index (its sidecar files removed first, the
  file itself in the page cache): a cold open of a 1 GiB file rescans it once and
  writes the sidecar;
* **API, warm**: the same request, median of ``--repeats`` (default 10), and the page
  before it (``message_before=<count-100>``), what scrolling up asks for;
* **browser, cold**: headless Chromium (Playwright, the system chromium, as in
  tests/web) opening ``/#/s/<id>`` once with the sidecar removed again, timed from
  ``page.goto`` to the newest message (``#messages .message[data-index="<count-1>"]``)
  visible;
* **browser, warm**: the same on ``--repeats`` fresh pages (each in a new browser
  context, so nothing is cached in the browser), median; with the time at which the
  node entered the DOM as the page itself saw it (``performance.now()`` from the
  navigation start, a MutationObserver added before the page's scripts run), which
  leaves out Playwright's own polling;
* **browser, scroll to the top once**: on each of those pages, from setting the message
  box's ``scrollTop`` to 0 to the 100 older messages fetched and prepended.

Then the ratio big/small of every warm number. The cold first open of the big one is
reported on its own: it is a one-time cost per file (or per rewrite), not the cost of
opening.

Warm requests alternate which transcript goes first (the machine is shared and noisy).
The HTTP client (httpx) runs in the server's process: one request at a time, it waits on
its socket while the server works.

Data: ``boundctx.transcript.sample.write_sample`` with seed 1234, ``big_every=6000``,
``big_bytes=(1 MiB, 5 MiB)``, ``compaction_every=5000`` (bench_transcript.py's mix), at
``--small-size`` (default 1 MB) and ``--size`` (default 1G = 1 GiB), written to
``--dir`` (default ``/tmp/boundctx-bench/front-end``, never the repository) as
``small-<bytes>-s<seed>.jsonl`` and ``big-<bytes>-s<seed>.jsonl`` with a
``.meta.json`` beside each, and reused while the file still has the size the meta
says. Generating 1 GiB takes one to two minutes, once.

Usage::

    python -m bench.bench_front_end                  # a few minutes the first time, ~1 min after
    python -m bench.bench_front_end --size 64M --repeats 5
    python -m bench.bench_front_end --dir /var/tmp/fe --json-out /tmp/front-end.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import statistics
import time

from bench._harness import ROOT, command_line, human_size, markdown_table, parse_size, read_through, run_facts

SEED = 1234
BIG_EVERY = 6000
BIG_BYTES = (1 << 20, 5 << 20)
COMPACTION_EVERY = 5000
#: What the front end asks for when it opens a session (serve/web/session.js: PAGE, DISPLAY_BYTES).
PAGE = 100
DISPLAY_BYTES = 64 * 1024
API = "/boundctx/v1/sessions"

#: Added before the page's own scripts: records, in page time (ms from the navigation
#: start), when the newest message's node entered the DOM and the animation frame after.
OBSERVE = """
(() => {
  const wanted = %s;
  const seen = () => {
    if (window.__newestInserted !== undefined) return;
    if (!document.querySelector(wanted)) return;
    window.__newestInserted = performance.now();
    requestAnimationFrame(() => { window.__newestFrame = performance.now(); });
    observer.disconnect();
  };
  const observer = new MutationObserver(seen);
  observer.observe(document, {subtree: true, childList: true});
})();
"""


# -- data -------------------------------------------------------------------------------


def ensure_sample(folder: pathlib.Path, kind: str, target: int) -> dict:
    """The seeded transcript ``<kind>-<target>-s<seed>.jsonl`` in ``folder``: reused when
    its meta says the same parameters and the file still has the size written, else
    generated (write_sample renames it into place only once complete)."""
    sid = f"{kind}-{target}-s{SEED}"
    path = folder / f"{sid}.jsonl"
    meta_path = folder / f"{sid}.meta.json"
    params = {"target_bytes": target, "seed": SEED, "big_every": BIG_EVERY, "big_bytes": list(BIG_BYTES),
              "compaction_every": COMPACTION_EVERY}
    if path.exists() and meta_path.exists():
        meta = json.loads(meta_path.read_text())
        if meta.get("params") == params and meta["counts"]["bytes"] == path.stat().st_size:
            print(f"[data] {kind}: reusing {path} ({human_size(meta['counts']['bytes'])}, "
                  f"{meta['counts']['messages']:,} messages)", flush=True)
            return {**meta, "id": sid, "path": str(path), "reused": True}
    from boundctx.transcript.sample import write_sample

    print(f"[data] {kind}: generating {human_size(target)} -> {path} ...", flush=True)
    last = [0]

    def progress(done: int) -> None:
        if done - last[0] >= (128 << 20):
            last[0] = done
            print(f"[data]   {human_size(done)}", flush=True)

    started = time.perf_counter()
    counts = write_sample(path, target_bytes=target, seed=SEED, big_every=BIG_EVERY, big_bytes=BIG_BYTES,
                          compaction_every=COMPACTION_EVERY, progress=progress)
    generation_s = time.perf_counter() - started
    remove_sidecars(str(path))  # one left from an earlier file of the same name would be stale
    meta = {"params": params, "counts": counts, "generation_s": generation_s}
    meta_path.write_text(json.dumps(meta, indent=1) + "\n")
    print(f"[data] {kind}: {counts['bytes']:,} bytes, {counts['messages']:,} messages in {generation_s:.1f} s",
          flush=True)
    return {**meta, "id": sid, "path": str(path), "reused": False}


def remove_sidecars(path: str) -> list[str]:
    """Delete the transcript's layout sidecars (beside it and in the cache folder), so
    the next open scans the file: the removed paths."""
    from boundctx.transcript.layout import sidecar_paths

    removed = []
    for side in sidecar_paths(path):
        try:
            os.unlink(side)
            removed.append(side)
        except FileNotFoundError:
            pass
    return removed


def sidecar_facts(path: str) -> dict | None:
    from boundctx.transcript.layout import sidecar_paths

    for side in sidecar_paths(path):
        if os.path.exists(side):
            return {"path": side, "bytes": os.path.getsize(side)}
    return None


# -- API --------------------------------------------------------------------------------


def window_url(base: str, sid: str, before: int | None = None) -> str:
    q = f"message_limit={PAGE}&content_limit={DISPLAY_BYTES}"
    if before is not None:
        q = f"message_before={before}&" + q
    return f"{base}{API}/{sid}/messages?{q}"


def timed_window(client, base: str, sample: dict, before: int | None = None) -> tuple[float, dict]:
    """One window request, timed to the last byte and checked: the newest ``PAGE``
    messages (or the ``PAGE`` before ``before``). The seconds and what came back."""
    started = time.perf_counter()
    r = client.get(window_url(base, sample["id"], before))
    elapsed = time.perf_counter() - started
    r.raise_for_status()
    body = r.json()
    count = sample["counts"]["messages"]
    end = count if before is None else before
    got = [m["index"] for m in body["messages"]]
    if body["message_count"] != count or got != list(range(end - PAGE, end)):
        raise SystemExit(f"wrong window for {sample['id']}: count {body['message_count']} (want {count}), "
                         f"indexes {got[:1]}..{got[-1:]} (want {end - PAGE}..{end - 1})")
    return elapsed, {"bytes": len(r.content), "cut_messages": sum(1 for m in body["messages"] if m["cut_bytes"]),
                     "compactions": len(body["compactions"])}


# -- browser ----------------------------------------------------------------------------


def newest_selector(count: int) -> str:
    return f'#messages .message[data-index="{count - 1}"]'


def browser_open(browser, base: str, sample: dict, timeout_ms: int) -> dict:
    """A fresh page (its own context) opening the session: time to the newest message
    visible, the page's own time for it, then one scroll to the top."""
    count = sample["counts"]["messages"]
    wanted = newest_selector(count)
    page = browser.new_page()
    page.set_default_timeout(timeout_ms)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.add_init_script(OBSERVE % json.dumps(wanted))
    try:
        started = time.perf_counter()
        page.goto(f"{base}/#/s/{sample['id']}", wait_until="commit")
        page.wait_for_selector(wanted, state="visible")
        shown_s = time.perf_counter() - started
        in_page = page.evaluate("""() => [window.__newestInserted, window.__newestFrame,
            (performance.getEntriesByType("resource").find((e) => e.name.includes("/messages?")) || {}).responseEnd]""")
        shown = page.eval_on_selector_all("#messages .message[data-index]",
                                          "ns => ns.map(n => Number(n.dataset.index))")
        if shown != list(range(count - PAGE, count)):
            raise SystemExit(f"{sample['id']}: the view opened on {shown[:1]}..{shown[-1:]}, "
                             f"not the newest {PAGE}")
        # Scroll to the top once: the page before is fetched and prepended.
        top = count - PAGE
        started = time.perf_counter()
        page.eval_on_selector("#messages", "b => { b.scrollTop = 0; }")
        page.wait_for_function(f"() => Number(document.querySelector('#messages .message[data-index]')"
                               f".dataset.index) < {top}")
        scroll_s = time.perf_counter() - started
        shown = page.eval_on_selector_all("#messages .message[data-index]",
                                          "ns => ns.map(n => Number(n.dataset.index))")
        if shown != list(range(count - 2 * PAGE, count)):
            raise SystemExit(f"{sample['id']}: after one scroll up the view holds {shown[:1]}..{shown[-1:]}")
    finally:
        page.close()
    if errors:
        raise SystemExit(f"{sample['id']}: the page reported errors: {errors}")
    return {"shown_s": shown_s, "in_page_inserted_s": in_page[0] / 1000,
            "in_page_frame_s": None if in_page[1] is None else in_page[1] / 1000,
            "in_page_window_fetched_s": None if in_page[2] is None else in_page[2] / 1000, "scroll_top_s": scroll_s}


def launch_browser():
    from playwright.sync_api import sync_playwright

    from tests._support.chromium import chromium_path

    executable = chromium_path()
    if executable is None:
        raise SystemExit("no chromium found (/usr/lib/chromium/chromium or on PATH): apt-get install chromium")
    playwright = sync_playwright().start()
    try:
        return playwright, playwright.chromium.launch(executable_path=executable, headless=True), executable
    except BaseException:
        playwright.stop()
        raise


# -- the run ----------------------------------------------------------------------------


def interleaved(kinds: list[str], repeats: int):
    """``repeats`` rounds over ``kinds``, the order flipped every other round."""
    for r in range(repeats):
        yield from (kinds if r % 2 == 0 else kinds[::-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", default="1G", help="the big transcript (default 1G = 1 GiB)")
    ap.add_argument("--small-size", default="1000000", help="the small transcript (default 1000000 bytes)")
    ap.add_argument("--repeats", type=int, default=10, help="warm requests and page loads each (default 10)")
    ap.add_argument("--dir", default="/tmp/boundctx-bench/front-end",
                    help="the sessions folder holding both transcripts (default /tmp/boundctx-bench/front-end)")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds a page may take (default 300)")
    ap.add_argument("--json-out", default=str(ROOT / "bench" / "results" / "front-end.json"))
    args = ap.parse_args()
    folder = pathlib.Path(args.dir).resolve()
    if folder == ROOT or ROOT in folder.parents:
        raise SystemExit(f"--dir {folder} is inside the repository; generated data goes elsewhere")
    folder.mkdir(parents=True, exist_ok=True)
    loadavg_before = os.getloadavg()
    date = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")

    import httpx

    from boundctx.providers import ScriptedProvider
    from boundctx.serve import create_app

    from tests._support import scripted
    from tests._support.running import Running
    MODEL, settings = scripted.MODEL, scripted.settings

    samples = {"small": ensure_sample(folder, "small", parse_size(args.small_size)),
               "big": ensure_sample(folder, "big", parse_size(args.size))}
    kinds = list(samples)
    results: dict[str, dict] = {k: {"api": {"warm_s": [], "older_page_warm_s": []},
                                    "browser": {"warm": []}} for k in kinds}
    for k in kinds:
        results[k]["page_cache_read_s"] = read_through(samples[k]["path"])

    server = Running(create_app(ScriptedProvider(lambda r: "x"), settings=settings(), model_id=MODEL,
                                sessions_dir=str(folder)))
    playwright = browser = None
    try:
        with httpx.Client(timeout=args.timeout) as client:
            # Untimed: the first request's own costs (imports, the native library, the
            # thread pool) are not a transcript's. Then cold: no sidecar, so the first
            # open scans the file and writes one.
            for k in kinds:
                timed_window(client, server.url, samples[k])
            for k in kinds:
                results[k]["sidecars_removed"] = remove_sidecars(samples[k]["path"])
                cold_s, window = timed_window(client, server.url, samples[k])
                results[k]["api"]["cold_s"] = cold_s
                results[k]["window"] = window
                results[k]["sidecar"] = sidecar_facts(samples[k]["path"])
                print(f"[api] {k}: cold first open {cold_s * 1000:.1f} ms", flush=True)
            # API, warm: the newest window and the page before it.
            for k in interleaved(kinds, args.repeats):
                count = samples[k]["counts"]["messages"]
                results[k]["api"]["warm_s"].append(timed_window(client, server.url, samples[k])[0])
                results[k]["api"]["older_page_warm_s"].append(
                    timed_window(client, server.url, samples[k], before=count - PAGE)[0])
        playwright, browser, executable = launch_browser()
        timeout_ms = int(args.timeout * 1000)
        # Untimed: one load each, for the browser's own first-page costs.
        for k in kinds:
            browser_open(browser, server.url, samples[k], timeout_ms)
        # Browser, cold: the sidecar removed again; one open each.
        for k in kinds:
            remove_sidecars(samples[k]["path"])
            results[k]["browser"]["cold"] = browser_open(browser, server.url, samples[k], timeout_ms)
            print(f"[browser] {k}: cold first open {results[k]['browser']['cold']['shown_s'] * 1000:.1f} ms",
                  flush=True)
        # Browser, warm: fresh pages, alternating.
        for k in interleaved(kinds, args.repeats):
            results[k]["browser"]["warm"].append(browser_open(browser, server.url, samples[k], timeout_ms))
        browser_version = browser.version
    finally:
        if browser is not None:
            browser.close()
        if playwright is not None:
            playwright.stop()
        server.stop()
    loadavg_after = os.getloadavg()

    for k in kinds:
        api, web = results[k]["api"], results[k]["browser"]
        api["warm_median_s"] = statistics.median(api["warm_s"])
        api["older_page_warm_median_s"] = statistics.median(api["older_page_warm_s"])
        for key in ("shown_s", "in_page_window_fetched_s", "in_page_inserted_s", "scroll_top_s"):
            web[f"warm_{key.removesuffix('_s')}_median_s"] = statistics.median([w[key] for w in web["warm"]])
    warm_keys = {"api_warm": ("api", "warm_median_s"), "api_older_page_warm": ("api", "older_page_warm_median_s"),
                 "browser_warm_shown": ("browser", "warm_shown_median_s"),
                 "browser_warm_in_page_window_fetched": ("browser", "warm_in_page_window_fetched_median_s"),
                 "browser_warm_in_page_inserted": ("browser", "warm_in_page_inserted_median_s"),
                 "browser_warm_scroll_top": ("browser", "warm_scroll_top_median_s")}
    ratios = {name: results["big"][a][b] / results["small"][a][b] for name, (a, b) in warm_keys.items()}
    report = {
        "date": date,
        "command": command_line(),
        "args": vars(args),
        "loadavg_before": loadavg_before,
        "loadavg_after": loadavg_after,
        "what": {"window": f"message_limit={PAGE}&content_limit={DISPLAY_BYTES}",
                 "cold": "no sidecar (removed first), the file in the page cache",
                 "browser": "headless chromium via Playwright, a fresh context per load, timed from page.goto "
                            "to the newest message visible; in_page_window_fetched: the window request's "
                            "responseEnd (resource timing), in_page_inserted: performance.now() when the "
                            "newest node entered the DOM, both from the navigation start",
                 "scroll_top": "scrollTop = 0 on #messages until the older page is prepended",
                 "repeats": args.repeats},
        "data": {k: {key: samples[k][key] for key in ("id", "path", "counts", "params", "generation_s", "reused")}
                 for k in kinds},
        "small": results["small"],
        "big": results["big"],
        "ratios_big_over_small": ratios,
        "big_cold_first_open": {"api_s": results["big"]["api"]["cold_s"],
                                "browser_shown_s": results["big"]["browser"]["cold"]["shown_s"]},
        "chromium": {"path": executable, "version": browser_version},
        "versions": run_facts(("boundctx", "starlette", "uvicorn", "httpx", "playwright")),
    }
    out = pathlib.Path(args.json_out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")

    def ms(x: float) -> str:
        return f"{x * 1000:,.1f} ms"

    s, b = results["small"], results["big"]
    rows = [
        ("file", (f"{human_size(samples['small']['counts']['bytes'])}, "
                  f"{samples['small']['counts']['messages']:,} msgs"),
         f"{human_size(samples['big']['counts']['bytes'])}, {samples['big']['counts']['messages']:,} msgs", ""),
        ("newest window (JSON bytes, cut messages)", f"{s['window']['bytes']:,}, {s['window']['cut_messages']}",
         f"{b['window']['bytes']:,}, {b['window']['cut_messages']}", ""),
        ("API cold first open (no sidecar)", ms(s["api"]["cold_s"]), ms(b["api"]["cold_s"]), "(once)"),
        ("API warm, newest window", ms(s["api"]["warm_median_s"]), ms(b["api"]["warm_median_s"]),
         f"{ratios['api_warm']:.2f}x"),
        ("API warm, the page before", ms(s["api"]["older_page_warm_median_s"]),
         ms(b["api"]["older_page_warm_median_s"]), f"{ratios['api_older_page_warm']:.2f}x"),
        ("browser cold first open", ms(s["browser"]["cold"]["shown_s"]), ms(b["browser"]["cold"]["shown_s"]),
         "(once)"),
        ("browser warm, newest shown", ms(s["browser"]["warm_shown_median_s"]),
         ms(b["browser"]["warm_shown_median_s"]), f"{ratios['browser_warm_shown']:.2f}x"),
        ("  in page: window fetched", ms(s["browser"]["warm_in_page_window_fetched_median_s"]),
         ms(b["browser"]["warm_in_page_window_fetched_median_s"]),
         f"{ratios['browser_warm_in_page_window_fetched']:.2f}x"),
        ("  in page: node inserted", ms(s["browser"]["warm_in_page_inserted_median_s"]),
         ms(b["browser"]["warm_in_page_inserted_median_s"]), f"{ratios['browser_warm_in_page_inserted']:.2f}x"),
        ("browser warm, scroll to top once", ms(s["browser"]["warm_scroll_top_median_s"]),
         ms(b["browser"]["warm_scroll_top_median_s"]), f"{ratios['browser_warm_scroll_top']:.2f}x"),
    ]
    print()
    print(markdown_table(("", "small", "big", "big/small"), rows, align=("---", "---:", "---:", "---:")))
    print(f"\nwarm rows: medians of {args.repeats}; load average {loadavg_before[0]:.2f} before, "
          f"{loadavg_after[0]:.2f} after; JSON: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
