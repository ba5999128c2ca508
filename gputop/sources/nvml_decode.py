"""What NVML's answers mean: its "unavailable" sentinels, clock-event reason bits, version
numbers, and the reason and fix for each way NVML fails to start.

Pure decoding for ``NvmlSource`` (``nvml.py``) and ``gputop doctor``; no NVML call here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

try:
    import pynvml
except ImportError:  # pragma: no cover - nvidia-ml-py is a dependency; still degrade
    pynvml = None

# Clock-event reason bits -> names. GPU idle (0x1) is deliberately absent: clocks
# drop because nothing runs, which is not a limit on work, and listing it would make
# every idle GPU look throttled. Bits 0x200/0x400 exist only in the older
# ThrottleReasons call.
THROTTLE_REASONS: tuple[tuple[int, str], ...] = (
    (0x2, "applications_clocks"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal"),
    (0x40, "hw_thermal"),
    (0x80, "hw_power_brake"),
    (0x100, "display_clocks"),
    (0x200, "board_limit"),
    (0x400, "reliability"),
)
# What NVML puts in a field it cannot fill on some drivers and boards
# (NVML_VALUE_NOT_AVAILABLE for 32- and 64-bit fields, and -1 read as signed).
_UNAVAILABLE = frozenset({0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF, -1})
_IDLE_BIT = 0x1
_KNOWN_BITS = _IDLE_BIT
for _bit, _ in THROTTLE_REASONS:
    _KNOWN_BITS |= _bit


class DeviceLost(Exception):
    """The device answered GPU_IS_LOST or RESET_REQUIRED."""


def valid(value: float | None, most: float | None = None) -> float | None:
    """``value`` if it is a real reading, else None (shown as n/a).

    None for NVML's "unavailable" sentinels, negatives and anything over
    ``most`` (100 for percentages): a driver that returns 4294967295 for
    GPU_UTIL must not show as 4294967295 %.
    """
    if value is None or value in _UNAVAILABLE or value < 0:
        return None
    if most is not None and value > most:
        return None
    return value


def decode_throttle(mask: int) -> tuple[str, ...]:
    """Clock-event reason names for an NVML bit mask (idle excluded; unknown bits as hex)."""
    names = [name for bit, name in THROTTLE_REASONS if mask & bit]
    extra = mask & ~_KNOWN_BITS
    if extra:
        names.append(f"unknown_{extra:#x}")
    return tuple(names)


def text(v: Any) -> str:
    """An NVML string (bytes from older bindings) as text."""
    return v.decode(errors="replace") if isinstance(v, bytes) else str(v)


def cuda_text(version: int) -> str:
    """NVML's CUDA driver version number (12060) as CUDA writes it (12.6)."""
    return f"{version // 1000}.{version % 1000 // 10}"


def gpu_list(indices: Sequence[int]) -> str:
    """'GPU 3', or 'GPUs 0-7' for a run, or 'GPUs 0, 2, 5'."""
    ix = sorted(set(indices))
    if len(ix) == 1:
        return f"GPU {ix[0]}"
    if ix == list(range(ix[0], ix[-1] + 1)):
        return f"GPUs {ix[0]}-{ix[-1]}"
    return "GPUs " + ", ".join(str(i) for i in ix)


def init_failure(exc: BaseException) -> tuple[str, str]:
    """The reason and the fix for an nvmlInit (or library load) failure."""
    if pynvml is None:
        return (
            "nvidia-ml-py is not installed",
            "pip install nvidia-ml-py (it is a gputop dependency)",
        )
    if isinstance(exc, pynvml.NVMLError_LibraryNotFound):
        return (
            "no NVIDIA GPU: libnvidia-ml.so.1 not found",
            "install the NVIDIA driver, or point LD_LIBRARY_PATH at the directory "
            "holding libnvidia-ml.so.1",
        )
    if isinstance(exc, pynvml.NVMLError_DriverNotLoaded):
        return (
            "no NVIDIA GPU: the NVIDIA kernel driver is not loaded",
            "load it (modprobe nvidia) and check that nvidia-smi works; in a container, "
            "start it with --gpus all",
        )
    if isinstance(exc, pynvml.NVMLError_NoPermission):
        return (
            "no NVIDIA GPU: no permission to open the GPU device files (/dev/nvidia*)",
            "run as a user allowed to open /dev/nvidia* (e.g. in the video group)",
        )
    if isinstance(exc, pynvml.NVMLError_LibRmVersionMismatch):
        return (
            "no NVIDIA GPU: NVML library and kernel driver versions differ",
            "reboot (or reload the nvidia kernel module) after a driver update",
        )
    return (f"no NVIDIA GPU: NVML failed to initialise: {exc}", "check that nvidia-smi works")
