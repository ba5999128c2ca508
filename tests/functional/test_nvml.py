"""NvmlSource and probe_nvml: the real nvidia-ml-py on a fake libnvidia-ml.so.1, in-process.

The fake is loaded into this process before pynvml's own dlopen, so pynvml's code
runs unchanged; each test writes its own scenario (tests/fakenvml/README.md).
"""

from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from gputop.model.frame import GpuReading
from gputop.sources.nvml import NvmlSource, probe_nvml
from tests.fakenvml import (
    ARCH_AMPERE,
    DRIVER_NOT_LOADED,
    GPU_IDLE,
    GPU_IS_LOST,
    HW_SLOWDOWN,
    LIB_RM_VERSION_MISMATCH,
    NO_PERMISSION,
    NOT_FOUND,
    NOT_SUPPORTED,
    RESET_REQUIRED,
    SW_POWER_CAP,
    SW_THERMAL,
    UNKNOWN,
    FakeError,
    FakeGpu,
    FakeNvml,
    FakeProc,
    fake_uuid,
)

MakeSource = Callable[..., tuple[NvmlSource, FakeNvml]]


@pytest.fixture
def nvml(tmp_path: Path) -> Iterator[MakeSource]:
    """Opens an NvmlSource on a fresh fake scenario; closes every source afterwards."""
    opened: list[NvmlSource] = []
    saved = {k: os.environ.get(k) for k in ("FAKE_NVML_SCENARIO", "FAKE_NVML_COUNTS")}

    def make(
        devices: Sequence[FakeGpu] = (FakeGpu(),), *, open_source: bool = True, **kw: object
    ) -> tuple[NvmlSource, FakeNvml]:
        source_kw = {k: kw.pop(k) for k in ("process_interval_s", "clock") if k in kw}
        fake = FakeNvml(tmp_path / f"fake{len(opened)}", devices, **kw)  # type: ignore[arg-type]
        fake.activate()
        src = NvmlSource(**source_kw)  # type: ignore[arg-type]
        opened.append(src)
        if open_source:
            src.open()
        return src, fake

    yield make
    for src in opened:
        src.close()
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def ticks(src: NvmlSource, n: int, gap_s: float = 0.0) -> list[GpuReading]:
    out = []
    for _ in range(n):
        out.append(src.read())
        if gap_s:
            time.sleep(gap_s)
    return out


def test_util_memory_power_and_clocks_follow_the_scenario_per_tick(nvml: MakeSource) -> None:
    src, _ = nvml(
        [
            FakeGpu(
                util=[97, 95, 90],
                mem_util=[40, 41, 42],
                power_w=[300, 310, 320],
                mem_used_mib=[60000, 61000, 62000],
                temperature_c=[60, 61, 62],
                sm_clock_mhz=[1700, 1650, 1600],
                mem_total_mib=81559,
                power_limit_w=700,
                sm_clock_max_mhz=1980,
            )
        ]
    )
    assert src.status.live and src.status.kind == "nvml"
    readings = ticks(src, 3)
    got = [r.gpus[0] for r in readings]
    assert [g.util for g in got] == [97.0, 95.0, 90.0]
    assert [g.mem_util for g in got] == [40.0, 41.0, 42.0]
    assert [g.power_w for g in got] == [300.0, 310.0, 320.0]
    assert [g.mem_used_mib for g in got] == [60000, 61000, 62000]
    assert [g.temperature_c for g in got] == [60.0, 61.0, 62.0]
    assert [g.sm_clock_mhz for g in got] == [1700, 1650, 1600]
    g = got[-1]
    assert (g.mem_total_mib, g.power_limit_w, g.sm_clock_max_mhz) == (81559, 700.0, 1980)
    assert g.uuid == fake_uuid(0) and g.name == "NVIDIA H100 80GB HBM3" and g.state == "ok"
    assert g.power_pct == pytest.approx(320 / 7)


def test_sm_activity_comes_from_a_gpm_sample_pair(nvml: MakeSource) -> None:
    src, _ = nvml(
        [
            FakeGpu(
                util=[97],
                sm_util=[10, 12, 14],
                sm_occupancy=[5, 6, 7],
                tensor_util=[1, 2, 3],
                dram_util=[30, 31, 32],
            )
        ]
    )
    first, second, third = (r.gpus[0] for r in ticks(src, 3, gap_s=0.11))
    # One sample is not a pair: nothing to report yet, and that is None, not 0.
    assert first.sm_active is None and first.tensor_active is None
    assert (second.sm_active, second.sm_occupancy, second.tensor_active, second.dram_active) == (
        12.0,
        6.0,
        2.0,
        31.0,
    )
    assert third.sm_active == 14.0
    assert second.efficiency == pytest.approx(12 / 97)


def test_gpm_samples_are_at_least_100ms_apart_even_when_ticks_are_faster(
    nvml: MakeSource,
) -> None:
    src, fake = nvml([FakeGpu(util=[90], sm_util=[25])])
    t0 = time.monotonic()
    readings = ticks(src, 12, gap_s=0.03)
    elapsed_s = time.monotonic() - t0
    assert fake.call_count("gpm_pairs_under_100ms") == 0
    samples = fake.call_count("nvmlGpmSampleGet")
    assert 2 <= samples <= 1 + elapsed_s / 0.1 and samples < 12
    # ticks between two samples keep the last SM activity instead of dropping to None
    assert [r.gpus[0].sm_active for r in readings][-4:] == [25.0] * 4


@pytest.mark.parametrize(
    ("device", "why"),
    [
        (FakeGpu(gpm=False, arch=ARCH_AMPERE, name="NVIDIA A100-SXM4-80GB"), "pre-Hopper"),
        (FakeGpu(gpm=False, name="NVIDIA GeForce RTX 4090"), "GPM not supported"),
    ],
)
def test_sm_activity_is_none_where_gpm_is_unsupported_and_the_source_says_why(
    nvml: MakeSource, device: FakeGpu, why: str
) -> None:
    src, fake = nvml([device])
    readings = ticks(src, 3, gap_s=0.11)
    assert all(r.gpus[0].sm_active is None for r in readings)
    assert all(r.gpus[0].util is not None for r in readings)
    assert src.status.live
    assert src.status.reason is not None and "SM activity n/a" in src.status.reason
    assert why in src.status.reason
    assert fake.call_count("nvmlGpmSampleGet") == 0


def test_each_gpm_metric_is_judged_by_its_own_return_code(nvml: MakeSource) -> None:
    src, _ = nvml(
        [
            FakeGpu(
                sm_util=[40],
                sm_occupancy=[20],
                tensor_util=[70],
                dram_util=[50],
                gpm_metric_errors={5: UNKNOWN, 10: NOT_SUPPORTED},
            )
        ]
    )
    g = ticks(src, 3, gap_s=0.11)[-1].gpus[0]
    assert g.sm_active == 40.0 and g.sm_occupancy == 20.0
    assert g.tensor_active is None  # failed this time
    assert g.dram_active is None  # not supported: said once
    assert src.status.reason is not None and "DRAM bandwidth n/a" in src.status.reason
    assert "tensor" not in src.status.reason


def test_not_supported_is_remembered_per_device_and_metric_not_retried(nvml: MakeSource) -> None:
    src, fake = nvml(
        [
            FakeGpu(power_w=[250], errors=[FakeError("nvmlDeviceGetPowerUsage", NOT_SUPPORTED)]),
            FakeGpu(power_w=[260]),
        ]
    )
    readings = ticks(src, 6)
    assert [r.gpus[0].power_w for r in readings] == [None] * 6
    assert [r.gpus[1].power_w for r in readings] == [260.0] * 6
    # one failed try on device 0, six good reads on device 1
    assert fake.call_count("nvmlDeviceGetPowerUsage") == 7
    assert src.status.reason is not None and "GPU 0: power n/a (not supported)" in src.status.reason


def test_a_transient_error_is_na_for_that_tick_only(nvml: MakeSource) -> None:
    src, _ = nvml(
        [
            FakeGpu(
                util=[50, 60, 70, 80],
                errors=[FakeError("nvmlDeviceGetUtilizationRates", UNKNOWN, 1, 3)],
            )
        ]
    )
    assert [r.gpus[0].util for r in ticks(src, 4)] == [50.0, None, None, 80.0]


def test_clock_event_reasons_are_decoded_to_names(nvml: MakeSource) -> None:
    src, _ = nvml([FakeGpu(throttle=[0, SW_POWER_CAP | HW_SLOWDOWN, GPU_IDLE, SW_THERMAL])])
    got = [r.gpus[0].throttle for r in ticks(src, 4)]
    assert got == [(), ("sw_power_cap", "hw_slowdown"), (), ("sw_thermal",)]


def test_missing_clock_event_reasons_falls_back_to_throttle_reasons(nvml: MakeSource) -> None:
    src, fake = nvml(
        [FakeGpu(throttle=[SW_POWER_CAP])], missing=["nvmlDeviceGetCurrentClocksEventReasons"]
    )
    readings = ticks(src, 4)
    assert all(r.gpus[0].throttle == ("sw_power_cap",) for r in readings)
    # the newer call is tried once; the fallback is then used directly
    assert fake.call_count("nvmlDeviceGetCurrentClocksEventReasons") == 1
    assert fake.call_count("nvmlDeviceGetCurrentClocksThrottleReasons") == 4


def test_missing_newer_process_calls_fall_back_to_the_older_ones(nvml: MakeSource) -> None:
    me = os.getpid()
    src, fake = nvml(
        [FakeGpu(util=[90], processes=[FakeProc(pid=me, mem_mib=2048, sm_pct=33)])],
        missing=[
            "nvmlDeviceGetProcessesUtilizationInfo",
            "nvmlDeviceGetComputeRunningProcesses_v3",
        ],
    )
    procs = ticks(src, 1)[0].processes
    assert [(p.pid, p.gpu_index, p.gpu_mem_mib, p.sm_pct) for p in procs] == [(me, 0, 2048, 33.0)]
    assert fake.call_count("nvmlDeviceGetComputeRunningProcesses_v2") >= 1
    assert fake.call_count("nvmlDeviceGetProcessUtilization") >= 1


def test_a_lost_gpu_is_marked_lost_while_the_others_keep_updating(nvml: MakeSource) -> None:
    src, fake = nvml(
        [
            FakeGpu(util=[10, 20, 30, 40, 50]),
            FakeGpu(util=[11, 21, 31, 41, 51], lost_at=2),
            FakeGpu(
                util=[12, 22, 32, 42, 52],
                errors=[FakeError("nvmlDeviceGetPowerUsage", RESET_REQUIRED, 3)],
            ),
        ]
    )
    readings = ticks(src, 5, gap_s=0.02)
    states = [tuple(g.state for g in r.gpus) for r in readings]
    assert states == [("ok", "ok", "ok")] * 2 + [
        ("ok", "lost", "ok"),
        ("ok", "lost", "lost"),
        ("ok", "lost", "lost"),
    ]
    assert [r.gpus[0].util for r in readings] == [10.0, 20.0, 30.0, 40.0, 50.0]
    lost = readings[-1].gpus[1]
    assert lost.uuid == fake_uuid(1) and lost.util is None and lost.sm_active is None
    assert (
        src.status.live
        and src.status.reason is not None
        and "GPU 1: lost (GPU is lost)" in src.status.reason
    )
    # a lost GPU is not polled any more
    assert fake.call_count("nvmlDeviceGetUtilizationRates") == 5 + 3 + 4


@pytest.mark.parametrize(
    ("code", "words"),
    [
        (DRIVER_NOT_LOADED, "driver is not loaded"),
        (NO_PERMISSION, "no permission"),
        (LIB_RM_VERSION_MISMATCH, "versions differ"),
    ],
)
def test_init_failure_means_no_gpu_mode_with_reason_and_fix(
    nvml: MakeSource, code: int, words: str
) -> None:
    src, _ = nvml(init_error=code)
    st = src.status
    assert not st.live and st.kind == "nvml"
    assert st.reason is not None and st.reason.startswith("no NVIDIA GPU") and words in st.reason
    assert st.fix
    assert src.read() == GpuReading()
    facts = probe_nvml()
    assert not facts.ok and facts.reason == st.reason and facts.gpus == ()


def test_zero_devices_is_no_gpu_mode(nvml: MakeSource) -> None:
    src, _ = nvml([])
    assert not src.status.live
    assert src.status.reason is not None and "reports no GPU" in src.status.reason


def test_static_facts_are_read_once(nvml: MakeSource) -> None:
    src, fake = nvml([FakeGpu(), FakeGpu()])
    ticks(src, 5)
    for fn in ("nvmlDeviceGetName", "nvmlDeviceGetUUID", "nvmlDeviceGetMaxClockInfo"):
        assert fake.call_count(fn) == 2, fn
    assert fake.call_count("nvmlInitWithFlags") == 1


def test_process_lists_refresh_at_a_slower_cadence(nvml: MakeSource) -> None:
    now = [100.0]
    pid = os.getpid()
    src, fake = nvml(
        [
            FakeGpu(
                util=[90],
                processes=[
                    FakeProc(pid=pid, mem_mib=1000, sm_pct=10, until_tick=3),
                    FakeProc(pid=pid, mem_mib=5000, sm_pct=70, from_tick=3),
                ],
            )
        ],
        process_interval_s=2.0,
        clock=lambda: now[0],
    )
    mems = []
    for _ in range(6):
        mems.append([p.gpu_mem_mib for p in src.read().processes])
        now[0] += 0.5
    # refreshed at t=100 and t=102 only (pynvml asks for the size, then the list);
    # the tick-3 change shows at the next refresh
    assert fake.call_count("nvmlDeviceGetComputeRunningProcesses_v3") == 2 * 2
    assert mems == [[1000]] * 4 + [[5000]] * 2
    assert fake.call_count("nvmlDeviceGetEnforcedPowerLimit") == 2


def test_process_utilisation_not_found_means_no_new_samples(nvml: MakeSource) -> None:
    pid = os.getpid()
    now = [0.0]
    src, _ = nvml(
        [FakeGpu(processes=[FakeProc(pid=pid, mem_mib=100, sm_pct=55)])],
        process_interval_s=1.0,
        clock=lambda: now[0],
    )
    assert [p.sm_pct for p in src.read().processes] == [55.0]
    # The fake stamps samples with its device tick. Reading the process list again
    # without a new tick gets NOT_FOUND: no new samples, not an error.
    src._next_process_refresh = 0.0
    h = src._devices[fake_uuid(0)]
    procs = src._processes(h)
    assert [(p.pid, p.gpu_mem_mib, p.sm_pct) for p in procs] == [(pid, 100, None)]
    assert "per-process SM %" not in (src.status.reason or "")
    now[0] += 1.0
    assert [p.sm_pct for p in src.read().processes] == [55.0]


def test_process_utilisation_not_found_from_the_driver_is_not_an_error(nvml: MakeSource) -> None:
    pid = os.getpid()
    src, fake = nvml(
        [
            FakeGpu(
                processes=[FakeProc(pid=pid, mem_mib=100, sm_pct=55)],
                errors=[FakeError("nvmlDeviceGetProcessesUtilizationInfo", NOT_FOUND)],
            )
        ],
        process_interval_s=0.0,
    )
    readings = ticks(src, 3)
    assert [[(p.pid, p.sm_pct) for p in r.processes] for r in readings] == [[(pid, None)]] * 3
    assert fake.call_count("nvmlDeviceGetProcessesUtilizationInfo") == 3
    assert fake.call_count("nvmlDeviceGetProcessUtilization") == 0


def test_a_gpu_pid_not_in_proc_is_left_out_and_said(nvml: MakeSource) -> None:
    gone = 4_000_000  # above the default pid_max range: never a live process
    me = os.getpid()
    src, _ = nvml(
        [FakeGpu(processes=[FakeProc(pid=gone, mem_mib=10), FakeProc(pid=me, mem_mib=20)])]
    )
    assert [p.pid for p in src.read().processes] == [me]
    assert src.status.reason is not None and f"GPU 0: process {gone} is not visible in /proc" in (
        src.status.reason
    )


def test_devices_are_keyed_by_uuid_and_keep_nvml_order(nvml: MakeSource) -> None:
    uuids = ["GPU-bbbbbbbb-0000-4000-8000-000000000001", "GPU-aaaaaaaa-0000-4000-8000-000000000002"]
    src, _ = nvml([FakeGpu(uuid=u, util=[i * 10]) for i, u in enumerate(uuids)])
    g = src.read().gpus
    assert [(x.index, x.uuid, x.util) for x in g] == [(0, uuids[0], 0.0), (1, uuids[1], 10.0)]
    assert set(src._devices) == set(uuids)


def test_eight_gpus_each_report_their_own_values(nvml: MakeSource) -> None:
    devices = [
        FakeGpu(util=[10 * i], power_w=[100 + i], sm_util=[i], gpm=i % 2 == 0) for i in range(8)
    ]
    src, _ = nvml(devices)
    r = ticks(src, 2, gap_s=0.11)[-1]
    assert [g.index for g in r.gpus] == list(range(8))
    assert [g.util for g in r.gpus] == [10.0 * i for i in range(8)]
    assert [g.power_w for g in r.gpus] == [100.0 + i for i in range(8)]
    assert [g.sm_active for g in r.gpus] == [float(i) if i % 2 == 0 else None for i in range(8)]


def test_average_power_comes_from_the_energy_counter(nvml: MakeSource) -> None:
    src, _ = nvml([FakeGpu(power_w=[400])])
    first, second = (r.gpus[0] for r in ticks(src, 2, gap_s=0.2))
    assert first.power_avg_w is None
    assert second.power_avg_w == pytest.approx(400, rel=0.05)


def test_probe_reports_versions_and_gpm_support_per_gpu(nvml: MakeSource) -> None:
    nvml(
        [FakeGpu(), FakeGpu(gpm=False, arch=ARCH_AMPERE, name="NVIDIA A100")],
        open_source=False,
        driver_version="560.35.03",
        nvml_version="12.560.35.03",
        cuda_version=12060,
    )
    facts = probe_nvml()
    assert facts.ok and facts.reason is None
    assert (facts.driver_version, facts.nvml_version, facts.cuda_version) == (
        "560.35.03",
        "12.560.35.03",
        "12.6",
    )
    assert [(g.index, g.uuid, g.gpm_supported) for g in facts.gpus] == [
        (0, fake_uuid(0), True),
        (1, fake_uuid(1), False),
    ]
    assert facts.gpus[1].name == "NVIDIA A100"
    assert facts.gpus[1].gpm_reason is not None and "pre-Hopper" in facts.gpus[1].gpm_reason


def test_probe_shuts_nvml_down_and_can_run_beside_an_open_source(nvml: MakeSource) -> None:
    src, fake = nvml([FakeGpu(util=[42])])
    assert probe_nvml().ok
    # the source's own init is still in place: reads keep working
    assert src.read().gpus[0].util == 42.0
    src.close()
    so = ctypes.CDLL(str(fake.lib_dir / "libnvidia-ml.so.1"))
    assert so.fakeNvmlRefcount() == 0


def test_gpu_is_lost_during_discovery_skips_that_gpu(nvml: MakeSource) -> None:
    src, _ = nvml(
        [FakeGpu(), FakeGpu(errors=[FakeError("nvmlDeviceGetUUID", GPU_IS_LOST)]), FakeGpu()]
    )
    assert [g.index for g in src.read().gpus] == [0, 2]
    assert src.status.reason is not None and "GPU 1: lost" in src.status.reason


def test_one_note_covers_every_gpu_that_shares_it(nvml: MakeSource) -> None:
    src, _ = nvml([FakeGpu(gpm=False, arch=ARCH_AMPERE) for _ in range(8)])
    src.read()
    assert src.notes == (
        "GPUs 0-7: SM activity n/a (pre-Hopper GPU: GPM (SM activity) needs Hopper or newer),"
        " so the diagnosis leans on power",
    )


def test_no_permission_for_one_call_is_remembered_and_said(nvml: MakeSource) -> None:
    src, fake = nvml(
        [FakeGpu(temperature_c=[70], errors=[FakeError("nvmlDeviceGetTemperature", NO_PERMISSION)])]
    )
    readings = ticks(src, 3)
    assert [r.gpus[0].temperature_c for r in readings] == [None] * 3
    assert fake.call_count("nvmlDeviceGetTemperature") == 1
    assert "GPU 0: temperature n/a (no permission)" in src.notes


def test_a_gpu_that_cannot_be_identified_is_skipped_and_the_rest_monitored(
    nvml: MakeSource,
) -> None:
    src, _ = nvml([FakeGpu(util=[5]), FakeGpu(errors=[FakeError("nvmlDeviceGetName", UNKNOWN)])])
    assert src.status.live
    assert [(g.index, g.util) for g in src.read().gpus] == [(0, 5.0)]
    assert "GPU 1: unreadable (Unknown Error), skipped" in src.notes


def test_a_second_device_with_the_same_uuid_is_not_counted_twice(nvml: MakeSource) -> None:
    src, _ = nvml([FakeGpu(uuid=fake_uuid(7), util=[1]), FakeGpu(uuid=fake_uuid(7), util=[2])])
    assert [(g.index, g.util) for g in src.read().gpus] == [(0, 1.0)]
    assert "GPU 1: same UUID as GPU 0, skipped" in src.notes


def test_a_rewritten_scenario_takes_effect_mid_run_keeping_the_tick(nvml: MakeSource) -> None:
    src, fake = nvml([FakeGpu(util=[10, 11, 12, 13, 14, 15])], process_interval_s=0.0)
    assert [r.gpus[0].util for r in ticks(src, 2)] == [10.0, 11.0]
    assert src.read().processes == ()
    me = os.getpid()
    fake.write([FakeGpu(util=[20, 21, 22, 23, 24, 25], processes=[FakeProc(pid=me, mem_mib=7)])])
    r = src.read()
    assert r.gpus[0].util == 23.0  # tick 3 of the new series
    assert [(p.pid, p.gpu_mem_mib) for p in r.processes] == [(me, 7)]


def test_the_pcie_link_and_its_throughput_follow_the_scenario(nvml: MakeSource) -> None:
    src, _ = nvml(
        [
            FakeGpu(
                util=[40],
                pcie_max=(5, 16),
                pcie_gen=[1, 3, 5],
                pcie_width=[16, 8, 16],
                pcie_rx_kb_s=[0, 2_400_000, 12_000_000],
                pcie_tx_kb_s=[0, 1000, 2000],
            )
        ]
    )
    got = [r.gpus[0] for r in ticks(src, 3)]
    assert [(g.pcie_gen, g.pcie_width) for g in got] == [(1, 16), (3, 8), (5, 16)]
    assert {(g.pcie_gen_max, g.pcie_width_max) for g in got} == {(5, 16)}
    assert [g.pcie_rx_kb_s for g in got] == [0.0, 2.4e6, 1.2e7]
    assert [g.pcie_tx_kb_s for g in got] == [0.0, 1000.0, 2000.0]


def test_a_gpu_without_pcie_queries_reports_the_link_as_not_available(nvml: MakeSource) -> None:
    missing = (
        "nvmlDeviceGetCurrPcieLinkGeneration",
        "nvmlDeviceGetCurrPcieLinkWidth",
        "nvmlDeviceGetMaxPcieLinkGeneration",
        "nvmlDeviceGetMaxPcieLinkWidth",
        "nvmlDeviceGetPcieThroughput",
    )
    src, _ = nvml([FakeGpu(util=[40])], missing=missing)
    g = ticks(src, 2)[-1].gpus[0]
    assert (g.pcie_gen, g.pcie_gen_max, g.pcie_width, g.pcie_width_max) == (None,) * 4
    assert (g.pcie_rx_kb_s, g.pcie_tx_kb_s) == (None, None)
    assert g.util == 40.0, "the rest of the sample is read as before"
