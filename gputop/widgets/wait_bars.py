"""One time bar per trainer: where its main thread spent the last interval."""

from __future__ import annotations

from typing import ClassVar

from gputop.model.frame import ProcessSample
from gputop.model.view import ScreenView, WaitSplit
from gputop.widgets.lines import Line, LineWidget, fit_runs

# One glyph per segment as well as one colour, so the bar reads without colour (NO_COLOR).
GLYPHS = {
    "cpu": "█",
    "runq": "▓",
    "throttled": "▚",
    "input": "▒",
    "h2d": "▙",
    "gpu": "░",
    "irq": "░",
    "io": "▤",
    "net": "▥",
    "collective": "▞",
    "other": "·",
    "blocked": "░",
}
SHORT = {
    "cpu": "cpu",
    "runq": "cpu-wait",
    "throttled": "throttled",
    "input": "batches",
    "h2d": "h2d-copy",
    "irq": "gpu/irq",
    "gpu": "gpu",
    "io": "disk-io",
    "net": "network",
    "collective": "collective",
    "other": "other",
    "blocked": "blocked",
}
# Where the full names do not fit (below ~80 columns).
COMPACT = {
    "cpu": "cpu",
    "runq": "wait",
    "throttled": "thr",
    "input": "in",
    "h2d": "h2d",
    "irq": "irq",
    "gpu": "gpu",
    "io": "io",
    "net": "net",
    "collective": "coll",
    "other": "oth",
    "blocked": "blk",
}
MAX_LINES = 3
LABEL_W = 14
COMPACT_LABEL_W = 8
MIN_BAR_W = 10


def label_text(pid: int, comm: str, width: int) -> str:
    """``3821 python3``, ``11128 demo_tra…`` or ``11128``: the pid, and the name where at least
    three characters of it fit (cut with "…"), never a fragment such as ``11128 de``."""
    head = str(pid)
    room = width - len(head) - 1
    if comm and len(comm) <= room:
        return f"{head} {comm}"
    if room >= 3 and comm:
        return f"{head} {comm[: room - 1]}…"
    return head[:width]


def bar_cells(split: WaitSplit, width: int) -> list[tuple[str, int]]:
    """(segment key, cells) runs filling ``width`` cells, rounded so they sum exactly."""
    total = sum(s.pct for s in split.segments) or 1.0
    runs: list[tuple[str, int]] = []
    acc = 0.0
    used = 0
    for s in split.segments:
        acc += s.pct
        end = round(width * acc / total)
        if end > used:
            runs.append((s.key, end - used))
            used = end
    return runs


def seg_name(key: str, names: dict[str, str], inferred: bool) -> str:
    """A part's name beside the bar; a throttled part inferred from ``cpu.stat`` ends in ``~``."""
    return names[key] + ("~" if inferred and key == "throttled" else "")


def legend(split: WaitSplit, names: dict[str, str] = SHORT, inferred: bool = False) -> str:
    """The numbers beside the bar: ``cpu 3 cpu-wait 10 batches 32 gpu 50 other 5``."""
    return " ".join(f"{seg_name(s.key, names, inferred)} {s.pct:.0f}" for s in split.segments)


def _inferred(p: ProcessSample) -> bool:
    return p.cpu_throttled_source == "cpu.stat"


class TrainerWaitBars(LineWidget):
    """Per trainer: on-CPU work | CPU wait | waiting for batches | waiting for the GPU | other.

    Under a cgroup CPU limit the CPU wait its limit held the trainer back is its own
    part (``throttled``; ``throttled~`` where inferred from ``cpu.stat``).

    The GPU part is measured where the probe watches the trainer's CUDA
    synchronization, and stands in as interrupt wake-ups (inferred, ``gpu/irq``)
    where it does not. Under /proc alone (no eBPF) the blocked time cannot be
    split by what the trainer waits on: the bar shows on-CPU | CPU wait |
    blocked and says so. Hidden when the frame has no trainer.
    """

    DEFAULT_CSS = """
    TrainerWaitBars {
        height: auto;
        max-height: 3;
        padding: 0 1;
        background: $surface;
    }
    TrainerWaitBars > .wait-bars--label { color: $text-muted; }
    TrainerWaitBars > .wait-bars--cpu { color: $text-success; }
    TrainerWaitBars > .wait-bars--runq { color: $text-error; }
    TrainerWaitBars > .wait-bars--throttled { color: $text-error; text-style: bold; }
    TrainerWaitBars > .wait-bars--input { color: $text-warning; }
    TrainerWaitBars > .wait-bars--irq { color: $text-primary; }
    TrainerWaitBars > .wait-bars--gpu { color: $text-accent; }
    TrainerWaitBars > .wait-bars--io { color: $text-warning; text-style: bold; }
    TrainerWaitBars > .wait-bars--net { color: $text-secondary; text-style: bold; }
    TrainerWaitBars > .wait-bars--h2d { color: $text-accent; text-style: bold; }
    TrainerWaitBars > .wait-bars--collective { color: $text-secondary; }
    TrainerWaitBars > .wait-bars--other { color: $text-muted; }
    TrainerWaitBars > .wait-bars--blocked { color: $text-primary; }
    TrainerWaitBars > .wait-bars--note { color: $text-muted; text-style: italic; }
    """
    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "wait-bars--label",
        "wait-bars--cpu",
        "wait-bars--runq",
        "wait-bars--throttled",
        "wait-bars--input",
        "wait-bars--irq",
        "wait-bars--gpu",
        "wait-bars--io",
        "wait-bars--net",
        "wait-bars--h2d",
        "wait-bars--collective",
        "wait-bars--other",
        "wait-bars--blocked",
        "wait-bars--note",
    }

    SELECTABLE = True

    def __init__(self, *, id: str | None = None) -> None:
        self._rows: list[tuple[ProcessSample, WaitSplit]] = []
        super().__init__(id=id)
        self.display = False

    @property
    def text(self) -> str:
        """The bars as plain text, one line per trainer."""
        return "\n".join(self.lines)

    def show(self, view: ScreenView) -> None:
        """Take the trainers of the newest frame (GPU holders first); repaint what changed."""
        frame = view.frame
        if frame is None:
            return
        rows = list(view.trainer_waits)
        if not rows and not self._rows:
            return  # hidden, and stays so
        self._rows = rows
        self.display = bool(rows)
        # Only a new number of lines changes the widget's size (a layout pass); new
        # values in the same lines repaint those lines, and unchanged text nothing.
        self.rebuild()

    def build(self, width: int) -> list[Line]:
        if not self._rows:
            return []
        return [fit_runs(line, width) for line in self._bar_lines(max(40, width))]

    def _bar_lines(self, width: int) -> list[Line]:
        out: list[Line] = []
        shown = self._rows[:MAX_LINES]
        more = len(self._rows) - len(shown)
        notes = []
        for i, (_p, split) in enumerate(shown):
            note = "" if split.measured else " (split needs eBPF)"
            if more and i == len(shown) - 1:
                note += f" +{more} more"
            notes.append(note)
        names, label_w = SHORT, LABEL_W
        widest = max(
            (
                len(legend(sp, SHORT, _inferred(p)) + n)
                for (p, sp), n in zip(shown, notes, strict=True)
            ),
            default=0,
        )
        if LABEL_W + MIN_BAR_W + widest + 4 > width:
            names, label_w = COMPACT, COMPACT_LABEL_W
            notes = [n.replace(" (split needs eBPF)", " (no eBPF)") for n in notes]
        # One bar width for every row, so the bars line up and compare.
        widest = max(
            (
                len(legend(sp, names, _inferred(p)) + n)
                for (p, sp), n in zip(shown, notes, strict=True)
            ),
            default=0,
        )
        bar_w = max(MIN_BAR_W, width - label_w - widest - 4)
        for (p, split), note in zip(shown, notes, strict=True):
            label = label_text(p.pid, p.comm, label_w).ljust(label_w)
            line: Line = [(label, "wait-bars--label"), (" ▕", "")]
            for key, cells in bar_cells(split, bar_w):
                line.append((GLYPHS[key] * cells, f"wait-bars--{key}"))
            line.append(("▏ ", ""))
            for j, seg in enumerate(split.segments):
                if j:
                    line.append((" ", ""))
                line.append((f"{seg_name(seg.key, names, _inferred(p))} ", "wait-bars--label"))
                line.append((f"{seg.pct:.0f}", f"wait-bars--{seg.key}"))
            if note:
                line.append((note, "wait-bars--note"))
            out.append(line)
        return out
