"""The CUDA uprobes' attachments, as root with the real probe: a library mapped after gputop
started is found, a trainer that never maps one reads null, two trainers of one library
share one attachment, and a probe killed outright leaves no uprobe program behind.

What is checked holds on a busy machine too (attachments, nulls, programs gone within a
bound), so this file runs beside other tests (tests/conftest.py); the GPU wait against the
loop's own clock is tests/system/test_cuda_sync.py's.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gputop.model.frame import Frame
from gputop.sampler import HostPass, Sampler
from gputop.sources.cuda_probe import PROBED_FUNCTIONS, PROBES, function_offsets
from gputop.sources.sched_probe import BpfSchedProbe
from tests.bpfutil import (
    held_links,
    held_perf_attachments,
    held_prog_ids,
    loaded_prog_ids,
    wait_gone,
)
from tests.probeticks import needs_probe, row_of, tick_until
from tests.procutil import kill_all, spawn_python
from tests.truthloop import running_loop

pytestmark = needs_probe(pytest.mark.torch)

TICK_S = 1.0


def _ticks(sampler: Sampler, n: int) -> list[Frame]:
    """n ticks TICK_S apart."""
    frames = []
    for _ in range(n):
        time.sleep(TICK_S)
        frames.append(sampler.tick())
    return frames


def test_a_library_mapped_after_gputop_started_is_found_and_probed(
    probe: BpfSchedProbe, cuda_lib: Path, tmp_path: Path
) -> None:
    args = ["--standin", "cuda-sleep", "--cuda-lib", str(cuda_lib), "--workers", "1"]
    args += ["--sample-cpu-ms", "2", "--step-ms", "20", "--cuda-after-s", "4"]
    with running_loop(tmp_path, args) as (pid, _out):
        sampler = Sampler(procs=HostPass(top_n=100_000), probe=probe, interval_s=TICK_S)
        sampler.tick()
        before = _ticks(sampler, 2)
        assert all((r := row_of(f, pid)) is not None and r.gpu_sync_pct is None for f in before)
        tick_until(sampler, lambda f: (r := row_of(f, pid)) is not None and r.gpu_sync_pct)


def test_a_trainer_that_never_maps_the_library_gets_null_not_zero(
    probe: BpfSchedProbe, tmp_path: Path
) -> None:
    args = ["--standin", "sleep", "--workers", "1", "--sample-cpu-ms", "2", "--step-ms", "20"]
    with running_loop(tmp_path, args) as (pid, _out):
        sampler = Sampler(procs=HostPass(top_n=100_000), probe=probe, interval_s=TICK_S)
        sampler.tick()
        frames = _ticks(sampler, 4)
    rows = [row_of(f, pid) for f in frames[1:]]
    assert all(r is not None and r.sched_source == "bpf" for r in rows), rows
    assert all(r.gpu_sync_pct is None and r.gpu_sync_spin_pct is None for r in rows if r)
    assert all(r.runq_after_input_pct is not None for r in rows if r), "measured, even if 0"


def test_two_trainers_mapping_one_library_share_one_attachment(
    probe: BpfSchedProbe, cuda_lib: Path, tmp_path: Path
) -> None:
    args = ["--standin", "cuda-sleep", "--cuda-lib", str(cuda_lib), "--workers", "1"]
    args += ["--sample-cpu-ms", "2", "--step-ms", "20"]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with running_loop(tmp_path / "a", args) as (a, _), running_loop(tmp_path / "b", args) as (b, _):
        sampler = Sampler(procs=HostPass(top_n=100_000), probe=probe, interval_s=TICK_S)
        sampler.tick()
        tick_until(
            sampler,
            lambda f: all((r := row_of(f, p)) is not None and r.gpu_sync_pct for p in (a, b)),
        )
    assert probe.cuda is not None
    files = probe.cuda.functions()
    st = os.stat(cuda_lib)
    mine = [k for k in files if k[1] == st.st_ino]
    assert len(mine) == 1, files
    probed = function_offsets(str(cuda_lib), PROBED_FUNCTIONS)
    assert set(files[mine[0]]) == set(probed)
    # One entry and one return probe per function: the alias cuMemcpyDtoH is not probed twice.
    distinct = set(probed.values())
    assert len(distinct) < len(files[mine[0]])
    if probe.cuda.multi:
        # One uprobe_multi link each way per program pair (the waits, the host-to-device
        # copies, the copies whose pointers tell) for the file, at each distinct address.
        links = [
            ln
            for ln in held_links(os.getpid())
            if ln["link_type"] in ("uprobe_multi", "uretprobe_multi")
            and os.path.samefile(ln["path"], cuda_lib)
        ]
        pairs = len(PROBES)
        assert sorted(ln["link_type"] for ln in links) == sorted(
            ["uprobe_multi", "uretprobe_multi"] * pairs
        )
        assert sum(int(ln["uprobe_cnt"]) for ln in links) == 2 * len(distinct), links
    else:
        uprobes = [
            a
            for a in held_perf_attachments(os.getpid())
            if a["fd_type"] in ("uprobe", "uretprobe")
            and str(a["filename"]).endswith(str(cuda_lib))
        ]
        assert len(uprobes) == 2 * len(distinct), uprobes


def test_every_exit_leaves_no_uprobe_program_of_gputops(cuda_lib: Path, tmp_path: Path) -> None:
    # A separate probe in a separate process, killed outright: its uprobe programs
    # and their attachments must go with it.
    code = (
        "import sys, time\n"
        "from gputop.model.readings import Pipeline\n"
        "from gputop.sources.sched_probe import BpfSchedProbe\n"
        "p = BpfSchedProbe(); p.open(); p.wait_attached(120)\n"
        "pipe = Pipeline({}, frozenset({int(sys.argv[1])}))\n"
        "while not (p.cuda and p.cuda.functions()):\n"
        "    p.read(pipe); time.sleep(0.2)\n"
        "print('attached', flush=True)\n"
        "time.sleep(600)\n"
    )
    trainer = spawn_python(
        "import ctypes, time\n"
        f"cu = ctypes.CDLL({str(cuda_lib)!r})\n"
        "while True:\n    cu.cuStreamSynchronize(None); time.sleep(0.01)\n"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", code, str(trainer.pid)],
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2])),
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "attached\n"
        ids = held_prog_ids(holder.pid)
        assert ids and ids <= loaded_prog_ids()
        holder.kill()
        holder.wait()
        assert not wait_gone(ids), "programs left after SIGKILL"
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
        kill_all([trainer])
