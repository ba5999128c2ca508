"""A process that calls the fake libcuda's waiting entry points, each on a thread of its own.

    python tests/fakecuda/caller.py LIB WAIT_MS GAP_MS TARGET...

A TARGET is ``sym:NAME`` (the export NAME, found by ``dlsym``, as a program linked against
the driver calls it), ``symh:NAME`` (the same, its source a host buffer) or
``proc:BASE:VERSION:FLAGS`` (the function pointer ``cuGetProcAddress_v2(BASE, VERSION,
FLAGS)`` hands out, as the CUDA runtime calls the driver). Every call passes a copy's
arguments (destination, source, bytes, stream): the source is "device memory" from the
fake's ``cuMemAlloc_v2`` (a reservation the process cannot read), the destination a host
buffer; for ``symh:`` the other way round. Every waiting call waits WAIT_MS, asleep; each
thread calls its target, then sleeps GAP_MS, and so on, timing every call with
``perf_counter`` (CLOCK_MONOTONIC, the clock of the kernel's ``bpf_ktime_get_ns``).

It prints one JSON line once every thread runs: ``{"tids": {target: tid},
"symbols": {target: the export its address is, by dladdr}}``. Then, for each line
``dump`` on stdin, one JSON line ``{target: [[start, end], ...]}``: every call that
ended so far.
"""

from __future__ import annotations

import ctypes
import functools
import json
import sys
import threading
import time
from collections.abc import Callable

COPY_BYTES = 4096


class _DlInfo(ctypes.Structure):
    _fields_ = [
        ("dli_fname", ctypes.c_char_p),
        ("dli_fbase", ctypes.c_void_p),
        ("dli_sname", ctypes.c_char_p),
        ("dli_saddr", ctypes.c_void_p),
    ]


def symbol_at(address: int) -> str | None:
    """The exported function that starts at ``address`` (``dladdr``), if one does."""
    info = _DlInfo()
    if not ctypes.CDLL(None).dladdr(ctypes.c_void_p(address), ctypes.byref(info)):
        return None
    if not info.dli_sname or info.dli_saddr != address:
        return None
    return info.dli_sname.decode()


def resolve(lib: ctypes.CDLL, target: str) -> int:
    """The address ``target`` calls."""
    kind, _, rest = target.partition(":")
    if kind in ("sym", "symh"):
        return ctypes.cast(getattr(lib, rest), ctypes.c_void_p).value or 0
    if kind == "proc":
        base, version, flags = rest.split(":")
        fn = ctypes.c_void_p()
        status = ctypes.c_int()
        rc = lib.cuGetProcAddress_v2(
            base.encode(),
            ctypes.byref(fn),
            ctypes.c_int(int(version)),
            ctypes.c_ulonglong(int(flags)),
            ctypes.byref(status),
        )
        if rc != 0 or not fn.value:
            raise SystemExit(f"cuGetProcAddress_v2({base}, {version}, {flags}) failed: {rc}")
        return fn.value
    raise SystemExit(f"unknown target {target!r}: sym:NAME or proc:BASE:VERSION:FLAGS")


def main(argv: list[str]) -> int:
    lib = ctypes.CDLL(argv[0])
    wait_ms, gap_ms, targets = float(argv[1]), float(argv[2]), argv[3:]
    lib.fake_cuda_set(ctypes.c_longlong(int(wait_ms * 1e6)), 0)
    addresses = {t: resolve(lib, t) for t in targets}
    device = ctypes.c_ulonglong()
    if lib.cuMemAlloc_v2(ctypes.byref(device), ctypes.c_size_t(COPY_BYTES)) != 0:
        raise SystemExit("cuMemAlloc_v2 failed")
    host = ctypes.create_string_buffer(COPY_BYTES)
    copy = ctypes.CFUNCTYPE(
        ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p
    )
    spans: dict[str, list[tuple[float, float]]] = {t: [] for t in targets}
    tids: dict[str, int] = {}
    started = threading.Barrier(len(targets) + 1)

    def run(target: str, call: Callable[[], int]) -> None:
        tids[target] = threading.get_native_id()
        started.wait()
        mine = spans[target]
        while True:
            t0 = time.perf_counter()
            call()
            mine.append((t0, time.perf_counter()))
            time.sleep(gap_ms / 1000.0)

    host_addr = ctypes.addressof(host)
    for t in targets:
        fn = copy(addresses[t])
        src, dst = (host_addr, device.value) if t.startswith("symh:") else (device.value, host_addr)
        call = functools.partial(fn, dst, src, COPY_BYTES, None)
        threading.Thread(target=run, args=(t, call), daemon=True).start()
    started.wait()
    symbols = {t: symbol_at(a) for t, a in addresses.items()}
    print(json.dumps({"tids": tids, "symbols": symbols}), flush=True)
    for line in sys.stdin:
        if line.strip() == "dump":
            print(json.dumps({t: list(s) for t, s in spans.items()}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
