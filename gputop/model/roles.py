"""Who is who in a training job: trainers, their DataLoader workers, pin-memory threads.

Pure functions over a snapshot of the process tree; no I/O except through the
``cmdline_of`` callback, which the caller caches.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from gputop.model.frame import Role

# PyTorch names worker processes with prctl(PR_SET_NAME); comm is cut at 15 bytes.
DATALOADER_PROCESS_PREFIXES = ("pt_data_worker", "pt_multiprocess")
DATALOADER_THREAD_PREFIXES = ("pt_thread_data",)
PIN_MEMORY_PREFIXES = ("pt_data_pin",)
# A distributed rank's collective-communication threads, whose wake-ups of its main thread
# end a wait inside a collective (all_reduce, DDP's bucketed all-reduce in backward): gloo's
# work loops (torch names them pt_gloo_runloop) and its TCP transport loop. NCCL's proxy
# and watchdog threads are not here: their wake-ups have not been measured on a machine
# with NCCL (docs/ebpf.md, "Collective wait"); adding their names is the seam.
COLLECTIVE_THREAD_PREFIXES = ("pt_gloo_runloop", "gloo_tcp_loop")
# Distributed launchers, by their command line: their children are one job's ranks.
_LAUNCHER_MARKERS = (
    "torchrun",
    "torch.distributed.run",
    "torch.distributed.launch",
    "deepspeed.launcher",
    "bin/deepspeed",
    "accelerate launch",
)

# Helpers that multiprocessing puts between a trainer and its spawned workers.
_MP_HELPER_MARKERS = ("multiprocessing.forkserver", "multiprocessing.resource_tracker")


def process_role_from_comm(comm: str) -> Role | None:
    """The role a process's own name gives it, if any."""
    if comm.startswith(DATALOADER_PROCESS_PREFIXES):
        return "dataloader"
    return None


def thread_role_from_comm(comm: str) -> Role | None:
    """The role of a thread inside a trainer, from its name, if any.

    Threads of a worker process inherit the worker's name, so the worker-process
    names are not thread roles.
    """
    if comm.startswith(PIN_MEMORY_PREFIXES):
        return "pin_memory"
    if comm.startswith(DATALOADER_THREAD_PREFIXES):
        return "dataloader"
    return None


def collective_thread(comm: str) -> bool:
    """Whether a thread of a rank is one of its collective-communication threads (by name)."""
    return comm.startswith(COLLECTIVE_THREAD_PREFIXES)


def is_launcher(cmdline: str) -> bool:
    """Whether a process is a distributed launcher (torchrun, DeepSpeed, Accelerate)."""
    return any(m in cmdline for m in _LAUNCHER_MARKERS)


def is_mp_helper(cmdline: str) -> bool:
    """True for multiprocessing's forkserver and resource tracker processes."""
    return any(m in cmdline for m in _MP_HELPER_MARKERS)


def assign_roles(
    parents: Mapping[int, int],
    comms: Mapping[int, str],
    gpu_pids: Iterable[int],
    cmdline_of: Callable[[int], str],
    workers: Iterable[int] | None = None,
) -> dict[int, tuple[Role, int | None]]:
    """Role and trainer pid for every process that has a role other than ``other``.

    A trainer is a process holding a GPU, or the nearest ancestor of a DataLoader
    worker that is neither a worker nor a multiprocessing helper (spawn and
    forkserver put a process in between). A worker whose ancestors include a GPU
    holder belongs to that GPU holder even when a helper sits in between.
    ``workers``: the pids whose name makes them DataLoader workers, where the
    caller keeps that index (else every name is looked at).
    """
    gpu = set(gpu_pids)
    roles: dict[int, tuple[Role, int | None]] = {}
    for pid in gpu:
        if pid in parents:
            roles[pid] = ("trainer", pid)
    candidates = comms if workers is None else workers
    for pid in candidates:
        comm = comms.get(pid, "")
        if process_role_from_comm(comm) != "dataloader":
            continue
        trainer = _find_trainer(pid, parents, comms, gpu, cmdline_of)
        roles[pid] = ("dataloader", trainer)
        if trainer is not None and trainer not in roles:
            roles[trainer] = ("trainer", trainer)
    return roles


def _find_trainer(
    pid: int,
    parents: Mapping[int, int],
    comms: Mapping[int, str],
    gpu: set[int],
    cmdline_of: Callable[[int], str],
) -> int | None:
    chain: list[int] = []
    seen = {pid}
    cur = parents.get(pid, 0)
    while cur > 1 and cur not in seen and cur in parents:
        seen.add(cur)
        chain.append(cur)
        cur = parents[cur]
    for anc in chain:
        if anc in gpu:
            return anc
    for anc in chain:
        if process_role_from_comm(comms.get(anc, "")) == "dataloader":
            continue
        if is_mp_helper(cmdline_of(anc)):
            continue
        return anc
    return None
