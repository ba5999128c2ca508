"""GPM (GPU Performance Monitoring, Hopper and newer): SM activity and its companions.

NVML computes a GPM metric from two samples of the GPU's counters; the pair must be
at least ``GPM_MIN_GAP_S`` apart to mean anything. ``DeviceGpm`` keeps one GPU's two
samples (allocated once, reused), takes a new one each tick the gap allows and
returns the metrics between the pair. A metric the GPU answers NOT_SUPPORTED for is
never requested again; what became unavailable is returned for ``NvmlSource`` to
note, and a lost device raises ``DeviceLost``.
"""

from __future__ import annotations

import time
from typing import Any

from gputop.sources.nvml_decode import DeviceLost

try:
    import pynvml
except ImportError:  # pragma: no cover - nvidia-ml-py is a dependency; still degrade
    pynvml = None

GPM_MIN_GAP_S = 0.1

# GPM metric ids (nvmlGpmMetricId_t), in the order GpuSample's fields take them.
GPM_SM_UTIL = 2
GPM_SM_OCCUPANCY = 3
GPM_ANY_TENSOR_UTIL = 5
GPM_DRAM_BW_UTIL = 10
GPM_METRICS = (GPM_SM_UTIL, GPM_SM_OCCUPANCY, GPM_ANY_TENSOR_UTIL, GPM_DRAM_BW_UTIL)
GPM_NAMES = {
    GPM_SM_UTIL: "SM activity",
    GPM_SM_OCCUPANCY: "SM occupancy",
    GPM_ANY_TENSOR_UTIL: "tensor activity",
    GPM_DRAM_BW_UTIL: "DRAM bandwidth",
}
# A key of what ``DeviceGpm`` reports unavailable: GPM as a whole (SM activity n/a).
WHOLE = "GPM"

_ARCH_HOPPER = 9
_NVML_SUCCESS = 0
_NVML_NOT_SUPPORTED = 3


def gpm_support(handle: Any) -> tuple[bool | None, str | None]:
    """Whether the GPU reports GPM metrics (SM activity), and why not."""
    assert pynvml is not None
    try:
        supported = bool(pynvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice)
    except (pynvml.NVMLError_FunctionNotFound, pynvml.NVMLLibraryMismatchError):
        return False, "the driver is too old for GPM (needs R520 or newer)"
    except pynvml.NVMLError_NotSupported:
        supported = False
    except pynvml.NVMLError as exc:
        return None, f"GPM support query failed: {exc}"
    if supported:
        return True, None
    try:
        arch = int(pynvml.nvmlDeviceGetArchitecture(handle))
    except pynvml.NVMLError:
        arch = None
    if arch is not None and arch < _ARCH_HOPPER:
        return False, "pre-Hopper GPU: GPM (SM activity) needs Hopper or newer"
    return False, "GPM not supported on this GPU (GeForce, MIG instance or vGPU)"


class DeviceGpm:
    """One GPU's pair of GPM samples, the metrics it still answers and their last values.

    ``values``: metric id -> % (None: not available this time), empty until a pair exists.
    """

    def __init__(self, handle: Any) -> None:
        self.handle = handle
        self.metrics: tuple[int, ...] = GPM_METRICS
        self.values: dict[int, float | None] = {}
        self._samples: list[Any] = []
        self._taken_at: float | None = None
        self._primed = False
        self._request: Any = None

    @property
    def active(self) -> bool:
        """Samples are allocated and GPM still answers."""
        return bool(self._samples)

    def alloc(self) -> str | None:
        """Allocate the sample pair; why not (None: done)."""
        assert pynvml is not None
        try:
            for _ in range(2):
                self._samples.append(pynvml.nvmlGpmSampleAlloc())
        except (pynvml.NVMLError, pynvml.NVMLLibraryMismatchError) as exc:
            self.free()
            return f"GPM sample allocation failed: {exc}"
        return None

    def free(self) -> None:
        """Free the samples (GPM is then off for this device); safe to call more than once."""
        assert pynvml is not None
        for s in self._samples:
            try:
                pynvml.nvmlGpmSampleFree(s)
            except pynvml.NVMLError:
                pass
        self._samples = []

    def sample(self) -> dict[str, str]:
        """Take a sample when >= GPM_MIN_GAP_S passed since the last; ``values`` from the pair.

        Returns what became unavailable, name -> why (``WHOLE`` for GPM itself).
        """
        assert pynvml is not None
        if not self._samples:
            return {}
        now = time.monotonic()
        if self._taken_at is not None and now - self._taken_at < GPM_MIN_GAP_S:
            return {}  # too close for a meaningful pair: keep the last values
        older, newer = self._samples[1], self._samples[0]
        try:
            pynvml.nvmlGpmSampleGet(self.handle, newer)
        except (pynvml.NVMLError_GpuIsLost, pynvml.NVMLError_ResetRequired) as exc:
            raise DeviceLost(str(exc)) from None
        except (
            pynvml.NVMLError_NotSupported,
            pynvml.NVMLError_FunctionNotFound,
            pynvml.NVMLLibraryMismatchError,
        ) as exc:
            self.free()
            self.values = {}
            return {WHOLE: f"GPM sampling not supported: {exc}"}
        except pynvml.NVMLError:
            self.values = {}
            return {}
        self._taken_at = now
        self._samples.reverse()  # the sample just taken becomes the older one next time
        if not self._primed:
            self._primed = True
            return {}
        return self._metrics(older, newer)

    def _metrics(self, older: Any, newer: Any) -> dict[str, str]:
        assert pynvml is not None
        if self._request is None:
            # ~19 KB of ctypes (one slot per metric NVML knows): built once, reused
            self._request = pynvml.c_nvmlGpmMetricsGet_t()
        req = self._request
        req.version = pynvml.NVML_GPM_METRICS_GET_VERSION
        req.numMetrics = len(self.metrics)
        req.sample1 = older
        req.sample2 = newer
        for i, metric in enumerate(self.metrics):
            req.metrics[i].metricId = metric
        try:
            pynvml.nvmlGpmMetricsGet(req)
        except (pynvml.NVMLError_GpuIsLost, pynvml.NVMLError_ResetRequired) as exc:
            raise DeviceLost(str(exc)) from None
        except pynvml.NVMLError:
            self.values = {}
            return {}
        out: dict[int, float | None] = {}
        keep: list[int] = []
        dropped: list[int] = []
        for i, metric in enumerate(self.metrics):
            m = req.metrics[i]
            ret = int(m.nvmlReturn)
            if ret == _NVML_SUCCESS:
                out[metric] = round(min(100.0, max(0.0, float(m.value))), 2)
                keep.append(metric)
            elif ret == _NVML_NOT_SUPPORTED:
                dropped.append(metric)  # remembered: never requested again on this device
            else:
                out[metric] = None
                keep.append(metric)
        self.metrics = tuple(keep)
        self.values = out
        if not keep:
            self.free()
        if GPM_SM_UTIL in dropped:
            # the headline metric: one note covers the rest
            return {WHOLE: "GPM SM_UTIL not supported"}
        return {GPM_NAMES[metric]: "not supported" for metric in dropped}
