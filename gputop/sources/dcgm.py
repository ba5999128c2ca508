"""SM activity from a dcgm-exporter on the node, for GPUs without GPM (A100, V100, L4...).

GPM (NVML, Hopper and newer) stays first: ``DcgmFill`` wraps the GPU source and
fills ``sm_active``, ``sm_occupancy``, ``tensor_active`` and ``dram_active``
only where the GPU source left ``sm_active`` n/a, matching GPUs by UUID, and
marks those GPUs ``sm_source = "dcgm"``.

dcgm-exporter serves DCGM's profiling fields as ratios (0-1) with the labels
``gpu``, ``UUID``, ``modelName``, ``Hostname`` (plus ``pci_bus_id``, ``device``
and, on Kubernetes, ``pod``/``namespace``/``container``); ``GPU_I_ID`` marks a
MIG instance, which is not the whole GPU and is left out. A field DCGM cannot
fill is a huge "blank" number: anything outside 0-1 is n/a.

The endpoint is read on a thread of its own, every ``interval_s``, with a short
timeout, so a slow or hung exporter never delays a tick; a reading older than
``stale_after_s`` (the exporter stopped answering) is dropped, never shown as
current. The thread starts only once a GPU lacks SM activity: a host without
GPUs, or with GPM everywhere, never fetches anything.
"""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from gputop.model.frame import GpuReading, GpuSample, SourceStatus
from gputop.sources.base import GpuSource

DEFAULT_URL = "http://localhost:9400/metrics"
# dcgm-exporter field -> GpuSample field (DCGM reports ratios; the frame holds %).
FIELDS: Mapping[str, str] = {
    "DCGM_FI_PROF_SM_ACTIVE": "sm_active",
    "DCGM_FI_PROF_SM_OCCUPANCY": "sm_occupancy",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": "tensor_active",
    "DCGM_FI_PROF_DRAM_ACTIVE": "dram_active",
}
FETCH_TIMEOUT_S = 2.0
MAX_BODY_BYTES = 16 * 1024 * 1024


def parse_metrics(text: str) -> dict[str, dict[str, float | None]]:
    """UUID -> {frame field: percent or None} from dcgm-exporter's text format.

    A GPU appears once any profiling field is present for it; a field missing
    from the page is absent from its dict, a blank or out-of-range one is None.
    Raises ValueError when the page is not Prometheus text.
    """
    # Here, not at the top: prometheus_client's package brings its HTTP server and
    # exposition (~1 MiB), which the TUI needs only once an exporter answered.
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, dict[str, float | None]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name = FIELDS.get(sample.name)
            if name is None:
                continue
            uuid = sample.labels.get("UUID", "")
            if not uuid or sample.labels.get("GPU_I_ID"):
                continue
            v = sample.value
            out.setdefault(uuid, {})[name] = (
                round(100.0 * v, 2) if v == v and 0.0 <= v <= 1.0 else None
            )
    return out


@dataclass
class _Latest:
    """The newest successful fetch and why the last attempt failed, if it did."""

    values: dict[str, dict[str, float | None]] = field(default_factory=dict)
    at: float | None = None
    error: str | None = None


# Looking for an exporter nobody named (the default URL): once every 10 s until one answers.
AUTO_RETRY_S = 10.0


class DcgmReader:
    """Polls one dcgm-exporter URL on a background thread; ``latest()`` never blocks."""

    def __init__(
        self,
        url: str = DEFAULT_URL,
        interval_s: float = 1.0,
        stale_after_s: float = 10.0,
        timeout_s: float = FETCH_TIMEOUT_S,
        absent_retry_s: float | None = None,
    ) -> None:
        self.url = url
        self.interval_s = max(0.1, interval_s)
        # Until the exporter first answers, look for it only this often (None: every interval):
        # where none runs, a connection attempt every tick would be most of this thread's cost.
        self.absent_retry_s = absent_retry_s
        self.stale_after_s = stale_after_s
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._latest = _Latest()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start polling (idempotent)."""
        with self._lock:
            if self._thread is not None or self._stop.is_set():
                return
            self._thread = threading.Thread(target=self._run, name="gputop-dcgm", daemon=True)
            self._thread.start()

    def close(self) -> None:
        self._stop.set()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(timeout=self.timeout_s + 1.0)

    def _run(self) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            self.fetch_once()
            period = self.interval_s
            if self.absent_retry_s is not None and not self.answered:
                period = max(period, self.absent_retry_s)
            self._stop.wait(max(0.0, period - (time.monotonic() - began)))

    def fetch_once(self) -> None:
        """One fetch; the result (or why it failed) becomes ``latest()``."""
        try:
            with urllib.request.urlopen(self.url, timeout=self.timeout_s) as r:
                body = r.read(MAX_BODY_BYTES + 1)
            if len(body) > MAX_BODY_BYTES:
                raise ValueError("page larger than 16 MiB")
            values = parse_metrics(body.decode("utf-8", "replace"))
        except (OSError, ValueError) as exc:
            with self._lock:
                self._latest.error = _why(exc)
            return
        with self._lock:
            self._latest = _Latest(values, time.monotonic(), None)

    @property
    def answered(self) -> bool:
        """Whether the exporter ever answered (a stale one did; an absent one never)."""
        with self._lock:
            return self._latest.at is not None

    def latest(self) -> tuple[dict[str, dict[str, float | None]], str | None]:
        """The newest values not older than ``stale_after_s``, and what is wrong, if anything."""
        with self._lock:
            latest = self._latest
        age = None if latest.at is None else time.monotonic() - latest.at
        if age is None:
            return {}, latest.error or "no answer yet"
        if age > self.stale_after_s:
            why = f"last answer {age:.0f} s ago"
            return {}, f"{why}: {latest.error}" if latest.error else why
        return latest.values, None


def _why(exc: BaseException) -> str:
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code}"
    if isinstance(exc, urllib.error.URLError):
        return str(exc.reason)
    return str(exc) or type(exc).__name__


class DcgmFill:
    """A GpuSource: the wrapped source's GPUs, with SM activity from dcgm-exporter where
    the wrapped source has none. ``auto`` (no --dcgm given): a missing exporter is normal
    and only said once a GPU needs it."""

    def __init__(self, inner: GpuSource, reader: DcgmReader, auto: bool = False) -> None:
        self.inner = inner
        self.reader = reader
        self.auto = auto
        self._note: str | None = None

    @property
    def status(self) -> SourceStatus:
        st = self.inner.status
        if self._note is None:
            return st
        reason = f"{st.reason}; {self._note}" if st.reason else self._note
        return replace(st, reason=reason)

    def open(self) -> None:
        self.inner.open()

    def close(self) -> None:
        self.reader.close()
        self.inner.close()

    def read(self) -> GpuReading:
        reading = self.inner.read()
        wanting = [g for g in reading.gpus if g.sm_active is None and g.state == "ok"]
        if not wanting:
            self._note = None
            return reading
        self.reader.start()
        values, problem = self.reader.latest()
        filled: dict[int, GpuSample] = {}
        for g in wanting:
            got = values.get(g.uuid, {})
            if got.get("sm_active") is None:
                continue
            filled[g.index] = replace(
                g,
                sm_active=got["sm_active"],
                sm_occupancy=got.get("sm_occupancy"),
                tensor_active=got.get("tensor_active"),
                dram_active=got.get("dram_active"),
                sm_source="dcgm",
            )
        self._note = self._say(reading.gpus, wanting, filled, values, problem)
        if not filled:
            return reading
        gpus = tuple(filled.get(g.index, g) for g in reading.gpus)
        return replace(reading, gpus=gpus)

    def _say(
        self,
        gpus: tuple[GpuSample, ...],
        wanting: list[GpuSample],
        filled: Mapping[int, GpuSample],
        values: Mapping[str, object],
        problem: str | None,
    ) -> str | None:
        where = f"dcgm-exporter at {self.reader.url}"
        if problem is not None:
            if self.auto and not self.reader.answered:
                return f"no {where} for SM activity (--dcgm URL names one)"
            return f"SM activity from {where} n/a: {problem}"
        said = []
        if filled:
            # Overrides the GPU source's own "SM activity n/a" note for these GPUs.
            said.append(
                f"GPU {', '.join(str(i) for i in sorted(filled))}: SM activity from {where}"
            )
        missing = [g for g in wanting if g.index not in filled]
        if missing:
            known = {g.uuid for g in gpus}
            strangers = sorted(set(values) - known)
            text = f"{where} has no SM activity for GPU {', '.join(str(g.index) for g in missing)}"
            if strangers:
                text += (
                    f" (it reports {', '.join(strangers)}, which this host's NVML does not list)"
                )
            said.append(text)
        return "; ".join(said) or None
