"""The screen's pieces without running the app: the host header for 2 to 256 CPUs, the jobs'
CPUs, sparkline gaps, and a resize before the GPU area is composed."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from gputop.model.fixes import cpu_list
from gputop.model.frame import HostSample
from gputop.model.jobcpus import job_cpus
from gputop.widgets.gpu_area import GpuArea
from gputop.widgets.host_header import HostHeader
from gputop.widgets.sparkline import MISSING, sparkline
from tests.frames_fixture import JOB_CPUS, STARVING_TRAINER_PID, make_frame

# ---- 1. the host header --------------------------------------------------------


@pytest.mark.parametrize("ncpu", [2, 8, 16, 64, 256])
@pytest.mark.parametrize("width", [118, 198])
def test_header_covers_every_cpu_in_its_rows_for_2_to_256_cpus(ncpu: int, width: int) -> None:
    header = HostHeader()
    per_cpu = tuple(float((7 * c) % 101) for c in range(ncpu))
    header.host = HostSample(
        cpu_pct=50.0, ncpu=ncpu, load1=1.0, per_cpu_pct=per_cpu, mem_total_mib=1024
    )
    header.cpu_rows = 4
    lines = header.build(width)
    text = ["".join(t for t, _ in line) for line in lines]
    assert all(len(t) <= width for t in text)
    cpu_rows = [t for t in text if not t.startswith(("Mem", "Load", "PSI", "jobs"))]
    assert 1 <= len(cpu_rows) <= 4
    if ncpu <= 16:
        # One meter per CPU, each with its own number and value.
        for c in range(ncpu):
            assert f"{c}[" in "".join(cpu_rows)
    else:
        # Groups: one block character per CPU, labelled lo-hi, covering 0..ncpu-1.
        blocks = sum(sum(ch in "▁▂▃▄▅▆▇█" for ch in row) for row in cpu_rows)
        assert blocks == ncpu
        assert f"-{ncpu - 1}" in "".join(cpu_rows)


def test_io_pressure_stands_beside_cpu_pressure_where_the_kernel_reports_it() -> None:
    header = HostHeader()
    host = HostSample(cpu_pct=5.0, ncpu=2, load1=0.1, psi_cpu_some=3.0, mem_total_mib=1024)
    header.host = replace(host, psi_io_some=27.5)
    text = " ".join("".join(t for t, _ in line) for line in header.build(120))
    assert "PSI 3% io 28%" in text or "PSI some 3.0% I/O PSI some 27.5%" in text, text
    header.host = host
    text = " ".join("".join(t for t, _ in line) for line in header.build(120))
    assert " io " not in text and "I/O" not in text, text


def test_jobs_cpus_are_the_union_over_each_trainer_and_its_workers() -> None:
    frame = make_frame(5)
    assert job_cpus(frame.processes) == [
        (STARVING_TRAINER_PID, JOB_CPUS, None, cpu_list(JOB_CPUS)),
        (4100, tuple(range(8)), None, "0-7"),
    ]
    limited = [replace(p, cpu_quota=2.0) if p.pid == 3851 else p for p in frame.processes]
    assert job_cpus(limited)[0] == (STARVING_TRAINER_PID, JOB_CPUS, 2.0, cpu_list(JOB_CPUS))


# ---- 5. any terminal size ------------------------------------------------------


def test_sparkline_draws_nan_and_infinity_as_gaps() -> None:
    line = sparkline([math.nan, math.inf, -math.inf, 50.0, None], 5)
    assert line == MISSING * 3 + "▅" + MISSING


# ---- 7. the GPU panel at scale ---------------------------------------------------


def test_a_resize_before_the_gpu_area_has_its_children_is_kept_for_later() -> None:
    # At start-up (or while exiting) the app can pass on a resize before GpuArea composed.
    area = GpuArea()
    area.fit(60, 6)
    assert (area.width, area.budget) == (60, 6)
