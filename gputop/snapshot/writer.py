"""Writing a bundle: encode within the size budget, redact, and write it atomically, mode 0600.

Writing is atomic (a temporary file in the same directory, fsync, rename), the
file is mode 0600 and a symlink at the target is refused. Command lines are
redacted unless asked not to.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import socket
import stat
import time
from collections.abc import Mapping, Sequence
from typing import Any

from gputop import __version__
from gputop.errors import UsageError
from gputop.model.frame import Frame
from gputop.model.framestore import FrameStore
from gputop.redact import redact as redact_text
from gputop.snapshot.hostfacts import trainer_torch
from gputop.snapshot.schema import (
    MAX_BYTES,
    MAX_FRAMES,
    SCHEMA,
    check_shape,
    jsonable,
    one_line,
    size_text,
)

_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9.\-]+")


def default_snapshot_dir(env: Mapping[str, str] | None = None) -> str:
    """Where bundles go when no path is given: ``$XDG_STATE_HOME/gputop/snapshots``.

    ``XDG_STATE_HOME`` defaults to ``~/.local/state`` (XDG base directory spec).
    """
    env = os.environ if env is None else env
    base = env.get("XDG_STATE_HOME") or ""
    if not os.path.isabs(base):
        home = env.get("HOME") or os.path.expanduser("~")
        base = os.path.join(home, ".local", "state")
    return os.path.join(base, "gputop", "snapshots")


class _Redactor:
    """Redacts the free-text fields of frame dicts, remembering each string's result."""

    def __init__(self) -> None:
        self._memo: dict[str, str] = {}

    def text(self, s: str) -> str:
        out = self._memo.get(s)
        if out is None:
            out = self._memo[s] = redact_text(s)
        return out

    def frame(self, d: dict[str, Any]) -> dict[str, Any]:
        d["sources"]["notes"] = [self.text(n) for n in d["sources"]["notes"]]
        self.processes(d["processes"])
        for v in d["verdicts"]:
            v["evidence"] = [self.text(e) for e in v["evidence"]]
            v["fixes"] = [self.text(e) for e in v["fixes"]]
        return d

    def processes(self, procs: list[dict[str, Any]]) -> None:
        for p in procs:
            p["cmdline"] = self.text(p["cmdline"])


def _dumps(obj: Any) -> str:
    return json.dumps(obj, allow_nan=False, separators=(",", ":"))


def encode_bundle(
    frames: Sequence[Frame] | FrameStore,
    meta: Mapping[str, Any],
    redact: bool,
    screenshot: str | None = None,
    *,
    max_bytes: int = MAX_BYTES,
) -> bytes:
    """The bundle's JSON text (docs/snapshot.md).

    ``frames`` is a list of frames or the TUI's compact store of its window. The
    newest frames are kept, as many as fit both ``MAX_FRAMES`` and (with the
    process table and the facts) ``max_bytes``, so every bundle written can be
    loaded; ``window.dropped_frames`` counts the rest.
    """
    last: Frame | None
    if isinstance(frames, FrameStore):
        last, newest_first = frames.last, frames.dicts(newest_first=True)
    else:
        last = frames[-1] if frames else None
        newest_first = (f.to_dict() for f in reversed(frames[-MAX_FRAMES:]))
    if last is None:
        raise UsageError("nothing to snapshot: no frames were sampled")
    meta_out = dict(meta)
    if "torch" not in meta_out:
        meta_out["torch"] = trainer_torch([last])
    r = _Redactor()
    table = last.to_dict(threads=True)["processes"]
    if redact:
        r.processes(table)
    last_dict = r.frame(last.to_dict()) if redact else last.to_dict()
    head: dict[str, Any] = jsonable(
        {
            "schema": SCHEMA,
            "created_t": round(time.time(), 3),
            "gputop_version": __version__,
            "redacted": redact,
            "screenshot": screenshot,
            "meta": meta_out,
            "window": {},
            "processes": table,
            "verdicts": last_dict["verdicts"],
        }
    )
    try:
        check_shape(head)
    except ValueError as exc:
        raise UsageError(f"cannot snapshot: {one_line(exc)}") from None
    # Frames are encoded one by one, newest first, until the size budget is spent.
    budget = max_bytes - len(_dumps(head)) - 4096
    encoded: list[str] = []
    times: list[float] = []
    for d in newest_first:
        if len(encoded) == MAX_FRAMES:
            break
        text = _dumps(jsonable(r.frame(d) if redact else d))
        budget -= len(text.encode("utf-8")) + 1
        if budget < 0:
            break
        encoded.append(text)
        times.append(d["t"])
    if not encoded:
        raise UsageError(f"cannot snapshot: the process table alone exceeds {size_text(max_bytes)}")
    encoded.reverse()
    head["window"] = {
        "start_t": round(times[-1], 3),
        "end_t": round(times[0], 3),
        "frames": len(encoded),
        "dropped_frames": len(frames) - len(encoded),
    }
    # The frames list goes last, spliced in as already-encoded text.
    text = _dumps(head)[:-1] + ',"frames":[' + ",".join(encoded) + "]}"
    return text.encode("utf-8")


def _safe_host() -> str:
    return _UNSAFE_NAME.sub("_", socket.gethostname())[:64] or "host"


def _free_name(dfd: int, stem: str, ext: str) -> str:
    for n in range(1, 1000):
        name = f"{stem}{'' if n == 1 else f'-{n}'}{ext}"
        try:
            os.lstat(name, dir_fd=dfd)
        except FileNotFoundError:
            return name
    raise UsageError(f"too many snapshots named {stem}*{ext}")


def atomic_write(dfd: int, name: str, data: bytes, shown: str) -> None:
    """Write ``data`` to ``name`` in the directory ``dfd`` all at once, mode 0600.

    The data goes to a new temporary file (O_EXCL | O_NOFOLLOW) in the same
    directory, is fsynced, then renamed over ``name``; a failure removes the
    temporary file and leaves any previous ``name`` untouched. A symlink or a
    directory at ``name`` is refused.
    """
    try:
        st = os.lstat(name, dir_fd=dfd)
    except FileNotFoundError:
        st = None
    if st is not None and stat.S_ISLNK(st.st_mode):
        raise UsageError(f"refusing to write through a symlink: {shown}")
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise UsageError(f"cannot write {shown}: not a regular file")
    tmp = f".{name}.{secrets.token_hex(6)}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(tmp, flags, 0o600, dir_fd=dfd)
    try:
        os.fchmod(fd, 0o600)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        os.unlink(tmp, dir_fd=dfd)
        raise
    os.close(fd)
    try:
        os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
    except BaseException:
        os.unlink(tmp, dir_fd=dfd)
        raise
    os.fsync(dfd)


def _target(directory: str | None, path: str | None) -> tuple[str, str | None]:
    """(directory, file name or None for a fresh default name)."""
    if path is not None:
        if os.path.isdir(path) and not os.path.islink(path):
            return path, None
        return os.path.dirname(os.path.abspath(path)), os.path.basename(path)
    if directory is None:
        directory = default_snapshot_dir()
    try:
        # Only the user can list a snapshot directory gputop creates.
        os.makedirs(directory, mode=0o700, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create {directory}: {exc.strerror}") from None
    return directory, None


def write_bundle(
    frames: Sequence[Frame] | FrameStore,
    meta: dict[str, Any],
    directory: str | None,
    svg: str | None,
    redact: bool,
    path: str | None = None,
) -> str:
    """Write one bundle (and ``svg``, the screenshot's SVG text, beside it); return its path.

    ``path`` names the file exactly; otherwise a fresh name
    ``gputop-HOST-YYYYmmdd-HHMMSS.json`` is chosen in ``directory`` (default:
    ``default_snapshot_dir()``). Bad paths and write failures raise UsageError.
    """
    directory, name = _target(directory, path)
    try:
        dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise UsageError(f"cannot write a snapshot in {directory}: {exc.strerror}") from None
    shown = directory
    try:
        if name is None:
            stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
            name = _free_name(dfd, f"gputop-{_safe_host()}-{stamp}", ".json")
        stem = name[:-5] if name.endswith(".json") else name
        svg_name = f"{stem}.svg" if svg is not None else None
        data = encode_bundle(frames, meta, redact, svg_name)
        if svg is not None and svg_name is not None:
            shown = os.path.join(directory, svg_name)
            atomic_write(dfd, svg_name, svg.encode("utf-8"), shown)
        shown = os.path.join(directory, name)
        try:
            atomic_write(dfd, name, data, shown)
        except BaseException:
            # A screenshot without its bundle is of no use to anyone.
            if svg_name is not None:
                with contextlib.suppress(OSError):
                    os.unlink(svg_name, dir_fd=dfd)
            raise
        return shown
    except OSError as exc:
        raise UsageError(f"cannot write {shown}: {exc.strerror or exc}") from None
    finally:
        os.close(dfd)
