"""`gputop doctor` on this machine and on the fake NVML: each check says works / does not,
why, and the fix."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from gputop.doctor import (
    check_kernel_headers,
    check_privileges,
    check_pyspy,
    check_schedstat,
    run_checks,
)
from gputop.sources.probe_plan import kernel_headers_present
from tests.doctorutil import CAP_BPF, CAP_PERFMON, CAP_SYS_ADMIN, row, run_doctor
from tests.fakenvml import ARCH_AMPERE, DRIVER_NOT_LOADED, FakeGpu, FakeNvml
from tests.harness import PY, ROOT


def test_doctor_and_the_probe_agree_on_headers_here() -> None:
    release = os.uname().release
    assert check_kernel_headers().ok is (kernel_headers_present(release) is not None)


def test_privileges_of_this_process_match_its_real_capeff() -> None:
    with open("/proc/self/status") as f:
        caps = int(next(line for line in f if line.startswith("CapEff:")).split()[1], 16)
    expected = bool(caps >> CAP_SYS_ADMIN & 1) or bool(
        caps >> CAP_BPF & 1 and caps >> CAP_PERFMON & 1
    )
    assert check_privileges().ok is expected


def test_schedstat(tmp_path: Path) -> None:
    (tmp_path / "self").mkdir()
    assert not check_schedstat(str(tmp_path)).ok
    (tmp_path / "self" / "schedstat").write_text("83027 2725125 2\n")
    assert check_schedstat(str(tmp_path)).ok
    (tmp_path / "self" / "schedstat").write_text("garbage\n")
    assert not check_schedstat(str(tmp_path)).ok
    assert check_schedstat().ok is os.path.exists("/proc/self/schedstat")


def test_pyspy_found_on_the_search_path(tmp_path: Path) -> None:
    exe = tmp_path / "py-spy"
    exe.write_text("#!/bin/sh\necho py-spy 0.3.14\n")
    exe.chmod(0o755)
    scope = tmp_path / "ptrace_scope"
    scope.write_text("1\n")
    c = check_pyspy(str(tmp_path), euid=0, ptrace_scope_path=str(scope))
    assert c.ok and "py-spy 0.3.14" in c.why
    c = check_pyspy(str(tmp_path), euid=1000, ptrace_scope_path=str(scope))
    assert c.ok and "only your own processes" in c.why
    scope.write_text("3\n")
    c = check_pyspy(str(tmp_path), euid=0, ptrace_scope_path=str(scope))
    assert not c.ok and "ptrace_scope=3" in c.why


def test_doctor_with_fake_nvml_lists_versions_and_gpm_per_gpu(tmp_path: Path) -> None:
    fake = FakeNvml(
        tmp_path,
        [
            FakeGpu(util=[97], sm_util=[12]),
            FakeGpu(name="NVIDIA A100-SXM4-80GB", arch=ARCH_AMPERE, gpm=False),
        ],
    )
    r = run_doctor([], fake.env())
    assert r.returncode == 0, r.stderr
    nvml = row(r.stdout, "NVML library + driver")
    assert " ok " in nvml
    assert "driver 550.54.15, NVML 12.550.54.15, CUDA 12.4; 2 GPUs" in nvml
    assert " ok " in row(r.stdout, "GPM SM activity, GPU 0")
    gpu1 = row(r.stdout, "GPM SM activity, GPU 1")
    assert " NO " in gpu1 and "NVIDIA A100-SXM4-80GB" in gpu1
    lines = r.stdout.splitlines()
    assert "fix: GPM needs a Hopper or newer" in lines[lines.index(gpu1) + 1]
    assert "GPU signals: NVML (GPU_UTIL and power only" in r.stdout


def test_doctor_with_the_driver_not_loaded(tmp_path: Path) -> None:
    fake = FakeNvml(tmp_path, [FakeGpu()], init_error=DRIVER_NOT_LOADED)
    r = run_doctor([], fake.env())
    assert r.returncode == 0, r.stderr
    nvml = row(r.stdout, "NVML library + driver")
    assert " NO " in nvml
    facts = _probe_in(fake.env())
    assert facts["reason"] in nvml
    lines = r.stdout.splitlines()
    assert lines[lines.index(nvml) + 1].strip() == f"fix: {facts['fix']}"


def _probe_in(env: dict[str, str]) -> dict[str, str]:
    code = (
        "import dataclasses, json\n"
        "from gputop.sources.nvml import probe_nvml\n"
        "print(json.dumps(dataclasses.asdict(probe_nvml())))\n"
    )
    out = subprocess.run(
        [PY, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    facts: dict[str, str] = json.loads(out.stdout)
    return facts


def test_no_bpf_skips_compiling_the_probe() -> None:
    probe = next(c for c in run_checks(try_probe=False) if c.name == "eBPF probe")
    assert not probe.ok and probe.why == "not tried (--no-bpf)"


def test_doctor_on_this_machine() -> None:
    r = run_doctor([])
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    for name in ("NVML", "privileges", "eBPF loader", "schedstat", "PSI", "py-spy"):
        assert row(r.stdout, name)
    loader = row(r.stdout, "eBPF loader")
    if " ok  libbpf:" in loader:
        # The object built ahead of time attaches raw tracepoints by name: it needs
        # neither bcc, nor headers, nor tracefs, and their rows are not shown.
        shown = [line.strip() for line in r.stdout.splitlines()]
        for name in ("bcc (eBPF)", "kernel headers", "tracefs"):
            assert not any(line.startswith(name) for line in shown), name
        return
    assert row(r.stdout, "tracefs")
    bcc_works = os.path.exists("/usr/lib/python3/dist-packages/bcc/__init__.py")
    assert (" ok " in row(r.stdout, "bcc (eBPF)")) is bcc_works
    headers = kernel_headers_present(os.uname().release) is not None
    assert (" ok " in row(r.stdout, "kernel headers")) is headers
