"""The htop-style process table: keyed rows updated in place, tree, sort, filter.

A line-based ScrollView rather than a DataTable: every row is cached as one Strip
and rebuilt only when one of its cells changed, so a tick with 50 processes
costs string comparisons plus a few Strips, not a Rich render of every cell.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from textual import events
from textual.binding import Binding, BindingType
from textual.geometry import Size
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from gputop.messages import ProcessOpened, TableView, ViewChanged
from gputop.model.frame import ProcessSample
from gputop.model.view import ScreenView
from gputop.widgets.lines import LineCache, Run, line_regions
from gputop.widgets.table_layout import (
    COLUMNS,
    GUTTER,
    HSCROLL_STEP,
    POD_COLUMN,
    STAT_ONLY,
    TREE,
    Column,
    Row,
    arrange,
    column,
    io_waited,
    matches,
    row_cells,
    row_key,
    table_columns,
    visible_columns,
)


class ProcessTable(ScrollView, can_focus=True):
    """Processes keyed by (pid, start time); each frame re-renders only the rows that changed.

    The cursor follows the selected process when the order changes, so a
    refresh never moves the selection to a different process. The header stays
    on the first line; COMMAND takes whatever width is left.
    """

    DEFAULT_CSS = """
    ProcessTable { height: 1fr; scrollbar-size-horizontal: 0; background: $surface; }
    ProcessTable > .process-table--header { background: $panel; color: $text; text-style: bold; }
    ProcessTable > .process-table--sorted { background: $accent; color: $text; text-style: bold; }
    ProcessTable > .process-table--cursor { background: $block-cursor-blurred-background; }
    ProcessTable:focus > .process-table--cursor {
        background: $block-cursor-background; color: $block-cursor-foreground;
    }
    ProcessTable > .process-table--hot { color: $text-error; }
    ProcessTable > .process-table--warm { color: $text-warning; }
    ProcessTable > .process-table--trainer { color: $text-accent; text-style: bold; }
    ProcessTable > .process-table--worker { color: $text-primary; }
    ProcessTable > .process-table--muted { color: $text-muted; }
    """
    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "process-table--header",
        "process-table--sorted",
        "process-table--cursor",
        "process-table--hot",
        "process-table--warm",
        "process-table--trainer",
        "process-table--worker",
        "process-table--muted",
    }
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up", "move(-1)", "Up", show=False),
        Binding("down", "move(1)", "Down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("home", "jump(0)", "First", show=False),
        Binding("end", "jump(-1)", "Last", show=False),
        Binding("enter", "open", "Details"),
        Binding("left,shift+left", "hscroll(-1)", "Scroll ←", show=False),
        Binding("right,shift+right", "hscroll(1)", "Scroll →", show=False),
    ]

    # The view: whoever shows it (the status line) hears of a change through ViewChanged.
    sort_key: reactive[str] = reactive("cpu", init=False)
    sort_reverse: reactive[bool] = reactive(True, init=False)
    tree_mode: reactive[bool] = reactive(True, init=False)
    needle: reactive[str] = reactive("", init=False)
    # Every process (htop's habit), or only the jobs and the busiest (the frame's rows).
    everyone: reactive[bool] = reactive(True, init=False)

    def __init__(self, *, id: str | None = None) -> None:
        self.cursor_row = 0
        # Characters of COMMAND scrolled off to the left (← →, htop's horizontal scroll).
        self.cmd_offset = 0
        self.since: Mapping[tuple[int, int], int] = {}
        self._visible: tuple[Column, ...] = COLUMNS
        self._procs: tuple[ProcessSample, ...] = ()
        # The newest frame's rows and its other processes (``Frame.others``).
        self._frame_rows: tuple[tuple[ProcessSample, ...], tuple[ProcessSample, ...]] = ((), ())
        self._by_key: dict[str, ProcessSample] = {}
        self._prefixes: dict[str, str] = {}
        # Cells of the rows drawn since the last frame, built when first drawn: (process,
        # tree prefix, frame number, cells). A thousand rows off screen cost no cells.
        self._cells: dict[str, tuple[ProcessSample, str, int, Row]] = {}
        self._frame_no = 0
        self._order: list[str] = []
        # Rows and the header drawn once per thing they show (cells, width, row key).
        self.cache = LineCache(self)
        # (start, end, column key) of each header cell as drawn.
        self._header_spans: list[tuple[int, int, str]] = []
        self._widths: tuple[int, ...] = ()
        self._columns: tuple[Column, ...] = COLUMNS
        # Some process waited on a disk since the table was made: IO% is shown.
        self._io = False
        super().__init__(id=id)

    # ---- data ---------------------------------------------------------------

    @property
    def order(self) -> list[str]:
        """Row keys in display order."""
        return list(self._order)

    @property
    def row_count(self) -> int:
        return len(self._order)

    def cells(self, key: str) -> dict[str, str]:
        """The texts of one row by column key (TREE: its tree prefix); tests read them."""
        return {column: text for column, (text, _) in self._row(key).items()}

    @property
    def selected(self) -> ProcessSample | None:
        """The process under the cursor, if any."""
        if not 0 <= self.cursor_row < len(self._order):
            return None
        return self._by_key.get(self._order[self.cursor_row])

    def select_key(self, key: str) -> bool:
        """Put the cursor on the process with this row key; False when it is not shown."""
        try:
            index = self._order.index(key)
        except ValueError:
            return False
        self._move_to(index)
        return True

    @property
    def shown_columns(self) -> tuple[str, ...]:
        """The keys of the columns shown at the current width."""
        return tuple(c.key for c in self._visible)

    def show(self, view: ScreenView) -> None:
        """Show the newest frame's processes: drop the gone, add the new, re-render changed rows."""
        frame = view.frame
        if frame is None:
            return
        self._frame_rows = (frame.processes, frame.others)
        self._procs = self._rows_of(frame.processes, frame.others)
        self.since = view.preempt_since
        # Only the frame's rows can have a CPU limit, disk waits or a pod (the others tell
        # their CPU share alone).
        self._io = self._io or io_waited(frame.processes)
        columns = table_columns(frame.processes, self._io)
        if columns != self._columns:
            # Every row and the header change shape.
            self._columns = columns
            self._cells = {}
            self.refresh()
        self._apply()

    def _rows_of(
        self, rows: tuple[ProcessSample, ...], others: tuple[ProcessSample, ...]
    ) -> tuple[ProcessSample, ...]:
        return rows + others if self.everyone else rows

    @property
    def sort_columns(self) -> tuple[Column, ...]:
        """The columns one may sort by now: the table's, POD aside (F6's menu, < and >)."""
        return tuple(c for c in self._columns if c is not POD_COLUMN)

    @property
    def view(self) -> TableView:
        """The current sort, tree mode and filter."""
        return TableView(
            self.sort_key, self.sort_reverse, self.tree_mode, self.needle, self.everyone
        )

    def sort_by(self, key: str) -> None:
        """Sort by this column, in the direction its values read best (htop's F6)."""
        if key == self.sort_key:
            return
        # Set quietly: the sort_key watcher re-arranges once for both changes.
        self.set_reactive(ProcessTable.sort_reverse, column(key).descending)
        self.sort_key = key

    def sort_step(self, step: int) -> None:
        """Sort by the column ``step`` places to the right (wrapping), htop's < and >."""
        keys = [c.key for c in self.sort_columns]
        if self.sort_key not in keys:
            # Sorted by a column no longer shown (THR% after the limit went): from RUNQ%.
            keys.insert(keys.index("runq") + 1, self.sort_key)
        i = keys.index(self.sort_key)
        self.sort_by(keys[(i + step) % len(keys)])

    def watch_sort_key(self) -> None:
        self._view_changed()

    def watch_sort_reverse(self) -> None:
        self._view_changed()

    def watch_tree_mode(self) -> None:
        self._view_changed()

    def watch_needle(self) -> None:
        self._view_changed()

    def watch_everyone(self) -> None:
        self._procs = self._rows_of(*self._frame_rows)
        self._view_changed()

    def _view_changed(self) -> None:
        """Re-arrange the rows (selection kept), redraw the header, tell the app."""
        self._apply()
        self.refresh()
        self.post_message(ViewChanged(self.view))

    def _apply(self) -> None:
        rows = arrange(
            self._procs,
            sort_key=self.sort_key,
            reverse=self.sort_reverse,
            tree=self.tree_mode,
            needle=self.needle,
            since=self.since,
        )
        selected = self._order[self.cursor_row] if self.selected is not None else None
        new_keys = [row_key(p) for p, _ in rows]
        by_key = dict(zip(new_keys, (p for p, _ in rows), strict=True))
        self._prefixes = dict(zip(new_keys, (prefix for _, prefix in rows), strict=True))
        self._by_key = by_key
        self._frame_no += 1
        # Only the rows on screen are compared with what they showed (their cells kept from
        # when they were drawn); the others get cells when they come into view.
        prev_cells, self._cells = self._cells, {}
        old_order, old_cursor, old_top = self._order, self.cursor_row, self.scroll_offset.y
        if new_keys != old_order:
            self._order = new_keys
            self._set_virtual_height(len(new_keys) + 1)
            index = new_keys.index(selected) if selected in by_key else self.cursor_row
            self._move_to(min(index, len(new_keys) - 1), refresh=False)
        top = self.scroll_offset.y
        if top != old_top:
            self.refresh()
            return
        # Repaint the lines whose row changed: another process, new cells, the cursor.
        # The cursor's lines only when it moved (its row's own change is in the cells).
        cursor = {old_cursor, self.cursor_row} if old_cursor != self.cursor_row else set()
        lines = []
        for index in range(top, top + max(0, self.size.height - 1)):
            was = old_order[index] if index < len(old_order) else None
            now = new_keys[index] if index < len(new_keys) else None
            changed = False
            if now is not None:
                old = prev_cells.get(now)
                if old is not None:
                    self._cells[now] = old
                changed = old is None or self._row(now) != old[3]
            if was != now or changed or (index in cursor and now is not None):
                lines.append(index + 1 - top)
        if lines:
            # One refresh for them all: each call clears the widget's caches and prompts it.
            width = max(self.virtual_size.width, self.size.width)
            self.refresh(*line_regions(lines, width))

    def _row(self, key: str) -> Row:
        """A row's cells: kept while it shows the same idle process (the same row object
        as when they were built, /proc's stat line alone), built anew each frame otherwise
        (preemptions since watching change the PRE column)."""
        p, prefix = self._by_key[key], self._prefixes[key]
        kept = self._cells.get(key)
        if (
            kept is not None
            and kept[0] is p
            and kept[1] == prefix
            and (kept[2] == self._frame_no or p.sched_source == STAT_ONLY)
        ):
            return kept[3]
        row = row_cells(p, prefix, self._columns, self.since)
        self._cells[key] = (p, prefix, self._frame_no, row)
        return row

    # ---- cells --------------------------------------------------------------

    def _set_virtual_height(self, height: int) -> None:
        """A new number of rows: a layout pass only when the scrollbar appears or goes.

        The vertical scrollbar is the only thing a layout pass could change; while it
        stays as it was, the new height goes to the scroll range and the thumb directly.
        """
        size = Size(self.scrollable_content_region.width, height)
        old = self.virtual_size
        room = self.container_size.height
        if old.width != size.width or (old.height > room) != (height > room) or not room:
            self.virtual_size = size
            return
        self.set_reactive(ScrollView.virtual_size, size)
        if height > room:
            self.vertical_scrollbar.window_virtual_size = height
        if self.scroll_offset.y > self.max_scroll_y:
            self.scroll_to(y=self.max_scroll_y, animate=False, immediate=True)

    # ---- rendering ----------------------------------------------------------

    def notify_style_update(self) -> None:
        self.cache.clear()
        super().notify_style_update()

    def _column_widths(self, width: int) -> tuple[int, ...]:
        visible = visible_columns(width, self._columns)
        if visible != self._visible:
            self._visible = visible
        fixed = [c.width for c in visible[:-1]]
        rest = max(8, width - sum(fixed) - GUTTER * len(fixed) - GUTTER)
        return (*fixed, rest)

    def on_resize(self) -> None:
        # Row lines are keyed by the width too: a new width draws them anew.
        self.virtual_size = Size(self.scrollable_content_region.width, len(self._order) + 1)
        self._scroll_to_cursor()

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        widths = self._column_widths(width)
        self._widths = widths
        if y == 0:
            return self.cache.strip(self._header_runs(widths), width, "process-table--header")
        index = self.scroll_offset.y + y - 1
        if not 0 <= index < len(self._order):
            return Strip.blank(width, self.cache.memo.base)
        # No metadata on the cells (a Style per segment, every time a row is drawn): a click
        # finds its row from where it landed (``on_click``).
        strip = self.cache.strip(self._row_runs(self._row(self._order[index]), widths), width)
        if index == self.cursor_row:
            return strip.apply_style(self.cache.memo.style("process-table--cursor"))
        return strip

    def _header_runs(self, widths: tuple[int, ...]) -> list[Run]:
        runs: list[Run] = []
        spans: list[tuple[int, int, str]] = []
        x = 0
        for c, w in zip(self._visible, widths, strict=True):
            label = c.label
            name = ""
            if c.key == self.sort_key:
                label += "▼" if self.sort_reverse else "▲"
                name = "process-table--sorted"
            text = label.rjust(w) if c.numeric else label.ljust(w)
            runs += [(" ", ""), (text[:w], name)]
            # Where this column's header was drawn (its gutter included), for clicks.
            spans.append((x, x + GUTTER + w, c.key))
            x += GUTTER + w
        self._header_spans = spans
        return runs

    def _row_runs(self, cells: Row, widths: tuple[int, ...]) -> list[Run]:
        runs: list[Run] = []
        prefix, prefix_cls = cells[TREE]
        command, command_cls = cells["command"]
        for c, w in zip(self._visible[:-1], widths[:-1], strict=True):
            text, cls = cells[c.key]
            text = text.rjust(w) if c.numeric else text.ljust(w)
            runs += [(" ", ""), (text[:w], cls)]
        runs.append((" ", ""))
        if self.cmd_offset:
            # Scrolled: the tree prefix scrolls away with the command, a mark says so.
            command = (prefix + command)[self.cmd_offset :]
            prefix, prefix_cls = "«", "process-table--muted"
        if prefix:
            runs.append((prefix, prefix_cls))
        runs.append((command, command_cls))
        return runs

    # ---- cursor -------------------------------------------------------------

    def _move_to(self, index: int, refresh: bool = True) -> None:
        old = self.cursor_row
        self.cursor_row = max(0, min(index, len(self._order) - 1))
        self._scroll_to_cursor()
        if refresh and old != self.cursor_row:
            self.refresh()

    def _scroll_to_cursor(self) -> None:
        visible = max(1, self.size.height - 1)
        top = self.scroll_offset.y
        if self.cursor_row < top:
            self.scroll_to(y=self.cursor_row, animate=False, immediate=True)
        elif self.cursor_row >= top + visible:
            self.scroll_to(y=self.cursor_row - visible + 1, animate=False, immediate=True)

    def action_move(self, step: int) -> None:
        self._move_to(self.cursor_row + step)

    def action_page(self, step: int) -> None:
        self._move_to(self.cursor_row + step * max(1, self.size.height - 2))

    def find(self, needle: str, step: int = 1) -> bool:
        """htop's F3: move to the next (``step`` 1), previous (-1) or first from here (0)
        row matching ``needle``, wrapping around; False when no row matches."""
        n = len(self._order)
        if not needle or n == 0:
            return False
        direction = -1 if step < 0 else 1
        for i in range(n):
            index = (self.cursor_row + step + direction * i) % n
            if matches(self._by_key[self._order[index]], needle):
                self._move_to(index)
                return True
        return False

    def action_hscroll(self, step: int) -> None:
        """Scroll the COMMAND column sideways to read long command lines."""
        longest = max(
            (len(row["command"][0]) + len(row[TREE][0]) for row in map(self._row, self._order)),
            default=0,
        )
        room = self._widths[-1] if self._widths else 0
        limit = max(0, longest - room + 1)
        offset = max(0, min(limit, self.cmd_offset + step * HSCROLL_STEP))
        if offset != self.cmd_offset:
            self.cmd_offset = offset
            self.refresh()

    def action_jump(self, index: int) -> None:
        self._move_to(index if index >= 0 else len(self._order) - 1)

    def action_open(self) -> None:
        p = self.selected
        if p is not None:
            self.post_message(ProcessOpened(p))

    def on_click(self, event: events.Click) -> None:
        # Resolved from where the pointer landed: line 0 is the header, where each of its
        # cells was drawn is kept with it; below it, the row drawn on that line.
        offset = event.get_content_offset(self)
        if offset is None:
            return
        if offset.y == 0:
            column_key = next((k for a, b, k in self._header_spans if a <= offset.x < b), None)
            if column_key is None:
                return
            # A click on the sorted column's header inverts it, as in htop.
            if column_key == self.sort_key:
                self.sort_reverse = not self.sort_reverse
            else:
                self.sort_by(column_key)
            return
        index = self.scroll_offset.y + offset.y - 1
        if not 0 <= index < len(self._order):
            return
        self._move_to(index)
        if event.chain >= 2:
            self.action_open()
