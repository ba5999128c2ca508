"""A prepared check of gputop on a real NVIDIA GPU, short enough for a lent machine.

    scripts/gpu_check.sh [--out DIR] [--only NAME[,NAME]] [--fake] [--dry-run]

Each check runs gputop as a user would (``python -m gputop doctor``/``record`` as
root) beside a workload that knows its own truth (scripts/gpu_check_loop.py: a
PyTorch loop timing its own GPU waits), and prints one line of a summary table;
``--dry-run`` lists them. Everything it saves (the summary, every frame, the loop's
own timings, gputop's stderr) goes into one tarball in ``--out``. It needs no
network: gputop's dependencies the machine lacks come from the bundle in
``.gpucheck/`` (scripts/gpu_bundle.py), and the bundled libbpf is used where the
machine has none. ``--fake`` runs the same checks with no GPU: the fake
``libnvidia-ml.so.1`` (tests/fakenvml/) is the GPU for NVML, the fake
``libcuda.so.1`` (tests/fakecuda/) for the loop, whose model then trains on the CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from contextlib import nullcontext, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_check_parts import (
    PHASE_S,
    ROOT,
    CheckError,
    Phase,
    Result,
    Run,
    Step,
    UprobeCounters,
    hogs_running,
    loop_library,
    loop_running,
    mono_offset,
    nvml_env,
    per_step,
    read_steps,
    recording,
    row_of,
    setup,
    tell,
    wait_measured,
    wait_share,
)

PROCADDR = ROOT / "scripts" / "gpu_check_procaddr.py"
BUDGET_S = 230.0
SYNC_POINTS = 5.0
KINDS = ("synchronize", "item", "cpu", "event")


@dataclass(frozen=True)
class Check:
    """A check: its name (for --only), what it shows, about how long it takes."""

    name: str
    what: str
    seconds: int
    shares: str = ""  # the run it shares with another check (run once for both)


CHECKS = (
    Check("doctor", "`gputop doctor`: NVML, GPM (SM activity) and the eBPF probe work", 6),
    Check(
        "procaddr",
        "each probed name: cuGetProcAddress hands out the probed export (dladdr), "
        "both stream modes, the runtime's and the driver's CUDA versions",
        6,
    ),
    Check(
        "nvml",
        "GPU_UTIL, SM activity (GPM) and power in `gputop record` frames, under load",
        30,
        "gpubound",
    ),
    Check("gpubound", "a GPU-bound loop (large matmuls): its verdict is ok", 30, "gpubound"),
    Check(
        "sync",
        "a PyTorch loop (DataLoader workers) ending each step in synchronize(), .item(), "
        ".cpu(), Event.synchronize(): each counted once, gpu_sync_pct within "
        f"{SYNC_POINTS:g} points of the loop's clock, idle and with CPU hogs on its CPUs; "
        "the probed entry points each one calls (uprobe counters)",
        75,
        "sync",
    ),
    Check("overhead", "the loop's steps/s without gputop and with it", 25, "sync"),
    Check(
        "copy",
        "a PyTorch loop copying a 64 MiB batch to the GPU each step, from pageable memory"
        f" then from pinned (non_blocking): h2d_copy_pct within {SYNC_POINTS:g} points of"
        " the loop's clock, pinned copies shorter, the entry points .to('cuda') reaches, the"
        " PCIe link NVML reports",
        30,
    ),
    Check("starved", "the loop starved by CPU hogs on its CPUs: its verdict (cpu_contention)", 30),
)
NAMES = tuple(c.name for c in CHECKS)


# ---- the checks ---------------------------------------------------------------------


def check_doctor(run: Run) -> list[Result]:
    env = run.gputop_env(nvml_env(run, os.getpid(), util=50, sm=50, power_w=300))
    done = subprocess.run(
        [sys.executable, "-m", "gputop", "doctor"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=60,
    )
    (run.work / "doctor.txt").write_text(done.stdout + done.stderr)
    rows = {}
    for line in done.stdout.splitlines():
        for mark in ("  ok  ", "  NO  "):
            if line.startswith("  ") and mark in line:
                name, _, why = line.strip().partition(mark)
                rows[name.strip()] = (mark.strip() == "ok", why.strip())
                break
    needed = ["NVML library + driver", "eBPF probe", *[n for n in rows if n.startswith("GPM")]]
    bad = [
        f"{n}: {rows[n][1] if n in rows else 'not in the report'}"
        for n in needed
        if not rows.get(n, (False,))[0]
    ]
    loader = next((why for n, (ok, why) in rows.items() if n.startswith("eBPF loader")), "")
    if done.returncode != 0 or bad:
        return [
            Result("doctor", "FAIL", "; ".join(bad) or f"exit {done.returncode}", {"rows": rows})
        ]
    gpm = sum(1 for n in rows if n.startswith("GPM"))
    return [
        Result(
            "doctor",
            "PASS",
            f"NVML, GPM on {gpm} GPU(s), eBPF probe ({loader.partition(':')[0]})",
            {"rows": rows},
        )
    ]


def check_procaddr(run: Run) -> list[Result]:
    out = run.work / "procaddr.json"
    cmd = [sys.executable, str(PROCADDR), "--out", str(out)]
    if run.fake_cuda is not None:
        cmd += ["--lib", str(run.fake_cuda)]
    done = subprocess.run(
        cmd, capture_output=True, text=True, env=run.gputop_env(), cwd=ROOT, timeout=60
    )
    if done.returncode != 0 or not out.exists():
        return [Result("procaddr", "FAIL", (done.stderr.strip().splitlines() or ["no output"])[-1])]
    data = json.loads(out.read_text())
    lookups = data["lookups"]
    found = [x for x in lookups if x["address"]]
    wrong = [x for x in found if not x["probed"]]
    names = sorted({f"{x['base']}/{x['flags']}@{x['version']}->{x['symbol']}" for x in wrong})
    detail = f"{len(found) - len(wrong)} of {len(found)} found addresses are probed exports"
    detail += f" (driver {data['driver_version']}, {len(lookups) - len(found)} not found)"
    if wrong:
        return [Result("procaddr", "FAIL", detail + ": " + ", ".join(names[:6]), data)]
    return [Result("procaddr", "PASS", detail, data)]


def gpubound_run(run: Run) -> dict[str, Any]:
    """The GPU-bound loop under `gputop record`: its frames (shared by nvml and gpubound)."""
    if "gpubound" in run.shared:
        return dict(run.shared["gpubound"])
    with loop_running(run, "gpubound", "--matmul", "--gpu-ms", "40", "--kind", "item") as (
        loop,
        _,
    ):
        env = run.gputop_env(nvml_env(run, loop.pid, util=99, sm=93, power_w=610))
        with recording(run, "gpubound", env) as rec:
            time.sleep(12.0)
        frames = rec.frames()
    run.shared["gpubound"] = {"frames": frames, "pid": loop.pid}
    return dict(run.shared["gpubound"])


def check_nvml(run: Run) -> list[Result]:
    frames = gpubound_run(run)["frames"]
    gpus = [f["gpus"][0] for f in frames[len(frames) // 2 :] if f["gpus"]]
    if not gpus:
        return [Result("nvml", "FAIL", f"no GPU in {len(frames)} frames")]
    fields = {k: [g.get(k) for g in gpus] for k in ("util", "sm_active", "power_w")}
    absent = [k for k, v in fields.items() if any(x is None for x in v)]
    mean = {k: sum(v) / len(v) for k, v in fields.items() if k not in absent}
    detail = ", ".join(f"{k} {v:.0f}" for k, v in mean.items()) + f" over {len(gpus)} frames"
    status = (
        "PASS"
        if not absent and mean.get("util", 0) > 50 and mean.get("sm_active", 0) > 0
        else "FAIL"
    )
    if absent:
        detail += f"; null: {', '.join(absent)}"
    return [Result("nvml", status, detail, {"means": mean, "gpu": gpus[-1]})]


def _verdict(frames: list[dict[str, Any]]) -> dict[str, Any] | None:
    vs = [f["verdicts"][0] for f in frames if f.get("verdicts")]
    return vs[-1] if vs else None


def verdict_line(v: dict[str, Any]) -> str:
    """A verdict in a summary line: its state, its cause, its first evidence shortened."""
    cause = f" ({v['cause']})" if v.get("cause") else ""
    evidence = (v.get("evidence") or [""])[0]
    if len(evidence) > 64:
        evidence = evidence[:64].rpartition(",")[0] + ", ..."
    return f"{v['state']}{cause}: {evidence}"


def check_gpubound(run: Run) -> list[Result]:
    v = _verdict(gpubound_run(run)["frames"])
    if v is None:
        return [Result("gpubound", "FAIL", "no verdict")]
    detail = verdict_line(v)
    return [Result("gpubound", "PASS" if v["state"] == "ok" else "FAIL", detail, {"verdict": v})]


def check_starved(run: Run) -> list[Result]:
    args = ("--gpu-ms", "10", "--host-ms", "4", "--sample-cpu-ms", "0.3", "--kind", "item")
    with loop_running(run, "starved", *args) as (loop, _), hogs_running(run.cpus):
        env = run.gputop_env(nvml_env(run, loop.pid, util=97, sm=12, power_w=140))
        with recording(run, "starved", env) as rec:
            time.sleep(12.0)
        frames = rec.frames()
    v = _verdict(frames)
    if v is None:
        return [Result("starved", "FAIL", "no verdict")]
    ok = v["state"] in ("busy_but_starving", "input_bound") and v.get("cause") == "cpu_contention"
    detail = verdict_line(v)
    return [Result("starved", "PASS" if ok else "FAIL", detail, {"verdict": v})]


def sync_run(run: Run, full: bool) -> dict[str, Any]:
    """The loop through every waiting call, idle and with hogs, under `gputop record`
    (``full``; else only the idle .item() phase), after a phase without gputop."""
    if "sync" in run.shared and (run.shared["sync"]["full"] or not full):
        return dict(run.shared["sync"])
    phase_s, settle_s = run.phase_s, 0.8
    phases: list[Phase] = []
    with loop_running(run, "sync", "--gpu-ms", "20", "--kind", "item") as (loop, steps_path):
        path, offsets = loop_library(loop.pid)
        counters = UprobeCounters(loop.pid, path, offsets)
        try:
            bare = Phase("item", False, time.monotonic() + settle_s)
            time.sleep(settle_s + phase_s)
            bare.end = time.monotonic()
            env = run.gputop_env(nvml_env(run, loop.pid, util=90, sm=40, power_w=400))
            with recording(run, "sync", env) as rec:
                wait_measured(rec, loop.pid)
                plan = [(k, h) for h in (False, True) for k in KINDS] if full else [("item", False)]
                for hogs in (False, True):
                    todo = [k for k, h in plan if h == hogs]
                    if not todo:
                        continue
                    with hogs_running(run.cpus) if hogs else nullcontext():
                        for kind in todo:
                            tell(loop, f"kind {kind}")
                            time.sleep(settle_s)
                            ph = Phase(kind, hogs, time.monotonic(), hits_before=counters.read())
                            time.sleep(phase_s)
                            ph.hits_after = counters.read()
                            ph.end = time.monotonic()
                            phases.append(ph)
                offset = mono_offset()
            frames = rec.frames()
        finally:
            counters.close()
        steps = read_steps(steps_path)
    result = {
        "full": full,
        "pid": loop.pid,
        "frames": frames,
        "steps": steps,
        "phases": phases,
        "bare": bare,
        "offset": offset,
        "library": path,
    }
    run.shared["sync"] = result
    return dict(result)


def _phase_numbers(data: dict[str, Any], ph: Phase, field: str = "gpu_sync_pct") -> dict[str, Any]:
    """gputop's mean ``field`` over the frames inside the phase, and the loop's own."""
    pid, offset = data["pid"], data["offset"]
    steps = [s for s in data["steps"] if ph.start <= s.start and s.end <= ph.end]
    got, truth = [], []
    for f in data["frames"]:
        t1 = f["t"] - offset
        t0 = t1 - f["interval"]
        if t0 < ph.start or t1 > ph.end:
            continue
        row = row_of(f, pid)
        got.append(None if row is None else row.get(field))
        truth.append(wait_share(data["steps"], t0, t1))
    measured = [g for g in got if g is not None]
    out: dict[str, Any] = {
        "kind": ph.kind,
        "hogs": ph.hogs,
        "frames": len(got),
        "steps_per_s": len(steps) / (ph.end - ph.start),
        "per_step": per_step(ph.hits_before, ph.hits_after, len(steps)),
    }
    if measured and len(measured) == len(got):
        out["gputop"] = sum(measured) / len(measured)
        out["loop"] = sum(truth) / len(truth)
    return out


def judge_sync(rows: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """What is wrong with the sync phases (empty: they pass), and their table."""
    table = ["kind         hogs  loop%  gputop%   diff  steps/s  probed entry points per step"]
    bad = []
    for r in rows:
        name = f"{r['kind']}{'+hogs' if r['hogs'] else ''}"
        if "gputop" not in r:
            bad.append(f"{name}: no measured frame")
            table.append(f"{r['kind']:12s} {'yes' if r['hogs'] else 'no':4s}  (no frame measured)")
            continue
        diff = r["gputop"] - r["loop"]
        hits = ", ".join(f"{n} {c:g}" for n, c in r["per_step"].items()) or "none"
        table.append(
            f"{r['kind']:12s} {'yes' if r['hogs'] else 'no':4s} {r['loop']:6.1f} {r['gputop']:8.1f}"
            f" {diff:+6.1f} {r['steps_per_s']:8.1f}  {hits}"
        )
        if abs(diff) > SYNC_POINTS or r["loop"] < 5.0:
            bad.append(f"{name} {diff:+.1f}")
        if not r["per_step"]:
            bad.append(f"{name}: reaches no probed entry point")
    return bad, table


def check_sync(run: Run) -> list[Result]:
    data = sync_run(run, full=True)
    rows = [_phase_numbers(data, ph) for ph in data["phases"]]
    bad, table = judge_sync(rows)
    run.log("sync phases:\n  " + "\n  ".join(table))
    worst = max((abs(r["gputop"] - r["loop"]) for r in rows if "gputop" in r), default=float("nan"))
    detail = f"{len(rows)} phases, worst |gputop - loop| {worst:.1f} points"
    if bad:
        detail += "; " + "; ".join(bad)
    return [Result("sync", "FAIL" if bad else "PASS", detail, {"phases": rows, "table": table})]


def check_overhead(run: Run) -> list[Result]:
    data = sync_run(run, full=False)
    bare = _phase_numbers(data, data["bare"])["steps_per_s"]
    idle = next((p for p in data["phases"] if p.kind == "item" and not p.hogs), None)
    if idle is None:
        return [Result("overhead", "FAIL", "no phase with gputop")]
    watched = _phase_numbers(data, idle)["steps_per_s"]
    change = 100.0 * (watched - bare) / bare if bare else float("nan")
    detail = f"{bare:.1f} steps/s without gputop, {watched:.1f} with ({change:+.1f}%)"
    return [Result("overhead", "INFO", detail, {"without": bare, "with": watched})]


def check_copy(run: Run) -> list[Result]:
    phases: list[Phase] = []
    args = ("--kind", "copy-pageable", "--copy-mb", "64", "--gpu-ms", "5")
    with loop_running(run, "copy", *args) as (loop, steps_path):
        path, offsets = loop_library(loop.pid)
        counters = UprobeCounters(loop.pid, path, offsets)
        try:
            env = run.gputop_env(nvml_env(run, loop.pid, util=30, sm=10, power_w=200))
            with recording(run, "copy", env) as rec:
                wait_measured(rec, loop.pid)
                for kind in ("copy-pageable", "copy-pinned"):
                    tell(loop, f"kind {kind}")
                    time.sleep(0.8)
                    ph = Phase(kind, False, time.monotonic(), hits_before=counters.read())
                    time.sleep(run.phase_s)
                    ph.hits_after = counters.read()
                    ph.end = time.monotonic()
                    phases.append(ph)
                offset = mono_offset()
            frames = rec.frames()
        finally:
            counters.close()
        steps = read_steps(steps_path)
    data = {"pid": loop.pid, "frames": frames, "steps": steps, "offset": offset}
    rows = [_phase_numbers(data, ph, "h2d_copy_pct") for ph in phases]
    gpu = next((f["gpus"][0] for f in reversed(frames) if f["gpus"]), {})
    link = {k: gpu.get(k) for k in ("pcie_gen", "pcie_gen_max", "pcie_width", "pcie_width_max")}
    link["pcie_rx_kb_s"] = gpu.get("pcie_rx_kb_s")
    bad = [f"{r['kind']}: no measured frame" for r in rows if "gputop" not in r]
    if not bad:
        page, pin = rows
        if abs(page["gputop"] - page["loop"]) > SYNC_POINTS or page["loop"] < 5.0:
            bad.append(f"pageable {page['gputop']:.1f} vs the loop's {page['loop']:.1f}")
        if pin["loop"] >= page["loop"]:
            bad.append(f"pinned copies took {pin['loop']:.1f}%, pageable {page['loop']:.1f}%")
    detail = "; ".join(
        f"{r['kind']}: gputop {r.get('gputop', float('nan')):.1f}% vs loop"
        f" {r.get('loop', float('nan')):.1f}%, entry points {r['per_step'] or 'none'}"
        for r in rows
    )
    detail += f"; link {link}"
    if bad:
        detail += "; " + "; ".join(bad)
    return [Result("copy", "FAIL" if bad else "PASS", detail, {"phases": rows, "link": link})]


RUNNERS: dict[str, Callable[[Run], list[Result]]] = {
    "doctor": check_doctor,
    "procaddr": check_procaddr,
    "nvml": check_nvml,
    "gpubound": check_gpubound,
    "sync": check_sync,
    "overhead": check_overhead,
    "starved": check_starved,
    "copy": check_copy,
}


# ---- the run ------------------------------------------------------------------------


def machine_facts(run: Run) -> dict[str, Any]:
    facts: dict[str, Any] = {
        "mode": "fake" if run.fake else "gpu",
        "host": socket.gethostname(),
        "kernel": platform.release(),
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "cpus": os.cpu_count(),
        "loop_cpus": run.cpus,
        "bundle_site": str(run.site) if run.site else None,
        "libbpf_carried": run.libbpf_carried,
        "btf": os.path.exists("/sys/kernel/btf/vmlinux"),
    }
    with suppress(OSError, subprocess.SubprocessError):
        done = subprocess.run(
            [sys.executable, "-c", "import torch; print(torch.__version__, torch.version.cuda)"],
            capture_output=True,
            text=True,
            env=run.loop_env(),
            timeout=60,
        )
        facts["torch"] = done.stdout.strip()
    return facts


def summary_table(results: list[Result]) -> str:
    width = max(len(r.name) for r in results)
    lines = [f"{'check':{width}s}  result  detail"]
    lines += [f"{r.name:{width}s}  {r.status:6s}  {r.detail}" for r in results]
    return "\n".join(lines)


def _jsonable(o: object) -> object:
    if isinstance(o, (Phase, Step)):
        return o.__dict__
    return str(o)


def run_checks(
    selected: list[str], fake: bool, out_dir: Path, budget_s: float, phase_s: float = PHASE_S
) -> int:
    with tempfile.TemporaryDirectory(prefix="gpucheck-") as tmp:
        run = Run(fake, Path(tmp), budget_s, phase_s)
        results: list[Result] = []
        try:
            setup(run)
            facts = machine_facts(run)
            run.log(f"machine: {json.dumps(facts)}")
            for check in CHECKS:
                if check.name not in selected:
                    continue
                needed = 2 if check.shares in run.shared else check.seconds
                if run.left_s() < needed:
                    results.append(Result(check.name, "SKIP", "no time left in the budget"))
                    continue
                run.log(f"{check.name}: {check.what}")
                t0 = time.monotonic()
                try:
                    got = RUNNERS[check.name](run)
                except (CheckError, OSError, subprocess.SubprocessError) as exc:
                    got = [Result(check.name, "FAIL", f"{type(exc).__name__}: {exc}")]
                for r in got:
                    r.data["seconds"] = round(time.monotonic() - t0, 1)
                    run.log(f"{r.name}: {r.status} {r.detail}")
                results += got
        except CheckError as exc:
            run.log(f"cannot run the checks: {exc}")
            results.append(Result("setup", "FAIL", str(exc)))
            facts = {}
        table = summary_table(results)
        print("\n" + table, flush=True)
        (run.work / "summary.txt").write_text(table + "\n")
        summary = {"facts": facts, "results": [r.__dict__ for r in results]}
        (run.work / "summary.json").write_text(json.dumps(summary, default=_jsonable, indent=1))
        (run.work / "log.txt").write_text("\n".join(run.log_lines) + "\n")
        stamp = time.strftime("%Y%m%d-%H%M%S")
        tarball = (
            out_dir / f"gpucheck-{'fake' if fake else 'gpu'}-{socket.gethostname()}-{stamp}.tar.gz"
        )
        with tarfile.open(tarball, "w:gz") as tar:
            tar.add(run.work, arcname=tarball.name.removesuffix(".tar.gz"))
        print(f"saved {tarball}")
    return 0 if all(r.status in ("PASS", "INFO") for r in results) else 1


def _usage(message: str) -> int:
    print(f"gpu_check: {message}", file=sys.stderr)
    return 2


class _Parser(argparse.ArgumentParser):
    """argparse with its errors in one line (no usage block), status 2."""

    def error(self, message: str) -> Any:
        raise SystemExit(_usage(message))


def main(argv: list[str] | None = None) -> int:
    ap = _Parser(prog="gpu_check.sh", description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("gpucheck-out"), help="where the tarball goes")
    ap.add_argument("--only", default=None, help="run only these checks (comma-separated)")
    ap.add_argument("--fake", action="store_true", help="no GPU: the fake NVML and libcuda")
    ap.add_argument("--dry-run", action="store_true", help="list the checks and exit")
    ap.add_argument("--budget-s", type=float, default=BUDGET_S, help="stop starting checks after")
    ap.add_argument(
        "--phase-s", type=float, default=PHASE_S, help="seconds each measured phase of sync lasts"
    )
    try:
        args = ap.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    selected = list(NAMES)
    if args.only is not None:
        selected = [n.strip() for n in args.only.split(",") if n.strip()]
        unknown = [n for n in selected if n not in NAMES]
        if unknown or not selected:
            what = f"unknown check {unknown[0]!r}" if unknown else "--only names no check"
            return _usage(f"{what} (one of {', '.join(NAMES)})")
    if args.budget_s <= 0:
        return _usage("--budget-s must be positive")
    if args.phase_s < 1.0:
        return _usage("--phase-s must be at least 1 (two frames of gputop's in a phase)")
    if args.dry_run:
        for c in CHECKS:
            mark = " " if c.name in selected else "-"
            print(f"{mark} {c.name:9s} ~{c.seconds:3d} s  {c.what}")
        print(f"budget {args.budget_s:.0f} s; --fake: {'yes' if args.fake else 'no'}")
        return 0
    if os.geteuid() != 0:
        return _usage("needs root (gputop's eBPF probe, uprobe counters)")
    try:
        args.out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return _usage(f"--out {args.out}: {exc.strerror}")
    try:
        return run_checks(selected, args.fake, args.out, args.budget_s, args.phase_s)
    except KeyboardInterrupt:
        print("gpu_check: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
