"""What the process table shows, apart from drawing it: columns, cell texts, filter, order.

Pure functions of the frame's processes (no Textual): ``ProcessTable`` (process_table.py)
arranges its rows with ``arrange``, builds each row's cells with ``row_cells`` and draws
them; the sort dialog and the status line read the columns and labels from here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gputop.messages import TableView
from gputop.model.frame import ProcessSample


@dataclass(frozen=True)
class Column:
    """One table column: key, header, width (0: the rest of the line), sort key, alignment."""

    key: str
    label: str
    width: int
    sort: Callable[[ProcessSample], Any]
    numeric: bool
    # Measurements read best largest first; PIDs and names ascending.
    descending: bool = False
    # On a narrow terminal columns are dropped lowest first (0: always shown).
    drop: int = 0


def _num(v: float | None) -> float:
    # Unknown values sort as the smallest, so "n/a" rows sink under a descending sort.
    return float("-inf") if v is None else v


COLUMNS: tuple[Column, ...] = (
    Column("pid", "PID", 7, lambda p: p.pid, True),
    Column("role", "ROLE", 6, lambda p: p.role, False, drop=6),
    Column("user", "USER", 8, lambda p: p.user, False, drop=1),
    Column("cpu", "CPU%", 5, lambda p: p.cpu_pct, True, True),
    Column("offcpu", "OFF%", 5, lambda p: _num(p.offcpu_pct), True, True),
    Column("runq", "RUNQ%", 6, lambda p: _num(p.runq_pct), True, True, drop=7),
    Column("preempt", "PRE/s", 6, lambda p: p.preempt_per_s, True, True),
    # Preemptions since gputop first saw the process; sorted through ``arrange``'s ``since``.
    Column("pretotal", "PRE", 6, lambda p: p.preempt_total, True, True, drop=4),
    Column("gpu", "GPU", 3, lambda p: p.gpus, False, drop=5),
    Column("gpumem", "GMEM", 5, lambda p: _num(p.gpu_mem_mib), True, True, drop=2),
    Column("command", "COMMAND", 0, lambda p: command_text(p), False),
)
MIN_COMMAND_W = 20
HSCROLL_STEP = 8
# Shown before COMMAND only while some process runs in a container or pod
# (gputop/sources/cgroup.py): the pod's namespace/name, else the short container id.
POD_COLUMN = Column("pod", "POD/CONTAINER", 24, lambda p: pod_text(p), False, drop=3)
# Shown after RUNQ% only while some job process runs under a cgroup CPU limit: the part
# of its run-queue time the limit held it back, "~" where inferred from cpu.stat.
THROTTLED_COLUMN = Column(
    "throttled", "THR%", 5, lambda p: _num(p.cpu_throttled_pct), True, True, drop=5
)
# Shown after RUNQ% (and THR%) once some process spent ``IO_SHOWN_PCT`` of an interval in
# uninterruptible sleep, waiting on a disk or a mapped file's page (the eBPF probe's
# ``io_wait_pct``); it stays from then on, so the table does not change shape each tick.
IO_COLUMN = Column("io", "IO%", 5, lambda p: _num(p.io_wait_pct), True, True, drop=5)
IO_SHOWN_PCT = 1.0
COLUMN_KEYS = tuple(c.key for c in COLUMNS)
# A row's cells also hold the tree prefix drawn before COMMAND under this key.
TREE = "tree"
_BY_KEY = {c.key: c for c in (*COLUMNS, POD_COLUMN, THROTTLED_COLUMN, IO_COLUMN)}
ROLE_SHORT = {"trainer": "train", "dataloader": "loader", "pin_memory": "pin", "other": ""}


def column(key: str) -> Column:
    """The column with this key."""
    return _BY_KEY[key]


def sort_label(view: TableView) -> str:
    """The sort as the status line shows it: the column's header and ▼ or ▲."""
    return column(view.sort_key).label + ("▼" if view.reverse else "▲")


def pod_text(p: ProcessSample) -> str:
    """Where the process runs: namespace/pod, the pod's UID, a container id, its SLURM job
    and step, or ""."""
    if p.pod_name is not None:
        return f"{p.pod_namespace}/{p.pod_name}"
    if p.pod_uid is not None:
        return f"pod {p.pod_uid[:8]}"
    if p.container_id is not None:
        return p.container_id[:12]
    return slurm_text(p)


def slurm_text(p: ProcessSample) -> str:
    """``slurm 4242.0``: the process's SLURM job and step; "" outside SLURM."""
    if p.slurm_job_id is None:
        return ""
    return f"slurm {p.slurm_job_id}" + (f".{p.slurm_step_id}" if p.slurm_step_id else "")


def command_text(p: ProcessSample) -> str:
    """The command line, led by the process's own name when it renamed itself.

    Forked workers keep their parent's command line; only their name (comm, set
    with prctl, as PyTorch does for "pt_data_worker") tells them apart.
    """
    if not p.cmdline:
        return f"[{p.comm}]"
    if p.cmdline.startswith("["):
        return p.cmdline
    argv0 = p.cmdline.split(" ", 1)[0].rsplit("/", 1)[-1]
    if argv0.startswith(p.comm) or p.comm.startswith(argv0[:15]):
        return p.cmdline
    return f"{p.comm}: {p.cmdline}"


def row_key(p: ProcessSample) -> str:
    """The table's row key: a process is (pid, start time) because PIDs are reused."""
    return f"{p.pid}:{p.start_time}"


def _fmt(v: float | None) -> str:
    # One decimal below 100 and none above keeps every value within 5 characters.
    if v is None:
        return "n/a"
    return f"{v:.1f}" if v < 99.95 else f"{v:.0f}"


def throttled_cell(p: ProcessSample) -> Cell:
    """THR%: "" outside a limit, ``n/a`` before it is known, ``~`` after an inferred share.

    Every share keeps the place of the mark, so measured and inferred digits line up.
    """
    if p.cpu_quota is None and p.cpu_throttled_pct is None:
        return ("", "")
    text, cls = _pct(p.cpu_throttled_pct, 20.0, 10.0)
    inferred = p.cpu_throttled_pct is not None and p.cpu_throttled_source == "cpu.stat"
    return (text + ("~" if inferred else " "), cls)


def limited(procs: Iterable[ProcessSample]) -> bool:
    """Whether any process runs under a cgroup CPU limit (THR% is shown)."""
    return any(p.cpu_quota is not None or p.cpu_throttled_pct is not None for p in procs)


def io_waited(procs: Iterable[ProcessSample]) -> bool:
    """Whether some process waited on a disk ``IO_SHOWN_PCT`` of the interval (IO% is shown)."""
    return any(p.io_wait_pct is not None and p.io_wait_pct >= IO_SHOWN_PCT for p in procs)


def table_columns(procs: Sequence[ProcessSample], io: bool = False) -> tuple[Column, ...]:
    """COLUMNS, with THR% after RUNQ% under a CPU limit, IO% after them where ``io``, and
    POD before COMMAND in containers."""
    cols = list(COLUMNS)
    if limited(procs):
        cols.insert(COLUMN_KEYS.index("runq") + 1, THROTTLED_COLUMN)
    if io:
        after = THROTTLED_COLUMN if THROTTLED_COLUMN in cols else column("runq")
        cols.insert(cols.index(after) + 1, IO_COLUMN)
    if any(pod_text(p) for p in procs):
        cols.insert(len(cols) - 1, POD_COLUMN)
    return tuple(cols)


def count_text(n: int | None) -> str:
    """A count in at most 6 characters: 987, 14504, 145.0k, 14.5M."""
    if n is None:
        return "n/a"
    if n < 100_000:
        return str(n)
    if n < 10_000_000:
        return f"{n / 1e3:.1f}k"
    return f"{n / 1e6:.1f}M"


def visible_columns(width: int, columns: Sequence[Column] = COLUMNS) -> tuple[Column, ...]:
    """The ``columns`` that fit ``width`` with COMMAND keeping ``MIN_COMMAND_W``, by priority."""
    cols = list(columns[:-1])
    for col in sorted((c for c in cols if c.drop), key=lambda c: c.drop):
        if width - sum(c.width + GUTTER for c in cols) - GUTTER >= MIN_COMMAND_W:
            break
        cols.remove(col)
    return (*cols, columns[-1])


def _mem(mib: int | None, on_gpu: bool) -> str:
    if mib is None:
        return "n/a" if on_gpu else ""
    return f"{mib / 1024:.1f}G" if mib >= 1024 else f"{mib}M"


def role_text(p: ProcessSample) -> str:
    """The ROLE cell: ``train``, ``loader``, ``pin``; a distributed job's rank as ``rank1``."""
    if p.role == "trainer" and p.rank is not None:
        return f"rank{p.rank}"
    return ROLE_SHORT.get(p.role, p.role)


def matches(p: ProcessSample, needle: str) -> bool:
    """Case-insensitive substring match on pid, user, role (a rank's ``rankN``), its job,
    command line, pod and SLURM job (``slurm 4242.0``)."""
    if not needle:
        return True
    n = needle.lower()
    return (
        n in str(p.pid)
        or n in p.user.lower()
        or n in p.role.lower()
        or n in role_text(p)
        or (p.job_id is not None and n in p.job_id.lower())
        or n in p.comm.lower()
        or n in p.cmdline.lower()
        or (p.pod_name is not None and n in f"{p.pod_namespace}/{p.pod_name}".lower())
        or (p.slurm_job_id is not None and n in slurm_text(p))
    )


def arrange(
    procs: Iterable[ProcessSample],
    *,
    sort_key: str = "cpu",
    reverse: bool = True,
    tree: bool = True,
    needle: str = "",
    since: Mapping[tuple[int, int], int] | None = None,
) -> list[tuple[ProcessSample, str]]:
    """Rows in display order with each row's tree prefix ("" at the top level).

    In tree mode a DataLoader or pin-memory worker whose trainer is shown sits
    under that trainer; siblings and top-level rows are sorted alike, but a distributed
    job's ranks stay together in rank order, where the first of them sorts. ``since``
    holds each process's preemptions since gputop began watching (the PRE column).
    """
    col = column(sort_key)
    shown = [p for p in procs if matches(p, needle)] if needle else list(procs)
    sort = col.sort
    if sort_key == "pretotal" and since is not None:
        counts = since

        def sort(p: ProcessSample) -> Any:
            return counts.get(p.key, 0)

    def order(rows: list[ProcessSample]) -> list[ProcessSample]:
        # Sort by pid first so equal values keep a stable, predictable order.
        rows = sorted(rows, key=lambda p: p.pid)
        return sorted(rows, key=sort, reverse=reverse)

    if not tree:
        return [(p, "") for p in order(shown)]
    pids = {p.pid for p in shown}
    children: dict[int, list[ProcessSample]] = {}
    roots: list[ProcessSample] = []
    for p in shown:
        parent = p.trainer_pid
        if p.role in ("dataloader", "pin_memory") and parent in pids and parent != p.pid:
            children.setdefault(parent, []).append(p)
        else:
            roots.append(p)
    # A distributed job's ranks stay together, in rank order, where its first one sorts.
    ranks: dict[str, list[ProcessSample]] = {}
    for p in roots:
        if p.job_id is not None:
            ranks.setdefault(p.job_id, []).append(p)
    out: list[tuple[ProcessSample, str]] = []
    placed: set[str] = set()
    for first in order(roots):
        if first.job_id is not None:
            if first.job_id in placed:
                continue
            placed.add(first.job_id)
            group = sorted(ranks[first.job_id], key=lambda p: (p.rank is None, p.rank, p.pid))
        else:
            group = [first]
        for root in group:
            out.append((root, ""))
            kids = children.get(root.pid)
            if not kids:
                continue
            kids = order(kids)
            for i, kid in enumerate(kids):
                out.append((kid, "└─ " if i == len(kids) - 1 else "├─ "))
    return out


# A cell: its text and a component class ("" for the row's base style).
Cell = tuple[str, str]
# A row's cells by column key (TREE: the tree prefix); POD's only while it is shown.
Row = dict[str, Cell]
GUTTER = 1  # one space before every column


def row_cells(
    p: ProcessSample,
    prefix: str,
    columns: Sequence[Column],
    since: Mapping[tuple[int, int], int],
) -> Row:
    """One process's cells for ``columns`` (POD, THR% and IO% only where shown), with its
    tree prefix; ``since``: preemptions since gputop first saw each process (PRE)."""
    role_cls = (
        "process-table--trainer"
        if p.role == "trainer"
        else "process-table--worker"
        if p.role in ("dataloader", "pin_memory")
        else ""
    )
    if p.sched_source == STAT_ONLY:
        return _stat_row(p, prefix, columns)
    row: Row = {
        "pid": (str(p.pid), ""),
        "role": (role_text(p), role_cls),
        "user": (p.user[:8], ""),
        "cpu": _pct(p.cpu_pct, 90.0, 60.0),
        "offcpu": _pct(p.offcpu_pct, 50.0, 25.0),
        "runq": _pct(p.runq_pct, 20.0, 10.0),
        "preempt": (_fmt(p.preempt_per_s), ""),
        "pretotal": (count_text(since.get(p.key, 0)), ""),
        "gpu": (",".join(str(g) for g in p.gpus), ""),
        "gpumem": (_mem(p.gpu_mem_mib, bool(p.gpus)), ""),
    }
    if THROTTLED_COLUMN in columns:
        row["throttled"] = throttled_cell(p)
    if IO_COLUMN in columns:
        row["io"] = _pct(p.io_wait_pct, 30.0, 10.0)
    if POD_COLUMN in columns:
        row["pod"] = (pod_text(p), "process-table--muted")
    row[TREE] = (prefix, "process-table--muted")
    row["command"] = (command_text(p)[:300], role_cls)
    return row


# A row of ``Frame.others``: only its stat line, owner and command line were read.
STAT_ONLY = "stat"


def _stat_row(p: ProcessSample, prefix: str, columns: Sequence[Column]) -> Row:
    """A process of which only CPU% is known: its scheduler columns are left blank, not n/a
    (they were not read this tick, which says nothing of what the host can report)."""
    row: Row = {c.key: ("", "") for c in columns}
    row["pid"] = (str(p.pid), "")
    row["user"] = (p.user[:8], "")
    row["cpu"] = _pct(p.cpu_pct, 90.0, 60.0)
    row[TREE] = (prefix, "process-table--muted")
    row["command"] = (command_text(p)[:300], "")
    return row


def _pct(v: float | None, hot: float, warm: float) -> Cell:
    if v is None:
        return ("n/a", "process-table--muted")
    cls = "process-table--hot" if v >= hot else "process-table--warm" if v >= warm else ""
    return (_fmt(v), cls)
