"""The GPU area: a panel per GPU, or one line per GPU when space is short.

Panels (``GpuPanel``) give each GPU five lines; with 8 GPUs on a 120x40 terminal
they would push the process table off the screen, so the area switches to the
compact list (``GpuList``): one line per GPU with GPU_UTIL, SM activity and power
sparklines side by side, on one time axis across GPUs. ``g`` switches by hand; the
choice then holds until pressed again.
"""

from __future__ import annotations

import math
from typing import ClassVar

from textual.app import ComposeResult
from textual.containers import Grid
from textual.widget import Widget

from gputop.model.frame import GpuSample
from gputop.model.view import ScreenView
from gputop.widgets.gpu_panel import NA, GpuPanel, finite, no_gpu_reason
from gputop.widgets.lines import Line, LineWidget, fit_runs
from gputop.widgets.sparkline import sparkline

PANEL_MIN_W = 38
PANEL_H = 5
METRICS = (
    ("util", "util", "gpu-list--util"),
    ("SM", "sm_active", "gpu-list--sm"),
    ("pwr", "power_pct", "gpu-list--power"),
)
SPARK_MIN_W = 4


def short_name(name: str) -> str:
    """The model without the vendor ("NVIDIA H100 80GB HBM3" -> "H100 80GB HBM3")."""
    return name.removeprefix("NVIDIA ").removeprefix("Tesla ")


class GpuList(LineWidget):
    """One line per GPU: index, model, three sparklines with their values, efficiency, memory."""

    DEFAULT_CSS = """
    GpuList { padding: 0 1; background: $surface; }
    GpuList > .gpu-list--title { text-style: bold; color: $text-accent; }
    GpuList > .gpu-list--label { color: $text-muted; }
    GpuList > .gpu-list--util { color: $text-warning; }
    GpuList > .gpu-list--sm { color: $text-success; }
    GpuList > .gpu-list--power { color: $text-primary; }
    GpuList > .gpu-list--na { color: $text-disabled; }
    GpuList > .gpu-list--warn { color: $text-error; text-style: bold; }
    """
    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "gpu-list--title",
        "gpu-list--label",
        "gpu-list--util",
        "gpu-list--sm",
        "gpu-list--power",
        "gpu-list--na",
        "gpu-list--warn",
    }

    def __init__(self, *, id: str | None = None) -> None:
        self.gpus: tuple[GpuSample, ...] = ()
        self.view: ScreenView | None = None
        self.reason = ""
        super().__init__(id=id)

    def show(self, view: ScreenView) -> None:
        """Take every GPU's newest sample and series from the view (or why there is none)."""
        frame = view.frame
        if frame is None:
            return
        self.view = view
        self.gpus = tuple(frame.gpus)
        self.reason = "" if frame.gpus else no_gpu_reason(frame)
        self.rebuild()

    def build(self, width: int) -> list[Line]:
        if not self.gpus:
            return [
                fit_runs(
                    [
                        ("no GPU — host signals only", "gpu-list--title"),
                        (f"  {self.reason or 'no GPU source is live'}", "gpu-list--label"),
                    ],
                    width,
                )
            ]
        idx_w = len(str(max(g.index for g in self.gpus)))
        label_w = max(len(label) for label, _, _ in METRICS)
        # Each metric: "  label " + sparkline + " 100%".
        metric_fixed = 2 + label_w + 1 + 5
        tails = [self._tail(g) for g in self.gpus]
        full_tail = max(sum(len(t) for t, _ in tail) for tail in tails)
        full_name = min(14, max(len(short_name(g.name)) for g in self.gpus))
        # Narrow: the model name goes first, then the efficiency/memory tail.
        choices = ((full_name, full_tail), (min(full_name, 9), full_tail), (0, full_tail), (0, 0))
        for name_w, tail_w in choices:
            head_w = 3 + idx_w + (1 + name_w if name_w else 0)
            spark_w = (width - head_w - tail_w - 3 * metric_fixed) // 3
            if spark_w >= SPARK_MIN_W:
                break
        spark_w = max(SPARK_MIN_W, spark_w)
        lines: list[Line] = []
        for gpu, tail in zip(self.gpus, tails, strict=True):
            name = f" {short_name(gpu.name)[:name_w]:<{name_w}}" if name_w else ""
            line: Line = [(f"GPU{gpu.index:<{idx_w}}{name}", "gpu-list--title")]
            for label, metric, cls in METRICS:
                value = finite(getattr(gpu, metric))
                view = self.view
                values = [] if view is None else view.gpu_series(gpu.uuid, metric, spark_w)
                line.append((f"  {label:<{label_w}} ", "gpu-list--label"))
                if value is None and (
                    view is None
                    or all(finite(v) is None for v in view.gpu_series(gpu.uuid, metric, 0))
                ):
                    line.append((NA.center(spark_w), "gpu-list--na"))
                else:
                    line.append((sparkline(values, spark_w), cls))
                shown = NA if value is None else f"{value:.0f}%"
                line.append((f"{shown:>5}", "gpu-list--na" if value is None else cls))
            if tail_w:
                line += tail
            lines.append(fit_runs(line, width))
        return lines

    @staticmethod
    def _tail(gpu: GpuSample) -> Line:
        eff = finite(gpu.efficiency)
        eff_txt = "eff n/a" if eff is None else f"eff {eff:.2f}"
        eff_cls = "gpu-list--warn" if eff is not None and eff < 0.5 else "gpu-list--label"
        used, total = gpu.mem_used_mib, gpu.mem_total_mib
        mem = NA if used is None or total is None else f"{used / 1024:.0f}/{total / 1024:.0f}G"
        tail: Line = [("  " + eff_txt, eff_cls), (f"  {mem}", "gpu-list--label")]
        if gpu.state != "ok":
            tail.append((f" [{gpu.state}]", "gpu-list--warn"))
        elif gpu.throttle:
            tail.append((" thr", "gpu-list--warn"))
        return tail


class GpuArea(Widget):
    """Panels in a grid, or the one-line-per-GPU list, for the GPUs of the newest frame."""

    DEFAULT_CSS = """
    GpuArea { height: auto; }
    GpuArea > Grid { height: auto; grid-gutter: 0 1; }
    GpuArea.-compact > Grid { display: none; }
    GpuArea > GpuList { display: none; }
    GpuArea.-compact > GpuList { display: block; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.pinned: bool | None = None
        self.compact = False
        self.width = 80
        self.budget = 12
        self._uuids: tuple[str | None, ...] = ()
        self._panels: list[GpuPanel] = []
        self._last: ScreenView | None = None

    def compose(self) -> ComposeResult:
        yield Grid()
        yield GpuList()

    @property
    def count(self) -> int:
        """GPUs shown (1 for the "no GPU" notice)."""
        return max(1, len(self._uuids))

    @property
    def rows(self) -> int:
        """The lines the area takes in its current mode (a layout need not have run)."""
        if self.compact:
            return self.count
        if self._uuids == (None,):
            return 3
        cols = max(1, min(self.count, self.width // PANEL_MIN_W))
        return math.ceil(self.count / cols) * PANEL_H

    def fit(self, width: int, budget_rows: int) -> None:
        """The terminal's width and the lines the GPUs may take; picks panels or the list."""
        self.width, self.budget = width, budget_rows
        self._choose()

    def toggle(self) -> None:
        """Switch between panels and the list by hand (the choice holds until toggled again)."""
        self.pinned = not self.compact
        self._choose()

    def auto_compact(self) -> bool:
        """Whether the list is chosen automatically: the panels would take more than the budget."""
        n = self.count
        if self._uuids == (None,):
            return self.budget < 3
        cols = max(1, min(n, self.width // PANEL_MIN_W))
        return math.ceil(n / cols) * PANEL_H > self.budget

    def _choose(self) -> None:
        compact = self.auto_compact() if self.pinned is None else self.pinned
        changed = compact != self.compact
        self.compact = compact
        self.set_class(compact, "-compact")
        self._layout_grid()
        if changed and self._last is not None:
            # The mode that was hidden did no work; fill it now, not on the next tick.
            self.show(self._last)

    def on_mount(self) -> None:
        # A resize can reach fit() before the children exist; lay them out now.
        self._choose()

    def _layout_grid(self) -> None:
        n = self.count
        cols = max(1, min(n, self.width // PANEL_MIN_W))
        grids = self.query(Grid)
        if not grids:
            return
        grid = grids.first()
        grid.styles.grid_size_columns = cols
        grid.styles.grid_size_rows = -(-n // cols)
        grid.styles.grid_rows = "3" if self._uuids == (None,) else str(PANEL_H)

    def show(self, view: ScreenView) -> None:
        """Render the newest frame's GPUs in the current mode (only that mode does any work)."""
        frame = view.frame
        if frame is None:
            return
        self._last = view
        uuids: tuple[str | None, ...] = tuple(g.uuid for g in frame.gpus) or (None,)
        if uuids != self._uuids:
            self._uuids = uuids
            self._panels = [GpuPanel(uuid) for uuid in uuids]
            grid = self.query_one(Grid)
            grid.remove_children()
            grid.mount_all(self._panels)
            self._choose()
        if self.compact:
            self.query_one(GpuList).show(view)
            return
        for panel in self._panels:
            panel.show(view)
