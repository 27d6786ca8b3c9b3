"""The domain an adopter supplies: workflows, operations with typed arguments, records.

A catalog is data (TOML, JSON or Python structs), validated once on load so that every
closed set a turn builds from it is well formed::

    [[operations]]
    name = "book_table"
    description = "Reserve a table at a restaurant"
    record_kind = "restaurant"          # acts on one record of this kind (omit: on none)
    guidance = "Party size counts the user."

    [[operations.params]]
    name = "time"
    type = "string"
    description = "Time of the booking, HH:MM"

Records (the candidates a turn may touch: ``id``, ``kind``, ``fields``) are usually
given per turn; :func:`check_records` validates them against the catalog.
:meth:`Catalog.from_bfcl` converts a BFCL function list (one operation per function).
"""

from __future__ import annotations

import hashlib
import json
import pathlib
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import msgspec

from boundctx._files import read_bytes
from boundctx.errors import CatalogError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = ["PARAM_TYPES", "Catalog", "Operation", "Param", "Record", "Workflow", "check_records"]

#: Argument types an operation may declare (JSON-schema names).
PARAM_TYPES = ("string", "integer", "number", "boolean", "array", "object", "any")
#: BFCL's type names that differ from JSON schema's.
_BFCL_TYPES = {"dict": "object", "float": "number", "tuple": "array", "int": "integer", "bool": "boolean",
               "str": "string", "list": "array"}
_SCALAR_CHECK = {"string": lambda v: isinstance(v, str),
                 "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
                 "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
                 "boolean": lambda v: isinstance(v, bool)}


class Param(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One argument of an operation.

    Attributes
    ----------
    name : str
    type : str
        One of :data:`PARAM_TYPES`.
    description : str
    required : bool
        A request without it cannot be carried out (it is asked for, not guessed).
    enum : list, optional
        The accepted values (a closed set the decoder enforces).
    items : str, optional
        The element type of an ``array``.
    default : any, optional
        The value used when the message does not give one (optional arguments only).
    """

    name: str
    type: str
    description: str = ""
    required: bool = True
    enum: list[Any] | None = None
    items: str | None = None
    default: Any = None


class Operation(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Something a message can ask for.

    Attributes
    ----------
    name : str
    description : str
    params : list of Param
    record_kind : str, optional
        The kind of record it acts on (locate picks one); None: it acts on no record.
    guidance : str
        How to read a request for this operation (shown to extract and verify).
    workflow : str, optional
        The workflow it belongs to.
    """

    name: str
    description: str
    params: list[Param] = []
    record_kind: str | None = None
    guidance: str = ""
    workflow: str | None = None

    def param(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(f"operation {self.name!r} has no argument {name!r}")


class Workflow(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A named group of operations (what a front end shows as one task)."""

    name: str
    description: str = ""
    operations: list[str] = []


class Record(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A thing a turn may act on: a booking, a restaurant, a file.

    Attributes
    ----------
    id : str
        Unique among the turn's records.
    kind : str
        Matches an operation's ``record_kind``.
    fields : dict
        What the user may refer to it by ("the 7 pm one", "the second one").
    label : str
        A short human name.
    """

    id: str
    kind: str
    fields: dict[str, Any] = {}
    label: str = ""


class _CatalogData(msgspec.Struct, forbid_unknown_fields=True):
    operations: list[Operation]
    workflows: list[Workflow] = []
    name: str = ""


class Catalog:
    """Validated workflows and operations.

    Build one with :meth:`load`, :meth:`from_dict` or :meth:`from_bfcl`; direct
    construction validates too.

    Raises
    ------
    CatalogError
        Naming the field and what is accepted.
    """

    def __init__(self, operations: Sequence[Operation], workflows: Sequence[Workflow] = (), *, name: str = "",
                 source: str = "<catalog>") -> None:
        self.operations = tuple(operations)
        self.workflows = tuple(workflows)
        self.name = name
        self.source = source
        _validate(self)
        self._by_name = {op.name: op for op in self.operations}

    def __repr__(self) -> str:
        return f"Catalog({self.name or self.source!r}, {len(self.operations)} operations)"

    @property
    def sha256(self) -> str:
        """A hash of the catalog's content (what a replay checks it was recorded with)."""
        data = {"operations": msgspec.to_builtins(self.operations), "workflows": msgspec.to_builtins(self.workflows)}
        return hashlib.sha256(json.dumps(data, sort_keys=True, ensure_ascii=False).encode()).hexdigest()

    def operation(self, name: str) -> Operation:
        try:
            return self._by_name[name]
        except KeyError:
            known = ", ".join(sorted(self._by_name)[:20]) + (", ..." if len(self._by_name) > 20 else "")
            raise KeyError(f"no operation {name!r} in {self!r}; the operations are: {known}") from None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str = "<dict>") -> "Catalog":
        """A catalog from plain data (``{"operations": [...], "workflows": [...]}``)."""
        try:
            parsed = msgspec.convert(data, _CatalogData, strict=True)
        except msgspec.ValidationError as exc:
            raise CatalogError(f"{source}: {_where(exc)}") from None
        return cls(parsed.operations, parsed.workflows, name=parsed.name, source=source)

    @classmethod
    def load(cls, path: str | pathlib.Path) -> "Catalog":
        """A catalog from a ``.toml`` or ``.json`` file."""
        path = pathlib.Path(path)
        try:
            raw = read_bytes(path, what="catalog (.toml or .json)")  # never a FIFO or a device
        except OSError as exc:
            raise CatalogError(f"cannot read the catalog {str(path)!r}: {exc.strerror or exc}") from exc
        try:
            if path.suffix.lower() == ".toml":
                data = tomllib.loads(raw.decode("utf-8"))
            elif path.suffix.lower() == ".json":
                data = json.loads(raw)
            else:
                raise CatalogError(f"{path}: a catalog is a .toml or .json file, not {path.suffix or 'no suffix'!r}")
        except (UnicodeDecodeError, tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
            raise CatalogError(f"{path}: not valid {path.suffix[1:].upper()}: {exc}") from None
        if not isinstance(data, dict):
            raise CatalogError(f"{path}: the top level must be a table/object with an 'operations' list")
        return cls.from_dict(data, source=str(path))

    @classmethod
    def from_bfcl(cls, functions: Iterable[Mapping[str, Any]], *, source: str = "<bfcl>") -> "Catalog":
        """One operation per BFCL function spec (``{"name", "description",
        "parameters": {"type": "dict", "properties", "required"}}``); BFCL's type names
        (``dict``, ``float``, ``tuple``) map to JSON schema's."""
        operations = []
        for i, fn in enumerate(functions):
            try:
                spec = fn.get("parameters") or {}
                required = set(spec.get("required") or ())
                params = []
                for pname, p in (spec.get("properties") or {}).items():
                    ptype = _BFCL_TYPES.get(p.get("type", "any"), p.get("type", "any"))
                    items = (p.get("items") or {}).get("type") if ptype == "array" else None
                    params.append(Param(pname, ptype, p.get("description", ""), pname in required,
                                        list(p["enum"]) if "enum" in p else None,
                                        _BFCL_TYPES.get(items, items) if items else None,
                                        _bfcl_default(p.get("default"), ptype)))
                operations.append(Operation(fn["name"], fn.get("description", ""), params))
            except (KeyError, TypeError, AttributeError) as exc:
                raise CatalogError(f"{source}: function {i}: not a BFCL function spec ({exc!r})") from None
        return cls(operations, source=source)


def _bfcl_default(value: Any, ptype: str) -> Any:
    """BFCL writes many defaults as strings ("false", "3", "None"): the typed value where
    the string is one, else no default (the description still says it)."""
    if not isinstance(value, str) or ptype in ("string", "any"):
        return value
    words = {"true": True, "false": False, "none": None, "null": None}
    if value.strip().lower() in words:
        parsed = words[value.strip().lower()]
    else:
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError:
            return None
    return parsed if parsed is not None and _check_value(parsed, ptype, None) else None


def _where(exc: msgspec.ValidationError) -> str:
    # msgspec says "... - at `$.operations[0].params[1]`"; keep its words, name the fix.
    return f"{exc} (see boundctx.understanding.catalog for the accepted fields)"


def _check_value(value: Any, ptype: str, items: str | None) -> bool:
    if ptype == "array":
        return isinstance(value, list) and (items is None or all(_check_value(v, items, None) for v in value))
    if ptype == "object":
        return isinstance(value, dict)
    return ptype == "any" or _SCALAR_CHECK[ptype](value)


def _validate(catalog: Catalog) -> None:
    where = catalog.source

    def fail(message: str) -> None:
        raise CatalogError(f"{where}: {message}")

    if not catalog.operations:
        fail("a catalog needs at least one operation")
    names: set[str] = set()
    workflow_names = {w.name for w in catalog.workflows}
    if len(workflow_names) != len(catalog.workflows):
        twice = sorted({w.name for w in catalog.workflows if [x.name for x in catalog.workflows].count(w.name) > 1})
        fail(f"workflow names must be unique; used more than once: {twice}")
    for i, op in enumerate(catalog.operations):
        at = f"operations[{i}] ({op.name!r})"
        if not op.name.strip() or "\n" in op.name:
            fail(f"operations[{i}]: the name must be a non-empty single line")
        if op.name in names:
            fail(f"{at}: the name is used twice; operation names must be unique")
        names.add(op.name)
        if op.workflow is not None and op.workflow not in workflow_names:
            fail(f"{at}: workflow {op.workflow!r} is not declared; declared: {sorted(workflow_names) or 'none'}")
        seen: set[str] = set()
        for j, p in enumerate(op.params):
            pat = f"{at}.params[{j}] ({p.name!r})"
            if not p.name.strip() or p.name.startswith("@"):
                fail(f"{at}.params[{j}]: the name must not be empty or start with '@' (reserved: '@record')")
            if p.name in seen:
                fail(f"{pat}: the name is used twice")
            seen.add(p.name)
            if p.type not in PARAM_TYPES:
                fail(f"{pat}: type {p.type!r} is not one of {', '.join(PARAM_TYPES)}")
            if p.items is not None and (p.type != "array" or p.items not in PARAM_TYPES):
                fail(f"{pat}: items applies to arrays only and must be one of {', '.join(PARAM_TYPES)}")
            if p.enum is not None:
                if not p.enum:
                    fail(f"{pat}: an enum needs at least one value")
                if any(isinstance(v, (list, dict)) or v is None for v in p.enum):
                    fail(f"{pat}: enum values must be strings, numbers or booleans")
                bad = [v for v in p.enum if not _check_value(v, p.type, p.items)]
                if bad:
                    fail(f"{pat}: enum values {bad!r} are not of type {p.type}")
            if p.default is not None and not _check_value(p.default, p.type, p.items):
                fail(f"{pat}: the default {p.default!r} is not of type {p.type}")
    for w in catalog.workflows:
        missing = [o for o in w.operations if o not in names]
        if missing:
            fail(f"workflow {w.name!r} lists operations that do not exist: {missing}")


def check_records(records: Sequence[Record | Mapping[str, Any]], catalog: Catalog) -> list[Record]:
    """The turn's records, validated: unique ids, kinds some operation acts on.

    Raises
    ------
    CatalogError
    """
    kinds = {op.record_kind for op in catalog.operations if op.record_kind}
    out: list[Record] = []
    ids: set[str] = set()
    for i, r in enumerate(records):
        try:
            record = r if isinstance(r, Record) else msgspec.convert(r, Record, strict=True)
        except msgspec.ValidationError as exc:
            raise CatalogError(f"records[{i}]: {exc}") from None
        if not record.id.strip():
            raise CatalogError(f"records[{i}]: the id must not be empty")
        if record.id in ids:
            raise CatalogError(f"records[{i}]: id {record.id!r} is used twice; record ids must be unique")
        if record.kind not in kinds:
            raise CatalogError(f"records[{i}] ({record.id!r}): kind {record.kind!r} is not acted on by any "
                               f"operation; known kinds: {sorted(kinds) or 'none'}")
        ids.add(record.id)
        out.append(record)
    return out
