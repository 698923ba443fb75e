"""Typed settings, stored whole and compared whole.

An artifact (a record set, a model_dir, an export) stores the frozen dataclass of the settings that shaped it
(`to_json`); a consumer reads it back (`from_json`, strict: a missing or unknown field is named) and compares
it with the settings it would use (`differences`, `require_same`). The comparison walks the dataclass fields,
nested dataclasses included, so a field added to a settings class is stored and compared without anyone adding
it to a list of keys.

JSON has no tuples: sequences are stored as lists and read back as tuples (settings classes declare their
sequences as `Tuple[...]` so that they stay hashable and frozen).
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, Dict, List, Mapping, Optional, Tuple, Type, TypeVar

from xlnet_tf.errors import UserError

T = TypeVar("T")


def to_json(settings: Any) -> Dict[str, Any]:
    """A settings dataclass as a JSON object: every field, nested dataclasses as objects, tuples as lists."""
    if not dataclasses.is_dataclass(settings):
        raise TypeError(f"not a settings dataclass: {settings!r}")
    return {f.name: _json_value(getattr(settings, f.name)) for f in dataclasses.fields(settings)}


def _json_value(value: Any) -> Any:
    if dataclasses.is_dataclass(value):
        return to_json(value)
    if isinstance(value, (tuple, list)):
        return [_json_value(v) for v in value]
    return value


def from_json(cls: Type[T], values: Any, where: str, error: Type[UserError] = UserError) -> T:
    """`cls` from what `to_json` wrote; `error` naming `where` and the field when one is missing, unknown or of
    the wrong kind (the file was written by another version: the caller's message says what to re-run)."""
    if not isinstance(values, Mapping):
        raise error(f"{where}: not a JSON object")
    names = {f.name for f in dataclasses.fields(cls)}
    unknown, missing = sorted(set(values) - names), sorted(names - set(values))
    if unknown or missing:
        what = "; ".join(p for p in (f"unknown field(s) {unknown}" if unknown else "",
                                     f"missing field(s) {missing}" if missing else "") if p)
        raise error(f"{where}: {what} (written by another version)")
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        kwargs[f.name] = _from_json_value(hints[f.name], values[f.name], f"{where}: {f.name}", error)
    return cls(**kwargs)


def _from_json_value(hint: Any, value: Any, where: str, error: Type[UserError]) -> Any:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Union:  # Optional[X]
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _from_json_value(inner[0], value, where, error) if len(inner) == 1 else value
    if dataclasses.is_dataclass(hint):
        return from_json(hint, value, where, error)
    if origin in (tuple, list) or hint in (tuple, list):
        if not isinstance(value, list):
            raise error(f"{where} is {value!r}, not a list (written by another version)")
        item = args[0] if args else Any
        return tuple(_from_json_value(item, v, where, error) for v in value)
    if hint is bool and not isinstance(value, bool):
        raise error(f"{where} is {value!r}, not true/false (written by another version)")
    if hint is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise error(f"{where} is {value!r}, not an integer (written by another version)")
    if hint is str and not isinstance(value, str):
        raise error(f"{where} is {value!r}, not a string (written by another version)")
    return value


def differences(recorded: Any, wanted: Any, prefix: str = "") -> List[Tuple[str, Any, Any]]:
    """`(field, recorded value, wanted value)` for every field where two settings objects of one class differ;
    nested settings give dotted names (`text.uncased`). Objects of different classes differ as a whole."""
    if type(recorded) is not type(wanted) or not dataclasses.is_dataclass(recorded):
        return [] if recorded == wanted else [(prefix.rstrip(".") or "settings", recorded, wanted)]
    out: List[Tuple[str, Any, Any]] = []
    for f in dataclasses.fields(recorded):
        a, b = getattr(recorded, f.name), getattr(wanted, f.name)
        if dataclasses.is_dataclass(a) and type(a) is type(b):
            out += differences(a, b, f"{prefix}{f.name}.")
        elif a != b:
            out.append((prefix + f.name, a, b))
    return out


def describe(diffs: List[Tuple[str, Any, Any]], there: str = "there", now: str = "now", limit: int = 120) -> str:
    """`field: <recorded> there, <wanted> now; ...` (long values shortened)."""
    def short(v):
        text = repr(list(v) if isinstance(v, tuple) else v)
        return text if len(text) <= limit else text[:limit - 5] + "...]"

    return "; ".join(f"{name}: {short(a)} {there}, {short(b)} {now}" for name, a, b in diffs)


def require_same(recorded: Any, wanted: Any, *, where: str, remedy: str, error: Type[UserError] = UserError,
                 there: str = "there", now: str = "now", what: Optional[str] = None) -> None:
    """Raises `error` in one line naming every field where `recorded` (read from `where`) differs from
    `wanted`, then `remedy`; returns when they are equal."""
    diffs = differences(recorded, wanted)
    if diffs:
        raise error(f"{where}: {what or 'built with other settings'}: {describe(diffs, there, now)}; {remedy}")
