"""`gputop doctor`'s checks on what is given to them (include trees, status and tracefs
files, search paths, loaders, facts): each says works / does not, why, and the fix; and
the report's layout."""

from __future__ import annotations

import os
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
    check_throttle_state,
    check_tracefs,
    format_report,
)
from gputop.sources.libbpf_loader import find_libbpf, throttle_field
from gputop.sources.nvml import NvmlFacts
from gputop.sources.probe_loader import Unavailable
from gputop.sources.probe_plan import LoaderPlan
from tests.doctorutil import CAP_BPF, CAP_PERFMON, CAP_SYS_ADMIN

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


def test_psi(tmp_path: Path) -> None:
    c = check_psi(str(tmp_path / "cpu"))
    assert not c.ok and "CONFIG_PSI" in c.why and c.fix
    (tmp_path / "cpu").write_text("some avg10=1.00 avg60=2.00 avg300=3.00 total=4\n")
    c = check_psi(str(tmp_path / "cpu"))
    assert c.ok and "some avg10=1.00" in c.why


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


def test_a_build_without_the_probe_says_so() -> None:
    def new_probe() -> object:
        raise ImportError("no module named gputop.sources.sched_probe")

    c = check_ebpf_probe(new_probe)
    assert not c.ok and "no eBPF probe" in c.why


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


def test_the_throttling_row_says_whether_the_limits_hold_is_measured_or_inferred() -> None:
    bcc = LoaderPlan("bcc", "the kernel has no BTF: compiled at run time by bcc", "no BTF")
    c = check_throttle_state(bcc)
    assert c.ok and c.why == (
        "inferred from each job cgroup's cpu.stat: only the CO-RE probe (libbpf) reads a"
        " task's throttle state"
    )
    core = LoaderPlan("libbpf", "the kernel has BTF", "bcc fallback ready")
    c = check_throttle_state(core)
    # This kernel's own BTF decides (6.18+: task_struct.throttled; older: cfs_rq.throttle_count).
    lib = find_libbpf()[0]
    want = throttle_field(lib) if lib is not None else None
    if want is None:
        assert c.why.startswith("inferred from each job cgroup's cpu.stat"), c.why
    else:
        assert c.why == f"measured: the probe reads {want} at each switch-out"


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
