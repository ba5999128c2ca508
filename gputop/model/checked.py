"""Dataclasses rebuilt from untrusted JSON, every field checked against its annotation.

Numbers must be finite numbers, strings strings, lists lists, a ``Literal`` one of its
values (a dict's keys too); an annotation not known here is passed through. Used by
``Frame.from_dict`` (gputop/model/frame.py) for snapshots, replays and fleet files.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from collections.abc import Callable
from dataclasses import fields
from typing import Any

Checker = Callable[[Any], Any]


def check_value(where: str, tp: Any, v: Any) -> Any:
    """``v`` converted to the annotated type ``tp``; TypeError/ValueError when it is not one."""
    return _checker(where, tp)(v)


@functools.cache
def _checker(where: str, tp: Any) -> Checker:
    """A function that checks and converts one value of annotation ``tp``.

    Built once per field and cached: loading a bundle checks every field of
    every process in every frame.
    """
    origin = typing.get_origin(tp)
    if origin is typing.Union or origin is types.UnionType:
        args = typing.get_args(tp)
        rest = [a for a in args if a is not type(None)]
        if len(rest) != 1:
            return _unchecked
        inner = _checker(where, rest[0])
        if type(None) not in args:
            return inner
        return lambda v: None if v is None else inner(v)
    if origin is typing.Literal:
        return functools.partial(_one_of, where, typing.get_args(tp))
    if tp is float:
        return functools.partial(_as_float, where)
    if tp is int:
        return functools.partial(_as_int, where)
    if tp is str or tp is bool:
        return functools.partial(_exactly, where, tp)
    if origin is tuple:
        args = typing.get_args(tp)
        if len(args) != 2 or args[1] is not Ellipsis:
            return _unchecked
        return functools.partial(_as_tuple, where, _checker(f"{where}[]", args[0]))
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return functools.partial(build, tp)
    if origin is dict:
        key_tp, value_tp = typing.get_args(tp)
        keys = _checker(f"{where} key", key_tp)
        values = _checker(f"{where}[]", value_tp)
        return functools.partial(_as_dict, where, keys, values)
    # An annotation this checker does not know (a field added later): passed through.
    return _unchecked


def _unchecked(v: Any) -> Any:
    return v


def _as_float(where: str, v: Any) -> float:
    t = type(v)
    if t is float:
        if math.isfinite(v):
            return v  # type: ignore[no-any-return]
        raise ValueError(f"{where} must be a finite number")
    if t is int:
        return float(v)
    raise TypeError(f"{where} must be a number, got {t.__name__}")


def _as_int(where: str, v: Any) -> int:
    t = type(v)
    if t is int:
        return v  # type: ignore[no-any-return]
    if t is float and math.isfinite(v) and v.is_integer():
        return int(v)
    raise TypeError(f"{where} must be a whole number, got {t.__name__}")


def _exactly(where: str, tp: type, v: Any) -> Any:
    if type(v) is not tp:
        raise TypeError(f"{where} must be a {tp.__name__}, got {type(v).__name__}")
    return v


def _one_of(where: str, allowed: tuple[Any, ...], v: Any) -> Any:
    if v not in allowed or type(v) is not type(allowed[0]):
        raise ValueError(f"{where} must be one of {', '.join(map(str, allowed))}, got {v!r}")
    return v


def _as_dict(where: str, key: Checker, value: Checker, v: Any) -> dict[Any, Any]:
    if type(v) is not dict:
        raise TypeError(f"{where} must be an object, got {type(v).__name__}")
    return {key(k): value(x) for k, x in v.items()}


def _as_tuple(where: str, item: Checker, v: Any) -> tuple[Any, ...]:
    if type(v) is not list and type(v) is not tuple:
        raise TypeError(f"{where} must be a list, got {type(v).__name__}")
    return tuple(item(x) for x in v)


@functools.cache
def _field_checkers(cls: type) -> tuple[tuple[str, Checker], ...]:
    hints = typing.get_type_hints(cls)
    out = []
    for f in fields(cls):
        where = f"{cls.__name__}.{f.name}"
        out.append((f.name, _checker(where, hints[f.name])))
    return tuple(out)


def build(cls: Any, d: Any) -> Any:
    if type(d) is not dict:
        raise TypeError(f"{cls.__name__} must be an object, got {type(d).__name__}")
    kw: dict[str, Any] = {}
    for name, check in _field_checkers(cls):
        if name in d:
            kw[name] = check(d[name])
    return cls(**kw)
