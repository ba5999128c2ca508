"""Frame.from_dict checks every field, so frames from untrusted files are safe to render."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gputop.model.frame import Frame, ProcessSample

GOOD: dict[str, Any] = {
    "t": 1763769600.25,
    "interval": 1.0,
    "seq": 3,
    "sampler_cpu_pct": None,
    "sources": {"gpu": "nvml", "sched": "bpf", "notes": ["x"]},
    "host": {"cpu_pct": 93.1, "ncpu": 8, "load1": 12.3, "psi_cpu_some": None},
    "gpus": [
        {
            "index": 0,
            "uuid": "GPU-a",
            "name": "H100",
            "util": 97,
            "sm_active": None,
            "power_w": 140.0,
            "power_limit_w": 700.0,
            "mem_used_mib": 62000,
            "mem_total_mib": 81559,
            "throttle": ["sw_power_cap"],
            "state": "ok",
        }
    ],
    "processes": [
        {
            "pid": 3821,
            "ppid": 1,
            "comm": "python3",
            "cmdline": "python3 train.py",
            "role": "trainer",
            "trainer_pid": 3821,
            "cpu_pct": 40.0,
            "offcpu_pct": 51.7,
            "runq_pct": 30.2,
            "preempt_per_s": 120.5,
            "preempt_total": 14504,
            "vcsw_per_s": 30.0,
            "gpus": [0],
            "gpu_mem_mib": None,
            "threads": [
                {
                    "tid": 3821,
                    "comm": "python3",
                    "cpu_pct": 1.0,
                    "offcpu_pct": None,
                    "runq_pct": None,
                    "preempt_per_s": 0.0,
                    "vcsw_per_s": 0.0,
                }
            ],
        }
    ],
    "verdicts": [{"gpu": 0, "state": "busy_but_starving", "evidence": ["e"], "fixes": []}],
}


def test_a_contract_frame_is_read_with_proper_types() -> None:
    f = Frame.from_dict(GOOD)
    assert f.gpus[0].util == 97.0 and isinstance(f.gpus[0].util, float)
    assert f.gpus[0].throttle == ("sw_power_cap",)
    assert f.processes[0].gpus == (0,)
    assert f.processes[0].threads[0].tid == 3821
    assert f.verdicts[0].evidence == ("e",)


def test_to_dict_then_from_dict_is_the_same_frame() -> None:
    f = Frame.from_dict(GOOD)
    assert Frame.from_dict(f.to_dict(threads=True)) == f
    assert Frame.from_dict(f.to_dict(threads=True)).processes[0].threads == f.processes[0].threads


def test_unknown_fields_are_ignored_for_forward_compatibility() -> None:
    d = copy.deepcopy(GOOD)
    d["future"] = {"x": 1}
    d["gpus"][0]["nvlink_gbps"] = 12.0
    assert Frame.from_dict(d) == Frame.from_dict(GOOD)


def test_whole_floats_are_accepted_for_integers() -> None:
    d = copy.deepcopy(GOOD)
    d["processes"][0]["pid"] = 3821.0
    assert Frame.from_dict(d).processes[0].pid == 3821


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("t",), "now", "Frame.t must be a number, got str"),
        (("t",), float("nan"), "Frame.t must be a finite number"),
        (("host", "ncpu"), 2.5, "HostSample.ncpu must be a whole number, got float"),
        (("host", "load1"), [1], "HostSample.load1 must be a number, got list"),
        (("gpus", 0, "name"), 5, "GpuSample.name must be a str, got int"),
        (("gpus", 0, "throttle"), "sw_power_cap", "GpuSample.throttle must be a list, got str"),
        (("gpus", 0, "util"), False, "GpuSample.util must be a number, got bool"),
        (("processes", 0, "role"), "admin", "ProcessSample.role must be one of"),
        (("processes", 0, "gpus"), ["0"], "ProcessSample.gpus[] must be a whole number, got str"),
        (("processes", 0, "threads"), [5], "ThreadSample must be an object, got int"),
        (("verdicts", 0, "state"), "fine", "Verdict.state must be one of"),
        (("sources", "gpu"), None, "sources.gpu must be a str, got NoneType"),
        (("sources",), [], "sources must be an object"),
        (("processes",), {"a": 1}, "processes must be a list"),
    ],
)
def test_wrong_types_raise_value_error_naming_the_field(
    path: tuple[Any, ...], value: Any, message: str
) -> None:
    d = copy.deepcopy(GOOD)
    node = d
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    with pytest.raises(ValueError, match="malformed frame") as info:
        Frame.from_dict(d)
    assert message in str(info.value)


def test_process_from_dict_reports_missing_fields() -> None:
    d = copy.deepcopy(GOOD["processes"][0])
    del d["cmdline"]
    with pytest.raises(ValueError, match=r"malformed process.*cmdline"):
        ProcessSample.from_dict(d)


def test_the_wait_split_round_trips_and_older_frames_without_it_load() -> None:
    measured = copy.deepcopy(GOOD)
    measured["processes"][0].update(
        wait_input_pct=32.0,
        wait_thread_pct=1.5,
        wait_irq_pct=20.0,
        wait_other_pct=0.0,
        wait_pending_pct=4.0,
        sched_source="bpf",
        preemptors=[{"pid": 900, "comm": "stress", "share_pct": 71.0}],
    )
    f = Frame.from_dict(measured)
    p = f.processes[0]
    assert (p.wait_input_pct, p.wait_pending_pct, p.sched_source) == (32.0, 4.0, "bpf")
    assert p.preemptors is not None and p.preemptors[0].comm == "stress"
    assert Frame.from_dict(f.to_dict()) == f
    # A frame written before these fields existed: every one of them is "not measured".
    old = copy.deepcopy(GOOD)
    for k in ("wait_input_pct", "wait_pending_pct", "sched_source", "preemptors"):
        old["processes"][0].pop(k, None)
    p = Frame.from_dict(old).processes[0]
    assert (p.wait_input_pct, p.wait_pending_pct, p.sched_source, p.preemptors) == (
        None,
        None,
        None,
        None,
    )


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("wait_pending_pct", "4"),
        ("sched_source", 1),
        ("preemptors", [{"pid": "900", "comm": "stress", "share_pct": 71.0}]),
    ],
)
def test_a_malformed_wait_field_is_refused(field: str, value: Any) -> None:
    bad = copy.deepcopy(GOOD)
    bad["processes"][0][field] = value
    with pytest.raises(ValueError, match="malformed frame"):
        Frame.from_dict(bad)


def test_a_cpu_limit_with_its_throttling_round_trips_and_a_malformed_one_is_refused() -> None:
    limited = copy.deepcopy(GOOD)
    limited["processes"][0].update(
        cpu_quota=0.25,
        cpu_throttled_pct=61.5,
        cpu_limit={
            "cgroup": "/sys/fs/cgroup/kubepods/pod1",
            "file": "cpu.max",
            "burst": None,
            "periods": 10,
            "throttled_periods": 9,
            "throttled_ms": 712.0,
            "throttled_source": "bpf",
        },
    )
    f = Frame.from_dict(limited)
    p = f.processes[0]
    assert p.cpu_limit is not None and p.cpu_limit.throttled_periods == 9
    assert (p.cpu_throttled_pct, p.cpu_throttled_source) == (61.5, "bpf")
    assert Frame.from_dict(f.to_dict()) == f
    assert f.to_dict()["processes"][0]["cpu_limit"]["throttled_ms"] == 712.0
    # Written before it existed: no limit known.
    assert Frame.from_dict(GOOD).processes[0].cpu_limit is None
    limited["processes"][0]["cpu_limit"]["periods"] = "10"
    with pytest.raises(ValueError, match="malformed frame"):
        Frame.from_dict(limited)


def test_io_wait_and_io_pressure_round_trip_and_a_malformed_one_is_refused() -> None:
    waiting = copy.deepcopy(GOOD)
    waiting["processes"][0]["io_wait_pct"] = 42.5
    waiting["host"]["psi_io_some"] = 17.25
    f = Frame.from_dict(waiting)
    assert (f.processes[0].io_wait_pct, f.host.psi_io_some) == (42.5, 17.25)
    assert Frame.from_dict(f.to_dict()) == f
    # Written before they existed: not known.
    old = Frame.from_dict(GOOD)
    assert (old.processes[0].io_wait_pct, old.host.psi_io_some) == (None, None)
    for where, field in ((("processes", 0), "io_wait_pct"), (("host",), "psi_io_some")):
        bad = copy.deepcopy(waiting)
        obj = bad
        for k in where:
            obj = obj[k]
        obj[field] = "42"
        with pytest.raises(ValueError, match="malformed frame"):
            Frame.from_dict(bad)
