"""CONTRACT.md section 2 as a checker: every fixed field, with its type and range."""

from __future__ import annotations

from typing import Any

NUM = (int, float)
ROLES = {"trainer", "dataloader", "pin_memory", "other"}
CAUSES = {
    "cpu_contention",
    "cpu_limit",
    "input_compute",
    "input_storage",
    "input_remote",
    "transfer",
    "trainer_work",
    "straggler",
    "gpu_side",
    "clocks",
}
STATES = {
    "ok",
    "busy_but_starving",
    "low_sm_efficiency",
    "input_bound",
    "host_bound",
    "throttled",
    "idle",
    "unknown",
}


def _is(v: Any, types: Any, nullable: bool = False) -> bool:
    if v is None:
        return nullable
    if isinstance(v, bool):
        return bool in (types if isinstance(types, tuple) else (types,))
    return isinstance(v, types)


def check_frame(d: dict[str, Any]) -> None:
    """Raise AssertionError naming the first field that breaks the contract."""
    assert _is(d["t"], NUM) and d["t"] > 1e9, "t"
    assert _is(d["interval"], NUM) and d["interval"] > 0, "interval"
    src = d["sources"]
    assert src["gpu"] in {"nvml", "demo", "none"}, f"sources.gpu={src['gpu']}"
    assert src["sched"] in {"bpf", "procfs"}, "sources.sched"
    assert isinstance(src["notes"], list) and all(isinstance(n, str) for n in src["notes"])
    h = d["host"]
    assert _is(h["cpu_pct"], NUM) and 0 <= h["cpu_pct"] <= 100, "host.cpu_pct"
    assert isinstance(h["ncpu"], int) and h["ncpu"] >= 1, "host.ncpu"
    assert _is(h["load1"], NUM), "host.load1"
    assert _is(h["psi_cpu_some"], NUM, nullable=True), "host.psi_cpu_some"
    for g in d["gpus"]:
        assert isinstance(g["index"], int) and isinstance(g["uuid"], str)
        assert isinstance(g["name"], str)
        for k in ("util", "sm_active", "power_w", "power_limit_w"):
            assert _is(g[k], NUM, nullable=True), f"gpu.{k}"
        for k in ("mem_used_mib", "mem_total_mib"):
            assert _is(g[k], int, nullable=True), f"gpu.{k}"
        assert isinstance(g["throttle"], list) and all(isinstance(x, str) for x in g["throttle"])
        assert g["state"] in {"ok", "lost"}
        lost = g["lost_gpu_s"]
        assert lost is None or isinstance(lost, dict), "gpu.lost_gpu_s"
        for cause, secs in (lost or {}).items():
            assert cause in CAUSES and _is(secs, NUM) and secs >= 0, f"gpu.lost_gpu_s[{cause}]"
    for p in d["processes"]:
        for k in ("pid", "ppid", "preempt_total"):
            assert isinstance(p[k], int), f"process.{k}"
        assert isinstance(p["comm"], str) and isinstance(p["cmdline"], str)
        assert p["role"] in ROLES, p["role"]
        assert _is(p["trainer_pid"], int, nullable=True)
        assert _is(p["cpu_pct"], NUM) and p["cpu_pct"] >= 0
        for k in ("offcpu_pct", "runq_pct"):
            assert _is(p[k], NUM, nullable=True), f"process.{k}"
            assert p[k] is None or 0 <= p[k] <= 100, f"process.{k}={p[k]}"
        for k in ("preempt_per_s", "vcsw_per_s"):
            assert _is(p[k], NUM) and p[k] >= 0, f"process.{k}"
        assert isinstance(p["gpus"], list) and all(isinstance(i, int) for i in p["gpus"])
        assert _is(p["gpu_mem_mib"], int, nullable=True)
        for k in (
            "wait_input_pct",
            "wait_thread_pct",
            "wait_irq_pct",
            "wait_other_pct",
            "net_wait_pct",
            "h2d_copy_pct",
        ):
            assert _is(p[k], NUM, nullable=True), f"process.{k}"
            assert p[k] is None or 0 <= p[k] <= 100, f"process.{k}={p[k]}"
        pre = p["preemptors"]
        assert pre is None or isinstance(pre, list), "process.preemptors"
        for e in pre or ():
            assert isinstance(e["pid"], int) and isinstance(e["comm"], str), "preemptors[]"
            assert _is(e["share_pct"], NUM) and 0 <= e["share_pct"] <= 100, "preemptors[].share_pct"
    for v in d["verdicts"]:
        assert isinstance(v["gpu"], int)
        assert v["state"] in STATES, v["state"]
        assert v["cause"] in CAUSES or v["cause"] is None, v["cause"]
        if v["state"] in ("ok", "idle", "unknown"):
            assert v["cause"] is None, v
        assert _is(v["lost_pct"], NUM, nullable=True), "verdict.lost_pct"
        assert v["lost_pct"] is None or 0 <= v["lost_pct"] <= 100, v["lost_pct"]
        assert _is(v["speedup_max"], NUM, nullable=True), "verdict.speedup_max"
        assert v["speedup_max"] is None or v["speedup_max"] >= 1, v["speedup_max"]
        if v["cause"] is None:
            assert v["lost_pct"] is None and v["speedup_max"] is None, v
        assert isinstance(v["evidence"], list) and isinstance(v["fixes"], list)
