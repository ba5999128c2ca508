"""NvmlSource: GPUs through nvidia-ml-py, and probe_nvml() for `doctor` and snapshots.

What each number means (docs/nvml.md has the long version):

* ``util`` is GPU_UTIL, ``nvmlDeviceGetUtilizationRates().gpu``: the share of time
  any kernel ran. A single tiny kernel keeps it at 100 %.
* ``sm_active`` is GPM ``SM_UTIL`` between two GPM samples at least 100 ms apart:
  the share of SMs that were busy. ``None`` where the GPU cannot report it.

Cost: NVML calls take driver locks, so each tick makes only the calls the frame
needs; static facts are read once at open, and the process lists, per-process SM
share and the enforced power limit are refreshed every ``process_interval_s``.
Every NVML error is turned into "not available" for that value, remembered per
device and metric when it is permanent, or into a ``lost`` device.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from gputop.model.frame import GpuProcess, GpuReading, GpuSample, SourceStatus
from gputop.sources.nvml_decode import (
    DeviceLost,
    cuda_text,
    decode_throttle,
    gpu_list,
    init_failure,
    text,
    valid,
)
from gputop.sources.nvml_gpm import (
    GPM_ANY_TENSOR_UTIL,
    GPM_DRAM_BW_UTIL,
    GPM_SM_OCCUPANCY,
    GPM_SM_UTIL,
    WHOLE,
    DeviceGpm,
    gpm_support,
)
from gputop.sources.pidns import HostPidMap

try:
    import pynvml
except ImportError:  # pragma: no cover - nvidia-ml-py is a dependency; still degrade
    pynvml = None

PROCESS_REFRESH_S = 2.0
_TEMPERATURE_GPU = 0
_CLOCK_SM = 1
_PCIE_TX_BYTES = 0  # nvmlPcieUtilCounter_t
_PCIE_RX_BYTES = 1

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class GpuFacts:
    """Static facts about one GPU, for `gputop doctor` and snapshot bundles."""

    index: int
    uuid: str
    name: str
    gpm_supported: bool | None
    gpm_reason: str | None


@dataclass(frozen=True, slots=True)
class NvmlFacts:
    """Whether NVML works here, why not, and the versions and GPUs it reports."""

    ok: bool
    reason: str | None = None
    fix: str | None = None
    driver_version: str | None = None
    nvml_version: str | None = None
    cuda_version: str | None = None
    gpus: tuple[GpuFacts, ...] = ()


def probe_nvml() -> NvmlFacts:
    """Open NVML exactly as the source does, report what it found, shut it down. Never raises."""
    src = NvmlSource()
    try:
        src.open()
        return src.facts
    except Exception as exc:  # noqa: BLE001 - doctor must always get an answer
        return NvmlFacts(ok=False, reason=f"NVML probe failed: {exc!r}", fix=None)
    finally:
        src.close()


def _optional(fn: Callable[[], T]) -> T | None:
    assert pynvml is not None
    try:
        return fn()
    except (pynvml.NVMLError, pynvml.NVMLLibraryMismatchError):
        return None


@dataclass
class _Device:
    """Everything NvmlSource keeps about one GPU between ticks (keyed by UUID)."""

    index: int
    handle: Any
    uuid: str
    name: str
    sm_clock_max_mhz: int | None = None
    # Its GPM samples and metrics; None where the GPU has no GPM.
    gpm: DeviceGpm | None = None
    lost: bool = False
    unsupported: dict[str, str] = field(default_factory=dict)
    choice: dict[str, int] = field(default_factory=dict)
    energy: tuple[float, int] | None = None
    power_limit_w: float | None = None
    processes: tuple[GpuProcess, ...] = ()
    util_last_seen: int = 0
    # The PCIe link's maximum (generation, width), read with the slow refreshes.
    pcie_max: tuple[float | None, float | None] | None = None


class NvmlSource:
    """The GPU source on a real (or LD_LIBRARY_PATH-chosen) NVML: a GpuSource."""

    def __init__(
        self,
        process_interval_s: float = PROCESS_REFRESH_S,
        clock: Callable[[], float] = time.monotonic,
        proc_root: str = "/proc",
    ) -> None:
        self.process_interval_s = process_interval_s
        self._clock = clock
        self._proc_root = proc_root
        self._status = SourceStatus("gpu", "nvml", False, "NVML not opened yet")
        self._devices: dict[str, _Device] = {}
        self._order: list[str] = []
        self._notes: dict[str, tuple[int | None, str]] = {}
        self._initialised = False
        self._opened = False
        self._next_process_refresh = 0.0
        self._pids: HostPidMap | None = None
        self._versions: tuple[str | None, str | None, str | None] = (None, None, None)
        self._gpu_facts: list[GpuFacts] = []

    # ---- GpuSource -----------------------------------------------------------

    @property
    def status(self) -> SourceStatus:
        return self._status

    @property
    def notes(self) -> tuple[str, ...]:
        """What this source cannot report, each said once; GPUs sharing a note share a line.

        ``status.reason`` joins them with "; " (no note contains one).
        """
        gpus_of: dict[str, list[int]] = {}
        for gpu, note in self._notes.values():
            gpus_of.setdefault(note, [])
            if gpu is not None:
                gpus_of[note].append(gpu)
        return tuple(
            f"{gpu_list(gpus)}: {note}" if gpus else note for note, gpus in gpus_of.items()
        )

    def open(self) -> None:
        """Initialise NVML once and read the static facts; failures become the status."""
        if self._opened:
            return
        self._opened = True
        if pynvml is None:
            reason, fix = init_failure(ImportError())
            self._status = SourceStatus("gpu", "nvml", False, reason, fix)
            return
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            reason, fix = init_failure(exc)
            self._status = SourceStatus("gpu", "nvml", False, reason, fix)
            return
        self._initialised = True
        cuda = _optional(pynvml.nvmlSystemGetCudaDriverVersion)
        self._versions = (
            _optional(lambda: text(pynvml.nvmlSystemGetDriverVersion())),
            _optional(lambda: text(pynvml.nvmlSystemGetNVMLVersion())),
            None if cuda is None else cuda_text(int(cuda)),
        )
        try:
            count = int(pynvml.nvmlDeviceGetCount())
            for i in range(count):
                self._discover(i)
        except pynvml.NVMLError as exc:
            self.close()
            self._status = SourceStatus(
                "gpu",
                "nvml",
                False,
                f"no NVIDIA GPU: NVML device query failed: {exc}",
                "check that nvidia-smi works",
            )
            return
        if not self._order:
            self.close()
            self._status = SourceStatus(
                "gpu",
                "nvml",
                False,
                "no NVIDIA GPU: NVML works but reports no GPU",
                "check nvidia-smi; in a container, start it with --gpus all",
            )
            return
        self._pids = HostPidMap(self._proc_root)
        self._update_status()

    @property
    def facts(self) -> NvmlFacts:
        """What open() found: whether NVML works, why not, versions, and every GPU it listed."""
        versions = self._versions
        if not self._order:
            st = self._status
            return NvmlFacts(False, st.reason, st.fix, *versions)
        return NvmlFacts(True, None, None, *versions, tuple(self._gpu_facts))

    def read(self) -> GpuReading:
        """One tick: every GPU's sample, and the GPU processes (refreshed at a slower cadence)."""
        if not self._initialised:
            return GpuReading()
        now = self._clock()
        refresh = now >= self._next_process_refresh
        if refresh:
            self._next_process_refresh = now + self.process_interval_s
        samples: list[GpuSample] = []
        for uuid in self._order:
            dev = self._devices[uuid]
            if not dev.lost:
                try:
                    samples.append(self._sample(dev, refresh))
                    continue
                except DeviceLost as exc:
                    self._mark_lost(dev, exc)
            samples.append(self._lost_sample(dev))
        procs = tuple(p for uuid in self._order for p in self._devices[uuid].processes)
        self._update_status()
        return GpuReading(gpus=tuple(samples), processes=procs)

    def close(self) -> None:
        """Free GPM samples and shut NVML down; safe to call more than once."""
        if not self._initialised or pynvml is None:
            return
        self._initialised = False
        for dev in self._devices.values():
            if dev.gpm is not None:
                dev.gpm.free()
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass
        self._status = SourceStatus("gpu", "nvml", False, "NVML closed")

    # ---- discovery -------------------------------------------------------------

    def _discover(self, index: int) -> None:
        assert pynvml is not None
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            uuid = text(pynvml.nvmlDeviceGetUUID(handle))
            name = text(pynvml.nvmlDeviceGetName(handle))
        except pynvml.NVMLError as exc:
            self._gpu_facts.append(GpuFacts(index, "", f"unreadable: {exc}", None, None))
            if isinstance(exc, (pynvml.NVMLError_GpuIsLost, pynvml.NVMLError_ResetRequired)):
                self._note(f"lost:{index}", index, f"lost ({exc}), not monitored")
            elif isinstance(exc, pynvml.NVMLError_NoPermission):
                self._note(f"perm:{index}", index, "no permission to query it, skipped")
            else:
                self._note(f"bad:{index}", index, f"unreadable ({exc}), skipped")
            return
        if uuid in self._devices:
            self._note(
                f"dup:{index}", index, f"same UUID as GPU {self._devices[uuid].index}, skipped"
            )
            return
        dev = _Device(index=index, handle=handle, uuid=uuid, name=name)
        dev.sm_clock_max_mhz = _optional(
            lambda: int(pynvml.nvmlDeviceGetMaxClockInfo(handle, _CLOCK_SM))
        )
        supported, why = gpm_support(handle)
        self._gpu_facts.append(GpuFacts(index, uuid, name, supported, why))
        if supported:
            dev.gpm = DeviceGpm(handle)
            why = dev.gpm.alloc()
        if why is not None or not supported:
            self._note_sm_na(dev, why or "GPM not available")
        self._devices[uuid] = dev
        self._order.append(uuid)

    # ---- one device, one tick ------------------------------------------------

    def _sample(self, dev: _Device, refresh: bool) -> GpuSample:
        assert pynvml is not None
        h = dev.handle
        util = self._call(dev, "GPU_UTIL", [lambda: pynvml.nvmlDeviceGetUtilizationRates(h)])
        mem = self._call(dev, "memory", [lambda: pynvml.nvmlDeviceGetMemoryInfo(h)])
        power_mw = self._call(dev, "power", [lambda: pynvml.nvmlDeviceGetPowerUsage(h)])
        temp = self._call(
            dev, "temperature", [lambda: pynvml.nvmlDeviceGetTemperature(h, _TEMPERATURE_GPU)]
        )
        clock = self._call(dev, "SM clock", [lambda: pynvml.nvmlDeviceGetClockInfo(h, _CLOCK_SM)])
        reasons = self._call(
            dev,
            "clock-event reasons",
            [
                lambda: pynvml.nvmlDeviceGetCurrentClocksEventReasons(h),
                lambda: pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(h),
            ],
        )
        power_avg_w = self._power_avg(dev)
        pcie = self._pcie(dev, refresh)
        power_mw, temp, clock = valid(power_mw), valid(temp), valid(clock)
        gpu_pct = None if util is None else valid(float(util.gpu), 100.0)
        mem_pct = None if util is None else valid(float(util.memory), 100.0)
        if dev.gpm is not None:
            self._gpm_unavailable(dev, dev.gpm.sample())
        if refresh:
            limit = self._call(
                dev, "power limit", [lambda: pynvml.nvmlDeviceGetEnforcedPowerLimit(h)]
            )
            limit = valid(limit)
            dev.power_limit_w = None if limit is None else limit / 1000.0
            dev.processes = self._processes(dev)
        g = dev.gpm.values if dev.gpm is not None else {}
        return GpuSample(
            index=dev.index,
            uuid=dev.uuid,
            name=dev.name,
            util=gpu_pct,
            mem_util=mem_pct,
            sm_active=g.get(GPM_SM_UTIL),
            sm_source=None if g.get(GPM_SM_UTIL) is None else "gpm",
            sm_occupancy=g.get(GPM_SM_OCCUPANCY),
            tensor_active=g.get(GPM_ANY_TENSOR_UTIL),
            dram_active=g.get(GPM_DRAM_BW_UTIL),
            power_w=None if power_mw is None else power_mw / 1000.0,
            power_limit_w=dev.power_limit_w,
            power_avg_w=power_avg_w,
            mem_used_mib=None if mem is None or valid(mem.used) is None else int(mem.used) >> 20,
            mem_total_mib=None if mem is None or valid(mem.total) is None else int(mem.total) >> 20,
            temperature_c=None if temp is None else float(temp),
            sm_clock_mhz=None if clock is None else int(clock),
            sm_clock_max_mhz=dev.sm_clock_max_mhz,
            throttle=() if reasons is None else decode_throttle(int(reasons)),
            state="ok",
            **pcie,
        )

    def _pcie(self, dev: _Device, refresh: bool) -> dict[str, Any]:
        """The PCIe link now (generation, width) against its maximum (read with the slow
        refreshes: it does not change), and its throughput each way (KB/s)."""
        assert pynvml is not None
        h = dev.handle
        if refresh or dev.pcie_max is None:
            top_gen = self._call(
                dev, "PCIe max gen", [lambda: pynvml.nvmlDeviceGetMaxPcieLinkGeneration(h)]
            )
            top_width = self._call(
                dev, "PCIe max width", [lambda: pynvml.nvmlDeviceGetMaxPcieLinkWidth(h)]
            )
            dev.pcie_max = (valid(top_gen), valid(top_width))
        gen = self._call(dev, "PCIe gen", [lambda: pynvml.nvmlDeviceGetCurrPcieLinkGeneration(h)])
        width = self._call(dev, "PCIe width", [lambda: pynvml.nvmlDeviceGetCurrPcieLinkWidth(h)])
        tx = self._call(
            dev, "PCIe TX", [lambda: pynvml.nvmlDeviceGetPcieThroughput(h, _PCIE_TX_BYTES)]
        )
        rx = self._call(
            dev, "PCIe RX", [lambda: pynvml.nvmlDeviceGetPcieThroughput(h, _PCIE_RX_BYTES)]
        )
        gen, width, tx, rx = valid(gen), valid(width), valid(tx), valid(rx)
        return {
            "pcie_gen": None if gen is None else int(gen),
            "pcie_gen_max": None if dev.pcie_max[0] is None else int(dev.pcie_max[0]),
            "pcie_width": None if width is None else int(width),
            "pcie_width_max": None if dev.pcie_max[1] is None else int(dev.pcie_max[1]),
            "pcie_tx_kb_s": None if tx is None else float(tx),
            "pcie_rx_kb_s": None if rx is None else float(rx),
        }

    def _lost_sample(self, dev: _Device) -> GpuSample:
        return GpuSample(
            index=dev.index,
            uuid=dev.uuid,
            name=dev.name,
            util=None,
            sm_active=None,
            power_w=None,
            power_limit_w=None,
            mem_used_mib=None,
            mem_total_mib=None,
            sm_clock_max_mhz=dev.sm_clock_max_mhz,
            state="lost",
        )

    def _call(self, dev: _Device, key: str, calls: Sequence[Callable[[], T]]) -> T | None:
        """Try ``calls`` (newest API first); remember what a device cannot do.

        FunctionNotFound / NVMLLibraryMismatchError / an unknown struct version mean
        an older driver: move on to the next, older call for good. NOT_SUPPORTED and
        NO_PERMISSION are remembered so the call is never retried. Other errors are
        n/a for this tick only. GPU_IS_LOST / RESET_REQUIRED raise DeviceLost.
        """
        assert pynvml is not None
        if key in dev.unsupported:
            return None
        for i in range(dev.choice.get(key, 0), len(calls)):
            try:
                value = calls[i]()
            except (
                pynvml.NVMLError_FunctionNotFound,
                pynvml.NVMLLibraryMismatchError,
                pynvml.NVMLError_ArgumentVersionMismatch,
            ):
                continue
            except pynvml.NVMLError_NotSupported:
                self._unsupported(dev, key, "not supported")
                return None
            except pynvml.NVMLError_NoPermission:
                self._unsupported(dev, key, "no permission")
                return None
            except (pynvml.NVMLError_GpuIsLost, pynvml.NVMLError_ResetRequired) as exc:
                raise DeviceLost(str(exc)) from None
            except pynvml.NVMLError:
                return None
            dev.choice[key] = i
            return value
        self._unsupported(dev, key, "not in this driver's NVML")
        return None

    def _unsupported(self, dev: _Device, key: str, why: str) -> None:
        dev.unsupported[key] = why
        self._note(f"na:{dev.uuid}:{key}", dev.index, f"{key} n/a ({why})")

    def _note_sm_na(self, dev: _Device, why: str) -> None:
        self._note(
            f"sm:{dev.uuid}",
            dev.index,
            f"SM activity n/a ({why}), so the diagnosis leans on power",
        )

    def _gpm_unavailable(self, dev: _Device, gone: dict[str, str]) -> None:
        """Note what GPM stopped answering (``WHOLE``: SM activity itself)."""
        for name, why in gone.items():
            if name == WHOLE:
                self._note_sm_na(dev, why)
            else:
                self._unsupported(dev, name, why)

    def _mark_lost(self, dev: _Device, exc: DeviceLost) -> None:
        dev.lost = True
        dev.processes = ()
        if dev.gpm is not None:
            dev.gpm.free()
        self._note(
            f"lost:{dev.uuid}", dev.index, f"lost ({exc}), it needs a reset, then restart gputop"
        )

    def _power_avg(self, dev: _Device) -> float | None:
        """Average power since the previous tick from the energy counter (mJ)."""
        assert pynvml is not None
        h = dev.handle
        mj = self._call(
            dev, "energy counter", [lambda: pynvml.nvmlDeviceGetTotalEnergyConsumption(h)]
        )
        if mj is None:
            return None
        now = time.monotonic()
        prev, dev.energy = dev.energy, (now, int(mj))
        if prev is None or now <= prev[0] or int(mj) < prev[1]:
            return None
        return round((int(mj) - prev[1]) / 1000.0 / (now - prev[0]), 2)

    # ---- processes -------------------------------------------------------------

    def _processes(self, dev: _Device) -> tuple[GpuProcess, ...]:
        assert pynvml is not None
        h = dev.handle
        running = self._call(
            dev,
            "process list",
            [
                lambda: pynvml.nvmlDeviceGetComputeRunningProcesses(h),
                lambda: pynvml.nvmlDeviceGetComputeRunningProcesses_v2(h),
            ],
        )
        if running is None:
            return ()
        self._notes.pop(f"pid:{dev.uuid}", None)
        sm = self._process_sm(dev)
        out: list[GpuProcess] = []
        for p in running:
            host_pid = int(p.pid)
            pid = self._pids.visible_pid(host_pid) if self._pids is not None else host_pid
            if pid is None:
                self._note_invisible(dev, host_pid)
                continue
            used = p.usedGpuMemory
            out.append(
                GpuProcess(
                    pid=pid,
                    gpu_index=dev.index,
                    gpu_mem_mib=None if used is None else int(used) >> 20,
                    sm_pct=sm.get(host_pid),
                )
            )
        return tuple(out)

    def _process_sm(self, dev: _Device) -> dict[int, float]:
        """Mean SM % per host PID over the samples NVML took since the last refresh.

        NOT_FOUND means no new samples: no process gets a value this refresh.
        """
        assert pynvml is not None
        h = dev.handle
        since = dev.util_last_seen

        def newest() -> Any:
            return _samples_or_none(lambda: pynvml.nvmlDeviceGetProcessesUtilizationInfo(h, since))

        def older() -> Any:
            return _samples_or_none(lambda: pynvml.nvmlDeviceGetProcessUtilization(h, since))

        samples = self._call(dev, "per-process SM %", [newest, older])
        if not samples:
            return {}
        per_pid: dict[int, list[float]] = {}
        for s in samples:
            sm_pct = valid(float(s.smUtil), 100.0)
            if sm_pct is not None:
                per_pid.setdefault(int(s.pid), []).append(sm_pct)
            dev.util_last_seen = max(dev.util_last_seen, int(s.timeStamp))
        return {pid: round(sum(v) / len(v), 1) for pid, v in per_pid.items()}

    def _note_invisible(self, dev: _Device, host_pid: int) -> None:
        if self._pids is not None and not self._pids.host_pids_visible:
            self._note(
                "pidns",
                None,
                f"GPU process {host_pid} on GPU {dev.index} is not visible: gputop runs in its "
                "own PID namespace and NVML reports host PIDs (run the container with --pid=host)",
            )
        else:
            self._note(
                f"pid:{dev.uuid}",
                dev.index,
                f"process {host_pid} is not visible in /proc (exited, or hidden by hidepid)",
            )

    def _note(self, key: str, gpu: int | None, text: str) -> None:
        self._notes[key] = (gpu, text)

    def _update_status(self) -> None:
        self._status = SourceStatus("gpu", "nvml", True, "; ".join(self.notes) or None)


def _samples_or_none(fn: Callable[[], Any]) -> Any:
    """Process-utilisation samples, or None when NVML has none newer (NOT_FOUND)."""
    assert pynvml is not None
    try:
        return fn()
    except pynvml.NVMLError_NotFound:
        return None


__all__ = [
    "PROCESS_REFRESH_S",
    "GpuFacts",
    "NvmlFacts",
    "NvmlSource",
    "probe_nvml",
]
