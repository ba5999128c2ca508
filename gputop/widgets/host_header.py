"""The htop-style header: per-CPU meters, memory, load, CPU pressure, where the jobs may run.

Up to a few dozen CPUs each get an htop meter (``  3[||||||     45.2%]``); on
bigger hosts CPUs are drawn in groups, one block character per CPU with the
group's average, so 256 CPUs still fit in four lines. On a small terminal the
whole header is one line.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import ClassVar

from gputop.model.frame import HostSample
from gputop.model.view import Job, ScreenView
from gputop.widgets.lines import Line, LineWidget, fit_runs

BLOCKS = "▁▂▃▄▅▆▇█"
METER_MIN_W = 16
GROUP_SIZES = (8, 16, 32, 64, 128, 256, 512, 1024)


def level_class(pct: float) -> str:
    """The colour of a CPU's load: calm, busy, saturated."""
    if pct >= 90.0:
        return "host-header--high"
    if pct >= 60.0:
        return "host-header--mid"
    return "host-header--low"


def _finite(v: float) -> float:
    return v if math.isfinite(v) else 0.0


def meter(label: str, pct: float, width: int, value: str, label_cls: str = "") -> Line:
    """``label[||||||    value]``: the bar fills ``pct`` of the inside; the value ends it."""
    pct = min(100.0, max(0.0, _finite(pct)))
    inner = max(1, width - len(label) - 2)
    value = value[:inner]
    filled = round(pct / 100.0 * inner)
    free = inner - len(value)
    bar_cls = level_class(pct)
    runs: Line = [(label, label_cls or "host-header--label"), ("[", "host-header--label")]
    if filled <= free:
        runs += [("|" * filled, bar_cls), (" " * (free - filled), "")]
        runs.append((value, "host-header--value"))
    else:
        # The bar reaches under the value: the value is drawn over it, in the bar's colour.
        runs += [("|" * free, bar_cls), (value, bar_cls)]
    runs.append(("]", "host-header--label"))
    return runs


def blocks(values: Sequence[float]) -> Line:
    """One block character per value, coloured by load; runs merged by colour."""
    runs: Line = []
    for v in values:
        v = min(100.0, max(0.0, _finite(v)))
        ch = BLOCKS[round(v / 100.0 * (len(BLOCKS) - 1))]
        cls = level_class(v)
        if runs and runs[-1][1] == cls:
            runs[-1] = (runs[-1][0] + ch, cls)
        else:
            runs.append((ch, cls))
    return runs


def shrink(values: Sequence[float], n: int) -> list[float]:
    """``values`` averaged down to at most ``n`` buckets of consecutive entries."""
    if len(values) <= n:
        return list(values)
    size = math.ceil(len(values) / n)
    return [
        sum(_finite(v) for v in values[i : i + size]) / len(values[i : i + size])
        for i in range(0, len(values), size)
    ]


def _gib(mib: int) -> str:
    return f"{mib / 1024:.1f}G"


class HostHeader(LineWidget):
    """CPU meters (or CPU groups), memory, load, PSI and the jobs' CPUs.

    ``fit`` sets how many lines the CPU meters may take (0: the one-line form);
    the app calls it when the terminal is resized.
    """

    DEFAULT_CSS = """
    HostHeader { height: 1; padding: 0 1; background: $surface; }
    HostHeader > .host-header--label { color: $text-accent; text-style: bold; }
    HostHeader > .host-header--value { color: $text-muted; }
    HostHeader > .host-header--low { color: $text-success; }
    HostHeader > .host-header--mid { color: $text-warning; }
    HostHeader > .host-header--high { color: $text-error; }
    HostHeader > .host-header--job { color: $text; text-style: bold reverse; }
    HostHeader > .host-header--warn { color: $text-error; text-style: bold; }
    HostHeader > .host-header--muted { color: $text-muted; }
    """
    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "host-header--label",
        "host-header--value",
        "host-header--low",
        "host-header--mid",
        "host-header--high",
        "host-header--job",
        "host-header--warn",
        "host-header--muted",
    }

    def __init__(self, *, id: str | None = None) -> None:
        self.host: HostSample | None = None
        self.jobs: list[Job] = []
        self.throttled: dict[int, float] = {}
        self.cpu_rows = 0
        super().__init__(id=id)

    def fit(self, cpu_rows: int) -> None:
        """Let the CPU meters take up to ``cpu_rows`` lines; 0 folds the header to one line."""
        if cpu_rows != self.cpu_rows:
            self.cpu_rows = cpu_rows
            self.rebuild(force=True)

    def show(self, view: ScreenView) -> None:
        """Take the newest frame's host sample and the watched processes' CPU affinity."""
        frame = view.frame
        if frame is None:
            return
        self.host = frame.host
        self.jobs = list(view.jobs)
        self.throttled = view.job_throttled
        self.rebuild()

    # ---- lines ----------------------------------------------------------------

    def build(self, width: int) -> list[Line]:
        host = self.host
        if host is None:
            return [[("waiting for the first host sample…", "host-header--muted")]]
        if self.cpu_rows <= 0:
            return [fit_runs(self._one_line(host, width), width)]
        lines = self._cpu_lines(host, width, self.cpu_rows)
        lines += self._info_lines(host, width)
        return lines

    def _job_set(self) -> set[int]:
        cpus: set[int] = set()
        for job in self.jobs:
            cpus.update(job.cpus)
        return cpus

    def _cpu_lines(self, host: HostSample, width: int, max_rows: int) -> list[Line]:
        per_cpu = host.per_cpu_pct
        n = len(per_cpu)
        if n == 0:
            return [meter("CPU", host.cpu_pct, min(width, 40), f"{_finite(host.cpu_pct):.1f}%")]
        rows = min(max_rows, math.ceil(n / max(1, width // 28)))
        cols = math.ceil(n / rows)
        if width // cols >= METER_MIN_W:
            return self._meters(per_cpu, width, cols)
        return self._groups(per_cpu, width, max_rows)

    def _meters(self, per_cpu: Sequence[float], width: int, cols: int) -> list[Line]:
        n = len(per_cpu)
        rows = math.ceil(n / cols)
        gap = 1
        mw = (width - gap * (cols - 1)) // cols
        label_w = len(str(n - 1))
        jobs = self._job_set()
        marked = bool(jobs) and len(jobs) < n
        lines: list[Line] = []
        for r in range(rows):
            line: Line = []
            # Column-major like htop: the first column holds CPUs 0..rows-1.
            for c in range(cols):
                cpu = c * rows + r
                if cpu >= n:
                    break
                if c:
                    line.append((" " * gap, ""))
                pct = _finite(per_cpu[cpu])
                label_cls = "host-header--job" if marked and cpu in jobs else ""
                line += meter(f"{cpu:>{label_w}}", pct, mw, f"{pct:.1f}%", label_cls=label_cls)
            lines.append(line)
        return lines

    def _groups(self, per_cpu: Sequence[float], width: int, max_rows: int) -> list[Line]:
        n = len(per_cpu)
        label_w = len(str(n - 1)) * 2 + 1
        chosen = GROUP_SIZES[-1]
        per_line = 1
        for size in GROUP_SIZES:
            item_w = label_w + 1 + size + 5
            per_line = max(1, (width + 1) // (item_w + 1))
            if math.ceil(n / size / per_line) <= max_rows or size >= n:
                chosen = size
                break
        lines: list[Line] = []
        line: Line = []
        for k, start in enumerate(range(0, n, chosen)):
            group = per_cpu[start : start + chosen]
            if k and k % per_line == 0:
                lines.append(line)
                line = []
            if line:
                line.append((" ", ""))
            avg = sum(_finite(v) for v in group) / len(group)
            label = f"{start}-{start + len(group) - 1}"
            line.append((f"{label:>{label_w}} ", "host-header--label"))
            line += blocks(group)
            line.append((" " * (chosen - len(group)), ""))
            line.append((f"{avg:>4.0f}%", "host-header--value"))
        if line:
            lines.append(line)
        if len(lines) > max_rows:
            lines = lines[:max_rows]
        return [fit_runs(x, width) for x in lines]

    def _info_items(self, host: HostSample, compact: bool) -> list[Line]:
        items: list[Line] = []
        overloaded = host.load1 > host.ncpu
        load_cls = "host-header--warn" if overloaded else ""
        if compact:
            items.append([("load ", "host-header--label"), (f"{host.load1:.2f}", load_cls)])
        else:
            items.append(
                [
                    ("Load ", "host-header--label"),
                    (f"{host.load1:.2f}", load_cls),
                    (f" {host.load5:.2f} {host.load15:.2f}", "host-header--value"),
                    (f" ({host.ncpu} CPUs)", "host-header--muted"),
                ]
            )
        some, full = host.psi_cpu_some, host.psi_cpu_full
        psi: Line = [("PSI ", "host-header--label")]
        if some is None:
            psi.append(("n/a", "host-header--muted"))
        else:
            psi.append((f"{some:.0f}%", "host-header--warn" if some >= 20.0 else ""))
            if not compact:
                psi[-1] = (f"some {some:.1f}%", psi[-1][1])
                if full is not None:
                    psi.append((f" full {full:.1f}%", "host-header--value"))
        items.append(psi)
        # I/O pressure beside it, where this kernel reports it: tasks stalled on storage.
        io = host.psi_io_some
        if io is not None:
            label = "io " if compact else "I/O PSI some "
            items.append(
                [
                    (label, "host-header--label"),
                    (
                        f"{io:.0f}%" if compact else f"{io:.1f}%",
                        "host-header--warn" if io >= 20.0 else "",
                    ),
                ]
            )
        if not compact and host.procs_running:
            items.append([("Run ", "host-header--label"), (str(host.procs_running), "")])
        if self.jobs:
            # Jobs that may run on the same CPUs (and under the same limit, throttled
            # alike) share one entry.
            by_set: dict[tuple[str, int, float | None, float | None], list[int]] = {}
            for job in self.jobs:
                thr = self.throttled.get(job.pid)
                key = (job.cpus_text, len(job.cpus), job.quota, None if thr is None else round(thr))
                by_set.setdefault(key, []).append(job.pid)
            jobs: Line = [("jobs " if compact else "jobs may run on ", "host-header--label")]
            for k, ((cpus_text, n_cpus, quota, thr), pids) in enumerate(by_set.items()):
                everywhere = n_cpus >= host.ncpu
                if compact:
                    where = "all" if everywhere else cpus_text
                    if quota is not None:
                        where += f"/{quota:g}"
                    jobs.append(((" " if k else "") + where, ""))
                    if thr is not None:
                        jobs.append((f" thr {thr:.0f}%", "host-header--warn"))
                    jobs.append((":", ""))
                    jobs.append((",".join(map(str, pids)), "host-header--muted"))
                    continue
                where = (
                    f"all {host.ncpu} CPUs"
                    if everywhere
                    else f"CPU{'s' if n_cpus != 1 else ''} {cpus_text} ({n_cpus} of {host.ncpu})"
                )
                if quota is not None:
                    where += f", cgroup limit {quota:g} CPUs"
                jobs.append(((" · " if k else "") + where, ""))
                if thr is not None:
                    jobs.append((f", throttled {thr:.0f}% of periods", "host-header--warn"))
                jobs.append((f" (pid {', '.join(map(str, pids))})", "host-header--muted"))
            items.append(jobs)
        return items

    def _info_lines(self, host: HostSample, width: int) -> list[Line]:
        mem_w = max(24, min(40, width // 3))
        used, total = host.mem_used_mib, host.mem_total_mib
        mem_pct = 100.0 * used / total if total else 0.0
        items = [meter("Mem", mem_pct, mem_w, f"{_gib(used)}/{_gib(total)}")]
        items += self._info_items(host, compact=False)
        lines: list[Line] = []
        line: Line = []
        used_w = 0
        for item in items:
            w = sum(len(t) for t, _ in item)
            if line and used_w + 2 + w > width:
                lines.append(line)
                line, used_w = [], 0
            if line:
                line.append(("  ", ""))
                used_w += 2
            line += item
            used_w += w
        if line:
            lines.append(line)
        return [fit_runs(x, width) for x in lines[:2]]

    def _one_line(self, host: HostSample, width: int) -> Line:
        per_cpu = host.per_cpu_pct or (host.cpu_pct,)
        room = max(4, min(32, width // 5))
        runs: Line = [("CPU", "host-header--label"), ("[", "host-header--label")]
        runs += blocks(shrink(per_cpu, room))
        runs.append((f" {_finite(host.cpu_pct):.0f}%", "host-header--value"))
        runs.append(("]", "host-header--label"))
        used, total = host.mem_used_mib, host.mem_total_mib
        mem_pct = 100.0 * used / total if total else 0.0
        runs += [
            (" Mem", "host-header--label"),
            ("[", "host-header--label"),
            (f"{mem_pct:.0f}%", level_class(mem_pct)),
            (f" {used / 1024:.1f}/{_gib(total)}", "host-header--value"),
            ("]", "host-header--label"),
        ]
        for item in self._info_items(host, compact=True):
            runs.append((" ", ""))
            runs += item
        return runs


def header_rows(width: int, height: int) -> int:
    """How many lines the CPU meters get at this terminal size (0: the one-line header)."""
    if height < 32 or width < 90:
        return 0
    return max(2, min(8, (height - 24) // 4))
