"""Snapshot bundles: one JSON file that holds what gputop saw, for bug reports and replay.

The schema is documented in docs/snapshot.md. Writing is atomic (a temporary file
in the same directory, fsync, rename), the file is mode 0600 and a symlink at the
target is refused. Command lines are redacted unless asked not to. Loading
checks everything (size, schema version, shape, every field's type) and turns any
problem into one ``UsageError`` line.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import platform
import re
import secrets
import socket
import stat
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gputop import __version__
from gputop.errors import UsageError
from gputop.model.frame import Frame, ProcessSample, SourceStatus, Verdict
from gputop.redact import redact as redact_text
from gputop.runtime import Options, build_sampler

SCHEMA = "gputop.snapshot/1"
_SCHEMA_PREFIX = "gputop.snapshot/"

# Loader limits. A real bundle (10 minutes at 1 s, ~40 processes) is ~10 MiB.
MAX_BYTES = 64 * 1024 * 1024
MAX_FRAMES = 6000
MAX_LIST_ITEMS = 100_000
MAX_STRING_CHARS = 65_536
MAX_DEPTH = 12
MAX_META_NODES = 100_000

# `gputop snapshot` has no top-N cap (CONTRACT.md: "all of them in snapshots"): every
# process that used CPU in the window is in the bundle, not only the busiest 30.
ALL_PROCESSES = 1_000_000

_MAPS_MAX_BYTES = 8 * 1024 * 1024
_TORCH_IN_MAPS = re.compile(r"(/\S*?/torch)/(?:lib/libtorch\S*|_C\S*\.so)\s*$")
_TORCH_VERSION = re.compile(r"""^__version__\s*=\s*['"]([^'"]{1,64})['"]""", re.M)
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9.\-]+")


# ---- host and source facts --------------------------------------------------


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


def _read_text(path: str, limit: int = 1 << 20) -> str | None:
    try:
        with open(path, "rb") as f:
            return f.read(limit).decode("utf-8", "replace")
    except OSError:
        return None


def _cpu_model(cpuinfo: str | None) -> str | None:
    if not cpuinfo:
        return platform.processor() or None
    for key in ("model name", "Model", "Hardware", "cpu model", "Processor"):
        m = re.search(rf"^{key}\s*:\s*(.+)$", cpuinfo, re.M)
        if m:
            return m.group(1).strip()
    return platform.processor() or None


def _mem_total_mib(meminfo: str | None) -> int | None:
    m = re.search(r"^MemTotal:\s+(\d+)\s+kB", meminfo or "", re.M)
    return int(m.group(1)) // 1024 if m else None


def _os_name(os_release: str | None) -> str | None:
    m = re.search(r'^PRETTY_NAME="?([^"\n]*)"?$', os_release or "", re.M)
    return m.group(1) if m else None


def _cgroup_cpu_max(proc_root: str, cgroup_root: str) -> str | None:
    """The CPU quota of gputop's own cgroup (v2 ``cpu.max``), e.g. ``"200000 100000"``."""
    text = _read_text(f"{proc_root}/self/cgroup")
    if not text:
        return None
    for line in text.splitlines():
        if line.startswith("0::"):
            value = _read_text(os.path.join(cgroup_root, line[3:].lstrip("/"), "cpu.max"))
            return value.strip() if value else None
    return None


def _nvml_facts() -> dict[str, Any]:
    from gputop.sources.nvml import probe_nvml

    facts: dict[str, Any] = _jsonable(dataclasses.asdict(probe_nvml()))
    return facts


def collect_meta(
    statuses: Sequence[SourceStatus],
    *,
    proc_root: str = "/proc",
    cgroup_root: str = "/sys/fs/cgroup",
    os_release: str = "/etc/os-release",
) -> dict[str, Any]:
    """Host and source facts for a bundle (docs/snapshot.md, ``meta``)."""
    uname = os.uname()
    try:
        affinity: int | None = len(os.sched_getaffinity(0))
    except OSError:
        affinity = None
    return {
        "gputop_version": __version__,
        "python": platform.python_version(),
        "host": {
            "hostname": socket.gethostname(),
            "os": _os_name(_read_text(os_release)),
            "kernel": uname.release,
            "kernel_build": uname.version,
            "arch": uname.machine,
            "cpu_model": _cpu_model(_read_text(f"{proc_root}/cpuinfo")),
            "ncpu": os.cpu_count(),
            "ncpu_usable": affinity,
            "cgroup_cpu_max": _cgroup_cpu_max(proc_root, cgroup_root),
            "mem_total_mib": _mem_total_mib(_read_text(f"{proc_root}/meminfo")),
        },
        "nvml": _nvml_facts(),
        "sources": [dataclasses.asdict(s) for s in statuses],
    }


def torch_version(pid: int, proc_root: str = "/proc") -> dict[str, Any] | None:
    """The PyTorch a running process has loaded, from its memory maps, or None.

    The version file is read through ``/proc/PID/root`` so a trainer in a
    container reports its own torch, not the host's.
    """
    maps = _read_text(f"{proc_root}/{pid}/maps", _MAPS_MAX_BYTES)
    if not maps:
        return None
    for line in maps.splitlines():
        m = _TORCH_IN_MAPS.search(line)
        if m is None:
            continue
        pkg = m.group(1)
        text = _read_text(f"{proc_root}/{pid}/root{pkg}/version.py", 65536)
        v = _TORCH_VERSION.search(text or "")
        if v is not None:
            return {"pid": pid, "version": v.group(1), "path": pkg}
    return None


def _trainer_torch(frames: Sequence[Frame], proc_root: str = "/proc") -> list[dict[str, Any]]:
    if not frames:
        return []
    pids = sorted({p.pid for p in frames[-1].processes if p.role == "trainer"})
    return [v for v in (torch_version(pid, proc_root) for pid in pids) if v is not None]


# ---- writing ----------------------------------------------------------------


def _jsonable(obj: Any) -> Any:
    """Plain JSON values; non-finite floats become None ("cannot report"), long strings cut."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, str):
        return obj if len(obj) <= MAX_STRING_CHARS else obj[:MAX_STRING_CHARS]
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    return obj


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
    frames: Sequence[Frame],
    meta: Mapping[str, Any],
    redact: bool,
    screenshot: str | None = None,
    *,
    max_bytes: int = MAX_BYTES,
) -> bytes:
    """The bundle's JSON text (docs/snapshot.md).

    The newest frames are kept, as many as fit both ``MAX_FRAMES`` and (with the
    process table and the facts) ``max_bytes``, so every bundle written can be
    loaded; ``window.dropped_frames`` counts the rest.
    """
    if not frames:
        raise UsageError("nothing to snapshot: no frames were sampled")
    recent = list(frames[-MAX_FRAMES:])
    last = recent[-1]
    meta_out = dict(meta)
    if "torch" not in meta_out:
        meta_out["torch"] = _trainer_torch(recent)
    r = _Redactor()
    table = last.to_dict(threads=True)["processes"]
    if redact:
        r.processes(table)
    last_dict = r.frame(last.to_dict()) if redact else last.to_dict()
    head: dict[str, Any] = _jsonable(
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
        _check_shape(head)
    except ValueError as exc:
        raise UsageError(f"cannot snapshot: {_one_line(exc)}") from None
    # Frames are encoded one by one, newest first, until the size budget is spent.
    budget = max_bytes - len(_dumps(head)) - 4096
    encoded: list[str] = []
    for f in reversed(recent):
        d = f.to_dict()
        text = _dumps(_jsonable(r.frame(d) if redact else d))
        budget -= len(text.encode("utf-8")) + 1
        if budget < 0:
            break
        encoded.append(text)
    if not encoded:
        raise UsageError(f"cannot snapshot: the process table alone exceeds {_size(max_bytes)}")
    encoded.reverse()
    kept = recent[len(recent) - len(encoded) :]
    head["window"] = {
        "start_t": round(kept[0].t, 3),
        "end_t": round(kept[-1].t, 3),
        "frames": len(kept),
        "dropped_frames": len(frames) - len(kept),
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
    frames: list[Frame],
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


# ---- loading ----------------------------------------------------------------


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


def _check_shape(obj: Any, depth: int = 0) -> int:
    """Reject absurd structure (nesting, list lengths, string sizes); returns the node count."""
    if depth > MAX_DEPTH:
        raise ValueError(f"nested deeper than {MAX_DEPTH} levels")
    if isinstance(obj, str):
        if len(obj) > MAX_STRING_CHARS:
            raise ValueError(f"a string of {len(obj)} characters (limit {MAX_STRING_CHARS})")
        return 1
    if isinstance(obj, list):
        if len(obj) > MAX_LIST_ITEMS:
            raise ValueError(f"a list of {len(obj)} items (limit {MAX_LIST_ITEMS})")
        return 1 + sum(_check_shape(v, depth + 1) for v in obj)
    if isinstance(obj, dict):
        if len(obj) > MAX_LIST_ITEMS:
            raise ValueError(f"an object with {len(obj)} keys (limit {MAX_LIST_ITEMS})")
        return 1 + sum(_check_shape(v, depth + 1) for v in obj.values())
    return 1


def _size(n: int) -> str:
    if n >= 2**20:
        return f"{n / 2**20:.0f} MiB"
    return f"{n / 2**10:.0f} KiB"


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
                f"{shown} is {_size(st.st_size)}; snapshots are limited to {_size(max_bytes)}"
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
            raise UsageError(f"{shown} grew past {_size(max_bytes)} while being read")
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
        raise UsageError(
            f"{shown} is not valid JSON (truncated or corrupt?): {exc.msg} at line "
            f"{exc.lineno} column {exc.colno}"
        ) from None
    except RecursionError:
        raise UsageError(f"{shown} is not a gputop snapshot: nested too deeply") from None
    except ValueError as exc:
        raise UsageError(f"{shown} is not a gputop snapshot: {_one_line(exc)}") from None


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300]


def _check_schema(shown: str, doc: Any) -> None:
    if not isinstance(doc, dict):
        raise UsageError(f"{shown} is not a gputop snapshot (not a JSON object)")
    schema = doc.get("schema")
    if not isinstance(schema, str) or not schema.startswith(_SCHEMA_PREFIX):
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
            raise ValueError(f"frame {i}: {_one_line(exc)}") from None
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
        _check_shape(doc)
        raw_frames = _field(doc, "frames", list)
        if not raw_frames:
            raise ValueError("it holds no frames")
        if len(raw_frames) > MAX_FRAMES:
            raise ValueError(f"{len(raw_frames)} frames (limit {MAX_FRAMES})")
        frames = _frames(raw_frames)
        meta = _field(doc, "meta", dict, {})
        if _check_shape(meta) > MAX_META_NODES:
            raise ValueError(f"meta has more than {MAX_META_NODES} values")
        table = _field(doc, "processes", list, [])
        try:
            processes = tuple(ProcessSample.from_dict(p) for p in table)
        except ValueError as exc:
            raise ValueError(f"process table: {_one_line(exc)}") from None
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
        raise UsageError(f"{shown} is not a valid gputop snapshot: {_one_line(exc)}") from None


# ---- the command ------------------------------------------------------------


def snapshot_command(args: argparse.Namespace, opts: Options) -> int:
    """`gputop snapshot`: sample for --duration seconds, write one bundle, print its path."""
    sampler = build_sampler(dataclasses.replace(opts, top_n=ALL_PROCESSES))
    frames: list[Frame] = []
    interrupted = False
    try:
        sampler.run(frames.append, args.duration)
    except KeyboardInterrupt:
        # Ctrl-C ends sampling early; what was seen so far is still worth writing.
        interrupted = True
    finally:
        statuses = sampler.statuses()
        sampler.close()
    if not frames:
        return 130 if interrupted else 1
    path = write_bundle(
        frames,
        collect_meta(statuses),
        None,
        None,
        redact=not getattr(args, "no_redact", False),
        path=args.output,
    )
    print(path, file=sys.stdout, flush=True)
    return 0
