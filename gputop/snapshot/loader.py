"""Loading a bundle: everything is checked, and any problem is one ``UsageError`` line.

Checks: size (before and while reading), UTF-8, JSON without NaN/Infinity,
schema version, shape (nesting, list and string sizes), and every field's type
through ``Frame.from_dict``.
"""

from __future__ import annotations

import json
import math
import os
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gputop import __version__
from gputop.errors import UsageError
from gputop.model.frame import Frame, ProcessSample, Verdict
from gputop.snapshot.schema import (
    MAX_BYTES,
    MAX_FRAMES,
    MAX_META_NODES,
    SCHEMA,
    SCHEMA_PREFIX,
    check_shape,
    one_line,
    size_text,
)


@dataclass(frozen=True)
class Bundle:
    """A loaded snapshot: the frames (oldest first), the facts, the last full process table."""

    path: str
    frames: list[Frame]
    meta: dict[str, Any]
    processes: tuple[ProcessSample, ...]
    created_t: float
    redacted: bool
    screenshot: str | None = None
    window: dict[str, Any] = field(default_factory=dict)

    @property
    def verdicts(self) -> tuple[Verdict, ...]:
        """The verdicts of the last frame."""
        return self.frames[-1].verdicts


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed (use null for a value that cannot be reported)")


def _finite_float(text: str) -> float:
    v = float(text)
    if not math.isfinite(v):
        raise ValueError(f"number {text[:20]} is out of range")
    return v


def _read_capped(path: str, shown: str, max_bytes: int) -> bytes:
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise UsageError(f"cannot open {shown}: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UsageError(f"{shown} is not a regular file")
        if st.st_size > max_bytes:
            raise UsageError(
                f"{shown} is {size_text(st.st_size)}; "
                f"snapshots are limited to {size_text(max_bytes)}"
            )
        chunks: list[bytes] = []
        total = 0
        while total <= max_bytes:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > max_bytes:
            raise UsageError(f"{shown} grew past {size_text(max_bytes)} while being read")
        return b"".join(chunks)
    except OSError as exc:
        raise UsageError(f"cannot read {shown}: {exc.strerror}") from None
    finally:
        os.close(fd)


def _parse(shown: str, raw: bytes) -> Any:
    if not raw.strip():
        raise UsageError(f"{shown} is empty")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"{shown} is not a gputop snapshot (not UTF-8 text)") from None
    try:
        return json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)
    except json.JSONDecodeError as exc:
        # json's own messages may end with "at" ("Unterminated string starting at"): the
        # place follows in parentheses, never as a second "at".
        raise UsageError(
            f"{shown} is not valid JSON (truncated or corrupt?): {exc.msg} (line "
            f"{exc.lineno}, column {exc.colno})"
        ) from None
    except RecursionError:
        raise UsageError(f"{shown} is not a gputop snapshot: nested too deeply") from None
    except ValueError as exc:
        raise UsageError(f"{shown} is not a gputop snapshot: {one_line(exc)}") from None


def _check_schema(shown: str, doc: Any) -> None:
    if not isinstance(doc, dict):
        raise UsageError(f"{shown} is not a gputop snapshot (not a JSON object)")
    schema = doc.get("schema")
    if not isinstance(schema, str) or not schema.startswith(SCHEMA_PREFIX):
        raise UsageError(f"{shown} is not a gputop snapshot (no {SCHEMA!r} schema field)")
    if schema != SCHEMA:
        raise UsageError(
            f"{shown} has schema {schema[:40]!r}; this gputop {__version__} reads {SCHEMA!r}"
        )


def _field(doc: Mapping[str, Any], key: str, kind: type, default: Any = None) -> Any:
    v = doc.get(key, default)
    if v is None and default is None:
        return None
    if not isinstance(v, kind) or isinstance(v, bool) is not (kind is bool):
        raise ValueError(f"field {key!r} must be a {kind.__name__}")
    return v


def _frames(raw_frames: Iterable[Any]) -> list[Frame]:
    frames: list[Frame] = []
    for i, d in enumerate(raw_frames):
        try:
            frame = Frame.from_dict(d)
        except ValueError as exc:
            raise ValueError(f"frame {i}: {one_line(exc)}") from None
        if frames and frame.t < frames[-1].t:
            raise ValueError(f"frame {i} is older than frame {i - 1} (frames must be oldest first)")
        frames.append(frame)
    return frames


def load_bundle(path: str, *, max_bytes: int = MAX_BYTES) -> Bundle:
    """Read and check a bundle; any problem raises UsageError with one line."""
    # A file name with control characters must not break the one-line message.
    shown = path if path.isprintable() else repr(path)
    doc = _parse(shown, _read_capped(path, shown, max_bytes))
    _check_schema(shown, doc)
    try:
        check_shape(doc)
        raw_frames = _field(doc, "frames", list)
        if not raw_frames:
            raise ValueError("it holds no frames")
        if len(raw_frames) > MAX_FRAMES:
            raise ValueError(f"{len(raw_frames)} frames (limit {MAX_FRAMES})")
        frames = _frames(raw_frames)
        meta = _field(doc, "meta", dict, {})
        if check_shape(meta) > MAX_META_NODES:
            raise ValueError(f"meta has more than {MAX_META_NODES} values")
        table = _field(doc, "processes", list, [])
        try:
            processes = tuple(ProcessSample.from_dict(p) for p in table)
        except ValueError as exc:
            raise ValueError(f"process table: {one_line(exc)}") from None
        created = doc.get("created_t", frames[-1].t)
        if isinstance(created, bool) or not isinstance(created, (int, float)):
            raise ValueError("field 'created_t' must be a number")
        window = _field(doc, "window", dict, {})
        return Bundle(
            path=path,
            frames=frames,
            meta=meta,
            processes=processes or frames[-1].processes,
            created_t=float(created),
            redacted=_field(doc, "redacted", bool, False),
            screenshot=_field(doc, "screenshot", str),
            window=window,
        )
    except ValueError as exc:
        raise UsageError(f"{shown} is not a valid gputop snapshot: {one_line(exc)}") from None
