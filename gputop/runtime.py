"""Builds the sampler the way every command needs it: sources chosen from the options."""

from __future__ import annotations

from dataclasses import dataclass, field

from gputop.model.diagnosis import Diagnoser, Thresholds
from gputop.model.ledger import GpuPrices
from gputop.sampler import HostPass, Sampler
from gputop.signals import deferred
from gputop.sources.base import GpuSource, SchedProbe
from gputop.sources.cgroup import ContainerTagger

DEFAULT_INTERVAL_S = 1.0


@dataclass(frozen=True)
class Options:
    """What the command line and the config file chose; shared by every command."""

    interval_s: float = DEFAULT_INTERVAL_S
    no_bpf: bool = False
    demo: str | None = None
    top_n: int = 30
    thresholds: Thresholds = field(default_factory=Thresholds)
    # dcgm-exporter for SM activity where GPM is missing: a URL, None for
    # auto-detection on localhost:9400, or "off".
    dcgm_url: str | None = None
    # What a GPU-hour costs (--gpu-price, config.toml's [gpu_price]); none built in.
    gpu_prices: GpuPrices = field(default_factory=GpuPrices)
    # Every process on the host in each frame's ``others`` (the TUI lists them all).
    list_all: bool = False


def gpu_source(opts: Options) -> GpuSource:
    """The GPU source for these options: a demo's modelled GPU or NVML."""
    if opts.demo is not None:
        from gputop.demo import demo_gpu_source

        return demo_gpu_source(opts.demo, probe=not opts.no_bpf)
    from gputop.sources.nvml import NvmlSource

    if opts.dcgm_url == "off":
        return NvmlSource()
    from gputop.sources.dcgm import AUTO_RETRY_S, DEFAULT_URL, DcgmFill, DcgmReader

    auto = opts.dcgm_url is None
    reader = DcgmReader(
        opts.dcgm_url or DEFAULT_URL,
        interval_s=opts.interval_s,
        absent_retry_s=AUTO_RETRY_S if auto else None,
    )
    return DcgmFill(NvmlSource(), reader, auto=auto)


def sched_probe(opts: Options) -> SchedProbe | None:
    """The eBPF scheduler probe, unless --no-bpf.

    It is returned even where it cannot run: it finds that out on its own
    thread and its status then says why and how to fix it.
    """
    if opts.no_bpf:
        return None
    from gputop.sources.sched_probe import BpfSchedProbe

    return BpfSchedProbe()


def build_sampler(opts: Options) -> Sampler:
    """A ready-to-open sampler for these options (nothing is read yet).

    The sources' libraries (nvidia-ml-py, ctypes bindings) are imported here, with
    exit signals deferred until they are (``signals.deferred``).
    """
    notes: tuple[str, ...] = ()
    if opts.no_bpf:
        notes = ("sched: eBPF probe off (--no-bpf); scheduler numbers from /proc",)
    with deferred():
        gpu = gpu_source(opts)
        probe = None if opts.no_bpf else sched_probe(opts)
    return Sampler(
        gpu=gpu,
        # The /proc source with each process's container and pod identity.
        procs=HostPass(ContainerTagger(), top_n=opts.top_n, list_all=opts.list_all),
        probe=probe,
        diagnoser=Diagnoser(opts.thresholds),
        interval_s=opts.interval_s,
        notes=notes,
    )
