"""Once gputop has exited, none of its BPF programs runs again, and all are gone soon after.

As root, through the command line, for both loaders: ``gputop record`` watches a real
DataLoader loop whose GPU step waits in the fake libcuda's ``cuStreamSynchronize``, so its
scheduler programs run on every context switch and its CUDA uprobes on every step. The
test holds a descriptor of each of gputop's programs (which keeps a program loaded, never
attached) and reads the kernel's own run count of each (bpf_stats) before the signal and
after gputop has been reaped, while the loop keeps switching and calling CUDA.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.bpfutil import held_prog_ids, loaded_prog_ids, prog_fds, prog_runs, run_stats
from tests.fakecuda import build_fake_cuda
from tests.harness import gputop_env, start_gputop
from tests.probeticks import needs_probe
from tests.truthloop import running_loop

pytestmark = needs_probe(pytest.mark.torch)

# How long after its exit a program of gputop's may still be listed (not run): on an idle
# machine the last references go within one grace period of the tracing subsystem (tens of
# milliseconds, docs/ebpf.md); 10 s leaves room for a machine whose CPUs are busy.
GONE_WITHIN_S = 10.0
# How long the test watches the run counts after the exit.
WATCH_S = 1.0


@pytest.fixture(scope="module")
def trainer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """A DataLoader loop with one worker whose 20 ms GPU step sleeps in cuStreamSynchronize."""
    lib = build_fake_cuda()
    args = ["--standin", "cuda-sleep", "--cuda-lib", str(lib), "--workers", "1"]
    args += ["--sample-cpu-ms", "2", "--step-ms", "20"]
    with running_loop(tmp_path_factory.mktemp("detach"), args) as (pid, _out):
        yield pid


def _until_probed(p: subprocess.Popen[str], trainer: int) -> dict[str, Any]:
    """Frames until one shows the trainer's GPU wait measured (its CUDA uprobes attached)."""
    assert p.stdout is not None
    deadline = time.monotonic() + 150  # bcc compiles at nice 19 first
    while time.monotonic() < deadline:
        ready, _, _ = select.select([p.stdout], [], [], 1.0)
        if not ready:
            continue
        line = p.stdout.readline()
        assert line, f"gputop record ended: {p.communicate()[1]}"
        frame: dict[str, Any] = json.loads(line)
        row = next((r for r in frame["processes"] if r["pid"] == trainer), None)
        if frame["sources"]["sched"] == "bpf" and row and row.get("gpu_sync_pct") is not None:
            return frame
    raise AssertionError("the probe never measured the trainer's CUDA wait")


def _runs(fds: dict[int, int]) -> dict[int, tuple[str, int]]:
    return {i: prog_runs(fd) for i, fd in fds.items()}


@pytest.mark.parametrize(
    ("loader", "multi", "sig"),
    [
        ("libbpf", "", signal.SIGTERM),
        ("bcc", "", signal.SIGTERM),
        # The CUDA uprobes one perf event per address (kernels before 6.6), through links.
        ("libbpf", "0", signal.SIGHUP),
    ],
    ids=["libbpf-SIGTERM", "bcc-SIGTERM", "libbpf-perf-uprobes-SIGHUP"],
)
def test_after_gputop_exits_none_of_its_programs_runs_and_all_are_gone_soon(
    trainer: int, loader: str, multi: str, sig: signal.Signals
) -> None:
    env = gputop_env(GPUTOP_BPF_LOADER=loader, GPUTOP_UPROBE_MULTI=multi)
    with run_stats():
        p = start_gputop("record", "--interval", "0.3", env=env)
        fds: dict[int, int] = {}
        try:
            _until_probed(p, trainer)
            ids = held_prog_ids(p.pid)
            fds = prog_fds(ids)
            assert fds and set(fds) == ids, "a live probe holds its programs"
            before = _runs(fds)
            time.sleep(0.5)
            live = _runs(fds)
            ran = {name for i, (name, n) in live.items() if n > before[i][1]}
            # The check below can fail: while gputop runs, its context-switch program and
            # its CUDA uprobes (entry and return) run.
            assert {"on_sync_enter", "on_sync_exit"} <= ran, ran
            # (names cut to 15 characters: "tracepoint__sch" (libbpf), "sched__sched_sw" (bcc))
            assert any(n.startswith(("tracepoint__sch", "sched__sched")) for n in ran), ran
            p.send_signal(sig)
            _, err = p.communicate(timeout=30)
            at_exit = _runs(fds)
            time.sleep(WATCH_S)  # the loop switches and calls cuStreamSynchronize ~50 times
            after = _runs(fds)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
            for fd in fds.values():
                os.close(fd)
    assert p.returncode == 128 + sig, err
    assert "Traceback" not in err, err
    grew = {at_exit[i][0]: after[i][1] - at_exit[i][1] for i in at_exit}
    assert not {n: d for n, d in grew.items() if d}, f"ran after gputop exited: {grew}"
    deadline = time.monotonic() + GONE_WITHIN_S
    while left := ids & loaded_prog_ids():
        assert time.monotonic() < deadline, f"still loaded {GONE_WITHIN_S} s after exit: {left}"
        time.sleep(0.05)


def test_the_test_reads_run_counts_from_the_kernel(tmp_path: Path) -> None:
    # bpf_prog_info's layout as this test reads it, against bpftool's reading of the same
    # programs: a wrong offset would make the check above pass on any code.
    env = gputop_env(GPUTOP_BPF_LOADER="libbpf")
    with run_stats():
        p = start_gputop("record", "--interval", "0.3", env=env)
        try:
            assert p.stdout is not None and p.stdout.readline()
            ids = held_prog_ids(p.pid)
            fds = prog_fds(ids)
            try:
                p.send_signal(signal.SIGSTOP)  # nothing of gputop's runs on its own switches now
                ours = _runs(fds)
                shown = json.loads(
                    subprocess.run(
                        ["bpftool", "prog", "show", "--json"], capture_output=True, text=True
                    ).stdout
                )
                again = _runs(fds)
            finally:
                for fd in fds.values():
                    os.close(fd)
        finally:
            p.kill()
            p.wait()
    theirs = {int(s["id"]): (s["name"], int(s.get("run_cnt", 0))) for s in shown}
    for i, (name, n) in ours.items():
        assert theirs[i][0].startswith(name), (theirs[i], name)
        assert n <= theirs[i][1] <= again[i][1], (i, n, theirs[i], again[i])
    assert any(n for _, n in ours.values()), ours
