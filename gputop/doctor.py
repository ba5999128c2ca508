"""`gputop doctor`: which data sources work on this host, why not, and the exact fix.

Each check is a small function whose inputs (paths, the bcc finder, the process's
status file) are parameters, so the tests can point it at a prepared tree; the
defaults read this machine. Checks never raise: a failure is a ``Check`` with a
reason and a fix.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import re
import shutil
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from gputop.procctl import PYSPY_INSTALL_HINT, find_pyspy
from gputop.runtime import Options
from gputop.sources.bcc_find import INSTALL_FIX, find_bcc
from gputop.sources.bcc_loader import TRACEFS_DIRS, state_masks
from gputop.sources.libbpf_loader import find_libbpf, throttle_field
from gputop.sources.nvml import NvmlFacts, probe_nvml
from gputop.sources.probe_loader import Unavailable
from gputop.sources.probe_plan import (
    KHEADERS,
    LoaderPlan,
    has_bpf_capabilities,
    kernel_headers_present,
    libbpf_problem,
    plan_loader,
    preflight,
)


@dataclass(frozen=True)
class Check:
    """One line of the report: does ``name`` work here, why (not), and how to fix it."""

    name: str
    ok: bool
    why: str
    fix: str | None = None


# ---- GPU ------------------------------------------------------------------------


def check_nvml(probe: Callable[[], NvmlFacts] = probe_nvml) -> list[Check]:
    """NVML library and driver, then GPM (SM activity) support for each GPU."""
    facts = probe()
    if not facts.ok:
        return [
            Check("NVML library + driver", False, str(facts.reason), facts.fix),
            Check("GPM SM activity", False, "no GPU can be read (see NVML above)"),
        ]
    versions = ", ".join(
        f"{label} {value}"
        for label, value in (
            ("driver", facts.driver_version),
            ("NVML", facts.nvml_version),
            ("CUDA", facts.cuda_version),
        )
        if value
    )
    n = len(facts.gpus)
    out = [Check("NVML library + driver", True, f"{versions}; {n} GPU{'s' if n != 1 else ''}")]
    if not facts.gpus:
        out.append(Check("GPM SM activity", False, "NVML sees no GPU"))
    for g in facts.gpus:
        name = f"GPM SM activity, GPU {g.index}"
        if g.gpm_supported:
            out.append(Check(name, True, f"{g.name}: SM activity from GPM metrics"))
        else:
            why = g.gpm_reason or ("unknown" if g.gpm_supported is None else "not supported")
            out.append(
                Check(
                    name,
                    False,
                    f"{g.name}: {why}; SM activity shows as n/a, GPU_UTIL and power still work",
                    "GPM needs a Hopper or newer data-center GPU (H100, H200, GH200, B200) and "
                    "driver 520 or later; inside a VM or MIG slice it may be unavailable",
                )
            )
    return out


# ---- eBPF ----------------------------------------------------------------------
#
# Each row's verdict is the probe's own test (gputop.sources.probe_plan), so the
# doctor cannot pass a host the probe then refuses; the rows only add detail to it.
# Whether to load is the probe's preflight() verdict.


def check_bpf_loader(plan: LoaderPlan | Unavailable | None = None) -> Check:
    """Which loader the probe uses here, why, and what this node lacks for the other one."""
    plan = plan_loader() if plan is None else plan
    name = "eBPF loader"
    if isinstance(plan, Unavailable):
        return Check(name, False, plan.reason, plan.fix)
    if plan.loader == "libbpf":
        return Check(name, True, f"libbpf: {plan.why}; {plan.other}")
    # bcc works, but the object built ahead of time would load in milliseconds without
    # a compiler or headers: say what it lacks.
    core = libbpf_problem()
    return Check(
        name,
        True,
        f"bcc: {plan.why}; the object built ahead of time cannot load: {plan.other}",
        core.fix if core is not None else None,
    )


def check_throttle_state(
    plan: LoaderPlan | Unavailable | None = None, probe_runs: bool = True
) -> Check:
    """Whether the probe can tell run-queue time held back by a cgroup CPU limit (measured).

    ``probe_runs``: the probe can run here (its own row passed); where it cannot, nothing
    is measured at a switch-out, whatever the loader and the kernel could do.
    """
    plan = plan_loader() if plan is None else plan
    name = "CPU-limit throttling"
    if not probe_runs:
        return Check(
            name,
            True,
            "inferred from each job cgroup's cpu.stat: the eBPF probe does not run here"
            " (its row says why)",
        )
    lib = find_libbpf()[0] if isinstance(plan, LoaderPlan) and plan.loader == "libbpf" else None
    field = throttle_field(lib) if lib is not None else None
    if field is not None:
        return Check(name, True, f"measured: the probe reads {field} at each switch-out")
    why = (
        "this kernel's BTF has neither task_struct.throttled nor cfs_rq.throttle_count"
        if lib is not None
        else "only the CO-RE probe (libbpf) reads a task's throttle state"
    )
    core = libbpf_problem() if lib is None else None
    return Check(
        name, True, f"inferred from each job cgroup's cpu.stat: {why}", core.fix if core else None
    )


def check_bcc(finder: Callable[[], tuple[ModuleType | None, str | None]] = find_bcc) -> Check:
    """The bcc Python module (python3-bpfcc) and its libbcc."""
    mod, why = finder()
    if mod is None:
        return Check(
            "bcc (eBPF)",
            False,
            f"{why or 'bcc cannot be imported'}; scheduler numbers come from /proc instead",
            INSTALL_FIX,
        )
    version = getattr(mod, "__version__", None) or "version unknown"
    where = os.path.dirname(os.path.dirname(getattr(mod, "__file__", "") or "")) or "?"
    return Check("bcc (eBPF)", True, f"bcc {version} from {where}")


def _headers_release(headers: str) -> str | None:
    path = os.path.join(headers, "include", "generated", "utsrelease.h")
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("#define UTS_RELEASE"):
                    return line.split('"')[1]
    except (OSError, IndexError):
        return None
    return None


def check_kernel_headers(release: str | None = None) -> Check:
    """Kernel headers where bcc looks for them (the probe's own test: include/linux/kconfig.h).

    ``$BCC_KERNEL_SOURCE``, else ``/lib/modules/RELEASE/build`` or ``.../source``,
    else the kernel's own ``kheaders`` archive (CONFIG_IKHEADERS).
    """
    release = release or os.uname().release
    found = kernel_headers_present(release)
    if found == KHEADERS:
        return Check("kernel headers", True, f"{KHEADERS} (CONFIG_IKHEADERS)")
    if found is not None:
        target = os.path.realpath(found)
        shown = f"{found} -> {target}" if target != found else found
        # Debian's common "source" tree has no generated headers; its "build" sibling does.
        built_for = _headers_release(found) or _headers_release(f"/lib/modules/{release}/build")
        if built_for is not None and built_for != release:
            return Check(
                "kernel headers",
                True,
                f"{shown} is for {built_for}, not {release}; enough for gputop's "
                "probe (it reads tracepoint fields only) if it compiles",
            )
        return Check("kernel headers", True, shown)
    override = os.environ.get("BCC_KERNEL_SOURCE")
    if override:
        return Check(
            "kernel headers",
            False,
            f"BCC_KERNEL_SOURCE={override} has no include/linux/kconfig.h",
            "point BCC_KERNEL_SOURCE at a kernel header tree, or unset it",
        )
    build = f"/lib/modules/{release}/build"
    if os.path.islink(build) and not os.path.exists(build):
        why = f"{build} points to {os.readlink(build)}, which does not exist"
    else:
        why = f"no {build}/include/linux/kconfig.h and no {KHEADERS}"
    return Check(
        "kernel headers",
        False,
        f"{why}; bcc cannot compile the probe",
        f"apt-get install linux-headers-{release}  (Fedora/RHEL: dnf install "
        f"kernel-devel-{release}), or modprobe kheaders",
    )


def check_privileges(status_path: str = "/proc/self/status", euid: int | None = None) -> Check:
    """Root, or CAP_BPF + CAP_PERFMON (CAP_SYS_ADMIN before Linux 5.8), in CapEff."""
    euid = os.geteuid() if euid is None else euid
    who = "root" if euid == 0 else f"uid {euid}"
    try:
        with open(status_path, encoding="ascii", errors="replace") as f:
            status_text = f.read()
    except OSError as exc:
        status_text = ""
        why = f"{who}; cannot read {status_path}: {exc.strerror}"
    else:
        m = re.search(r"^CapEff:\s*([0-9a-fA-F]+)", status_text, re.M)
        why = f"{who}, CapEff {int(m.group(1), 16):#x}" if m else f"{who}, no CapEff"
    if has_bpf_capabilities(status_text):
        return Check("privileges for eBPF", True, f"{why}: may load and attach the probe")
    return Check(
        "privileges for eBPF",
        False,
        f"{why}: without CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN) the probe cannot load",
        "run as root (sudo gputop), or in a container add --cap-add BPF --cap-add PERFMON "
        "(--cap-add SYS_ADMIN on kernels before 5.8)",
    )


def check_tracefs(dirs: Sequence[str] = TRACEFS_DIRS) -> Check:
    """A mounted tracefs whose sched_switch format lists prev_state's flags, as the probe needs."""
    for d in dirs:
        path = os.path.join(d, "events", "sched", "sched_switch", "format")
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                fmt = f.read()
        except OSError:
            continue
        if state_masks(fmt) is None:
            return Check(
                "tracefs",
                False,
                f"{path} lists no prev_state flags",
                "use a kernel whose sched_switch tracepoint prints prev_state flags",
            )
        return Check("tracefs", True, f"{d} has the sched_switch tracepoint")
    for d in dirs:
        if os.path.isdir(os.path.join(d, "events")):
            return Check(
                "tracefs",
                False,
                f"{d} is mounted but has no sched/sched_switch tracepoint",
                "use a kernel with CONFIG_TRACEPOINTS and scheduler tracepoints",
            )
    return Check(
        "tracefs",
        False,
        f"not mounted at {' or '.join(dirs)}",
        f"mount -t tracefs nodev {dirs[0]}" if dirs else None,
    )


def _new_probe() -> Any:
    # Looked up at run time: builds without the eBPF probe still run the doctor.
    return importlib.import_module("gputop.sources.sched_probe").BpfSchedProbe()


def check_ebpf_probe(new_probe: Callable[[], Any] = _new_probe, timeout_s: float = 60.0) -> Check:
    """Really load and attach the scheduler probe, then detach: the kernel's verdict."""
    name = "eBPF probe"
    try:
        probe = new_probe()
    except (ImportError, AttributeError):
        return Check(name, False, "this gputop build has no eBPF probe")
    started = time.monotonic()
    probe.open()
    try:
        attached = probe.wait_attached(timeout_s)
        failure = probe.failure
        loader = probe.loader
        libbpf_failure = probe.libbpf_failure
    finally:
        probe.close()
    took = time.monotonic() - started
    if attached:
        how = "loaded with libbpf" if loader == "libbpf" else "compiled with bcc"
        why = f"{how} and attached to sched:sched_switch in {took:.2f} s"
        if libbpf_failure:
            why += f" (libbpf refused the object built ahead of time: {libbpf_failure})"
        return Check(name, True, why)
    reason = "did not attach" if failure is None else failure.reason
    fix = None if failure is None else failure.fix
    if fix and "gputop doctor" in fix:
        # The reason quotes the loader's first error; its causes have rows here.
        fix = "check the eBPF loader, privileges and tracefs rows above"
    if took >= timeout_s:
        reason = f"not attached after {timeout_s:.0f} s: {reason}"
    return Check(name, False, reason, fix)


# ---- /proc ----------------------------------------------------------------------


def check_schedstat(proc_root: str = "/proc") -> Check:
    """Per-thread run-queue wait from /proc/PID/schedstat (CONFIG_SCHED_INFO)."""
    path = f"{proc_root}/self/schedstat"
    fix = "use a kernel built with CONFIG_SCHED_INFO (CONFIG_SCHEDSTATS), or use the eBPF probe"
    try:
        with open(path, encoding="ascii") as f:
            parts = f.read().split()
        [int(p) for p in parts[:3]]
    except FileNotFoundError:
        why = f"no {path}: run-queue wait and off-CPU time are n/a without the eBPF probe"
        return Check("schedstat", False, why, fix)
    except (OSError, ValueError) as exc:
        return Check("schedstat", False, f"{path} unreadable: {exc}", fix)
    if len(parts) < 3:
        return Check("schedstat", False, f"{path} has {len(parts)} fields, expected 3", fix)
    return Check("schedstat", True, f"{path}: run-queue wait and on-CPU time per thread")


def check_psi(path: str = "/proc/pressure/cpu") -> Check:
    """CPU pressure stall information (Linux 4.20+, CONFIG_PSI)."""
    try:
        with open(path, encoding="ascii") as f:
            first = f.readline().strip()
    except FileNotFoundError:
        return Check(
            "PSI (CPU pressure)",
            False,
            f"no {path}: kernel older than 4.20 or built without CONFIG_PSI",
            "use a kernel with CONFIG_PSI=y; host CPU pressure shows as n/a meanwhile",
        )
    except OSError as exc:
        if exc.errno == errno.EOPNOTSUPP:
            return Check(
                "PSI (CPU pressure)",
                False,
                f"{path}: PSI is compiled in but disabled at boot",
                "add psi=1 to the kernel command line and reboot",
            )
        return Check("PSI (CPU pressure)", False, f"{path} unreadable: {exc.strerror}")
    return Check("PSI (CPU pressure)", True, f"{path}: {first}")


def _ptrace_scope(path: str) -> int | None:
    try:
        with open(path, encoding="ascii") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def check_pyspy(
    search_path: str | None = None,
    euid: int | None = None,
    ptrace_scope_path: str = "/proc/sys/kernel/yama/ptrace_scope",
) -> Check:
    """py-spy for Python stacks in the process drill-down, and whether it may attach."""
    exe = find_pyspy(search_path)
    if exe is None:
        return Check(
            "py-spy",
            False,
            "not found on PATH: the drill-down shows no Python stacks",
            PYSPY_INSTALL_HINT,
        )
    try:
        out = subprocess.run(
            [exe, "--version"], capture_output=True, text=True, timeout=10, check=False
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError) as exc:
        return Check("py-spy", False, f"{exe} does not run: {exc}", PYSPY_INSTALL_HINT)
    euid = os.geteuid() if euid is None else euid
    scope = _ptrace_scope(ptrace_scope_path)
    if scope == 3:
        return Check(
            "py-spy",
            False,
            f"{out or exe}, but kernel.yama.ptrace_scope=3 forbids attaching to any process",
            "sysctl kernel.yama.ptrace_scope=1 (3 can only be cleared by a reboot)",
        )
    if euid != 0:
        return Check(
            "py-spy",
            True,
            f"{out or exe}; as uid {euid} it can read only your own processes",
            "run as root (or with CAP_SYS_PTRACE) to see other users' trainers",
        )
    return Check("py-spy", True, f"{out or exe} at {exe}")


# ---- report ---------------------------------------------------------------------


def run_checks(try_probe: bool = True) -> list[Check]:
    """Every check, against this machine; the probe is compiled only when it can work."""
    plan = plan_loader()
    ebpf = [check_privileges(), check_bpf_loader(plan)]
    if not (isinstance(plan, LoaderPlan) and plan.loader == "libbpf"):
        # bcc compiles the probe here (or would): what it needs, row by row. (libbpf
        # attaches raw tracepoints by name: it needs neither tracefs nor headers.)
        ebpf += [check_tracefs(), check_bcc(), check_kernel_headers()]
    if not try_probe:
        probe = Check("eBPF probe", False, "not tried (--no-bpf)")
    elif not all(c.ok for c in ebpf):
        probe = Check("eBPF probe", False, "not tried: fix the eBPF checks above first")
    else:
        pre = preflight()
        if isinstance(pre, Unavailable):
            probe = Check("eBPF probe", False, f"not tried: {pre.reason}", pre.fix)
        else:
            probe = check_ebpf_probe()
    if isinstance(plan, LoaderPlan):
        # After the loader's row; measured only where the probe itself runs.
        ebpf.insert(2, check_throttle_state(plan, probe_runs=probe.ok))
    return [
        *check_nvml(),
        *ebpf,
        probe,
        check_schedstat(),
        check_psi(),
        check_pyspy(),
    ]


def _summary(checks: Sequence[Check]) -> list[str]:
    ok = {c.name: c.ok for c in checks}
    lines = []
    if ok.get("eBPF probe", False):
        lines.append("scheduler signals: eBPF probe (exact off-CPU, run-queue and preemptions)")
    elif ok.get("schedstat", False):
        lines.append(
            "scheduler signals: /proc estimates; what a trainer waits on (batches, CPU, GPU) is inferred, not measured: fix the eBPF checks above to measure it"  # noqa: E501
        )
    else:
        lines.append("scheduler signals: CPU time only (no eBPF, no schedstat)")
    lines.append(importlib.import_module("gputop.sources.sched_probe").FOOTPRINT)
    if ok.get("NVML library + driver", False):
        gpm = [c for c in checks if c.name.startswith("GPM")]
        starving = "full" if gpm and all(c.ok for c in gpm) else "GPU_UTIL and power only"
        lines.append(f"GPU signals: NVML ({starving} for the BUSY BUT STARVING check)")
    else:
        lines.append("GPU signals: none (no NVML); host and process panels still work")
    return lines


def format_report(checks: Sequence[Check], title: str, columns: int = 100) -> str:
    """Aligned, plain-text report: one row per check, its fix indented under it."""
    width = max(len(c.name) for c in checks)
    indent = " " * (width + 8)
    text_width = max(40, columns - len(indent))
    lines = [title, ""]
    for c in checks:
        mark = "ok" if c.ok else "NO"
        why = textwrap.wrap(c.why, text_width, break_on_hyphens=False, break_long_words=False) or [
            ""
        ]
        lines.append(f"  {c.name:<{width}}  {mark:<2}  {why[0]}")
        lines.extend(indent + w for w in why[1:])
        if c.fix:
            # Not wrapped: a fix is a command to copy and paste.
            lines.append(f"{indent}fix: {c.fix}")
    works = sum(c.ok for c in checks)
    lines += ["", f"{works} of {len(checks)} checks pass."]
    lines += _summary(checks)
    return "\n".join(lines) + "\n"


def doctor_command(args: argparse.Namespace, opts: Options) -> int:
    """`gputop doctor`: print the report; always exit 0 (the report is the result)."""
    title = f"gputop doctor: data sources on {socket.gethostname()} (Linux {os.uname().release})"
    columns = shutil.get_terminal_size((100, 24)).columns
    sys.stdout.write(format_report(run_checks(not opts.no_bpf), title, max(80, columns)))
    return 0
