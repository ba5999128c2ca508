"""The short-lived compiler process: bcc compiles, this attaches, then hands the fds over.

Run by ``bpf_handover.spawn`` as ``python -m gputop.sources.bpf_child SOCK_FD
PARENT_PID SRC [CFLAG...]``. It imports bcc (and with it LLVM, about 65 MiB
the long-lived gputop process never pays), compiles ``SRC``, attaches every
``TRACEPOINT_PROBE`` through a BPF link on its perf event (``bpf_syscall``; bcc's
own attach sets the program on the event, where it runs until the event is
freed), and sends one message over the Unix socket ``SOCK_FD``: a JSON
description, with the program, attachment and map file descriptors as
SCM_RIGHTS. Then it exits without running bcc's cleanup.

It dies with its parent (PR_SET_PDEATHSIG): a gputop killed mid-compile leaves
neither a compiler running nor a program attached. It runs at nice 19 so the
compile takes CPU only from idle time.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import signal
import socket
import sys
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gputop.sources.bpf_attach import Attachment

PR_SET_PDEATHSIG = 1
NICE = 19


def _die_with_parent(parent_pid: int) -> bool:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    # The parent may have died before prctl: then nobody would kill us later.
    return os.getppid() == parent_pid


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else repr(exc)


def _peak_rss_kib() -> int:
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _tables(bcc: Any, bpf: Any) -> list[tuple[str, int, Any, Any]]:
    """(name, fd, key description, value description) of every map the program defines."""
    lib = bcc.libbcc.lib
    lib.bpf_num_tables.restype = ctypes.c_ulonglong
    lib.bpf_num_tables.argtypes = [ctypes.c_void_p]
    lib.bpf_table_name.restype = ctypes.c_char_p
    lib.bpf_table_name.argtypes = [ctypes.c_void_p, ctypes.c_ulonglong]
    out = []
    for i in range(int(lib.bpf_num_tables(bpf.module))):
        name: bytes = lib.bpf_table_name(bpf.module, i)
        fd = int(lib.bpf_table_fd(bpf.module, name))
        if fd < 0:
            continue
        descs = []
        for getter in (lib.bpf_table_key_desc, lib.bpf_table_leaf_desc):
            raw = getter(bpf.module, name)
            try:
                descs.append(json.loads(raw.decode()) if raw else None)
            except ValueError:
                descs.append(None)
        out.append((name.decode(), fd, descs[0], descs[1]))
    return out


def _tracepoint_id(tp: str) -> int:
    """The trace event's id in tracefs (``category:event``); OSError or ValueError if none."""
    from gputop.sources.bcc_loader import TRACEFS_DIRS

    category, event = tp.split(":", 1)
    for d in TRACEFS_DIRS:
        try:
            with open(f"{d}/events/{category}/{event}/id", encoding="ascii") as f:
                return int(f.read().strip())
        except FileNotFoundError:
            continue
    raise FileNotFoundError(f"no trace event {tp}")


def _attach(bcc: Any, bpf: Any, tp: str, fn: str) -> Attachment:
    from gputop.sources.bpf_attach import attach_tracepoint

    prog = bpf.load_func(fn.encode(), bcc.BPF.TRACEPOINT)
    return attach_tracepoint(int(prog.fd), _tracepoint_id(tp))


def _attach_all(
    bcc: Any, bpf: Any, pairs: list[list[str]], optional: list[list[str]]
) -> dict[str, Attachment]:
    """Every ``TRACEPOINT_PROBE`` (a failure fails the load), then the (entry, program,
    exit, program) pairs, exit first, dropping a pair the kernel refuses, then the
    optional (tracepoint, program) ones this kernel has.

    The exit first: an event in flight during the attach can then only miss its
    entry, never leave an entry without its exit.
    """
    from gputop.sources.bpf_handover import detach

    done: dict[str, Attachment] = {}
    for i in range(int(bcc.libbcc.lib.bpf_num_functions(bpf.module))):
        fn = bcc.libbcc.lib.bpf_function_name(bpf.module, i).decode()
        if fn.startswith("tracepoint__"):
            tp = fn.removeprefix("tracepoint__").replace("__", ":")
            done[f"tracepoint:{tp}"] = _attach(bcc, bpf, tp, fn)
    for entry_tp, entry_fn, exit_tp, exit_fn in pairs:
        try:
            exit_at = _attach(bcc, bpf, exit_tp, exit_fn)
        except Exception:  # noqa: BLE001 - refused by this kernel: skip the pair
            continue
        try:
            done[f"tracepoint:{entry_tp}"] = _attach(bcc, bpf, entry_tp, entry_fn)
        except Exception:  # noqa: BLE001
            detach([exit_at])
            continue
        done[f"tracepoint:{exit_tp}"] = exit_at
    for tp, fn in optional:
        try:
            done[f"tracepoint:{tp}"] = _attach(bcc, bpf, tp, fn)
        except Exception:  # noqa: BLE001 - this kernel lacks it: skip
            continue
    return done


_MAP_CALL = re.compile(r"\bGT_(LOOKUP|INSERT|UPDATE|DELETE)\(\s*(\w+)\s*,\s*")


def bcc_source(text: str) -> str:
    """The program in bcc's dialect: ``GT_LOOKUP(map, ...)`` written out as ``map.lookup(...)``.

    bcc rewrites map calls only where the source spells them out, never inside
    a macro expansion; the ahead-of-time build expands the same GT_ macros to
    libbpf's helper calls (bpf/dialect.h).
    """
    return _MAP_CALL.sub(lambda m: f"{m.group(2)}.{m.group(1).lower()}(", text)


def compile_and_attach(src: str, cflags: list[str]) -> tuple[dict[str, Any], list[int]]:
    """(the message, the fds to send): a description of what is attached, or why not."""
    from gputop.sources.bcc_find import find_bcc

    bcc, why = find_bcc()
    if bcc is None:
        return {"ok": False, "stage": "bcc", "reason": str(why)}, []
    started = time.monotonic()
    try:
        with open(src, encoding="utf-8") as f:
            text = bcc_source(f.read())
    except OSError as exc:
        return {"ok": False, "stage": "compile", "reason": f"cannot read {src}: {exc}"}, []

    class Unattached(bcc.BPF):  # type: ignore[misc, name-defined]
        """bcc's BPF, which attaches nothing while constructing: this module attaches."""

        def _trace_autoload(self) -> None:
            pass

    try:
        bpf = Unattached(text=text.encode(), cflags=cflags)
    except Exception as exc:  # noqa: BLE001 - compile or verifier failure
        return {"ok": False, "stage": "compile", "reason": _first_line(exc)}, []
    compile_s = time.monotonic() - started
    try:
        attached = _attach_all(
            bcc,
            bpf,
            json.loads(os.environ.get("GPUTOP_BPF_ATTACH", "[]")),
            json.loads(os.environ.get("GPUTOP_BPF_OPTIONAL", "[]")),
        )
    except Exception as exc:  # noqa: BLE001 - verifier or attach failure
        return {"ok": False, "stage": "compile", "reason": _first_line(exc)}, []
    # Programs the parent attaches itself later (uprobes): loaded, handed over unattached.
    from gputop.sources.bpf_attach import BPF_TRACE_UPROBE_MULTI

    attach_type = BPF_TRACE_UPROBE_MULTI if os.environ.get("GPUTOP_BPF_LOAD_MULTI") else -1
    for name in json.loads(os.environ.get("GPUTOP_BPF_LOAD", "[]")):
        try:
            bpf.load_func(name.encode(), bcc.BPF.KPROBE, attach_type=attach_type)
        except Exception:  # noqa: BLE001 - refused: the parent finds it missing
            continue
    fds: list[int] = []
    programs = []
    for name, fn in bpf.funcs.items():
        programs.append(name.decode())
        fds.append(int(fn.fd))
    attachments = []
    for name, a in attached.items():
        attachments.append([name, a.link_fd is not None, a.event_fd is not None])
        fds.extend(fd for fd in (a.link_fd, a.event_fd) if fd is not None)
    maps = []
    for name, fd, key_desc, leaf_desc in _tables(bcc, bpf):
        maps.append({"name": name, "key_desc": key_desc, "leaf_desc": leaf_desc})
        fds.append(fd)
    msg = {
        "ok": True,
        "programs": programs,
        "attachments": attachments,
        "maps": maps,
        "compile_s": round(compile_s, 3),
        "child_peak_rss_kib": _peak_rss_kib(),
    }
    return msg, fds


def main(argv: list[str]) -> int:
    """Entry point; returns the exit status (0: a message was sent)."""
    sock_fd, parent_pid, src, *cflags = argv
    if not _die_with_parent(int(parent_pid)):
        return 3
    os.setpriority(os.PRIO_PROCESS, 0, int(os.environ.get("GPUTOP_BPF_NICE", NICE)))
    sock = socket.socket(fileno=int(sock_fd))
    msg, fds = compile_and_attach(src, cflags)
    socket.send_fds(sock, [json.dumps(msg).encode()], fds)
    sock.close()
    # Skip interpreter shutdown: bcc's atexit cleanup would disable and detach the
    # perf events the parent now holds. The kernel drops this process's own fds.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
