"""``boundctx config show|get|set|schema``: read and change settings."""

from __future__ import annotations

import sys

import msgspec

__all__ = ["add_parser"]


def add_parser(sub, summary: str) -> None:
    p = sub.add_parser(
        "config", help=summary,
        description="Settings come from defaults < the config file < the "
                    "environment (BOUNDCTX_GROUP_KEY) < command-line flags.")
    cmds = p.add_subparsers(dest="config_command", metavar="ACTION")
    cmds.required = True
    show = cmds.add_parser("show", help="every setting, its value and where it came from")
    show.add_argument("--json", action="store_true")
    show.set_defaults(run=run_show)
    get = cmds.add_parser("get", help="one setting's value")
    get.add_argument("key", metavar="KEY")
    get.set_defaults(run=run_get)
    set_ = cmds.add_parser("set", help="store a value in the config file, changing only that key's line")
    set_.add_argument("key", metavar="KEY")
    set_.add_argument("value", metavar="VALUE")
    set_.set_defaults(run=run_set)
    sch = cmds.add_parser("schema", help="the settings choices a UI renders, as JSON")
    sch.set_defaults(run=run_schema)


def _fail(exc: Exception) -> int:
    print(f"boundctx config: {exc}", file=sys.stderr)
    return 2


def run_show(args) -> int:
    from boundctx import config
    from boundctx.errors import ConfigError

    try:
        settings = config.load()
    except ConfigError as exc:
        return _fail(exc)
    if args.json:
        sys.stdout.buffer.write(msgspec.json.encode(
            {name: {"value": settings[name], "source": settings.source(name)} for name in settings}) + b"\n")
        return 0
    width = max(map(len, settings))
    for name in settings:
        print(f"{name:<{width}}  {settings[name]!r:<10}  {settings.source(name)}")
    print(f"config file: {config.config_path()}", file=sys.stderr)
    return 0


def run_get(args) -> int:
    from boundctx import config
    from boundctx.errors import ConfigError

    try:
        print(config.load()[args.key])
    except ConfigError as exc:
        return _fail(exc)
    return 0


def run_set(args) -> int:
    from boundctx import config
    from boundctx.errors import ConfigError

    try:
        path = config.write_value(args.key, args.value)
    except (ConfigError, OSError) as exc:
        return _fail(exc)
    print(f"{args.key} = {config.load(path=path)[args.key]!r} in {path}")
    return 0


def run_schema(args) -> int:
    from boundctx import config

    sys.stdout.buffer.write(msgspec.json.encode(config.schema()) + b"\n")
    return 0
