"""`gputop export`: the latest frame's metrics and verdicts in Prometheus text format.

A background sampler (the same one the TUI uses) keeps the latest Frame; a
custom prometheus-client collector renders that frame on each scrape. Scrapes
never sample, so any number of scrapers costs nothing extra and every scrape in
one interval sees the same numbers. Metric names and a scrape config are in
docs/prometheus.md.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import socket
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

from prometheus_client import start_http_server, write_to_textfile
from prometheus_client.core import CollectorRegistry, CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from gputop.api import Monitor, Options
from gputop.errors import UsageError
from gputop.model.frame import CAUSES, VERDICT_STATES, Frame, ProcessSample

MIB = 1024 * 1024
# Label names as dcgm-exporter spells them, so its series and gputop's join with
# `on(UUID)` or `on(Hostname, gpu)` and no label_replace.
HOST_LABEL = "Hostname"
GPU_LABELS = (HOST_LABEL, "gpu", "UUID", "modelName")
# pod and namespace as dcgm-exporter names them on Kubernetes; "" outside a pod/container.
PROC_LABELS = (
    *(HOST_LABEL, "pid", "comm", "role", "pod", "namespace", "container_id"),
    *("slurm_job_id", "slurm_step_id"),
)
# A distributed job's rank: job_id is the same on every node (its launcher's rendezvous id,
# else MASTER_ADDR:MASTER_PORT), so a job's ranks meet across nodes; "job" is Prometheus's own.
RANK_LABELS = (HOST_LABEL, "pid", "job_id", "rank")
# 9400 is dcgm-exporter's port, and the registry's 9100-9999 exporter range is
# allocated; gputop takes 9400 + 10000, so both run on one node.
DEFAULT_PORT = 19400
DEFAULT_LISTEN = f"127.0.0.1:{DEFAULT_PORT}"
TEXTFILE_NAME = "gputop.prom"
# The causes whose cost is counted (gpu_side, the kernels' own pace, never is).
COSTED_CAUSES = tuple(c for c in CAUSES if c != "gpu_side")


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT``, ``[IPv6]:PORT`` or ``:PORT`` (all interfaces) -> (host, port)."""
    host, sep, port_text = text.rpartition(":")
    if not sep or not port_text.isdigit():
        raise UsageError(f"--listen: expected HOST:PORT, got {text!r}")
    port = int(port_text)
    if port > 65535:
        raise UsageError(f"--listen: port must be 0-65535, got {port}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise UsageError(f"--listen: write an IPv6 address in brackets, e.g. [::1]:{port}")
    return host or "0.0.0.0", port


def _exported_processes(frame: Frame) -> list[ProcessSample]:
    """Trainers, DataLoader workers, pin-memory threads and GPU processes, one per label set."""
    seen: set[tuple[int, str, str]] = set()
    out = []
    for p in frame.processes:
        if p.role == "other" and not p.gpus:
            continue
        key = (p.pid, p.comm, p.role)
        if key in seen:
            continue
        seen.add(key)
        out.append(p)
    return out


class FrameCollector(Collector):
    """Renders the latest Frame as metric families; fed by the sampler thread."""

    def __init__(self, host: str) -> None:
        self.host = host
        self._frame: Frame | None = None
        self._lock = threading.Lock()

    def update(self, frame: Frame) -> None:
        """Called by the sampler for every tick."""
        with self._lock:
            self._frame = frame

    def describe(self) -> Iterable[Any]:
        # Families depend on the frame; nothing to pre-register.
        return ()

    def collect(self) -> Iterator[Any]:
        with self._lock:
            frame = self._frame
        up = GaugeMetricFamily(
            "gputop_up", "1 once gputop has sampled a frame", labels=[HOST_LABEL]
        )
        up.add_metric([self.host], 0.0 if frame is None else 1.0)
        yield up
        if frame is None:
            return
        yield from self._frame_metrics(frame)
        yield from self._host_metrics(frame)
        yield from self._gpu_metrics(frame)
        yield from self._process_metrics(frame)
        yield from self._rank_metrics(frame)
        yield from self._verdict_metrics(frame)
        yield from self._lost_metrics(frame)

    def _gauge(self, name: str, doc: str, labels: Iterable[str]) -> GaugeMetricFamily:
        return GaugeMetricFamily(name, doc, labels=list(labels))

    def _frame_metrics(self, frame: Frame) -> Iterator[Any]:
        h = [self.host]
        ts = self._gauge(
            "gputop_frame_timestamp_seconds", "Unix time at the end of the frame", [HOST_LABEL]
        )
        ts.add_metric(h, frame.t)
        iv = self._gauge("gputop_frame_interval_seconds", "Seconds the frame covers", [HOST_LABEL])
        iv.add_metric(h, frame.interval)
        src = self._gauge(
            "gputop_source_info",
            "Which sources fed the frame",
            [HOST_LABEL, "gpu_source", "sched_source"],
        )
        src.add_metric([self.host, frame.sources.gpu, frame.sources.sched], 1.0)
        yield from (ts, iv, src)
        if frame.sampler_cpu_pct is not None:
            own = self._gauge(
                "gputop_sampler_cpu_percent", "gputop's own CPU use, % of one CPU", [HOST_LABEL]
            )
            own.add_metric(h, frame.sampler_cpu_pct)
            yield own

    def _host_metrics(self, frame: Frame) -> Iterator[Any]:
        host = frame.host
        values: list[tuple[str, str, float | None]] = [
            ("gputop_host_cpu_percent", "Whole-host CPU use, 0-100", host.cpu_pct),
            ("gputop_host_cpus", "Online CPUs", float(host.ncpu)),
            ("gputop_host_load1", "1-minute load average", host.load1),
            ("gputop_host_load5", "5-minute load average", host.load5),
            ("gputop_host_load15", "15-minute load average", host.load15),
            ("gputop_host_psi_cpu_some_percent", "CPU pressure, some, avg10", host.psi_cpu_some),
            ("gputop_host_psi_cpu_full_percent", "CPU pressure, full, avg10", host.psi_cpu_full),
            ("gputop_host_psi_io_some_percent", "I/O pressure, some, avg10", host.psi_io_some),
            ("gputop_host_procs_running", "Runnable tasks", float(host.procs_running)),
        ]
        if host.mem_total_mib:
            values += [
                ("gputop_host_memory_used_bytes", "Memory in use", host.mem_used_mib * MIB),
                ("gputop_host_memory_total_bytes", "Memory installed", host.mem_total_mib * MIB),
            ]
        for name, doc, v in values:
            if v is None:
                continue
            g = self._gauge(name, doc, [HOST_LABEL])
            g.add_metric([self.host], v)
            yield g

    def _gpu_metrics(self, frame: Frame) -> Iterator[Any]:
        specs = {
            "util": ("gputop_gpu_utilization_percent", "GPU_UTIL: share of time a kernel ran", 1.0),
            "sm_active": (
                "gputop_gpu_sm_active_percent",
                "SM activity (GPM); absent when unknown",
                1.0,
            ),
            "power_w": ("gputop_gpu_power_watts", "Power draw", 1.0),
            "power_limit_w": ("gputop_gpu_power_limit_watts", "Enforced power limit", 1.0),
            "mem_used_mib": ("gputop_gpu_memory_used_bytes", "GPU memory in use", float(MIB)),
            "mem_total_mib": ("gputop_gpu_memory_total_bytes", "GPU memory installed", float(MIB)),
            "temperature_c": ("gputop_gpu_temperature_celsius", "GPU temperature", 1.0),
            "tensor_active": (
                "gputop_gpu_tensor_active_percent",
                "Tensor core activity (GPM)",
                1.0,
            ),
            "dram_active": ("gputop_gpu_dram_active_percent", "Memory bandwidth use (GPM)", 1.0),
        }
        families = {k: self._gauge(n, d, GPU_LABELS) for k, (n, d, _) in specs.items()}
        throttled = self._gauge(
            "gputop_gpu_throttled", "1 when any clock-event reason is active", GPU_LABELS
        )
        reasons = self._gauge(
            "gputop_gpu_throttle_reason", "Active clock-event reasons (1)", [*GPU_LABELS, "reason"]
        )
        lost = self._gauge(
            "gputop_gpu_lost", "1 when the GPU fell off the bus or stopped answering", GPU_LABELS
        )
        sm_source = self._gauge(
            "gputop_gpu_sm_source_info",
            "1 for where SM activity comes from: gpm (NVML), dcgm (dcgm-exporter), demo",
            [*GPU_LABELS, "source"],
        )
        for g in frame.gpus:
            labels = [self.host, str(g.index), g.uuid, g.name]
            for key, (_, _, scale) in specs.items():
                v = getattr(g, key)
                if v is not None:
                    families[key].add_metric(labels, float(v) * scale)
            throttled.add_metric(labels, 1.0 if g.throttle else 0.0)
            for r in g.throttle:
                reasons.add_metric([*labels, r], 1.0)
            lost.add_metric(labels, 1.0 if g.state == "lost" else 0.0)
            if g.sm_source is not None:
                sm_source.add_metric([*labels, g.sm_source], 1.0)
        yield from families.values()
        yield from (throttled, reasons, lost, sm_source)

    def _rank_metrics(self, frame: Frame) -> Iterator[Any]:
        info = self._gauge(
            "gputop_rank_info",
            "1 for each rank of a distributed job on this node, with its world size and GPUs",
            [*RANK_LABELS, "world_size", "local_rank", "gpu"],
        )
        collective = self._gauge(
            "gputop_rank_collective_wait_percent",
            "Share of the interval the rank's main thread was blocked in its collectives"
            " (woken by its collective-communication threads): waiting for other ranks",
            RANK_LABELS,
        )
        host_wait = self._gauge(
            "gputop_rank_host_wait_percent",
            "Share of the interval its host held the rank back: waiting for a CPU (outside"
            " CUDA synchronization) plus waiting for batches",
            RANK_LABELS,
        )
        for p in frame.processes:
            if p.job_id is None or p.role != "trainer":
                continue
            labels = [self.host, str(p.pid), p.job_id, "" if p.rank is None else str(p.rank)]
            info.add_metric(
                [
                    *labels,
                    "" if p.world_size is None else str(p.world_size),
                    "" if p.local_rank is None else str(p.local_rank),
                    ",".join(str(g) for g in p.gpus),
                ],
                1.0,
            )
            if p.wait_collective_pct is not None:
                collective.add_metric(labels, p.wait_collective_pct)
            if p.wait_input_pct is not None:
                runq = max(0.0, (p.runq_pct or 0.0) - (p.gpu_sync_runq_pct or 0.0))
                host_wait.add_metric(labels, runq + p.wait_input_pct)
        yield from (info, collective, host_wait)

    def _process_metrics(self, frame: Frame) -> Iterator[Any]:
        cpu = self._gauge("gputop_process_cpu_percent", "CPU use, % of one CPU", PROC_LABELS)
        off = self._gauge(
            "gputop_process_offcpu_percent",
            "Share of time the main thread was off-CPU",
            PROC_LABELS,
        )
        runq = self._gauge(
            "gputop_process_runq_percent",
            "Share of time the main thread waited to run",
            PROC_LABELS,
        )
        pre = self._gauge(
            "gputop_process_preemptions_per_second",
            "Involuntary context switches per second",
            PROC_LABELS,
        )
        vol = self._gauge(
            "gputop_process_voluntary_switches_per_second",
            "Voluntary context switches per second",
            PROC_LABELS,
        )
        total = CounterMetricFamily(
            "gputop_process_preemptions",
            "Involuntary context switches seen",
            labels=list(PROC_LABELS),
        )
        gmem = self._gauge("gputop_process_gpu_memory_bytes", "GPU memory held", PROC_LABELS)
        wait = self._gauge(
            "gputop_process_wait_percent",
            "Share of the interval the main thread was blocked, by who woke it (eBPF only)",
            [*PROC_LABELS, "reason"],
        )
        limit = self._gauge(
            "gputop_process_cpu_limit_cpus",
            "CPUs' worth of time the process's cgroup allows (training jobs with a limit)",
            PROC_LABELS,
        )
        throttled = self._gauge(
            "gputop_process_cpu_throttled_percent",
            "Share of the interval the main thread was held back by its cgroup's CPU limit"
            " (part of runq); source: bpf (measured) or cpu.stat (inferred)",
            [*PROC_LABELS, "source"],
        )
        periods = self._gauge(
            "gputop_process_cpu_throttled_periods_percent",
            "Share of its cgroup's CFS periods in the interval in which the kernel throttled it",
            PROC_LABELS,
        )
        io_wait = self._gauge(
            "gputop_process_io_wait_percent",
            "Share of the interval the main thread was blocked in uninterruptible sleep"
            " (mostly disk I/O; part of its blocked time)",
            PROC_LABELS,
        )
        h2d = self._gauge(
            "gputop_process_h2d_copy_percent",
            "Share of the interval the main thread was inside host-to-device copies (a batch"
            " copied from pageable memory, staged by the driver)",
            PROC_LABELS,
        )
        for p in _exported_processes(frame):
            labels = [
                self.host,
                str(p.pid),
                p.comm,
                p.role,
                p.pod_name or "",
                p.pod_namespace or "",
                p.container_id or "",
                p.slurm_job_id or "",
                p.slurm_step_id or "",
            ]
            cpu.add_metric(labels, p.cpu_pct)
            if p.offcpu_pct is not None:
                off.add_metric(labels, p.offcpu_pct)
            if p.runq_pct is not None:
                runq.add_metric(labels, p.runq_pct)
            if p.cpu_quota is not None:
                limit.add_metric(labels, p.cpu_quota)
            if p.cpu_throttled_pct is not None:
                throttled.add_metric([*labels, p.cpu_throttled_source or ""], p.cpu_throttled_pct)
            if p.io_wait_pct is not None:
                io_wait.add_metric(labels, p.io_wait_pct)
            if p.h2d_copy_pct is not None:
                h2d.add_metric(labels, p.h2d_copy_pct)
            lim = p.cpu_limit
            if lim is not None and lim.periods:
                periods.add_metric(labels, 100.0 * (lim.throttled_periods or 0) / lim.periods)
            pre.add_metric(labels, p.preempt_per_s)
            vol.add_metric(labels, p.vcsw_per_s)
            total.add_metric(labels, float(p.preempt_total))
            if p.gpu_mem_mib is not None:
                gmem.add_metric(labels, float(p.gpu_mem_mib * MIB))
            for reason, pct in (
                ("input", p.wait_input_pct),
                ("thread", p.wait_thread_pct),
                ("irq", p.wait_irq_pct),
                ("other", p.wait_other_pct),
                ("collective", p.wait_collective_pct),
                ("net", p.net_wait_pct),
            ):
                if pct is not None:
                    wait.add_metric([*labels, reason], pct)
        yield from (cpu, off, runq, pre, vol, total, gmem, wait, limit, throttled, periods, io_wait)
        yield h2d

    def _verdict_metrics(self, frame: Frame) -> Iterator[Any]:
        gpu_of = {g.index: g for g in frame.gpus}
        state = self._gauge(
            "gputop_verdict",
            "Diagnosis per GPU: 1 for the current state, 0 for the others",
            [*GPU_LABELS, "state"],
        )
        cause = self._gauge(
            "gputop_verdict_cause",
            "What holds the GPU back: 1 for the current verdict's cause, 0 for the others"
            " (all 0 where nothing does)",
            [*GPU_LABELS, "cause"],
        )
        for v in frame.verdicts:
            g = gpu_of.get(v.gpu)
            labels = [
                self.host,
                str(v.gpu),
                "" if g is None else g.uuid,
                "" if g is None else g.name,
            ]
            for s in VERDICT_STATES:
                state.add_metric([*labels, s], 1.0 if s == v.state else 0.0)
            # A series of its own, so a cause changing inside one state (a job's limit, then
            # other processes) leaves gputop_verdict's series, and alerts held on it, alone.
            for c in CAUSES:
                cause.add_metric([*labels, c], 1.0 if c == v.cause else 0.0)
        yield state
        yield cause

    def _lost_metrics(self, frame: Frame) -> Iterator[Any]:
        lost = CounterMetricFamily(
            "gputop_gpu_lost_seconds",
            "Seconds of the GPU's time each cause took since gputop started: each frame adds"
            " interval x the verdict's lost_pct / 100 to its cause (a GPU counts once)",
            labels=[*GPU_LABELS, "cause"],
        )
        for g in frame.gpus:
            if g.lost_gpu_s is None:
                continue
            labels = [self.host, str(g.index), g.uuid, g.name]
            # Every cause a cost is counted for, from 0: a series that appears only at its
            # first increment loses that increment to increase() and rate().
            for c in COSTED_CAUSES:
                lost.add_metric([*labels, c], g.lost_gpu_s.get(c, 0.0))
        yield lost


def _registry(collector: FrameCollector) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry


def serve(collector: FrameCollector, host: str, port: int) -> tuple[Any, threading.Thread]:
    """Start the HTTP server on its own thread; bad addresses become one-line UsageErrors."""
    shown = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        return start_http_server(port, addr=host, registry=_registry(collector))
    except socket.gaierror as exc:
        raise UsageError(f"cannot listen on {shown}: {exc.strerror}") from None
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise UsageError(f"cannot listen on {shown}: address already in use") from None
        raise UsageError(f"cannot listen on {shown}: {exc.strerror or exc}") from None


class TextfileWriter:
    """node-exporter's textfile collector mode: the same metrics in DIR/gputop.prom.

    Each frame is written to a temporary file in DIR and renamed over the old one
    (prometheus-client's write_to_textfile), so node-exporter never reads half a file.
    """

    def __init__(self, collector: FrameCollector, directory: str) -> None:
        if not os.path.isdir(directory):
            raise UsageError(f"--textfile: {directory} is not a directory")
        if not os.access(directory, os.W_OK | os.X_OK):
            raise UsageError(f"--textfile: cannot write in {directory}")
        self.path = os.path.join(directory, TEXTFILE_NAME)
        self._collector = collector
        self._registry = _registry(collector)
        self.error: OSError | None = None

    def update(self, frame: Frame) -> None:
        """Sampler callback: take the frame, then rewrite the file."""
        self._collector.update(frame)
        try:
            write_to_textfile(self.path, self._registry)
            self.error = None
        except OSError as exc:
            # A full disk must not kill sampling; the next frame tries again.
            self.error = exc

    def remove(self) -> None:
        """A stopped gputop leaves no last values that look current, and no temporary file
        of a write its stop interrupted (write_to_textfile removes one only on an Exception,
        not on the KeyboardInterrupt or SystemExit a signal raises)."""
        mine = f"{os.path.basename(self.path)}.{os.getpid()}."
        directory = os.path.dirname(self.path)
        with contextlib.suppress(OSError):
            for name in os.listdir(directory):
                if name.startswith(mine):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(os.path.join(directory, name))
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)


def export_command(args: argparse.Namespace, opts: Options) -> int:
    """`gputop export`: serve /metrics and/or write a textfile until interrupted.

    Exit status 2 for an unusable address or directory; 143/130 after SIGTERM/SIGINT
    (gputop.signals), with the probe detached, the port released, the textfile removed.
    """
    textfile = getattr(args, "textfile", None)
    listen = args.listen
    if listen is None and textfile is None:
        listen = DEFAULT_LISTEN
    host_label = getattr(args, "host_label", None) or socket.gethostname()
    collector = FrameCollector(host_label)
    writer = TextfileWriter(collector, textfile) if textfile is not None else None
    httpd = None
    if listen is not None:
        host, port = parse_listen(listen)
        httpd, _thread = serve(collector, host, port)
    sampler = Monitor(opts)
    try:
        if httpd is not None:
            bound = httpd.server_address
            where = f"[{bound[0]}]:{bound[1]}" if ":" in bound[0] else f"{bound[0]}:{bound[1]}"
            print(f"gputop export: serving http://{where}/metrics", flush=True)
        if writer is not None:
            print(f"gputop export: writing {writer.path} every frame", flush=True)
        sampler.start(collector.update if writer is None else writer.update)
        # The main thread only waits (signals are delivered to it); the sampler and
        # the HTTP server run on their own threads.
        while sampler.error is None:
            time.sleep(0.5)
        print(f"gputop export: sampler stopped: {sampler.error!r}", file=sys.stderr)
        return 1
    finally:
        sampler.close()
        if writer is not None:
            writer.remove()
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
