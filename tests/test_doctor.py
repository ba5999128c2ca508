"""`gputop doctor`: each check says works / does not, why, and the fix."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from types import ModuleType

import pytest

from gputop.doctor import (
    Check,
    check_bcc,
    check_bpf_loader,
    check_ebpf_probe,
    check_kernel_headers,
    check_nvml,
    check_privileges,
    check_psi,
    check_pyspy,
    check_schedstat,
    check_tracefs,
    format_report,
    run_checks,
)
from gputop.sources.nvml import NvmlFacts
from gputop.sources.sched_probe import (
    BpfSchedProbe,
    LoaderPlan,
    Unavailable,
    kernel_headers_present,
)
from tests.doctorutil import CAP_BPF, CAP_PERFMON, CAP_SYS_ADMIN, row, run_doctor
from tests.fakenvml import ARCH_AMPERE, DRIVER_NOT_LOADED, FakeGpu, FakeNvml
from tests.harness import PY, ROOT

RELEASE = "6.1.0-99-amd64"
# bcc's fallback; where this kernel has it, "no headers" cannot be staged.
_KHEADERS = os.path.exists("/sys/kernel/kheaders.tar.xz")


def _headers(root: Path, built_for: str, kconfig: bool = True) -> Path:
    (root / "include" / "generated").mkdir(parents=True)
    (root / "include" / "generated" / "utsrelease.h").write_text(
        f'#define UTS_RELEASE "{built_for}"\n'
    )
    if kconfig:
        (root / "include" / "linux").mkdir()
        (root / "include" / "linux" / "kconfig.h").write_text("/* kconfig */\n")
    return root


def test_headers_present_for_this_kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BCC_KERNEL_SOURCE", str(_headers(tmp_path / "src", RELEASE)))
    c = check_kernel_headers(RELEASE)
    assert c.ok and c.fix is None
    assert str(tmp_path / "src") in c.why


def test_headers_of_another_kernel_are_usable_but_said_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BCC_KERNEL_SOURCE", str(_headers(tmp_path / "src", "6.1.0-1-amd64")))
    c = check_kernel_headers(RELEASE)
    assert c.ok
    assert f"is for 6.1.0-1-amd64, not {RELEASE}" in c.why


@pytest.mark.skipif(_KHEADERS, reason="this kernel has kheaders: headers are never missing")
def test_an_include_tree_without_kconfig_h_is_not_headers_bcc_can_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The probe's own test (bcc's): include/ alone does not do.
    monkeypatch.setenv("BCC_KERNEL_SOURCE", str(_headers(tmp_path / "src", RELEASE, kconfig=False)))
    c = check_kernel_headers(RELEASE)
    assert not c.ok and "has no include/linux/kconfig.h" in c.why and c.fix


@pytest.mark.skipif(_KHEADERS, reason="this kernel has kheaders: headers are never missing")
def test_missing_headers_give_the_package_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BCC_KERNEL_SOURCE", raising=False)
    c = check_kernel_headers(RELEASE)  # no /lib/modules for a kernel that is not running
    assert not c.ok
    assert f"no /lib/modules/{RELEASE}/build" in c.why and "bcc cannot compile the probe" in c.why
    assert c.fix is not None and f"apt-get install linux-headers-{RELEASE}" in c.fix


def test_doctor_and_the_probe_agree_on_headers_here() -> None:
    release = os.uname().release
    assert check_kernel_headers().ok is (kernel_headers_present(release) is not None)


def _status(tmp_path: Path, caps: int) -> str:
    p = tmp_path / "status"
    p.write_text(f"Name:\tpython3\nCapInh:\t0000000000000000\nCapEff:\t{caps:016x}\n")
    return str(p)


@pytest.mark.parametrize(
    ("caps", "euid", "ok", "fragment"),
    [
        ((1 << 41) - 1, 0, True, "root, CapEff 0x1ffffffffff: may load"),
        (1 << CAP_BPF | 1 << CAP_PERFMON, 1000, True, "uid 1000, CapEff 0xc000000000: may load"),
        (1 << CAP_SYS_ADMIN, 1000, True, "uid 1000, CapEff 0x200000: may load"),
        (1 << CAP_BPF, 1000, False, "without CAP_BPF and CAP_PERFMON"),
        (0, 0, False, "root, CapEff 0x0: without"),
    ],
)
def test_privileges_come_from_effective_capabilities(
    tmp_path: Path, caps: int, euid: int, ok: bool, fragment: str
) -> None:
    c = check_privileges(_status(tmp_path, caps), euid=euid)
    assert c.ok is ok
    assert fragment in c.why
    assert (c.fix is None) is ok


def test_privileges_of_this_process_match_its_real_capeff() -> None:
    with open("/proc/self/status") as f:
        caps = int(next(line for line in f if line.startswith("CapEff:")).split()[1], 16)
    expected = bool(caps >> CAP_SYS_ADMIN & 1) or bool(
        caps >> CAP_BPF & 1 and caps >> CAP_PERFMON & 1
    )
    assert check_privileges().ok is expected


SCHED_SWITCH_FORMAT = (
    'print fmt: "prev_state=%s", __print_flags(REC->prev_state & 0xff, "|", '
    '{ 0x01, "S" }, { 0x02, "D" }, { 0x10, "X" }, { 0x20, "Z" })\n'
)


def _tracefs(root: Path, fmt: str | None = SCHED_SWITCH_FORMAT) -> Path:
    (root / "events" / "sched" / "sched_switch").mkdir(parents=True)
    if fmt is not None:
        (root / "events" / "sched" / "sched_switch" / "format").write_text(fmt)
    return root


def test_tracefs_with_sched_tracepoints(tmp_path: Path) -> None:
    _tracefs(tmp_path)
    c = check_tracefs([str(tmp_path / "missing"), str(tmp_path)])
    assert c.ok and str(tmp_path) in c.why


def test_tracefs_not_mounted_gives_the_mount_command(tmp_path: Path) -> None:
    c = check_tracefs([str(tmp_path / "tracing")])
    assert not c.ok
    assert c.fix == f"mount -t tracefs nodev {tmp_path / 'tracing'}"
    (tmp_path / "tracing" / "events").mkdir(parents=True)
    c = check_tracefs([str(tmp_path / "tracing")])
    assert not c.ok and "no sched/sched_switch" in c.why


def test_a_sched_switch_format_without_state_flags_is_refused_as_the_probe_does(
    tmp_path: Path,
) -> None:
    _tracefs(tmp_path, 'print fmt: "prev_state=%d", REC->prev_state\n')
    c = check_tracefs([str(tmp_path)])
    assert not c.ok and "lists no prev_state flags" in c.why


def test_schedstat(tmp_path: Path) -> None:
    (tmp_path / "self").mkdir()
    assert not check_schedstat(str(tmp_path)).ok
    (tmp_path / "self" / "schedstat").write_text("83027 2725125 2\n")
    assert check_schedstat(str(tmp_path)).ok
    (tmp_path / "self" / "schedstat").write_text("garbage\n")
    assert not check_schedstat(str(tmp_path)).ok
    assert check_schedstat().ok is os.path.exists("/proc/self/schedstat")


def test_psi(tmp_path: Path) -> None:
    c = check_psi(str(tmp_path / "cpu"))
    assert not c.ok and "CONFIG_PSI" in c.why and c.fix
    (tmp_path / "cpu").write_text("some avg10=1.00 avg60=2.00 avg300=3.00 total=4\n")
    c = check_psi(str(tmp_path / "cpu"))
    assert c.ok and "some avg10=1.00" in c.why


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


def test_pyspy_missing_says_how_to_install(tmp_path: Path) -> None:
    c = check_pyspy(str(tmp_path))
    assert not c.ok
    assert c.fix is not None and "pip install py-spy" in c.fix


def test_bcc_missing_gives_the_distro_package() -> None:
    c = check_bcc(lambda: (None, "bcc (BPF Compiler Collection) is not installed"))
    assert not c.ok
    assert "scheduler numbers come from /proc" in c.why
    assert c.fix is not None and "python3-bpfcc" in c.fix


def test_bcc_present_names_its_version() -> None:
    mod = ModuleType("bcc")
    mod.__version__ = "0.26.0"  # type: ignore[attr-defined]
    mod.__file__ = "/usr/lib/python3/dist-packages/bcc/__init__.py"
    c = check_bcc(lambda: (mod, None))
    assert c.ok and c.why == "bcc 0.26.0 from /usr/lib/python3/dist-packages"


def test_nvml_failure_gives_the_probes_reason_and_fix() -> None:
    facts = NvmlFacts(ok=False, reason="NVIDIA driver not loaded", fix="modprobe nvidia")
    nvml, gpm = check_nvml(lambda: facts)
    assert (nvml.ok, nvml.why, nvml.fix) == (False, "NVIDIA driver not loaded", "modprobe nvidia")
    assert not gpm.ok and "see NVML above" in gpm.why


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


def test_a_build_without_the_probe_says_so() -> None:
    def new_probe() -> object:
        raise ImportError("no module named gputop.sources.sched_probe")

    c = check_ebpf_probe(new_probe)
    assert not c.ok and "no eBPF probe" in c.why


_CAN_BPF = os.geteuid() == 0 and check_bcc().ok and check_kernel_headers().ok and check_tracefs().ok
needs_bpf = pytest.mark.skipif(not _CAN_BPF, reason="needs root, bcc, kernel headers and tracefs")
needs_btf = pytest.mark.skipif(
    not os.path.exists("/sys/kernel/btf/vmlinux"), reason="needs a kernel with BTF"
)


@pytest.mark.root
@needs_bpf
@needs_btf
def test_the_real_probe_loads_with_libbpf_and_attaches() -> None:
    c = check_ebpf_probe()
    assert c.ok, c
    assert c.why.startswith("loaded with libbpf and attached to sched:sched_switch in "), c.why


@pytest.mark.root
@needs_bpf
def test_the_real_probe_compiles_with_bcc_and_attaches_when_told_to() -> None:
    c = check_ebpf_probe(lambda: BpfSchedProbe(use_loader="bcc"))
    assert c.ok, c
    assert c.why.startswith("compiled with bcc and attached to sched:sched_switch in "), c.why


def test_the_loader_row_names_the_loader_why_and_what_the_other_lacks() -> None:
    core = LoaderPlan("libbpf", "the kernel has BTF: ...", "bcc fallback unavailable: no headers")
    c = check_bpf_loader(core)
    assert c.ok and c.why.startswith("libbpf: the kernel has BTF") and "no headers" in c.why
    bcc = LoaderPlan("bcc", "the kernel has no BTF: compiled at run time by bcc", "no BTF")
    c = check_bpf_loader(bcc)
    assert c.ok and c.why.startswith("bcc: the kernel has no BTF")
    assert "the object built ahead of time cannot load: no BTF" in c.why
    c = check_bpf_loader(Unavailable("no BTF, and no headers", "install them"))
    assert not c.ok and c.why == "no BTF, and no headers" and c.fix == "install them"


@pytest.mark.root
@needs_bpf
def test_a_probe_that_fails_to_load_gives_the_reason_without_the_status_line_wording() -> None:
    # Zero-sized kernel maps are refused by the kernel: a real load failure.
    c = check_ebpf_probe(lambda: BpfSchedProbe(max_threads=0))
    assert not c.ok
    assert c.why.startswith("BPF program failed to load")
    assert "eBPF probe off" not in c.why and "scheduler numbers from /proc" not in c.why
    # The compiler ran in a child: its error is quoted, not left on the terminal.
    assert "Invalid argument" in c.why
    assert c.fix is not None and "rows above" in c.fix


@pytest.mark.root
@needs_bpf
def test_doctor_reports_the_attached_probe_and_exact_scheduler_signals() -> None:
    r = run_doctor([])
    assert r.returncode == 0, r.stderr
    assert " ok " in row(r.stdout, "eBPF probe")
    assert "scheduler signals: eBPF probe" in r.stdout


def test_no_bpf_skips_compiling_the_probe() -> None:
    probe = next(c for c in run_checks(try_probe=False) if c.name == "eBPF probe")
    assert not probe.ok and probe.why == "not tried (--no-bpf)"


def test_report_is_aligned_and_puts_fixes_under_their_check() -> None:
    checks = [
        Check("short", True, "works"),
        Check("a much longer name", False, "broken " * 30, "do this"),
    ]
    text = format_report(checks, "title", columns=80)
    rows = [line for line in text.splitlines() if line.startswith("  ") and line.strip()]
    assert rows[0].index("ok") == rows[1].index("NO")
    assert max(len(r) for r in rows) <= 80
    fix_line = next(r for r in rows if "fix:" in r)
    assert fix_line.index("fix:") == rows[0].index("works")
    assert "1 of 2 checks pass." in text


def test_doctor_on_this_machine() -> None:
    r = run_doctor([])
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    for name in ("NVML", "privileges", "tracefs", "eBPF loader", "schedstat", "PSI", "py-spy"):
        assert row(r.stdout, name)
    loader = row(r.stdout, "eBPF loader")
    if " ok  libbpf:" in loader:
        # The object built ahead of time needs neither: their rows are not shown.
        assert not any(line.strip().startswith("bcc (eBPF)") for line in r.stdout.splitlines())
        return
    bcc_works = os.path.exists("/usr/lib/python3/dist-packages/bcc/__init__.py")
    assert (" ok " in row(r.stdout, "bcc (eBPF)")) is bcc_works
    headers = kernel_headers_present(os.uname().release) is not None
    assert (" ok " in row(r.stdout, "kernel headers")) is headers


@pytest.mark.root
@pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare"
)
def test_doctor_without_bcc_and_headers_loads_the_object_built_ahead_of_time() -> None:
    # A private mount namespace hides the distro's bcc and every kernel's modules
    # directory from this one run; the rest of the machine is untouched.
    if not os.path.exists("/sys/kernel/btf/vmlinux"):
        pytest.skip("needs a kernel with BTF")
    hide = (
        "mount -t tmpfs none /usr/lib/python3/dist-packages/bcc 2>/dev/null; "
        'mount -t tmpfs none /lib/modules && exec "$0" "$@"'
    )
    r = run_doctor(["unshare", "--mount", "--propagation", "private", "sh", "-c", hide])
    assert r.returncode == 0, r.stderr
    loader = row(r.stdout, "eBPF loader")
    assert " ok  libbpf: the kernel has BTF" in loader, loader
    assert "bcc fallback unavailable" in " ".join(r.stdout.split())
    assert " ok  loaded with libbpf" in row(r.stdout, "eBPF probe")
    assert "scheduler signals: eBPF probe" in r.stdout


@pytest.mark.root
@pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare"
)
def test_doctor_without_btf_bcc_and_headers() -> None:
    # As above, and the kernel's BTF hidden too: neither loader can work.
    hide = (
        "mount -t tmpfs none /usr/lib/python3/dist-packages/bcc 2>/dev/null; "
        "mount -t tmpfs none /sys/kernel/btf 2>/dev/null; "
        'mount -t tmpfs none /lib/modules && exec "$0" "$@"'
    )
    r = run_doctor(["unshare", "--mount", "--propagation", "private", "sh", "-c", hide])
    assert r.returncode == 0, r.stderr
    loader = row(r.stdout, "eBPF loader")
    assert " NO  the kernel has no BTF" in loader, loader
    bcc = row(r.stdout, "bcc (eBPF)")
    assert " NO " in bcc and "not installed" in bcc
    headers = row(r.stdout, "kernel headers")
    assert " NO " in headers and f"no /lib/modules/{os.uname().release}/build" in headers
    lines = r.stdout.splitlines()
    bcc_fix = lines[lines.index(bcc) + 1].strip()
    assert bcc_fix.startswith("fix: apt-get install python3-bpfcc")
    headers_fix = lines[lines.index(headers) + 1].strip()
    assert headers_fix.startswith(f"fix: apt-get install linux-headers-{os.uname().release}")
    assert "not tried: fix the eBPF checks above first" in row(r.stdout, "eBPF probe")
    assert "CONFIG_DEBUG_INFO_BTF" in r.stdout
    assert "scheduler signals: /proc estimates" in r.stdout
    assert "is inferred, not measured: fix the eBPF checks above to measure it" in " ".join(
        r.stdout.split()
    )
