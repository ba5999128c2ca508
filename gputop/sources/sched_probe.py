"""The eBPF scheduler probe: ``sched:sched_switch`` and friends, aggregated in kernel maps.

``open()`` checks the node (``probe_plan.preflight``) and loads the program with the
loader it plans (``probe_loader``): libbpf loads the CO-RE object built ahead of
time before ``open()`` returns; bcc compiles for seconds on a background thread,
and if libbpf refuses the object bcc takes over where it can. Either way the
programs, attachments and maps arrive as a ``Handover`` of file descriptors, and
the maps are read with ``bpf(2)`` through the ctypes structures of ``probe_abi``.
Until the probe is attached ``read()`` returns None and the sampler serves the
/proc numbers, with ``status.reason`` saying what is happening or why the probe
cannot run, and the fix.

The probe only reads. Each ``read()`` flips the program's epoch counter (so the
longest stretch of the finished interval can be read), reads the rows of the
threads it is asked for and returns them as ``ProbeRows``: the kernel's running
totals. Turning them into an interval is the model's work (``SchedIntervals``,
driven by the sampler's host pass). The pipeline the model named is written into
the kernel once (who feeds which trainer, whose preemptors to record), with the
CUDA uprobes for new trainers: by ``prepare()`` at the end of the sampler's tick,
or after the rows of a ``read()`` handed a new one. Each read frees the rows of
what is gone.
"""

from __future__ import annotations

import os
import threading
import time

from gputop.model.frame import SourceStatus
from gputop.model.probe_abi import (
    DEFAULT_MAX_PIPELINE,
    DEFAULT_MAX_PREEMPT,
    DEFAULT_MAX_TGIDS,
    DEFAULT_MAX_THREADS,
    MAP_TYPES,
)
from gputop.model.readings import Pipeline, ProbeRows
from gputop.sources.bpf_attach import uprobe_multi_supported
from gputop.sources.bpf_handover import Handover
from gputop.sources.bpf_syscall import BpfError, LayoutMismatch
from gputop.sources.cuda_probe import UPROBE_PROGRAMS, CudaProbes
from gputop.sources.probe_loader import LoadError, LoadSpec, ProbeLoader, Unavailable
from gputop.sources.probe_maps import ProbeMaps
from gputop.sources.probe_plan import (
    LoaderPlan,
    irq_pairs,
    make_loader,
    possible_cpus,
    preflight,
)

# "0": attach the CUDA uprobes one perf event per address even where the kernel has
# uprobe_multi links (the path of kernels before 6.6; docs/ebpf.md).
UPROBE_MULTI_ENV = "GPUTOP_UPROBE_MULTI"

# What the probe asks of the kernel and what it does to other tracers (`gputop doctor`).
FOOTPRINT = (
    "eBPF probe footprint: raw tracepoints as BPF links (bcc: perf-event tracepoints) on"
    " sched:sched_switch, sched_waking, sched_wakeup, sched_process_exit, sched_process_exec;"
    " entry/exit of irq, softirq, timer and x86 irq_vectors to tell interrupt context (and"
    " network receive processing, with sock:sk_data_ready where the kernel has it); and"
    " uprobes on the CUDA driver's synchronizing calls and host-to-device copies in the libcuda a"
    " watched trainer maps"
    " (never on kernel launches); no kprobes. Other tracers (perf, bcc tools, another gputop)"
    " keep seeing every event: a raw tracepoint filters nothing, and each perf-event program"
    " returns 1, which keeps the event."
)
# Tracepoints attached where this kernel has them (tracepoint, program): a network
# socket's data-ready (Linux 6.6+) tells a wake-up by its receive path outside NET_RX.
OPTIONAL_EVENTS = (("sock:sk_data_ready", "on_sk_data_ready"),)
# The status reason for the one tick between attaching and the first full
# eBPF interval (it lands in that frame's sources.notes).
ATTACHED_NOTE = "eBPF probe attached; its numbers start with the next full interval"
# Nice value of the thread that compiles the program: the lowest CPU priority.
COMPILE_NICE = 19


class BpfSchedProbe:
    """Scheduler probe (libbpf, or bcc in a child); a ``SchedProbe``.

    ``max_threads`` and ``max_tgids`` bound the kernel maps; when one is full
    the probe counts the failed insert, and ``status.reason`` says so.
    ``compile_nice`` is the nice value of the bcc compiler child (19: the
    compile only gets CPU the watched job leaves over). ``use_loader``
    ("libbpf" or "bcc") allows only that loader (default: ``$GPUTOP_BPF_LOADER``,
    else the best this node has). ``loader`` is the one that attached it,
    ``plan`` why that one.
    """

    def __init__(
        self,
        max_threads: int = DEFAULT_MAX_THREADS,
        max_tgids: int = DEFAULT_MAX_TGIDS,
        proc_root: str = "/proc",
        compile_nice: int = COMPILE_NICE,
        use_loader: str | None = None,
    ) -> None:
        self.max_threads = max_threads
        self.max_tgids = max_tgids
        self.proc_root = proc_root
        self.compile_nice = compile_nice
        self.use_loader = use_loader
        self._lock = threading.Lock()
        self._status = SourceStatus("sched", "bpf", False, "eBPF probe not started")
        self._handover: Handover | None = None
        self._maps: ProbeMaps | None = None
        # The last pipeline asked for (handed to the maps once attached).
        self._pipeline: Pipeline | None = None
        self._loading: ProbeLoader | None = None
        self._thread: threading.Thread | None = None
        self._closed = False
        # The CUDA synchronization uprobes, once attached (see cuda_probe.py).
        self.cuda: CudaProbes | None = None
        self.attach_s: float | None = None
        self.irq_tracepoints: tuple[str, ...] = ()
        # Why the probe is off, as fields (status.reason is worded for the status line).
        self.failure: Unavailable | None = None
        self._opened = False
        self.plan: LoaderPlan | None = None
        self.loader: str | None = None
        # Why libbpf's attempt gave way to bcc, when it did.
        self.libbpf_failure: str | None = None

    # ---- lifecycle ------------------------------------------------------------

    @property
    def status(self) -> SourceStatus:
        return self._status

    @property
    def attached(self) -> bool:
        return self._handover is not None

    def open(self) -> None:
        """Load and attach: with libbpf before returning, with bcc on a background thread.

        libbpf takes tens of milliseconds, so the sampler's first tick already
        has the probe; bcc compiles for seconds, during which ``read()``
        returns None and the sampler serves /proc's numbers.
        """
        with self._lock:
            if self._opened or self._closed:
                return
            self._opened = True
        started = time.monotonic()
        plan = preflight(self.proc_root, self.use_loader)
        if isinstance(plan, Unavailable):
            self._fail(plan.reason, plan.fix)
            return
        self.plan = plan
        names = [plan.loader] + (["bcc"] if plan.bcc_fallback else [])
        self._next_loader(names, started)

    def _next_loader(self, names: list[str], started: float) -> None:
        """Load with the first of ``names``; the rest take over, in turn, if it fails."""
        loader = make_loader(names[0])
        with self._lock:
            if self._closed:
                return
            self._loading = loader
            if loader.slow:
                self._status = SourceStatus("sched", "bpf", False, "compiling BPF program…")
                self._thread = threading.Thread(
                    target=self._load,
                    args=(loader, names[1:], started),
                    name="gputop-bpf-load",
                    daemon=True,
                )
                self._thread.start()
                return
        self._status = SourceStatus("sched", "bpf", False, "loading the BPF program…")
        self._load(loader, names[1:], started)

    def _load(self, loader: ProbeLoader, fallbacks: list[str], started: float) -> None:
        try:
            ho = loader.load(self._spec())
        except LoadError as exc:
            if fallbacks:
                self.libbpf_failure = exc.reason
                self._next_loader(fallbacks, started)
                return
            reason = exc.reason
            if loader.name == "libbpf":
                reason = f"libbpf could not load the probe: {reason}"
            elif self.libbpf_failure:
                reason += f" (and libbpf: {self.libbpf_failure})"
            self._fail(reason, exc.fix)
            return
        self._take(ho, loader.name, started)

    def _spec(self) -> LoadSpec:
        cpus = possible_cpus()
        return LoadSpec(
            max_entries=self.max_entries(),
            max_cpus=cpus,
            irq_pairs=irq_pairs(),
            load_only=UPROBE_PROGRAMS,
            optional=OPTIONAL_EVENTS,
            uprobe_multi=uprobe_multi_supported() and os.environ.get(UPROBE_MULTI_ENV) != "0",
            nice=self.compile_nice,
        )

    def max_entries(self) -> dict[str, int]:
        """Every map's bound on this node."""
        cpus = possible_cpus()
        return {
            "threads": self.max_threads,
            "exiting": self.max_threads,
            "groups": self.max_tgids,
            "pipeline": DEFAULT_MAX_PIPELINE,
            "watched": DEFAULT_MAX_PIPELINE,
            "preempt": DEFAULT_MAX_PREEMPT,
            "other_wakers": DEFAULT_MAX_PREEMPT,
            "cpu_waiters": cpus,
            "irq_depth": cpus,
            "activity": self.max_tgids,
            "running": cpus,
        }

    def wait_attached(self, timeout_s: float) -> bool:
        """Block until loading ends (attached or failed); True when attached."""
        t = self._thread
        if t is not None:
            t.join(timeout_s)
        return self.attached

    def close(self) -> None:
        """Detach the probe; a load in flight is cancelled, so nothing stays attached."""
        with self._lock:
            self._closed = True
            t = self._thread
            loading = self._loading
        if loading is not None:
            loading.cancel()
        if t is not None and t is not threading.current_thread():
            # The load was cancelled, so the thread returns at once and then sees _closed.
            t.join(timeout=30)
        with self._lock:
            ho, self._handover = self._handover, None
            self._maps = None
        if ho is not None:
            ho.close()
            self._status = SourceStatus("sched", "bpf", False, "eBPF probe detached")

    def _fail(self, reason: str, fix: str | None) -> None:
        self.failure = Unavailable(reason, fix)
        # The frame's notes carry only the reason, so the fix goes into it as well.
        text = f"eBPF probe off: {reason}; scheduler numbers from /proc"
        if fix:
            text += f"; fix: {fix}"
        self._status = SourceStatus("sched", "bpf", False, text, fix)

    def _take(self, ho: Handover, loader: str, started: float) -> None:
        """Adopt an attached program: check the maps against gputop's structures, start reading."""
        try:
            maps = ho.open_maps(MAP_TYPES)
        except (LayoutMismatch, BpfError) as exc:
            ho.close()
            self._fail(f"gputop does not match its BPF program: {exc}", "reinstall gputop")
            return
        with self._lock:
            if self._closed:
                ho.close()
                return
            self._handover = ho
            self.cuda = CudaProbes(ho.programs, ho.attachments, self.proc_root, ho.uprobe_multi)
            self._maps = ProbeMaps(maps, self.cuda, self.proc_root, self._pipeline)
            self._maps.throttle_measured = ho.throttle_field is not None
            self.loader = loader
            events = (a.partition(":") for a in ho.attachments)
            self.irq_tracepoints = tuple(
                e.removesuffix("_entry")
                for kind, _, e in events
                if kind in ("tracepoint", "raw_tracepoint")
                and e.endswith("_entry")
                and not e.startswith("sched:")
            )
            self.attach_s = time.monotonic() - started
            self._status = SourceStatus("sched", "bpf", True, None)

    def program_fds(self) -> dict[str, int]:
        """Name -> file descriptor of each attached BPF program (for bpf_stats in bench/)."""
        ho = self._handover
        return dict(ho.programs) if ho is not None else {}

    # ---- reading --------------------------------------------------------------

    def prepare(self, pipeline: Pipeline) -> None:
        """Watch ``pipeline`` (the join stage's output of this tick) from now on, not from
        the next read: a trainer found in this tick has its wake-ups classified, its
        preemptors recorded and its CUDA library probed through the next interval, so
        its first measured numbers come one tick sooner. Nothing before attaching."""
        self._pipeline = pipeline
        if self._maps is not None:
            self._maps.apply(pipeline)

    def read(self, pipeline: Pipeline | None = None) -> ProbeRows | None:
        """The kernel's running totals now; None until attached.

        ``pipeline``: who feeds which trainer, whose preemptors to record and
        whose rows to read, as the join stage saw them at the end of the last
        tick (None: as ``prepare()`` or the last read left it, without writing it
        again). The kernel maps get it after this read's rows are taken, so it
        classifies wake-ups from now on; processes that stopped being watched
        lose their rows now. The first read after attaching is
        marked ``baseline_only``: its window began at the attach.
        """
        if pipeline is not None:
            self._pipeline = pipeline
        maps = self._maps
        if maps is None:
            return None
        if pipeline is not None:
            maps.want(pipeline)
        rows = maps.read()
        if maps.errors_seen:
            self._status = SourceStatus(
                "sched",
                "bpf",
                True,
                f"eBPF probe: {maps.errors_seen} failed map updates ({maps.error_detail()});"
                " some threads are not tracked",
                f"raise the map bounds (max_threads={self.max_threads},"
                f" max_tgids={self.max_tgids}) in BpfSchedProbe",
            )
        elif rows.baseline_only:
            self._status = SourceStatus("sched", "bpf", True, ATTACHED_NOTE)
        elif self._status.reason == ATTACHED_NOTE:
            self._status = SourceStatus("sched", "bpf", True, None)
        return rows
