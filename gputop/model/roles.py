"""Who is who in a training job: trainers, their DataLoader workers, pin-memory threads.

Pure functions over a snapshot of the process tree, and ``RoleKeeper``, which keeps
their answer across ticks; no I/O except through the ``cmdline_of`` callback, which
the caller caches.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from typing import Generic, TypeVar

from gputop.model.frame import Role
from gputop.model.readings import ProcStat

V = TypeVar("V")

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


class RoleKeeper:
    """Every process's role, kept across ticks and worked out again only when what it
    rests on changed.

    A role rests on the stat lines (start time, parent, name) of the processes
    ``assign_roles`` looked at: the GPU holders, each DataLoader worker and its
    ancestors, and the pid where an ancestor chain ended (absent then: a process
    started there would extend the chain); and on the command lines of the ancestors
    it checked for multiprocessing helpers. A stat line changes only when its process
    runs, starts or exits, and a command line when it execs, which runs it: the scan
    reads exactly those again (``ProcScan.read``). A tick that read none of them, with
    the same GPU holders and the same workers, keeps the last roles; any other works
    them out again, within that tick.
    """

    def __init__(self) -> None:
        # Processes named as DataLoader workers, kept from what each scan read.
        self.workers: set[int] = set()
        self._roles: dict[int, tuple[Role, int | None]] = {}
        self._gpu: frozenset[int] | None = None
        self._workers_then: frozenset[int] = frozenset()
        # What the last working-out rested on: each stat line it looked at (None: absent)
        # and each command line.
        self._lines: dict[int, tuple[int, int, str] | None] = {}
        self._cmdlines: dict[int, str] = {}

    def roles(
        self,
        stats: Mapping[int, ProcStat],
        read: Collection[int] | None,
        gpu: Collection[int],
        cmdline_of: Callable[[int], str],
    ) -> dict[int, tuple[Role, int | None]]:
        """Role and trainer pid of every process with one (a copy the caller may add to).

        ``read``: the pids whose stat line the scan read this tick (None: all of them).
        """
        self._index_workers(stats, read)
        gpu_set = frozenset(gpu)
        if (
            read is None
            or gpu_set != self._gpu
            or self.workers != self._workers_then
            or self._changed(stats, read, cmdline_of)
        ):
            self._work_out(stats, gpu_set, cmdline_of)
        return dict(self._roles)

    def _index_workers(self, stats: Mapping[int, ProcStat], read: Collection[int] | None) -> None:
        if read is None:
            self.workers = {p for p, s in stats.items() if process_role_from_comm(s.comm)}
            return
        for pid in read:
            st = stats.get(pid)
            if st is not None and process_role_from_comm(st.comm):
                self.workers.add(pid)
            else:
                self.workers.discard(pid)

    def _changed(
        self, stats: Mapping[int, ProcStat], read: Collection[int], cmdline_of: Callable[[int], str]
    ) -> bool:
        lines, cmdlines = self._lines, self._cmdlines
        for pid in read:
            if pid in lines and lines[pid] != _line(stats.get(pid)):
                return True
            if pid in cmdlines and cmdline_of(pid) != cmdlines[pid]:
                return True
        return False

    def _work_out(
        self, stats: Mapping[int, ProcStat], gpu: frozenset[int], cmdline_of: Callable[[int], str]
    ) -> None:
        looked: set[int] = set()
        cmdlines: dict[int, str] = {}

        def cmdline(pid: int) -> str:
            cmdlines[pid] = got = cmdline_of(pid)
            return got

        self._roles = assign_roles(
            _Field(stats, lambda s: s.ppid, looked),
            _Field(stats, lambda s: s.comm, looked),
            gpu,
            cmdline,
            workers=self.workers,
        )
        self._lines = {pid: _line(stats.get(pid)) for pid in looked}
        self._cmdlines = cmdlines
        self._gpu = gpu
        self._workers_then = frozenset(self.workers)


def _line(st: ProcStat | None) -> tuple[int, int, str] | None:
    return None if st is None else (st.start, st.ppid, st.comm)


class _Field(Mapping[int, V], Generic[V]):
    """One field of every process's stat line, as a mapping, without copying it out;
    each pid looked up goes into ``looked``."""

    __slots__ = ("_get", "_looked", "_stats")

    def __init__(
        self, stats: Mapping[int, ProcStat], get: Callable[[ProcStat], V], looked: set[int]
    ) -> None:
        self._stats = stats
        self._get = get
        self._looked = looked

    def __getitem__(self, pid: int) -> V:
        self._looked.add(pid)
        return self._get(self._stats[pid])

    def __contains__(self, pid: object) -> bool:
        if isinstance(pid, int):
            self._looked.add(pid)
        return pid in self._stats

    def __iter__(self) -> Iterator[int]:
        return iter(self._stats)

    def __len__(self) -> int:
        return len(self._stats)
