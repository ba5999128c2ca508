"""What the eBPF probe needs from this node, and which loader it uses: checked before loading.

Cheap and side-effect free (it never imports bcc or loads a program), so ``gputop
doctor`` runs the same checks the probe does. Two loaders (``probe_loader``):
libbpf loads the CO-RE object built ahead of time where the kernel has BTF, and
needs nothing else of the node; bcc compiles the program at run time and needs
kernel headers and tracefs (its tracepoint records are laid out as tracefs says).
Both need the privileges to load and attach BPF programs.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from importlib import resources

from gputop.sources import libbpf_loader
from gputop.sources.bcc_find import INSTALL_FIX, bcc_present
from gputop.sources.bcc_loader import TRACEFS_DIRS, BccLoader, kernel_facts
from gputop.sources.bpf_build import OBJECT_NAME
from gputop.sources.libbpf_loader import LibbpfLoader
from gputop.sources.probe_loader import ProbeLoader, Unavailable

# The kernel's own headers (CONFIG_IKHEADERS), bcc's fallback.
KHEADERS = "/sys/kernel/kheaders.tar.xz"
# Which loader to use: unset (the best this node allows), "libbpf" or "bcc".
LOADER_ENV = "GPUTOP_BPF_LOADER"
# Interrupt entry/exit tracepoint pairs ({category}:{event}_entry/_exit) that keep the
# per-CPU interrupt depth; each one this kernel has is attached, to its own programs
# (on_{event}_entry/_exit in bpf/sched_probe.c: why one per tracepoint is said there).
# irq_vectors:irq_work_* is left out: x86 refuses sampling perf events on it
# (TRACE_EVENT_PERF_PERM), and bcc's attempt prints an error from libbcc.
IRQ_EVENT_PAIRS = (
    ("irq", "irq_handler"),
    ("irq", "softirq"),
    ("timer", "hrtimer_expire"),
    ("timer", "timer_expire"),
    ("irq_vectors", "local_timer"),
    ("irq_vectors", "call_function"),
    ("irq_vectors", "call_function_single"),
    ("irq_vectors", "reschedule"),
    ("irq_vectors", "x86_platform_ipi"),
    ("irq_vectors", "thermal_apic"),
    ("irq_vectors", "error_apic"),
    ("irq_vectors", "spurious_apic"),
    ("ipi", "ipi"),
)

_CAP_SYS_ADMIN = 21
_CAP_PERFMON = 38
_CAP_BPF = 39


@dataclass(frozen=True, slots=True)
class LoaderPlan:
    """Which loader the probe uses here, why, and what the node lacks for the other one.

    ``bcc_fallback``: bcc can take over if libbpf refuses the object.
    """

    loader: str  # "libbpf" | "bcc"
    why: str
    other: str
    bcc_fallback: bool = False


def possible_cpus() -> int:
    """How many CPU ids this kernel can use (the highest possible CPU + 1)."""
    text = _read_text("/sys/devices/system/cpu/possible")
    if text:
        try:
            return int(re.split(r"[-,]", text.strip())[-1]) + 1
        except ValueError:
            pass
    return os.cpu_count() or 1


def _bpf_file(name: str) -> str:
    """A file of ``bpf/``: inside the installed package, else the source tree's."""
    installed = resources.files("gputop") / "bpf" / name
    if installed.is_file():
        return str(installed)
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.normpath(os.path.join(here, "..", "..", "bpf", name))


def bpf_source_path() -> str:
    """The BPF C program (bcc compiles it at run time)."""
    return _bpf_file("sched_probe.c")


def bpf_object_path() -> str:
    """The CO-RE object built ahead of time from it (libbpf loads it)."""
    return _bpf_file(OBJECT_NAME)


def has_bpf_capabilities(status_text: str) -> bool:
    """True when CapEff (from /proc/self/status) allows loading and attaching the probe."""
    m = re.search(r"^CapEff:\s*([0-9a-fA-F]+)", status_text, re.M)
    if m is None:
        return os.geteuid() == 0
    caps = int(m.group(1), 16)
    if caps & (1 << _CAP_SYS_ADMIN):
        return True
    return bool(caps & (1 << _CAP_BPF)) and bool(caps & (1 << _CAP_PERFMON))


def kernel_headers_present(release: str) -> str | None:
    """Where bcc will find headers to compile against, by bcc's own test; None if nowhere.

    bcc looks for ``include/linux/kconfig.h`` under ``$BCC_KERNEL_SOURCE`` or
    ``/lib/modules/RELEASE/{build,source}``, then for the kernel's built-in
    ``kheaders``. When it finds none its C library prints to stdout, which would
    corrupt ``gputop record -o -``; so this check must be at least as strict.
    """
    src = os.environ.get("BCC_KERNEL_SOURCE")
    mod = f"/lib/modules/{release}"
    roots = [src] if src else [f"{mod}/build", f"{mod}/source"]
    found = next((r for r in roots if os.path.isfile(f"{r}/include/linux/kconfig.h")), None)
    if found is None and os.path.exists(KHEADERS):
        found = KHEADERS
    return found


def _read_text(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def privileges_problem(proc_root: str = "/proc") -> Unavailable | None:
    """Why this process may not load and attach BPF programs (None: it may)."""
    if has_bpf_capabilities(_read_text(f"{proc_root}/self/status") or ""):
        return None
    return Unavailable(
        "needs root (or CAP_BPF + CAP_PERFMON)",
        "run gputop with sudo (or give it CAP_BPF, CAP_PERFMON and read access to tracefs)",
    )


def irq_pairs() -> list[tuple[str, str]]:
    """The interrupt entry/exit pairs to attach: those tracefs lists, or every one to try.

    A raw tracepoint attaches by name without tracefs; a pair the kernel lacks is
    refused at attach and skipped.
    """
    tracefs = next((d for d in TRACEFS_DIRS if os.path.isdir(f"{d}/events")), None)
    if tracefs is None:
        return list(IRQ_EVENT_PAIRS)
    return [
        (c, e)
        for c, e in IRQ_EVENT_PAIRS
        if os.path.isdir(f"{tracefs}/events/{c}/{e}_entry")
        and os.path.isdir(f"{tracefs}/events/{c}/{e}_exit")
    ]


def libbpf_problem(object_path: str | None = None) -> Unavailable | None:
    """Why the ahead-of-time object cannot be loaded here (None: it can)."""
    why = libbpf_loader.kernel_btf_problem()
    if why is not None:
        return Unavailable(why, "use a kernel built with CONFIG_DEBUG_INFO_BTF=y")
    _, why = libbpf_loader.find_libbpf()
    if why is not None:
        return Unavailable(why, libbpf_loader.libbpf_fix())
    path = object_path or bpf_object_path()
    if not os.path.isfile(path):
        return Unavailable(f"this gputop has no probe object ({path})", "reinstall gputop")
    return None


def bcc_problem(release: str | None = None) -> Unavailable | None:
    """Why bcc cannot compile the probe here (None: it may; the child has the last word).

    Checked without importing bcc: only the compiler child ever does.
    """
    if not bcc_present():
        return Unavailable("bcc (BPF Compiler Collection) is not installed", INSTALL_FIX)
    release = release or os.uname().release
    if not kernel_headers_present(release):
        return Unavailable(
            f"no kernel headers for {release}",
            f"apt-get install linux-headers-{release} (or set BCC_KERNEL_SOURCE)",
        )
    facts = kernel_facts()
    return facts if isinstance(facts, Unavailable) else None


def plan_loader(forced: str | None = None) -> LoaderPlan | Unavailable:
    """The loader for this node: libbpf where the kernel has BTF, else bcc; or why neither.

    ``forced`` ("libbpf" or "bcc"; default ``$GPUTOP_BPF_LOADER``) allows only that one.
    """
    forced = forced if forced is not None else os.environ.get(LOADER_ENV, "")
    if forced not in ("", "libbpf", "bcc"):
        return Unavailable(f"{LOADER_ENV}={forced} names no loader", "use libbpf or bcc")
    core = libbpf_problem()
    bcc = bcc_problem()
    if forced == "bcc" or (forced == "" and core is not None):
        if bcc is not None:
            if forced:
                return bcc
            return Unavailable(
                f"{core.reason if core else ''}, and {bcc.reason}",
                f"{core.fix if core else ''}; or for bcc: {bcc.fix}",
            )
        why = f"{LOADER_ENV}=bcc" if forced else f"{core.reason if core else ''}"
        other = core.reason if core else "libbpf could load the object built ahead of time"
        return LoaderPlan("bcc", f"{why}: compiled at run time by bcc", other)
    if core is not None:
        return core
    version = libbpf_loader.libbpf_version() or "?"
    why = f"the kernel has BTF: the object built ahead of time, loaded by libbpf {version}"
    other = "bcc fallback ready" if bcc is None else f"bcc fallback unavailable: {bcc.reason}"
    return LoaderPlan("libbpf", why, other, bcc_fallback=bcc is None and forced == "")


def preflight(proc_root: str = "/proc", forced: str | None = None) -> LoaderPlan | Unavailable:
    """Everything the probe needs before loading, checked in order: privileges, then a loader.

    Returns the loader plan or why the probe cannot run here.
    """
    why = privileges_problem(proc_root)
    if why is not None:
        return why
    return plan_loader(forced)


def make_loader(name: str) -> ProbeLoader:
    """The loader ``name`` ("libbpf" or "bcc") with this installation's program."""
    if name == "libbpf":
        return LibbpfLoader(bpf_object_path())
    if name == "bcc":
        return BccLoader(bpf_source_path())
    raise ValueError(f"no loader named {name!r}")
