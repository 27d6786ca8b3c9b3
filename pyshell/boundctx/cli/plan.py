"""``boundctx plan --catalog C "message"``: what a message asks for, as a checked plan.

Nothing is carried out: the command prints the plan (acts, questions, notices, budget)
that understanding made, as text or ``--json``; ``--log`` appends every model attempt to
a replay log. ``run(args)`` parses and prints; :func:`plan_message` makes the plan.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from boundctx._files import read_bytes
from boundctx.cli._progress import LiveStatus
from boundctx.cli._provider import add_provider_arguments, load_settings, make_provider

if TYPE_CHECKING:  # `boundctx plan --help` imports no understanding code
    from boundctx.providers.base import Provider
    from boundctx.understanding import Catalog, Click, Plan, Record, ReplayLog

__all__ = ["add_parser", "plan_message"]


def add_parser(sub, summary: str) -> None:
    p = sub.add_parser(
        "plan", help=summary,
        description="Understand MESSAGE against a catalog of operations: segment it, route each part, "
                    "locate records, extract arguments as quotes then values, and print the plan. Bounded "
                    "by the understanding.* settings; fails closed.")
    p.add_argument("message", metavar="MESSAGE")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--catalog", metavar="FILE", help="the catalog (.toml or .json)")
    source.add_argument("--bfcl", metavar="FILE", help="a BFCL-style JSON list of function specs as the catalog")
    p.add_argument("--records", metavar="FILE", help="JSON list of the records the message may touch "
                                                      "({id, kind, fields, label})")
    p.add_argument("--click", metavar="OP[:RECORD]", help="the operation (and record) chosen in the UI")
    p.add_argument("--single-call", action="store_true", help="the one-call baseline instead of the task pipeline")
    p.add_argument("--log", metavar="FILE", help="append every model attempt to this replay log (JSONL)")
    p.add_argument("--max-model-calls", type=int, metavar="N", help="understanding.max_model_calls")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    add_provider_arguments(p)
    p.set_defaults(run=run)


def _render(plan) -> str:
    lines = [f"status: {plan.status}"]
    for a in plan.acts:
        args = ", ".join(f"{k}={json.dumps(v)}" for k, v in a.arguments.items())
        on = f" on {a.record}" if a.record else ""
        lines.append(f"  [{a.status}] {a.operation}{on}({args})" + (f"  missing: {', '.join(a.missing)}"
                                                                     if a.missing else ""))
    for q in plan.questions:
        lines.append(f"  ask: {q.text}")
    for n in plan.notices:
        lines.append(f"  notice ({n.kind}{', ' + n.bound if n.bound else ''}): {n.message}")
    b = plan.budget
    lines.append(f"  {b.model_calls} model calls, {b.prompt_tokens} prompt + {b.completion_tokens} completion "
                 f"tokens, chain depth {b.chain_depth}, {b.wall_s:.1f} s"
                 + (f"; budget.exhausted{{{b.exhausted}}}" if b.exhausted else ""))
    return "\n".join(lines)


def _call_progress(status: LiveStatus, max_calls: int):
    """The understander's progress hook: which task the model is on, and how many of the
    turn's calls have been made."""
    import threading

    lock = threading.Lock()
    made = 0

    def progress(kind: str, role: str) -> None:
        nonlocal made
        with lock:
            made += 1
            what = kind.replace("_", " ") + ("" if role == "call" else f" ({role})")
            status.set(f"understanding: {what}, model call {made} of at most {max_calls}")

    return progress


def plan_message(message: str, *, catalog: Catalog, provider: Provider, settings: Mapping[str, Any],
                 records: Sequence[Record | Mapping[str, Any]] = (), click: Click | None = None,
                 single_call: bool = False, log: ReplayLog | None = None,
                 progress: Callable[[str, str], None] | None = None) -> Plan:
    """The plan for ``message`` against ``catalog``; nothing is carried out.

    Parameters
    ----------
    message : str
        The user's message, verbatim.
    catalog : Catalog
    provider : Provider
        The model; the caller made it and closes it.
    settings : mapping
        The settings (``boundctx.config.load``): the ``understanding.*`` bounds.
    records : sequence of Record or dict
        The records the message may touch.
    click : Click, optional
        The operation (and record) chosen in the UI; the task pipeline only.
    single_call : bool
        The one-call baseline instead of the task pipeline (it takes no ``click``).
    log : ReplayLog, optional
        Every model attempt is appended to it.
    progress : callable, optional
        ``progress(kind, role)`` before each model call (see ``Understander``).
    """
    from boundctx.understanding import Understander

    u = Understander(provider, catalog, settings=settings, log=log, progress=progress)
    if single_call:
        return u.single_call(message, records=records)
    return u.understand(message, records=records, click=click)


def _catalog(path: str | None, bfcl: str | None) -> Catalog:
    """The catalog file at ``path``, or the BFCL-style list of function specs at ``bfcl``."""
    from boundctx.understanding import Catalog

    if path is not None:  # an empty --catalog is the catalog loader's error, not a missing --bfcl
        return Catalog.load(path)
    assert bfcl is not None, "argparse requires --catalog or --bfcl"
    functions = json.loads(read_bytes(bfcl, what="BFCL JSON file").decode("utf-8"))
    return Catalog.from_bfcl(functions, source=bfcl)


def _records(path: str | None) -> list:
    """The JSON list of records at ``path`` (none without a path)."""
    if not path:
        return []
    records = json.loads(read_bytes(path, what="JSON list of records").decode("utf-8"))
    if not isinstance(records, list):
        raise ValueError(f"{path}: records must be a JSON list of {{id, kind, fields, label}}")
    return records


def _click(text: str | None) -> Click | None:
    """``OP`` or ``OP:RECORD`` as a Click."""
    if not text:
        return None
    from boundctx.understanding import Click

    op, _, record = text.partition(":")
    return Click(op, record or None)


def run(args) -> int:
    from boundctx.errors import BoundctxError
    from boundctx.understanding import ReplayLog

    provider = log = status = None
    try:
        settings = load_settings(args)
        catalog = _catalog(args.catalog, args.bfcl)
        records = _records(args.records)
        click = _click(args.click)
        provider = make_provider(args, settings)
        log = ReplayLog(args.log) if args.log else None
        status = LiveStatus(enabled=getattr(args, "verbosity", 0) >= 0)
        status.set("understanding")
        plan = plan_message(args.message, catalog=catalog, provider=provider, settings=settings, records=records,
                            click=click, single_call=args.single_call, log=log,
                            progress=_call_progress(status, settings.understanding.max_model_calls))
    except (OSError, ValueError, KeyError, ImportError, BoundctxError, RecursionError) as exc:
        if status is not None:
            status.close()
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        if isinstance(exc, RecursionError):  # json.load on a file nested thousands deep
            message = "an input file nests too deeply to be a catalog or a list of records"
        print(f"boundctx plan: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        if status is not None:
            status.close()
        print("\nboundctx plan: interrupted; no plan", file=sys.stderr)
        return 130
    finally:
        if status is not None:
            status.close()
        if log is not None:
            log.close()
        if provider is not None:
            provider.close()
    if args.json:
        sys.stdout.buffer.write(msgspec.json.encode(plan) + b"\n")
    else:
        print(_render(plan))
    return 0 if plan.status != "failed_closed" else 1
