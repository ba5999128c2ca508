"""`gputop doctor` as root: the real probe loads (libbpf) or compiles (bcc) and attaches, a
probe that fails to load says why, and with bcc, headers or BTF hidden the report says
what is missing and how to get it."""

from __future__ import annotations

import os
import shutil

import pytest

from gputop.doctor import check_bcc, check_ebpf_probe, check_kernel_headers, check_tracefs
from gputop.sources.sched_probe import BpfSchedProbe
from tests.doctorutil import row, run_doctor

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
