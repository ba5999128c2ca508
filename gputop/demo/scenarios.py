"""The built-in demo scenarios: what the real host workload does and what its GPU is like."""

from __future__ import annotations

from dataclasses import dataclass

from gputop.demo.gpumodel import GpuSpec, KernelProfile, clock_ratio
from gputop.errors import UsageError

# The demo confines itself to this many CPUs so a scenario behaves (and costs)
# the same on a laptop and on a 128-core node.
DEMO_CPUS = 2

_COMPUTE_BOUND = KernelProfile(sm_fill=0.9, dram_fill=0.35, full_power_w=620.0)
_MEMORY_BOUND = KernelProfile(sm_fill=0.22, dram_fill=0.9, full_power_w=330.0)
_POWER_HUNGRY = KernelProfile(sm_fill=0.92, dram_fill=0.5, full_power_w=900.0)


@dataclass(frozen=True, slots=True)
class Scenario:
    """One demo: the training job's shape, the background load, the GPU's kernels.

    The defaults are a healthy GPU-bound job; each scenario says what it changes.
    """

    name: str
    summary: str
    expect: str
    """The verdict gputop should reach."""
    num_workers: int = 2
    worker_cpu_ms: float = 4.0
    """CPU time a DataLoader worker spends on one batch (decode, augment, collate)."""
    worker_io_ms: float = 0.0
    """Time a worker sleeps per batch (reading from slow storage)."""
    launch_cpu_ms: float = 3.0
    """Trainer CPU time per step spent launching kernels (Python, autograd, dispatch)."""
    trainer_cpu_ms: float = 0.0
    """Trainer CPU time per step before its first launch (per-step Python: metrics,
    logging), while nothing is queued on the GPU."""
    kernels_per_step: int = 6
    gpu_ms: float = 40.0
    """GPU compute time per step at full clocks."""
    profile: KernelProfile = _COMPUTE_BOUND
    hogs_per_cpu: float = 0.0
    """Background CPU hogs per demo CPU (the contention)."""
    prefetch_factor: int = 2
    cpu_limit: float | None = None
    """CPUs' worth of time the job's cgroup allows (CFS bandwidth; making it needs root)."""
    expect_cause: str | None = None
    """The cause the verdict should name, where the scenario is about one."""
    read_iops: int | None = None
    """Reads a second the kernel allows the workers from the demo's disk (a loop device
    throttled by an I/O cgroup; making it needs root); None: no disk reads."""
    reads_per_batch: int = 0
    """4 KiB ``O_DIRECT`` reads of that disk per batch, per worker."""
    needs_probe: bool = False
    """The verdict rests on what only the eBPF probe measures (root, no ``--no-bpf``)."""
    cuda_stand_in: bool = False
    """The trainer waits for its modelled GPU inside a CUDA driver call of a stand-in
    ``libcuda.so.1`` (built with cc), which the probe measures as a real one."""
    ranks: int = 1
    """Ranks of one distributed job on this node (exec'd with torchrun's environment), each
    on its own demo CPU with its own modelled GPU; they meet in an all-reduce every step."""
    rank0_hogs: int = 0
    """CPU hogs on rank 0's CPU only (with ``ranks`` > 1): its host holds the job back."""

    def hogs(self, ncpu: int) -> int:
        """How many CPU hogs to start on ``ncpu`` CPUs."""
        return round(self.hogs_per_cpu * ncpu)

    def step_gpu_ms(self, spec: GpuSpec) -> float:
        """GPU time per step at the clock the power cap allows."""
        return self.gpu_ms / clock_ratio(spec, self.profile)


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            name="healthy",
            summary="a GPU-bound training loop with idle CPUs to spare: GPU_UTIL and SM agree",
            expect="ok",
        ),
        Scenario(
            name="cpu-contention",
            summary="the trainer and 4 DataLoader workers fight CPU hogs: GPU_UTIL high, SM low",
            expect="busy_but_starving",
            num_workers=4,
            worker_cpu_ms=6.0,
            launch_cpu_ms=18.0,
            kernels_per_step=10,
            gpu_ms=15.0,
            hogs_per_cpu=3.0,
        ),
        Scenario(
            name="cpu-limit",
            summary="the job runs in a cgroup capped at 0.25 CPU (needs root): "
            "throttled, GPU_UTIL high, SM low",
            expect="busy_but_starving",
            expect_cause="cpu_limit",
            num_workers=4,
            worker_cpu_ms=6.0,
            launch_cpu_ms=18.0,
            kernels_per_step=10,
            gpu_ms=15.0,
            cpu_limit=0.25,
        ),
        Scenario(
            name="slow-dataloader",
            summary="2 DataLoader workers cannot keep up: the trainer waits for batches",
            expect="input_bound",
            worker_cpu_ms=45.0,
            worker_io_ms=55.0,
            launch_cpu_ms=2.0,
            kernels_per_step=4,
            gpu_ms=12.0,
        ),
        Scenario(
            name="storage",
            summary="2 DataLoader workers read a throttled disk (needs root): the trainer "
            "waits for batches, the workers wait on storage",
            expect="input_bound",
            expect_cause="input_storage",
            worker_cpu_ms=1.0,
            read_iops=40,
            reads_per_batch=2,
            launch_cpu_ms=2.0,
            kernels_per_step=4,
            gpu_ms=12.0,
            needs_probe=True,
        ),
        Scenario(
            name="trainer-work",
            summary="the trainer spends 30 ms of its own CPU per step (needs root and cc): "
            "its GPU idles while the workers keep up",
            expect="host_bound",
            expect_cause="trainer_work",
            worker_cpu_ms=2.0,
            trainer_cpu_ms=30.0,
            launch_cpu_ms=2.0,
            kernels_per_step=6,
            gpu_ms=10.0,
            needs_probe=True,
            cuda_stand_in=True,
        ),
        Scenario(
            name="straggler",
            summary="2 ranks of one job, CPU hogs on rank 0's CPU (needs root): rank 1 waits "
            "for it in every all-reduce, and names it",
            expect="busy_but_starving",
            expect_cause="straggler",
            worker_cpu_ms=1.0,
            launch_cpu_ms=18.0,
            kernels_per_step=10,
            gpu_ms=15.0,
            needs_probe=True,
            ranks=2,
            rank0_hogs=2,
        ),
        Scenario(
            name="memory-bound",
            summary="memory-bound kernels on an unloaded host: busy GPU, few SMs working",
            expect="low_sm_efficiency",
            profile=_MEMORY_BOUND,
        ),
        Scenario(
            name="throttled",
            summary="power-hungry kernels hit the power cap: clocks drop, steps slow down",
            expect="throttled",
            profile=_POWER_HUNGRY,
        ),
    )
}


def get_scenario(name: str) -> Scenario:
    """The scenario called ``name``; an unknown name raises UsageError listing the valid ones."""
    try:
        return SCENARIOS[name]
    except KeyError:
        raise UsageError(f"unknown demo {name!r} (choose from: {', '.join(SCENARIOS)})") from None
