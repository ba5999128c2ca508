"""One GPU's panel: GPU_UTIL, SM activity and power on one time axis, plus its numbers."""

from __future__ import annotations

import math
from typing import ClassVar

from gputop.model.frame import Frame, GpuSample
from gputop.model.view import ScreenView
from gputop.widgets.lines import Line, LineWidget
from gputop.widgets.sparkline import sparkline

LABEL_W = 6
VALUE_W = 6
NA = "n/a"


def finite(v: float | None) -> float | None:
    """``v``, or None when it is missing, NaN or infinite (a broken reading is not a number)."""
    return v if v is not None and math.isfinite(v) else None


def no_gpu_reason(frame: Frame) -> str:
    """Why the frame has no GPU, from the sources' notes ("" when they do not say)."""
    note = next((n for n in frame.sources.notes if n.startswith("gpu")), "")
    return note.removeprefix("gpu: ")


def _pct(v: float | None) -> str:
    v = finite(v)
    return NA if v is None else f"{v:.0f}%"


def _gib(mib: int | None) -> str:
    return NA if mib is None else f"{mib / 1024:.1f}"


def _gb_s(kb_s: float) -> str:
    return f"{kb_s / 1e6:.1f} GB/s"


def pcie_text(gpu: GpuSample) -> tuple[str, bool] | None:
    """``PCIe Gen3 x16/Gen5 x16 ↓2.4 GB/s ↑0.1 GB/s``: the link now against its maximum, the
    throughput into (↓) and out of (↑) the GPU, and whether it runs below its maximum;
    None where NVML does not report the link."""
    if gpu.pcie_gen is None or gpu.pcie_width is None:
        return None
    text = f"PCIe Gen{gpu.pcie_gen} x{gpu.pcie_width}"
    below = False
    if gpu.pcie_gen_max is not None and gpu.pcie_width_max is not None:
        text += f"/Gen{gpu.pcie_gen_max} x{gpu.pcie_width_max}"
        below = gpu.pcie_gen < gpu.pcie_gen_max or gpu.pcie_width < gpu.pcie_width_max
    if gpu.pcie_rx_kb_s is not None:
        text += f" ↓{_gb_s(gpu.pcie_rx_kb_s)}"
    if gpu.pcie_tx_kb_s is not None:
        text += f" ↑{_gb_s(gpu.pcie_tx_kb_s)}"
    return text, below


class GpuPanel(LineWidget):
    """A line-based panel for one GPU, or the "no GPU" notice when ``gpu`` is None.

    Lines are built as plain strings once per frame and only the lines whose
    text changed are repainted; the three sparklines share the right edge (now)
    and the width, so they read as one time axis, also across panels of equal width.
    """

    DEFAULT_CSS = """
    GpuPanel {
        height: 5;
        width: 1fr;
        padding: 0 1;
        background: $surface;
    }
    GpuPanel.-nogpu { height: 3; }
    """
    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "gpu-panel--title",
        "gpu-panel--label",
        "gpu-panel--util",
        "gpu-panel--sm",
        "gpu-panel--power",
        "gpu-panel--na",
        "gpu-panel--warn",
    }
    DEFAULT_CSS += """
    GpuPanel > .gpu-panel--title { text-style: bold; color: $text-accent; }
    GpuPanel > .gpu-panel--label { color: $text-muted; }
    GpuPanel > .gpu-panel--util { color: $text-warning; }
    GpuPanel > .gpu-panel--sm { color: $text-success; }
    GpuPanel > .gpu-panel--power { color: $text-primary; }
    GpuPanel > .gpu-panel--na { color: $text-disabled; }
    GpuPanel > .gpu-panel--warn { color: $text-error; text-style: bold; }
    """

    SIZED_BY_LINES = False

    def __init__(self, uuid: str | None, *, id: str | None = None) -> None:
        # Set before Widget.__init__, which may already call notify_style_update.
        self.uuid = uuid
        self._view: ScreenView | None = None
        super().__init__(id=id)
        if uuid is None:
            self.add_class("-nogpu")

    def show(self, view: ScreenView) -> None:
        """Take this GPU's newest sample and series (or why there is no GPU) from the view."""
        self._view = view
        self.rebuild()

    def line_width(self) -> int:
        # Before the first layout there is nothing to draw; on_resize builds the lines.
        return self.content_size.width

    def build(self, width: int) -> list[Line]:
        view = self._view
        frame = None if view is None else view.frame
        gpu = None
        if frame is not None:
            gpu = next((g for g in frame.gpus if g.uuid == self.uuid), None)
        if view is None or gpu is None:
            reason = "" if frame is None else no_gpu_reason(frame)
            return [
                [("no GPU — host signals only", "gpu-panel--title")],
                [(reason or "no GPU source is live", "gpu-panel--label")],
                [],
            ]
        spark_w = max(4, width - LABEL_W - VALUE_W)
        title = f"GPU{gpu.index} {gpu.name}"
        if gpu.state != "ok":
            title += f" [{gpu.state}]"
        mem = f"{_gib(gpu.mem_used_mib)}/{_gib(gpu.mem_total_mib)} GiB"
        gap = max(1, width - len(title) - len(mem))
        lines: list[Line] = [
            [
                (title[: max(0, width - len(mem) - 1)], "gpu-panel--title"),
                (" " * gap, ""),
                (mem, "gpu-panel--label"),
            ],
        ]
        rows = (
            ("util", "util", gpu.util, "gpu-panel--util"),
            ("SM", "sm_active", gpu.sm_active, "gpu-panel--sm"),
            ("power", "power_pct", gpu.power_pct, "gpu-panel--power"),
        )
        for label, metric, value, cls in rows:
            values = view.gpu_series(gpu.uuid, metric, spark_w)
            vcls = "gpu-panel--na" if value is None else cls
            if value is None and all(v is None for v in view.gpu_series(gpu.uuid, metric, 0)):
                spark = NA.center(spark_w) if spark_w > 6 else NA
                spark_cls = "gpu-panel--na"
            else:
                spark = sparkline(values, spark_w)
                spark_cls = cls
            lines.append(
                [
                    (f"{label:<{LABEL_W}}", "gpu-panel--label"),
                    (spark, spark_cls),
                    (f"{_pct(value):>{VALUE_W}}", vcls),
                ]
            )
        eff = finite(gpu.efficiency)
        eff_txt = "eff n/a" if eff is None else f"eff {eff:.2f}"
        power = (
            f"{gpu.power_w:.0f}/{gpu.power_limit_w:.0f} W"
            if finite(gpu.power_w) is not None and finite(gpu.power_limit_w)
            else "power n/a"
        )
        info: list[tuple[str, str]] = [
            (eff_txt, "gpu-panel--warn" if eff is not None and eff < 0.5 else "gpu-panel--label"),
            (f"  {power}", "gpu-panel--label"),
        ]
        if gpu.throttle:
            info.append(("  thr: " + ",".join(gpu.throttle), "gpu-panel--warn"))
        else:
            info.append(("  no throttle", "gpu-panel--label"))
        pcie = pcie_text(gpu)
        if pcie is not None:
            # Below its maximum is worth a look only while it copies (the link trains down
            # when idle): the verdict names a link that stayed below it; here it is marked.
            info.append((f"  {pcie[0]}", "gpu-panel--warn" if pcie[1] else "gpu-panel--label"))
        if gpu.sm_source == "dcgm":
            # Not NVML GPM: read from the node's dcgm-exporter (docs/nvml.md).
            info.append(("  SM: dcgm", "gpu-panel--label"))
        lines.append(info)
        return lines
