"""What scripts/gpu_check.py's checks are made of: the run (its machine, files and
deadline), the processes it starts (the loop, CPU hogs, `gputop record`), the loop's
own clock read back, and counting uprobes on the loop's libcuda."""

from __future__ import annotations

import ctypes
import importlib.util
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import gpu_bundle  # noqa: E402

LOOP = ROOT / "scripts" / "gpu_check_loop.py"
INTERVAL_S = 0.5
# How long each measured phase of the sync run lasts (its steps and frames are averaged).
PHASE_S = 4.5
READY_S = 90.0  # PyTorch, CUDA and the DataLoader workers starting
# What gputop itself imports (pyproject.toml's dependencies, by module).
NEEDED_MODULES = ("textual", "pynvml", "psutil", "prometheus_client", "plotext", "textual_plotext")


class CheckError(Exception):
    """Why the check run cannot go on, in one line."""


@dataclass
class Result:
    """One row of the summary."""

    name: str
    status: str  # PASS, FAIL, INFO, SKIP
    detail: str
    data: dict[str, Any] = field(default_factory=dict)


class Run:
    """One run of the checks: the machine, where files go, the deadline, the shared runs."""

    def __init__(self, fake: bool, work: Path, budget_s: float, phase_s: float = PHASE_S) -> None:
        self.fake = fake
        self.work = work
        self.phase_s = phase_s
        self.deadline = time.monotonic() + budget_s
        self.log_lines: list[str] = []
        self.cpus = sorted(os.sched_getaffinity(0))[-2:]
        self.site: Path | None = None
        self.libbpf_carried = False
        self.fake_cuda: Path | None = None
        self.shared: dict[str, Any] = {}

    def log(self, msg: str) -> None:
        line = f"[{time.strftime('%H:%M:%S')}] {msg}"
        self.log_lines.append(line)
        print(line, flush=True)

    def left_s(self) -> float:
        return self.deadline - time.monotonic()

    def gputop_env(self, nvml_env: dict[str, str] | None = None) -> dict[str, str]:
        """The environment of gputop's processes: the bundle first on PYTHONPATH, the
        carried libbpf where the machine has none, the fake NVML in --fake mode."""
        env = dict(nvml_env or os.environ)
        paths = [str(self.site)] if self.site else []
        env["PYTHONPATH"] = os.pathsep.join([*paths, str(ROOT)])
        if self.libbpf_carried:
            lib = str(gpu_bundle.DEFAULT_DIR / "lib")
            env["LD_LIBRARY_PATH"] = os.pathsep.join(
                p for p in (lib, env.get("LD_LIBRARY_PATH", "")) if p
            )
        return env

    def loop_env(self) -> dict[str, str]:
        """The loop's environment: the machine's own Python, nothing of the bundle."""
        env = dict(os.environ)
        env.pop("PYTHONPATH", None)
        return env


# ---- setting up ---------------------------------------------------------------------


def setup(run: Run) -> None:
    """Make gputop importable (the bundle where a dependency is missing) and libbpf loadable."""
    missing = [m for m in NEEDED_MODULES if importlib.util.find_spec(m) is None]
    if missing:
        try:
            run.site = gpu_bundle.install(gpu_bundle.DEFAULT_DIR)
        except gpu_bundle.BundleError as exc:
            raise CheckError(f"{', '.join(missing)} missing and no usable bundle: {exc}") from exc
        sys.path.insert(0, str(run.site))
        importlib.invalidate_caches()
        run.log(f"installed the bundle for {', '.join(missing)} into {run.site}")
    try:
        ctypes.CDLL("libbpf.so.1")
    except OSError:
        if not (gpu_bundle.DEFAULT_DIR / "lib" / "libbpf.so.1").exists():
            run.log("no libbpf.so.1 here and none carried: gputop falls back to bcc or /proc")
        else:
            run.libbpf_carried = True
            run.log("no libbpf.so.1 here: gputop uses the carried one (.gpucheck/lib)")
    if run.fake:
        from tests.fakecuda import build_fake_cuda

        run.fake_cuda = build_fake_cuda()


# ---- processes ----------------------------------------------------------------------


def _kill(p: subprocess.Popen[Any]) -> None:
    if p.poll() is None:
        with suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
    p.wait()


@contextmanager
def loop_running(run: Run, tag: str, *args: str) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    """scripts/gpu_check_loop.py running on the run's CPUs, ready; its steps file."""
    out = run.work / f"loop-{tag}.txt"
    cmd = [sys.executable, str(LOOP), "--out", str(out), "--cpus", ",".join(map(str, run.cpus))]
    if run.fake_cuda is not None:
        cmd += ["--fake", str(run.fake_cuda)]
    errors = run.work / f"loop-{tag}.stderr"
    # Its own process group (to kill its workers with it) in this session: with
    # autogroup scheduling, hogs in another session would not compete with it.
    with open(errors, "w") as err:
        p = subprocess.Popen(
            [*cmd, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env=run.loop_env(),
            preexec_fn=os.setpgrp,  # process_group= is Python 3.11+
        )
    try:
        assert p.stdout is not None
        started, _, _ = select.select([p.stdout], [], [], READY_S)
        if not started or p.stdout.readline() != "ready\n":
            _kill(p)
            tail = errors.read_text().strip().splitlines()
            why = tail[-1] if tail else f"no step within {READY_S:.0f} s"
            raise CheckError(f"the loop did not start: {why}")
        yield p, out
    finally:
        _kill(p)


def tell(loop: subprocess.Popen[str], line: str) -> None:
    assert loop.stdin is not None
    loop.stdin.write(line + "\n")
    loop.stdin.flush()


@contextmanager
def hogs_running(cpus: list[int], per_cpu: int = 2) -> Iterator[list[int]]:
    """Busy processes pinned to ``cpus`` (in this session); their pids."""
    code = "import os, sys\nos.sched_setaffinity(0, {int(sys.argv[1])})\nwhile True:\n    pass\n"
    procs = [
        subprocess.Popen([sys.executable, "-c", code, str(c)], preexec_fn=os.setpgrp)
        for c in cpus
        for _ in range(per_cpu)
    ]
    try:
        yield [p.pid for p in procs]
    finally:
        for p in procs:
            _kill(p)


@dataclass
class Recorder:
    """`gputop record` running into a file; stopped with SIGINT as a user would."""

    proc: subprocess.Popen[str]
    path: Path

    def frames(self) -> list[dict[str, Any]]:
        """The whole frames written so far (none before gputop opens the file)."""
        out: list[dict[str, Any]] = []
        if not self.path.exists():
            return out
        for line in self.path.read_text().splitlines(keepends=True):
            if line.endswith("\n"):
                out.append(json.loads(line))
        return out


@contextmanager
def recording(run: Run, tag: str, env: dict[str, str]) -> Iterator[Recorder]:
    path = run.work / f"frames-{tag}.jsonl"
    cmd = [sys.executable, "-m", "gputop", "record", "--interval", str(INTERVAL_S), "-o", str(path)]
    with open(run.work / f"gputop-{tag}.stderr", "w") as err:
        p = subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=err, text=True, env=env, cwd=ROOT
        )
    try:
        yield Recorder(p, path)
    finally:
        p.send_signal(signal.SIGINT)
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def row_of(frame: dict[str, Any], pid: int) -> dict[str, Any] | None:
    return next((r for r in frame["processes"] if r["pid"] == pid), None)


def wait_measured(rec: Recorder, pid: int, timeout_s: float = 40.0) -> None:
    """Until a frame has the loop's GPU wait measured (its libcuda found and probed)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if rec.proc.poll() is not None:
            raise CheckError(f"gputop record exited ({rec.proc.returncode}): see its stderr")
        for f in rec.frames()[-3:]:
            r = row_of(f, pid)
            if r is not None and r.get("gpu_sync_pct") is not None:
                return
        time.sleep(INTERVAL_S)
    raise CheckError(f"gputop never measured the loop's GPU wait within {timeout_s:.0f} s")


def nvml_env(run: Run, pid: int, *, util: int, sm: int, power_w: int) -> dict[str, str] | None:
    """--fake: the fake NVML reporting ``pid`` as the GPU's process; else None (the real one)."""
    if not run.fake:
        return None
    from tests.fakenvml import FakeGpu, FakeNvml, FakeProc

    gpu = FakeGpu(
        util=[util],
        sm_util=[sm],
        power_w=[power_w],
        mem_used_mib=[20000],
        processes=[FakeProc(pid=pid, mem_mib=20000, sm_pct=sm)],
    )
    return FakeNvml(run.work / f"nvml-{pid}", [gpu]).env()


# ---- the loop's own clock -----------------------------------------------------------


@dataclass(frozen=True)
class Step:
    kind: str
    start: float
    wait_start: float
    wait_end: float
    end: float


def read_steps(path: Path) -> list[Step]:
    steps = []
    for line in path.read_text().splitlines(keepends=True):
        parts = line.split()
        if len(parts) == 5 and line.endswith("\n"):
            steps.append(Step(parts[0], *map(float, parts[1:])))
    return steps


def wait_share(steps: list[Step], t0: float, t1: float) -> float:
    """% of [t0, t1] the loop spent inside its waiting call (each span clipped)."""
    inside = sum(max(0.0, min(s.wait_end, t1) - max(s.wait_start, t0)) for s in steps)
    return 100.0 * inside / (t1 - t0)


def mono_offset() -> float:
    """Unix time minus monotonic time now: turns a frame's ``t`` into the loop's clock."""
    return time.time() - time.monotonic()


# ---- uprobe counters: which probed entry points a call reaches ----------------------


class UprobeCounters:
    """Counting uprobes (no BPF program) on every probed function of a library, for one
    thread: how often it entered each. The kernel's uprobe PMU, as gputop's own uprobes."""

    _PERF_FLAG_FD_CLOEXEC = 8
    _NR_PERF_EVENT_OPEN = 298  # x86_64

    def __init__(self, tid: int, path: str, offsets: dict[str, int]) -> None:
        pmu = Path("/sys/bus/event_source/devices/uprobe/type")
        if not pmu.exists():
            raise CheckError("this kernel has no uprobe PMU")
        self._type = int(pmu.read_text())
        self._libc = ctypes.CDLL(None, use_errno=True)
        self.fds: dict[str, int] = {}
        by_off: dict[int, list[str]] = {}
        for name, off in sorted(offsets.items()):
            by_off.setdefault(off, []).append(name)
        for off, names in by_off.items():
            self.fds["=".join(names)] = self._open(tid, path, off)

    def _open(self, tid: int, path: str, offset: int) -> int:
        name = ctypes.create_string_buffer(os.fsencode(path))
        attr = bytearray(128)
        attr[0:4] = self._type.to_bytes(4, "little")
        attr[4:8] = (128).to_bytes(4, "little")
        attr[56:64] = ctypes.addressof(name).to_bytes(8, "little")  # uprobe_path
        attr[64:72] = offset.to_bytes(8, "little")  # probe_offset
        buf = (ctypes.c_char * 128).from_buffer(attr)
        fd = self._libc.syscall(
            self._NR_PERF_EVENT_OPEN, buf, tid, -1, -1, self._PERF_FLAG_FD_CLOEXEC
        )
        if fd < 0:
            raise CheckError(
                f"perf_event_open(uprobe {path}+{offset:#x}): errno {ctypes.get_errno()}"
            )
        return int(fd)

    def read(self) -> dict[str, int]:
        return {n: int.from_bytes(os.read(fd, 8), "little") for n, fd in self.fds.items()}

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)


def loop_library(pid: int) -> tuple[str, dict[str, int]]:
    """The libcuda the loop maps (reached through its root) and gputop's probed offsets in it."""
    from gputop.sources.cuda_probe import PROBED_FUNCTIONS, function_offsets, mapped_library

    with open(f"/proc/{pid}/maps") as f:
        lib = mapped_library(f.read())
    if lib is None:
        raise CheckError(f"the loop (pid {pid}) maps no libcuda.so")
    path = f"/proc/{pid}/root{lib.path}"
    return path, function_offsets(path, PROBED_FUNCTIONS)


def per_step(before: dict[str, int], after: dict[str, int], steps: int) -> dict[str, float]:
    return {
        n: round((after[n] - before[n]) / steps, 2)
        for n in after
        if steps and after[n] - before[n] >= 0.5 * steps
    }


@dataclass
class Phase:
    kind: str
    hogs: bool
    start: float
    end: float = 0.0
    hits_before: dict[str, int] = field(default_factory=dict)
    hits_after: dict[str, int] = field(default_factory=dict)
