"""The htop-style process table: keyed rows updated in place, tree, sort, filter."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from rich.text import Text
from textual.widgets import DataTable
from textual.widgets.data_table import ColumnKey, RowDoesNotExist

from gputop.model.frame import ProcessSample


@dataclass(frozen=True)
class Column:
    """One table column: its key, header, width, how to sort and how to show a process."""

    key: str
    label: str
    width: int
    sort: Callable[[ProcessSample], Any]
    numeric: bool
    # Measurements read best largest first; PIDs and names ascending.
    descending: bool = False


def _num(v: float | None) -> float:
    # Unknown values sort as the smallest, so "n/a" rows sink under a descending sort.
    return float("-inf") if v is None else v


COLUMNS: tuple[Column, ...] = (
    Column("pid", "PID", 7, lambda p: p.pid, True),
    Column("role", "ROLE", 7, lambda p: p.role, False),
    Column("user", "USER", 9, lambda p: p.user, False),
    Column("cpu", "CPU%", 6, lambda p: p.cpu_pct, True, True),
    Column("offcpu", "OFF%", 6, lambda p: _num(p.offcpu_pct), True, True),
    Column("runq", "RUNQ%", 6, lambda p: _num(p.runq_pct), True, True),
    Column("preempt", "PRE/s", 6, lambda p: p.preempt_per_s, True, True),
    Column("gpu", "GPU", 4, lambda p: p.gpus, False),
    Column("gpumem", "GMEM", 6, lambda p: _num(p.gpu_mem_mib), True, True),
    Column("command", "COMMAND", 200, lambda p: p.cmdline or p.comm, False),
)
COLUMN_KEYS = tuple(c.key for c in COLUMNS)
ROLE_SHORT = {"trainer": "train", "dataloader": "loader", "pin_memory": "pin", "other": ""}


def row_key(p: ProcessSample) -> str:
    """The table's row key: a process is (pid, start time) because PIDs are reused."""
    return f"{p.pid}:{p.start_time}"


def _fmt(v: float | None) -> str:
    # One decimal below 100 and none above keeps every value within 5 characters.
    if v is None:
        return "n/a"
    return f"{v:.1f}" if v < 99.95 else f"{v:.0f}"


def _mem(mib: int | None, on_gpu: bool) -> str:
    if mib is None:
        return "n/a" if on_gpu else ""
    return f"{mib / 1024:.1f}G" if mib >= 1024 else f"{mib}M"


def _justify(c: Column) -> Literal["left", "right"]:
    return "right" if c.numeric else "left"


def matches(p: ProcessSample, needle: str) -> bool:
    """Case-insensitive substring match on pid, user, role and command line."""
    if not needle:
        return True
    n = needle.lower()
    return (
        n in str(p.pid)
        or n in p.user.lower()
        or n in p.role.lower()
        or n in p.comm.lower()
        or n in p.cmdline.lower()
    )


def arrange(
    procs: Iterable[ProcessSample],
    *,
    sort_key: str = "cpu",
    reverse: bool = True,
    tree: bool = True,
    needle: str = "",
) -> list[tuple[ProcessSample, str]]:
    """Rows in display order with each row's tree prefix ("" at the top level).

    In tree mode a DataLoader or pin-memory worker whose trainer is shown sits
    under that trainer; siblings and top-level rows are sorted alike.
    """
    col = next(c for c in COLUMNS if c.key == sort_key)
    shown = [p for p in procs if matches(p, needle)]

    def order(rows: list[ProcessSample]) -> list[ProcessSample]:
        # Sort by pid first so equal values keep a stable, predictable order.
        rows = sorted(rows, key=lambda p: p.pid)
        return sorted(rows, key=col.sort, reverse=reverse)

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
    out: list[tuple[ProcessSample, str]] = []
    for root in order(roots):
        out.append((root, ""))
        kids = order(children.get(root.pid, []))
        for i, kid in enumerate(kids):
            out.append((kid, "└─ " if i == len(kids) - 1 else "├─ "))
    return out


class ProcessTable(DataTable[Any]):
    """Processes keyed by (pid, start time); each frame updates only the cells that changed.

    The cursor follows the selected process when the order changes, so a
    refresh never moves the selection to a different process.
    """

    DEFAULT_CSS = """
    ProcessTable { height: 1fr; scrollbar-size-horizontal: 0; }
    ProcessTable > .process-table--hot { color: $text-error; }
    ProcessTable > .process-table--warm { color: $text-warning; }
    ProcessTable > .process-table--trainer { color: $text-accent; text-style: bold; }
    ProcessTable > .process-table--worker { color: $text-primary; }
    ProcessTable > .process-table--muted { color: $text-muted; }
    """
    COMPONENT_CLASSES: ClassVar[set[str]] = DataTable.COMPONENT_CLASSES | {
        "process-table--hot",
        "process-table--warm",
        "process-table--trainer",
        "process-table--worker",
        "process-table--muted",
    }

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="row", zebra_stripes=False, cell_padding=0)
        self.sort_key = "cpu"
        self.sort_reverse = True
        self.tree_mode = True
        self.needle = ""
        self._procs: tuple[ProcessSample, ...] = ()
        self._by_key: dict[str, ProcessSample] = {}
        self._cells: dict[str, tuple[Any, ...]] = {}
        self._order: list[str] = []

    def on_mount(self) -> None:
        for c in COLUMNS:
            self.add_column(self._label(c), width=c.width, key=c.key)

    # ---- data ---------------------------------------------------------------

    @property
    def order(self) -> list[str]:
        """Row keys in display order."""
        return list(self._order)

    @property
    def selected(self) -> ProcessSample | None:
        """The process under the cursor, if any."""
        if not self._order or not 0 <= self.cursor_row < len(self._order):
            return None
        return self._by_key.get(self._order[self.cursor_row])

    def select_key(self, key: str) -> bool:
        """Put the cursor on the process with this row key; False when it is not shown."""
        try:
            index = self.get_row_index(key)
        except RowDoesNotExist:
            return False
        self.move_cursor(row=index, animate=False)
        return True

    def show(self, procs: Sequence[ProcessSample]) -> None:
        """Show these processes: remove the gone, add the new, update changed cells."""
        self._procs = tuple(procs)
        self._apply()

    def set_view(
        self,
        *,
        sort_key: str | None = None,
        reverse: bool | None = None,
        tree: bool | None = None,
        needle: str | None = None,
    ) -> None:
        """Change sort, tree mode or filter and re-arrange the rows (selection kept)."""
        old_sort = self.sort_key
        if sort_key is not None:
            self.sort_key = sort_key
        if reverse is not None:
            self.sort_reverse = reverse
        if tree is not None:
            self.tree_mode = tree
        if needle is not None:
            self.needle = needle
        for key in {old_sort, self.sort_key}:
            col = next(c for c in COLUMNS if c.key == key)
            self.columns[ColumnKey(key)].label = self._label(col)
        # DataTable caches rendered rows (the header too) per update count.
        self._update_count += 1
        self._apply()

    def _label(self, c: Column) -> Text:
        # Cells carry their own one-space gutter (cell padding is 0 to fit 80 columns).
        if c.key != self.sort_key:
            return Text(c.label if c.numeric else f" {c.label}", justify=_justify(c))
        arrow = "▼" if self.sort_reverse else "▲"
        label = f"{c.label}{arrow}"
        return Text(label if c.numeric else f" {label}", style="reverse", justify=_justify(c))

    def _apply(self) -> None:
        rows = arrange(
            self._procs,
            sort_key=self.sort_key,
            reverse=self.sort_reverse,
            tree=self.tree_mode,
            needle=self.needle,
        )
        selected = self._order[self.cursor_row] if 0 <= self.cursor_row < len(self._order) else None
        new_keys = [row_key(p) for p, _ in rows]
        wanted = set(new_keys)
        for key in [k for k in self._cells if k not in wanted]:
            self.remove_row(key)
            del self._cells[key]
        self._by_key = {}
        for (p, prefix), key in zip(rows, new_keys, strict=True):
            self._by_key[key] = p
            cells = self._cells_for(p, prefix)
            old = self._cells.get(key)
            if old is None:
                self.add_row(*cells, key=key)
            else:
                for col, new, was in zip(COLUMN_KEYS, cells, old, strict=True):
                    if new != was:
                        self.update_cell(key, col, new)
            self._cells[key] = cells
        if new_keys != self._order:
            position = {k: i for i, k in enumerate(new_keys)}
            self._order = new_keys
            # The PID cell is unique among live rows, so it can carry the order.
            pid_pos = {k.split(":", 1)[0]: i for k, i in position.items()}
            self.sort("pid", key=lambda cell: pid_pos[str(cell).strip()])
            if selected is not None and selected in position:
                self.move_cursor(row=position[selected], animate=False)
        self.refresh()

    def _cells_for(self, p: ProcessSample, prefix: str) -> tuple[Any, ...]:
        on_gpu = bool(p.gpus)
        role_cls = (
            "process-table--trainer"
            if p.role == "trainer"
            else "process-table--worker"
            if p.role in ("dataloader", "pin_memory")
            else ""
        )
        command = p.cmdline or f"[{p.comm}]"
        cmd = Text(" ")
        if prefix:
            cmd.append(prefix, style=self._style("process-table--muted"))
        cmd.append(command[:200], style=self._style(role_cls) if role_cls else "")
        role = " " + ROLE_SHORT.get(p.role, p.role)
        return (
            Text(str(p.pid), justify="right"),
            Text(role, style=self._style(role_cls)) if role_cls else role,
            " " + p.user[:8],
            self._pct(p.cpu_pct, 90.0, 60.0),
            self._pct(p.offcpu_pct, 50.0, 25.0),
            self._pct(p.runq_pct, 20.0, 10.0),
            Text(_fmt(p.preempt_per_s), justify="right"),
            " " + ",".join(str(g) for g in p.gpus),
            Text(_mem(p.gpu_mem_mib, on_gpu), justify="right"),
            cmd,
        )

    def _pct(self, v: float | None, hot: float, warm: float) -> Text:
        if v is None:
            return Text("n/a", justify="right", style=self._style("process-table--muted"))
        cls = "process-table--hot" if v >= hot else "process-table--warm" if v >= warm else ""
        return Text(_fmt(v), justify="right", style=self._style(cls) if cls else "")

    def _style(self, cls: str) -> Any:
        return self.get_component_rich_style(cls, partial=True)
