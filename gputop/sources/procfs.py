"""Host and per-process scheduling readings from /proc (no root needed). Reads only.

Two passes per tick keep the cost linear and small: ``scan()`` reads every
process's ``/proc/PID/stat`` once (CPU time, parent, name); the model chooses
the processes worth showing (``model/hostjoin.py``) and ``details()`` reads only
their threads (``task/*/schedstat`` and ``task/*/status``: run-queue wait,
off-CPU share and context switches). What a process *is* to a training job
(its role), which rows are shown and how the probe's numbers replace these
estimates are the model's. Processes are keyed by (pid, start time) so a reused
PID never inherits another process's counters; their identity (command line,
owner) is cached here until they exit.
"""

from __future__ import annotations

import os
import pwd
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace

from gputop.model.frame import HostSample, SourceStatus, ThreadSample
from gputop.model.readings import ProcDetail, ProcScan, ProcStat, RankEnv
from gputop.sources.cpulimits import CpuLimitReader, cpus_allowed
from gputop.sources.sockets import SocketReader
from gputop.sources.storage import StorageReader

_PF_KTHREAD = 0x00200000
_CMDLINE_MAX = 4096


def _read_all(path: str, limit: int = 1 << 20) -> bytes | None:
    """A file of any size up to ``limit`` bytes (an environment can pass 64 KiB), or None."""
    try:
        with open(path, "rb") as f:
            return f.read(limit)
    except OSError:
        return None


# What launchers (torchrun, torch.distributed.launch, DeepSpeed, Accelerate, mpirun with
# these set by the script's wrapper) put in each rank's environment.
_RANK_VARS = (
    b"RANK",
    b"LOCAL_RANK",
    b"WORLD_SIZE",
    b"TORCHELASTIC_RUN_ID",
    b"MASTER_ADDR",
    b"MASTER_PORT",
)


def parse_rank_env(raw: bytes | None) -> RankEnv | None:
    """A rank's job variables from ``/proc/PID/environ``; None: not a rank, or not readable.

    The environment is the one the process started with (a later ``os.environ`` change in
    the process is not seen), which is where launchers put these.
    """
    if not raw:
        return None
    env: dict[bytes, str] = {}
    for item in raw.split(b"\0"):
        name, sep, value = item.partition(b"=")
        if sep and name in _RANK_VARS:
            env[name] = value.decode("utf-8", "replace")
    rank = _int_or_none(env.get(b"RANK"))
    world = _int_or_none(env.get(b"WORLD_SIZE"))
    if rank is None or world is None:
        return None
    addr, port = env.get(b"MASTER_ADDR"), env.get(b"MASTER_PORT")
    return RankEnv(
        rank=rank,
        local_rank=_int_or_none(env.get(b"LOCAL_RANK")),
        world_size=world,
        run_id=env.get(b"TORCHELASTIC_RUN_ID") or None,
        master=f"{addr}:{port}" if addr and port else None,
    )


def _int_or_none(v: str | None) -> int | None:
    try:
        return int(v) if v is not None else None
    except ValueError:
        return None


def _read(path: str) -> bytes | None:
    """Whole small file, or None when it is gone or unreadable (races are normal)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        return os.read(fd, 65536)
    except OSError:
        return None
    finally:
        os.close(fd)


def _psi_avg10(text: bytes | None) -> tuple[float | None, float | None]:
    """(some, full) avg10 of a ``/proc/pressure/*`` file; None for a line missing or unreadable."""
    some = full = None
    for line in (text or b"").split(b"\n"):
        kind, _, rest = line.partition(b" ")
        if kind not in (b"some", b"full"):
            continue
        fields = dict(f.partition(b"=")[::2] for f in rest.split())
        try:
            avg10 = float(fields.get(b"avg10", b""))
        except ValueError:
            continue
        if kind == b"some":
            some = avg10
        else:
            full = avg10
    return some, full


@dataclass(slots=True)
class _Stat:
    pid: int
    comm: str
    state: str
    ppid: int
    ticks: int
    nthreads: int
    start: int
    kthread: bool


def parse_stat(raw: bytes) -> _Stat | None:
    """Parse /proc/PID/stat; None when truncated or malformed."""
    try:
        lp = raw.index(b"(")
        rp = raw.rindex(b")")
        rest = raw[rp + 2 :].split()
        if len(rest) < 20:
            return None
        return _Stat(
            pid=int(raw[:lp]),
            comm=raw[lp + 1 : rp].decode("utf-8", "replace"),
            state=rest[0].decode("ascii", "replace"),
            ppid=int(rest[1]),
            ticks=int(rest[11]) + int(rest[12]),
            nthreads=int(rest[17]),
            start=int(rest[19]),
            kthread=bool(int(rest[6]) & _PF_KTHREAD),
        )
    except ValueError:
        return None


def parse_schedstat(raw: bytes | None) -> tuple[int, int] | None:
    """(on-CPU ns, run-queue wait ns) from a schedstat file."""
    if not raw:
        return None
    parts = raw.split()
    if len(parts) < 2:
        return None
    try:
        return int(parts[0]), int(parts[1])
    except ValueError:
        return None


def parse_status_ctxt(raw: bytes | None) -> tuple[str, int, int] | None:
    """(thread name, voluntary, involuntary switches) from a status file."""
    if not raw:
        return None
    try:
        name = ""
        if raw.startswith(b"Name:"):
            name = raw[5 : raw.index(b"\n")].strip().decode("utf-8", "replace")
        v = raw.index(b"\nvoluntary_ctxt_switches:") + 25
        n = raw.index(b"\nnonvoluntary_ctxt_switches:", v) + 28
        vol = int(raw[v : raw.index(b"\n", v)])
        end = raw.find(b"\n", n)
        invol = int(raw[n:] if end < 0 else raw[n:end])
        return name, vol, invol
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class _ThreadPrev:
    """A thread's last reading: its status and schedstat (``schedstat``: that was readable)."""

    comm: str
    vol: int
    invol: int
    oncpu: int
    run_delay: int
    schedstat: bool


@dataclass(slots=True)
class _ProcPrev:
    ticks: int
    threads: dict[int, _ThreadPrev] = field(default_factory=dict)
    # The details pass that last read (or kept) its threads: they are a baseline for the
    # next one only, the interval the probe's idle threads are known for.
    threads_pass: int = -1
    preempt_total: int = 0
    vcsw_total: int = 0
    detailed: bool = False
    user: str | None = None
    # Its distributed rank from its environment, read once (again after an exec).
    env_read: bool = False
    rank_env: RankEnv | None = None


class ProcSource:
    """Reads /proc. Construct with another root to read a fake tree in tests."""

    def __init__(self, proc_root: str = "/proc") -> None:
        self.root = proc_root.rstrip("/")
        self.clk_tck = os.sysconf("SC_CLK_TCK")
        self._prev: dict[tuple[int, int], _ProcPrev] = {}
        self._cmdlines: dict[tuple[int, int], str] = {}
        self._users: dict[int, str] = {}
        self._cpu_prev: list[tuple[int, int]] | None = None
        # Every process's last stat line (kept for those that did not run since), and
        # those with a CPU share above 0 in the last scan.
        self._stats: dict[int, ProcStat] = {}
        self._busy: set[int] = set()
        self._limits = CpuLimitReader(self.root)
        self._storage = StorageReader(self.root)
        self._sockets = SocketReader(self.root)
        self._last_t: float | None = None
        self._pass = 0
        self._has_schedstat = os.path.exists(self.root + "/self/schedstat") or os.path.exists(
            self.root + "/1/schedstat"
        )
        self._status = SourceStatus("sched", "procfs", True, None)

    @property
    def status(self) -> SourceStatus:
        return self._status

    # ---- host -------------------------------------------------------------

    def read_host(self) -> HostSample:
        """System CPU, load, memory and CPU pressure."""
        cpus: list[tuple[int, int]] = []
        online: list[int] = []  # /proc/stat lists the online CPUs only
        procs_running = 0
        raw = _read(self.root + "/stat") or b""
        for line in raw.split(b"\n"):
            if line.startswith(b"cpu"):
                parts = line.split()
                if parts[0] != b"cpu":
                    online.append(int(parts[0][3:]))
                vals = [int(x) for x in parts[1:9]]
                idle = vals[3] + (vals[4] if len(vals) > 4 else 0)
                cpus.append((sum(vals), idle))
            elif line.startswith(b"procs_running"):
                procs_running = int(line.split()[1])
        per_cpu: list[float] = []
        total_pct = 0.0
        if self._cpu_prev is not None and len(self._cpu_prev) == len(cpus):
            pcts = []
            for (tot, idle), (ptot, pidle) in zip(cpus, self._cpu_prev, strict=True):
                dt = tot - ptot
                pcts.append(0.0 if dt <= 0 else 100.0 * (dt - (idle - pidle)) / dt)
            total_pct, per_cpu = pcts[0], pcts[1:]
        self._cpu_prev = cpus
        ncpu = max(1, len(cpus) - 1)
        load = (_read(self.root + "/loadavg") or b"0 0 0").split()
        mem_total = mem_avail = 0
        for line in (_read(self.root + "/meminfo") or b"").split(b"\n"):
            if line.startswith(b"MemTotal:"):
                mem_total = int(line.split()[1]) // 1024
            elif line.startswith(b"MemAvailable:"):
                mem_avail = int(line.split()[1]) // 1024
        some, full = _psi_avg10(_read(self.root + "/pressure/cpu"))
        io_some, _ = _psi_avg10(_read(self.root + "/pressure/io"))
        return HostSample(
            cpu_pct=round(total_pct, 1),
            ncpu=ncpu,
            load1=float(load[0]),
            load5=float(load[1]),
            load15=float(load[2]),
            psi_cpu_some=some,
            psi_cpu_full=full,
            psi_io_some=io_some,
            per_cpu_pct=tuple(round(p, 1) for p in per_cpu),
            mem_used_mib=mem_total - mem_avail,
            mem_total_mib=mem_total,
            procs_running=procs_running,
            cpus_online=tuple(online),
        )

    # ---- processes --------------------------------------------------------

    def cmdline(self, pid: int, start: int = 0) -> str:
        """The command line (NUL-separated args joined by spaces), cached per process."""
        key = (pid, start)
        got = self._cmdlines.get(key)
        if got is None:
            raw = _read(f"{self.root}/{pid}/cmdline")
            got = (
                raw[:_CMDLINE_MAX].replace(b"\0", b" ").strip().decode("utf-8", "replace")
                if raw
                else ""
            )
            self._cmdlines[key] = got
        return got

    def identity(self, pid: int, start: int) -> tuple[str, str]:
        """(command line, owner) of a process, each read once in its life and kept."""
        key = (pid, start)
        prev = self._prev.get(key)
        if prev is None:
            prev = self._prev[key] = _ProcPrev(0)
        if prev.user is None:
            prev.user = self._user(pid)
        return self.cmdline(pid, start), prev.user

    def _user(self, pid: int) -> str:
        """The owner's name; callers cache it per process (owners rarely change)."""
        try:
            uid = os.stat(f"{self.root}/{pid}").st_uid
        except OSError:
            return ""
        name = self._users.get(uid)
        if name is None:
            try:
                name = pwd.getpwuid(uid).pw_name
            except KeyError:
                name = str(uid)
            self._users[uid] = name
        return name

    def scan(
        self, now: float, active: Collection[int] | None = None, execd: Collection[int] = ()
    ) -> ProcScan:
        """The first pass: the host and every process's stat line, with its CPU share.

        ``active`` (from the eBPF probe): the only processes that ran, exited or
        exec'd since the last scan; the others are known not to have used a CPU,
        so their last stat line stands (CPU share 0) and costs nothing. None: read
        every process (no probe, the first scan, or the probe lost track).
        ``execd``: processes whose command line changed.
        """
        host = self.read_host()
        dt = None if self._last_t is None else max(1e-6, now - self._last_t)
        self._last_t = now
        for pid in execd:
            for key in [k for k in self._cmdlines if k[0] == pid]:
                del self._cmdlines[key]
            for key in [k for k in self._prev if k[0] == pid]:
                self._prev[key].env_read = False
        if active is None or not self._stats:
            self._full_scan(dt)
            read = None
        else:
            read = self._active_scan(dt, active)
        return ProcScan(
            host=host, procs=dict(self._stats), dt=dt, read=read, busy=frozenset(self._busy)
        )

    def _stat(self, st: _Stat, dt: float | None) -> ProcStat:
        """A process's stat line as a ProcStat, its CPU share since its last read."""
        key = (st.pid, st.start)
        prev = self._prev.get(key)
        cpu = 0.0
        if prev is None:
            self._prev[key] = _ProcPrev(st.ticks)
        else:
            if dt is not None:
                cpu = max(0.0, 100.0 * (st.ticks - prev.ticks) / self.clk_tck / dt)
            prev.ticks = st.ticks
        return ProcStat(
            pid=st.pid,
            ppid=st.ppid,
            comm=st.comm,
            state=st.state,
            start=st.start,
            nthreads=st.nthreads,
            kthread=st.kthread,
            cpu_pct=cpu,
        )

    def _full_scan(self, dt: float | None) -> None:
        try:
            entries = os.listdir(self.root)
        except OSError:
            entries = []
        root = self.root
        stats: dict[int, ProcStat] = {}
        for name in entries:
            if not name.isdigit():
                continue
            raw = _read(f"{root}/{name}/stat")
            st = parse_stat(raw) if raw is not None else None
            if st is not None:
                stats[st.pid] = self._stat(st, dt)
        self._stats = stats
        self._busy = {p for p, s in stats.items() if s.cpu_pct > 0}
        # Forget processes that are gone; keep cheap per-process state for the rest.
        seen = {(s.pid, s.start) for s in stats.values()}
        for key in [k for k in self._prev if k not in seen]:
            del self._prev[key]
        for key in [k for k in self._cmdlines if k not in seen]:
            del self._cmdlines[key]

    def _active_scan(self, dt: float | None, active: Collection[int]) -> frozenset[int]:
        """Read the active processes' stat lines only; the pids read (or found gone)."""
        stats = self._stats
        # Busy last time, idle now: their share drops to 0 without a read.
        for pid in self._busy - set(active):
            idle = stats.get(pid)
            if idle is not None:
                stats[pid] = replace(idle, cpu_pct=0.0)
        busy = set()
        read = set()
        for pid in active:
            raw = _read(f"{self.root}/{pid}/stat")
            st = parse_stat(raw) if raw is not None else None
            if st is None:
                self._forget(pid)
                read.add(pid)
                continue
            if pid not in stats and st.nthreads > 1:
                # A thread the probe saw running: its process is the one to read.
                tgid = _tgid(self.root, pid)
                if tgid is not None and tgid != pid:
                    if tgid in active or tgid in busy:
                        continue
                    raw = _read(f"{self.root}/{tgid}/stat")
                    st = parse_stat(raw) if raw is not None else None
                    if st is None:
                        continue
            old = stats.get(st.pid)
            if old is not None and old.start != st.start:
                self._forget(st.pid)  # a reused pid: another process
            stats[st.pid] = self._stat(st, dt)
            read.add(st.pid)
            if stats[st.pid].cpu_pct > 0:
                busy.add(st.pid)
        self._busy = busy
        return frozenset(read)

    def _forget(self, pid: int) -> None:
        st = self._stats.pop(pid, None)
        if st is not None:
            self._prev.pop((pid, st.start), None)
            self._cmdlines.pop((pid, st.start), None)

    def details(
        self,
        wanted: Mapping[int, bool],
        scan: ProcScan,
        peers: Collection[int] = (),
        idle: Collection[int] = (),
    ) -> dict[int, ProcDetail]:
        """The second pass, for the chosen processes: their threads, switch totals and owner.

        ``wanted``: pid -> also read where the process may run (its CPU affinity
        and cgroup quota: read for training jobs, whose fixes need them). ``peers``: whose
        TCP peers to read (job processes that waited on the network last tick).
        ``idle``: threads the eBPF probe saw neither run nor wait for a CPU over the
        interval. Their counters cannot have moved, so, as the scan does for processes,
        they keep their last reading and cost no read; every thread of a process the
        scan knows did not run (not in ``scan.read``) is kept likewise.
        """
        self._pass += 1
        out: dict[int, ProcDetail] = {}
        self._limits.begin()
        self._sockets.begin()
        for pid, limits in wanted.items():
            st = scan.procs.get(pid)
            if st is None:
                continue
            key = (pid, st.start)
            prev = self._prev.get(key)
            if prev is None:
                prev = self._prev[key] = _ProcPrev(0)
            ran = scan.read is None or pid in scan.read
            out[pid] = self._detail(st, prev, scan.dt, limits, idle, ran)
            if pid in peers:
                out[pid] = replace(out[pid], peers=self._sockets.read(pid))
        return out

    def _detail(
        self,
        st: ProcStat,
        prev: _ProcPrev,
        dt: float | None,
        limits: bool,
        idle: Collection[int],
        ran: bool,
    ) -> ProcDetail:
        had_threads = prev.detailed
        pass_ = self._read_threads(st.pid, prev, dt, idle, ran)
        if had_threads:
            prev.preempt_total += pass_.d_invol
            prev.vcsw_total += pass_.d_vol
        else:
            prev.preempt_total, prev.vcsw_total = pass_.tot_invol, pass_.tot_vol
        prev.threads = pass_.new_prev
        prev.threads_pass = self._pass
        prev.detailed = True
        if prev.user is None:
            prev.user = self._user(st.pid)
        limit = self._limits.limit(st.pid) if limits else None
        if limits and not prev.env_read:
            prev.rank_env = parse_rank_env(_read_all(f"{self.root}/{st.pid}/environ"))
            prev.env_read = True
        return ProcDetail(
            cmdline=self.cmdline(st.pid, st.start) or f"[{st.comm}]",
            user=prev.user,
            threads=tuple(pass_.threads),
            switch_totals={tid: (t.vol, t.invol) for tid, t in pass_.new_prev.items()},
            d_vol=pass_.d_vol,
            d_invol=pass_.d_invol,
            rates=dt is not None and had_threads,
            vcsw_total=prev.vcsw_total,
            preempt_total=prev.preempt_total,
            cpus_allowed=cpus_allowed(self.root, st.pid) if limits else None,
            cpu_quota=None if limit is None else limit.quota_cpus,
            cpu_limit=limit,
            # Waiting on storage now: what it reads from (the fds of a job process in D).
            storage=self._storage.read(st.pid) if limits and st.state == "D" else None,
            rank_env=prev.rank_env if limits else None,
        )

    def _read_threads(
        self, pid: int, prev: _ProcPrev, dt: float | None, idle: Collection[int], ran: bool
    ) -> _ThreadPass:
        """One pass over the process's threads: samples, switch counts, new baselines.

        Threads are kept (not read) only against a baseline from the previous pass:
        a process shown again after a while may have run meanwhile.
        """
        base = f"{self.root}/{pid}/task"
        recent = prev.detailed and prev.threads_pass == self._pass - 1
        if ran or not recent:
            try:
                tids = [int(t) for t in os.listdir(base)]
            except OSError:
                tids = []
        else:
            tids = list(prev.threads)  # it did not run: no thread was born or exited
        out = _ThreadPass()
        for tid in tids:
            tp = prev.threads.get(tid)
            if tp is not None and recent and (not ran or tid in idle):
                cur: _ThreadPrev | None = tp
            else:
                cur = _read_thread(base, tid)
            if cur is None:
                continue
            vol, invol = cur.vol, cur.invol
            out.tot_vol += vol
            out.tot_invol += invol
            out.new_prev[tid] = cur
            t_cpu = t_off = t_runq = None
            t_pre = t_vcs = 0.0
            if tp is not None and dt is not None and invol >= tp.invol and vol >= tp.vol:
                dv, di = vol - tp.vol, invol - tp.invol
                out.d_vol += dv
                out.d_invol += di
                t_pre, t_vcs = di / dt, dv / dt
                if cur.schedstat and self._has_schedstat and cur.oncpu >= tp.oncpu:
                    t_cpu = min(100.0, 100.0 * (cur.oncpu - tp.oncpu) / 1e9 / dt)
                    t_off = max(0.0, 100.0 - t_cpu)
                    t_runq = min(100.0, 100.0 * (cur.run_delay - tp.run_delay) / 1e9 / dt)
            elif prev.detailed and dt is not None:
                # Born during the interval: all its switches happened in it.
                out.d_vol += vol
                out.d_invol += invol
            out.threads.append(
                ThreadSample(
                    tid=tid,
                    comm=cur.comm,
                    cpu_pct=round(t_cpu or 0.0, 2),
                    offcpu_pct=_r2(t_off),
                    runq_pct=_r2(t_runq),
                    preempt_per_s=round(t_pre, 2),
                    vcsw_per_s=round(t_vcs, 2),
                )
            )
        return out


def _read_thread(base: str, tid: int) -> _ThreadPrev | None:
    """A thread's status and schedstat now; None when it is gone."""
    ctx = parse_status_ctxt(_read(f"{base}/{tid}/status"))
    if ctx is None:
        return None
    ss = parse_schedstat(_read(f"{base}/{tid}/schedstat"))
    oncpu, delay = ss if ss is not None else (0, 0)
    return _ThreadPrev(ctx[0], ctx[1], ctx[2], oncpu, delay, ss is not None)


@dataclass(slots=True)
class _ThreadPass:
    """What one pass over a process's threads found."""

    threads: list[ThreadSample] = field(default_factory=list)
    new_prev: dict[int, _ThreadPrev] = field(default_factory=dict)
    d_vol: int = 0
    d_invol: int = 0
    tot_vol: int = 0
    tot_invol: int = 0


def _tgid(root: str, tid: int) -> int | None:
    """The process a thread id belongs to (``Tgid:`` of its status file)."""
    raw = _read(f"{root}/{tid}/status")
    if raw is None:
        return None
    at = raw.find(b"\nTgid:")
    if at < 0:
        return None
    try:
        return int(raw[at + 6 : raw.index(b"\n", at + 6)])
    except ValueError:
        return None


def _r2(v: float | None) -> float | None:
    return None if v is None else round(v, 2)
