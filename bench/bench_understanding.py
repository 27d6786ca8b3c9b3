"""Understanding: the task pipeline against the recorded single-call baseline.

Corpora:

- **booking** (``bench/data/booking_turns.json``): 24 turns written for this benchmark, a
  booking domain with records on screen: one, two and three operations per message,
  corrections inside the message, records named by position ("the second one"), and
  messages that ask for nothing in the catalog.
- **BFCL v4** (``../shared/data/bfcl``): ``multiple`` (one call among 2-4 functions),
  ``parallel`` (several calls of one function), ``parallel_multiple`` (2-5 calls across
  functions), ``irrelevance`` (no function applies: the right plan is empty). The first
  ``--bfcl`` items of each, scored against BFCL's acceptable values.

Per turn: whole-plan accuracy, operation-set exact match, argument accuracy, warranted
and unwarranted notices, model calls, prompt and completion tokens, chain depth, wall
clock, shortcuts; split by the number of requested operations. Then each task kind on
its own with gold inputs (booking), and a budget sweep (``max_model_calls`` 1, 2, 4, ...)
counting partial effects, which must be zero in every run.

Models: ``--model scripted`` answers every task from the booking gold (exact by
construction: it proves the harness and measures the pipeline's cost structure; it
cannot run BFCL, which has no gold units); ``--model embedded`` runs SmolLM2-135M
through llama-cpp-python with grammar-constrained decoding (reported, not gated).

Run: ``python -m bench.bench_understanding --model embedded`` (writes
``bench/results/understanding-<model>.json``).
"""

from __future__ import annotations

import argparse
import collections
import json
import pathlib
import re
import statistics
import sys
import time

import msgspec

from boundctx import config
from boundctx.understanding import Catalog, Record, ReplayLog, Understander
from boundctx.understanding import tasks as T
from boundctx.understanding.normalise import normalise

from bench._harness import ROOT, markdown_table, percentile, run_facts

BOOKING = ROOT / "bench" / "data" / "booking_turns.json"
BFCL = ROOT.parent / "shared" / "data" / "bfcl"
BFCL_CATEGORIES = ("multiple", "parallel", "parallel_multiple", "irrelevance")


# -- corpora ------------------------------------------------------------------------------


def booking_corpus() -> tuple[Catalog, list[Record], list[dict]]:
    data = json.loads(BOOKING.read_text())
    catalog = Catalog.from_dict(data["catalog"], source=str(BOOKING))
    records = [Record(**r) for r in data["records"]]
    return catalog, records, data["turns"]


def oracle_gold(turn: dict) -> dict:
    """The Oracle's gold for a booking turn."""
    units = turn.get("units") or list(dict.fromkeys(a["unit"] for a in turn["acts"]))
    route = collections.defaultdict(list)
    locate, extract = {}, {}
    for a in turn["acts"]:
        route[a["unit"]].append(a["operation"])
        locate[(a["unit"], a["operation"])] = a["record"]
        extract[(a["unit"], a["operation"])] = {k: tuple(v) for k, v in a["arguments"].items()}
    return {"units": units, "route": dict(route), "locate": locate, "extract": extract}


def bfcl_corpus(per_category: int) -> list[dict]:
    items = []
    for category in BFCL_CATEGORIES:
        path = BFCL / f"BFCL_v4_{category}.json"
        if not path.exists():
            raise SystemExit(f"BFCL data not found at {path} (the benchmark reads ../shared/data/bfcl)")
        answers = {}
        answer_path = BFCL / "possible_answer" / f"BFCL_v4_{category}.json"
        if answer_path.exists():
            answers = {a["id"]: a["ground_truth"] for a in map(json.loads, answer_path.read_text().splitlines())}
        for line in path.read_text().splitlines()[:per_category]:
            item = json.loads(line)
            items.append({"category": category, "id": item["id"], "functions": item["function"],
                          "message": item["question"][0][-1]["content"],
                          "gold": answers.get(item["id"], [])})
    return items


# -- scoring ------------------------------------------------------------------------------


def _norm_string(s: str) -> str:
    # BFCL compares strings without case, spaces and , . / - _ * ^
    return re.sub(r"[ ,./\-_*^]", "", s.lower())


def _same(value, option) -> bool:
    if option is None or value is None:
        return value is option
    if isinstance(option, str) and isinstance(value, str):
        return _norm_string(value) == _norm_string(option)
    if isinstance(option, bool) or isinstance(value, bool):
        return value is option
    if isinstance(option, (int, float)) and isinstance(value, (int, float)):
        return abs(float(value) - float(option)) < 1e-9
    if isinstance(option, list) and isinstance(value, list):
        return len(option) == len(value) and all(_same(v, o) for v, o in zip(value, option))
    if isinstance(option, dict) and isinstance(value, dict):
        return set(option) == set(value) and all(
            any(_same(value[k], o) for o in (option[k] if isinstance(option[k], list) else [option[k]]))
            for k in option)
    return False


def _call_score(args: dict, gold: dict) -> tuple[int, bool]:
    """(gold arguments right, whole call right) for one predicted call against one gold call."""
    right = 0
    whole = all(k in gold for k in args)  # no argument the gold does not have
    for name, options in gold.items():
        if name in args:
            ok = any(_same(args[name], o) for o in options)
        else:
            ok = "" in options  # an optional argument left out
        right += ok
        whole = whole and ok
    return right, whole


def score(predicted: list[tuple[str, dict]], gold: list[tuple[str, dict]]) -> dict:
    """Per-turn scores: gold calls are (name, {arg: [acceptable values]})."""
    op_set = collections.Counter(n for n, _ in predicted) == collections.Counter(n for n, _ in gold)
    free = list(range(len(predicted)))
    args_right = args_total = whole_calls = 0
    for name, gargs in gold:
        args_total += len(gargs)
        best = None
        for i in free:
            if predicted[i][0] == name:
                s = _call_score(predicted[i][1], gargs)
                if best is None or s > best[1]:
                    best = (i, s)
        if best is not None:
            free.remove(best[0])
            args_right += best[1][0]
            whole_calls += best[1][1]
    whole = op_set and whole_calls == len(gold) and not free
    return {"whole_plan": whole, "op_set": op_set, "args_right": args_right, "args_total": args_total}


def plan_calls(plan, catalog: Catalog, with_record: bool, *, ready_only: bool = False) -> list[tuple[str, dict]]:
    """The plan's acts as calls: all of them (what the plan understood), or only those
    marked ready (what would go ahead)."""
    out = []
    for a in plan.acts:
        if ready_only and a.status != "ready":
            continue
        args = dict(a.arguments)
        if with_record:
            args["@record"] = a.record
        out.append((a.operation, args))
    return out


def booking_gold(turn: dict, catalog: Catalog) -> list[tuple[str, dict]]:
    gold = []
    for a in turn["acts"]:
        op = catalog.operation(a["operation"])
        args = {name: [normalise(v[1], op.param(name))] for name, v in a["arguments"].items()}
        args["@record"] = [a["record"]]
        gold.append((a["operation"], args))
    return gold


def notices(plan, asks_nothing) -> tuple[int, int]:
    """(warranted, unwarranted). Saying "nothing here for me" about a part of the message
    that asks for nothing in the catalog is warranted (``asks_nothing(unit_text)``);
    every other notice or question, on these corpora of complete requests, is not."""
    text = {u.id: u.text for u in plan.units}
    warranted = sum(n.kind == "no_operation" and asks_nothing(text.get(n.unit, "")) for n in plan.notices)
    return warranted, len(plan.notices) - warranted + len(plan.questions)


# -- runs ---------------------------------------------------------------------------------


def make_provider(model: str, gold_of=None, records=()):
    if model == "embedded":
        from boundctx.providers.local import LlamaCppProvider
        return LlamaCppProvider(n_ctx=4096)
    from boundctx.providers import ScriptedProvider

    from tests._support.oracle import Oracle  # the scripted model of tests/understanding
    return ScriptedProvider(Oracle(gold_of, records))


def run_turn(system: str, u: Understander, message: str, records, turn: str | None = None) -> tuple[object, float]:
    started = time.perf_counter()
    plan = (u.understand if system == "pipeline" else u.single_call)(message, records=records, turn=turn)
    return plan, time.perf_counter() - started


def row(plan, wall: float, s: dict, asks_nothing, ready: dict) -> dict:
    w, uw = notices(plan, asks_nothing)
    s = {**s, "whole_plan_ready": ready["whole_plan"]}
    b = plan.budget
    return {**s, "status": plan.status, "warranted_notices": w, "unwarranted_notices": uw,
            "calls": b.model_calls, "prompt_tokens": b.prompt_tokens, "completion_tokens": b.completion_tokens,
            "chain_depth": b.chain_depth, "wall_s": round(wall, 3), "shortcuts": plan.shortcuts,
            "exhausted": b.exhausted}


def end_to_end(model: str, settings, bfcl_n: int, log, replay: ReplayLog | None = None) -> list[dict]:
    """Every turn through both systems. With ``replay``, the booking turns' attempts are
    recorded and each row keeps its plan, so the run can be replayed without a model
    (``bench/test_bench_understanding.py`` does)."""
    rows = []
    catalog, records, turns = booking_corpus()
    shared = make_provider(model) if model == "embedded" else None
    for k, turn in enumerate(turns):
        gold = booking_gold(turn, catalog)
        provider = shared or make_provider(model, oracle_gold(turn), records)
        for system in ("pipeline", "baseline"):
            u = Understander(provider, catalog, settings=settings, log=replay)
            plan, wall = run_turn(system, u, turn["message"], records, f"booking-{k}-{system}")
            acting = {a["unit"] for a in turn["acts"]}
            r = row(plan, wall, score(plan_calls(plan, catalog, True), gold),
                    lambda text, acting=acting: not any(text in a or a in text for a in acting),
                    score(plan_calls(plan, catalog, True, ready_only=True), gold))
            rows.append({"corpus": "booking", "item": k, "category": turn["category"], "ops": len(gold),
                         "system": system, **r, "plan": msgspec.to_builtins(plan)})
            log(rows[-1])
    if model != "embedded" or bfcl_n == 0:
        return rows
    for item in bfcl_corpus(bfcl_n):
        catalog = Catalog.from_bfcl(item["functions"], source=item["id"])
        gold = [(name, args) for call in item["gold"] for name, args in call.items()]
        for system in ("pipeline", "baseline"):
            u = Understander(shared, catalog, settings=settings)
            plan, wall = run_turn(system, u, item["message"], [])
            r = row(plan, wall, score(plan_calls(plan, catalog, False), gold), lambda text, empty=not gold: empty,
                    score(plan_calls(plan, catalog, False, ready_only=True), gold))
            rows.append({"corpus": "bfcl", "item": item["id"], "category": item["category"], "ops": len(gold),
                         "system": system, **r})
            log(rows[-1])
    return rows


def per_task(model: str, settings, log, bfcl_n: int = 0) -> dict:
    """Each task kind on its own, with gold inputs: booking for every kind, BFCL
    (``multiple`` and ``irrelevance``, the whole message as the unit) for route and
    extract."""
    catalog, records, turns = booking_corpus()
    shared = make_provider(model) if model == "embedded" else None
    results = collections.defaultdict(lambda: [0, 0])

    def tally(name: str, ok: bool) -> None:
        results[name][0] += bool(ok)
        results[name][1] += 1

    for k, turn in enumerate(turns):
        provider = shared or make_provider(model, oracle_gold(turn), records)
        u = Understander(provider, catalog, settings=settings)
        m = turn["message"]
        gold = oracle_gold(turn)
        units, reason, _ = u.run_task(T.segment_call(m, max_units=8), records=records)
        tally("segment: units exact", units is not None and [x.text for x in units] == gold["units"])
        gold_units = []
        for i, text in enumerate(gold["units"]):
            at = m.find(text)
            gold_units.append(T.Unit(f"u{i + 1}", text, at, at + len(text)))
        if len(gold_units) > 1:  # coverage: leave the last unit out; its words must be flagged
            kept = gold_units[:-1]
            found = T.gaps(m, kept)
            flagged, _, _ = u.run_task(T.coverage_call(m, kept, found), records=records)
            dropped = gold_units[-1]
            tally("coverage: a dropped unit is flagged", flagged is not None and any(
                g.start <= dropped.start and dropped.end <= g.end for g in flagged))
        for unit in gold_units:
            text = unit.text
            ops, _, _ = u.run_task(T.route_call(m, unit, catalog.operations), records=records)
            want = sorted(gold["route"].get(text, []))
            tally("route: operation set exact", ops is not None and sorted(o.name for o in ops) == want)
            for name in gold["route"].get(text, []):
                op = catalog.operation(name)
                candidates = [r for r in records if r.kind == op.record_kind]
                record = next((r for r in records if r.id == gold["locate"][(text, name)]), None)
                if len(candidates) > 1:
                    got, _, _ = u.run_task(T.locate_call(m, unit, op, candidates), records=records)
                    tally("locate: record exact", got is not None and got.id == gold["locate"][(text, name)])
                if not op.params:
                    continue
                got, _, _ = u.run_task(T.extract_call(m, unit, op, record), records=records)
                want = {n: normalise(v[1], op.param(n)) for n, v in gold["extract"][(text, name)].items()}
                have = {n: e.value for n, e in (got or {}).items() if e.value is not None}
                tally("extract: arguments exact", got is not None and have == want)
                tally("extract: valid (spans in range, values of their type)", got is not None)
                values = {n: T.Extracted(v[0], v[1], want[n]) for n, v in gold["extract"][(text, name)].items()}
                verdicts, _, _ = u.run_task(T.verify_call(m, unit, op, values), records=records)
                tally("verify: right values kept", verdicts is not None and all(verdicts.values()))
                wrong = {n: T.Extracted(e.evidence, e.value_text, _perturb(e.value)) for n, e in values.items()}
                verdicts, _, _ = u.run_task(T.verify_call(m, unit, op, wrong), records=records)
                tally("verify: seeded wrong values caught", verdicts is not None and not any(verdicts.values()))
                if len(op.params) + bool(op.record_kind) > 1:
                    missing = [("record", f"which {op.record_kind}")] if op.record_kind else []
                    missing += [(p.name, p.description) for p in op.params]
                    about, _, _ = u.run_task(T.question_frame_call(m, unit, op, missing), records=records)
                    tally("question_frame: asks about everything missing",
                          about is not None and set(about) == {x for x, _ in missing})
        log({"per_task_turn": k})
    if model == "embedded" and bfcl_n:
        for item in bfcl_corpus(bfcl_n):
            if item["category"] not in ("multiple", "irrelevance"):
                continue
            bfcl = Catalog.from_bfcl(item["functions"], source=item["id"])
            u = Understander(shared, bfcl, settings=settings)
            m = item["message"]
            unit = T.Unit("u1", m, 0, len(m))
            gold = [(name, args) for call in item["gold"] for name, args in call.items()]
            ops, _, _ = u.run_task(T.route_call(m, unit, bfcl.operations))
            tally(f"route on BFCL {item['category']}: exact",
                  ops is not None and sorted(o.name for o in ops) == sorted(n for n, _ in gold))
            if gold:
                op = bfcl.operation(gold[0][0])
                got, _, _ = u.run_task(T.extract_call(m, unit, op, None))
                args = {n: e.value for n, e in (got or {}).items() if e.value is not None}
                tally("extract on BFCL multiple: call right", got is not None and score([(op.name, args)], gold[:1])[
                    "whole_plan"])
            log({"per_task_bfcl": item["id"]})
    return {name: {"right": r, "asked": n, "share": r / n if n else None} for name, (r, n) in results.items()}


def _perturb(value):
    """A value that is plainly not the quoted one (for verify's seeded errors)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 7
    return f"{value} (or 11:45pm)" if not str(value).endswith("pm") else "11:45am"


def partial_effect(plan, full) -> bool:
    """Whether a bounded plan lets something go ahead that it should not: an act marked
    ready that the unbounded plan does not have as it is, one beside a unit not
    understood that (in the unbounded plan) acts on the same record, or on the same
    operation when it acts on none, or any act of a turn that failed closed. Worked
    out from the unbounded plan, not from the holds the bounded plan declares."""
    if plan.status == "failed_closed" and plan.acts:
        return True
    full_acts = {json.dumps(msgspec.to_builtins(a), sort_keys=True) for a in full.acts}
    failed = {n.unit for n in plan.notices if n.kind == "not_understood"}
    touched = {(a.record or f"op:{a.operation}") for a in full.acts if a.unit in failed}
    return any(a.status == "ready" and (json.dumps(msgspec.to_builtins(a), sort_keys=True) not in full_acts
                                        or (a.record or f"op:{a.operation}") in touched) for a in plan.acts)


def budget_sweep(model: str, settings_for, log, turns_limit: int | None) -> list[dict]:
    """The pipeline at max_model_calls 1, 2, 4, ...: partial effects must be 0."""
    catalog, records, turns = booking_corpus()
    turns = turns[:turns_limit] if turns_limit else turns
    shared = make_provider(model) if model == "embedded" else None
    full = {}
    out = []
    for calls in (None, 1, 2, 4, 8, 16):
        settings = settings_for(calls)
        partial = right = total_calls = 0
        for k, turn in enumerate(turns):
            provider = shared or make_provider(model, oracle_gold(turn), records)
            plan = Understander(provider, catalog, settings=settings).understand(turn["message"], records=records)
            if calls is None:
                full[k] = plan
            else:
                partial += partial_effect(plan, full[k])
            right += score(plan_calls(plan, catalog, True), booking_gold(turn, catalog))["whole_plan"]
            total_calls += plan.budget.model_calls
        out.append({"max_model_calls": calls or "unbounded (24)", "turns": len(turns), "whole_plan_right": right,
                    "model_calls": total_calls, "partial_effects": partial})
        log(out[-1])
    return out


def summarise(rows: list[dict]) -> dict:
    groups = collections.defaultdict(list)
    for r in rows:
        groups[(r["corpus"], r["system"], "all")].append(r)
        groups[(r["corpus"], r["system"], f"{r['ops']} ops")].append(r)
        groups[(r["corpus"], r["system"], r["category"])].append(r)
    out = {}
    for (corpus, system, split), rs in sorted(groups.items(), key=lambda kv: str(kv[0])):
        args_total = sum(r["args_total"] for r in rs)
        out[f"{corpus} | {system} | {split}"] = {
            "turns": len(rs), "whole_plan": sum(r["whole_plan"] for r in rs) / len(rs),
            "whole_plan_ready": sum(r["whole_plan_ready"] for r in rs) / len(rs),
            "op_set": sum(r["op_set"] for r in rs) / len(rs),
            "args": sum(r["args_right"] for r in rs) / args_total if args_total else None,
            "warranted_notices": sum(r["warranted_notices"] for r in rs),
            "unwarranted_notices": sum(r["unwarranted_notices"] for r in rs),
            "calls_per_turn": statistics.mean(r["calls"] for r in rs),
            "prompt_tokens_per_turn": statistics.mean(r["prompt_tokens"] for r in rs),
            "completion_tokens_per_turn": statistics.mean(r["completion_tokens"] for r in rs),
            "max_chain_depth": max(r["chain_depth"] for r in rs),
            "wall_s_p50": statistics.median(r["wall_s"] for r in rs),
            "wall_s_p90": percentile((r["wall_s"] for r in rs), 0.9),
            "shortcuts": dict(sum((collections.Counter(r["shortcuts"]) for r in rs), collections.Counter())),
            "failed_closed": sum(r["status"] == "failed_closed" for r in rs)}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=("scripted", "embedded"), default="scripted")
    ap.add_argument("--bfcl", type=int, default=8, help="BFCL items per category (embedded only; default 8)")
    ap.add_argument("--sweep-turns", type=int, default=None,
                    help="booking turns in the budget sweep (default: all; embedded: 8)")
    ap.add_argument("--json-out", default=None)
    ap.add_argument("--parts", default="e2e,tasks,sweep",
                    help="which parts to run (comma-separated: e2e, tasks, sweep); the others are kept from the "
                         "existing JSON, each part with the commit it ran at")
    args = ap.parse_args(argv)
    parts = set(args.parts.split(","))
    if not parts <= {"e2e", "tasks", "sweep"}:
        ap.error(f"--parts takes e2e, tasks, sweep; got {args.parts}")
    json_out = args.json_out or str(ROOT / "bench" / "results" / f"understanding-{args.model}.json")

    def settings_for(calls=None):
        over = {"understanding.max_parallel": 1}
        if calls is not None:
            over["understanding.max_model_calls"] = calls
        return config.load(env={}, overrides=over)

    def log(entry):
        print(json.dumps(entry, default=str), flush=True)

    started = time.perf_counter()
    previous = json.loads(pathlib.Path(json_out).read_text()) if pathlib.Path(json_out).exists() else {}
    if parts != {"e2e", "tasks", "sweep"} and not previous:
        ap.error(f"--parts {args.parts} keeps the other parts from {json_out}, which does not exist")
    ran_at = {}
    facts = run_facts(("boundctx", "llama_cpp_python"))
    if "e2e" in parts:
        replay_path = pathlib.Path(json_out).with_suffix(".replay.jsonl")
        partial = replay_path.with_suffix(".partial")
        partial.unlink(missing_ok=True)
        with ReplayLog(str(partial), sync=False) as replay:
            rows = end_to_end(args.model, settings_for(), args.bfcl, log, replay)
        partial.replace(replay_path)  # the log and its plans land together
        for stale in (partial.with_name(partial.name + ".layout"), partial.with_name(partial.name + ".lock")):
            stale.unlink(missing_ok=True)
        ran_at["e2e"] = facts["git_commit"]
    else:
        rows = previous["rows"]
    if "tasks" in parts:
        tasks = per_task(args.model, settings_for(), log, args.bfcl)
        ran_at["tasks"] = facts["git_commit"]
    else:
        tasks = previous["per_task"]
    if "sweep" in parts:
        sweep = budget_sweep(args.model, settings_for, log, args.sweep_turns if args.sweep_turns is not None
                             else (8 if args.model == "embedded" else None))
        ran_at["sweep"] = facts["git_commit"]
    else:
        sweep = previous["budget_sweep"]
    commits = {**previous.get("meta", {}).get("parts_ran_at", {}), **ran_at}
    report = {"meta": {"model": args.model, "bfcl_per_category": args.bfcl,
                       "wall_s": time.perf_counter() - started, "parts_ran_at": commits, "versions": facts},
              "summary": summarise(rows), "per_task": tasks, "budget_sweep": sweep, "rows": rows}
    pathlib.Path(json_out).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(json_out).write_text(json.dumps(report, indent=1, default=str))
    print()
    print(markdown_table(
        ("corpus / system / split", "turns", "whole plan", "op set", "args", "notices w/u", "calls", "prompt tok",
         "compl tok", "depth", "p50 s"),
        [(key, s["turns"], f"{s['whole_plan']:.2f}", f"{s['op_set']:.2f}",
          "-" if s["args"] is None else f"{s['args']:.2f}", f"{s['warranted_notices']}/{s['unwarranted_notices']}",
          f"{s['calls_per_turn']:.1f}", f"{s['prompt_tokens_per_turn']:.0f}", f"{s['completion_tokens_per_turn']:.0f}",
          s["max_chain_depth"], f"{s['wall_s_p50']:.2f}") for key, s in report["summary"].items()]))
    print()
    print(markdown_table(("task (gold inputs)", "right", "asked"),
                         [(name, t["right"], t["asked"]) for name, t in tasks.items()]))
    print()
    print(markdown_table(("max_model_calls", "turns", "whole plan right", "model calls", "partial effects"),
                         [(s["max_model_calls"], s["turns"], s["whole_plan_right"], s["model_calls"],
                           s["partial_effects"]) for s in sweep]))
    print(f"\nwall {report['meta']['wall_s']:.1f} s; [json] {json_out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
