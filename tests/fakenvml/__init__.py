"""A fake ``libnvidia-ml.so.1`` for tests: built from C with gcc, driven by a scenario file.

The real nvidia-ml-py loads it the standard way (``dlopen("libnvidia-ml.so.1")``), so
tests run pynvml's own code against it. Two ways to use it:

* subprocess: ``env = FakeNvml(tmp_path, devices=[FakeGpu(...)]).env()`` and run
  ``python -m gputop ...`` with that environment (``LD_LIBRARY_PATH`` points at the build);
* in-process: ``fake.activate()`` loads the library with ``RTLD_GLOBAL`` before pynvml
  does, so pynvml's dlopen of the soname finds it, and makes the next ``nvmlInit`` read
  this scenario. Only the full (new-driver) build can be used in-process.

The scenario format is described in README.md beside this file.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "fake_nvml.c"
# Included by SOURCE (its PCIe queries): part of what a build is cached by.
INCLUDED = (HERE / "fake_nvml_pcie.c",)
BUILD_ROOT = HERE / "build"
SONAME = "libnvidia-ml.so.1"

# NVML return codes the tests inject (values from nvml.h / pynvml).
NOT_SUPPORTED = 3
NO_PERMISSION = 4
NOT_FOUND = 6
DRIVER_NOT_LOADED = 9
FUNCTION_NOT_FOUND = 13
GPU_IS_LOST = 15
RESET_REQUIRED = 16
LIB_RM_VERSION_MISMATCH = 18
UNKNOWN = 999

# Clock-event reason bits.
GPU_IDLE = 0x1
APPLICATIONS_CLOCKS = 0x2
SW_POWER_CAP = 0x4
HW_SLOWDOWN = 0x8
SYNC_BOOST = 0x10
SW_THERMAL = 0x20
HW_THERMAL = 0x40
HW_POWER_BRAKE = 0x80

ARCH_AMPERE = 7
ARCH_HOPPER = 9


def build_fake_nvml(*, old_driver: bool = False) -> Path:
    """Compile the fake (once per source hash and variant); return the directory holding it."""
    h = hashlib.sha256(SOURCE.read_bytes())
    for path in INCLUDED:
        h.update(path.read_bytes())
    digest = h.hexdigest()[:16]
    out_dir = BUILD_ROOT / (f"{digest}-old" if old_driver else digest)
    lib = out_dir / SONAME
    if lib.exists():
        return out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / f".{SONAME}.{os.getpid()}.tmp"
    cmd = [
        shutil.which("gcc") or "gcc",
        "-O1",
        "-Wall",
        "-Werror",
        "-shared",
        "-fPIC",
        f"-Wl,-soname,{SONAME}",
        "-o",
        str(tmp),
        str(SOURCE),
        "-lpthread",
    ]
    if old_driver:
        cmd.insert(1, "-DFAKE_OLD_DRIVER")
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    os.replace(tmp, lib)  # atomic: concurrent builders never see half a library
    return out_dir


@dataclass(frozen=True)
class FakeProc:
    """A compute process on one fake GPU, from device tick ``from_tick`` to ``until_tick``."""

    pid: int
    mem_mib: int = 1024
    sm_pct: int | None = 50
    from_tick: int = 0
    until_tick: int | None = None


@dataclass(frozen=True)
class FakeError:
    """Make NVML function ``fn`` return ``code`` on this device from tick ``from_tick``."""

    fn: str
    code: int
    from_tick: int = 0
    until_tick: int | None = None


Series = Sequence[float] | None


@dataclass(frozen=True)
class FakeGpu:
    """One fake device. Series hold one value per device tick; the last value repeats."""

    uuid: str | None = None
    name: str = "NVIDIA H100 80GB HBM3"
    arch: int = ARCH_HOPPER
    gpm: bool = True
    mem_total_mib: int = 81559
    power_limit_w: int = 700
    sm_clock_max_mhz: int = 1980
    pcie_max: tuple[int, int] = (5, 16)
    """The PCIe link's maximum generation and width (device and system)."""
    util: Series = (0.0,)
    mem_util: Series = None
    power_w: Series = None
    mem_used_mib: Series = None
    temperature_c: Series = None
    sm_clock_mhz: Series = None
    throttle: Series = None
    sm_util: Series = None
    sm_occupancy: Series = None
    tensor_util: Series = None
    dram_util: Series = None
    pcie_gen: Series = None
    pcie_width: Series = None
    pcie_tx_kb_s: Series = None
    pcie_rx_kb_s: Series = None
    lost_at: int | None = None
    errors: Sequence[FakeError] = ()
    gpm_metric_errors: Mapping[int, int] = field(default_factory=dict)
    processes: Sequence[FakeProc] = ()


_SERIES = (
    "util",
    "mem_util",
    "power_w",
    "mem_used_mib",
    "temperature_c",
    "sm_clock_mhz",
    "throttle",
    "sm_util",
    "sm_occupancy",
    "tensor_util",
    "dram_util",
    "pcie_gen",
    "pcie_width",
    "pcie_tx_kb_s",
    "pcie_rx_kb_s",
)


def fake_uuid(index: int) -> str:
    """The UUID the fake gives device ``index`` unless the scenario names one."""
    return f"GPU-fa4e0000-0000-4000-8000-{index:012d}"


def render_scenario(
    devices: Sequence[FakeGpu],
    *,
    init_error: int = 0,
    missing: Sequence[str] = (),
    driver_version: str = "550.54.15",
    nvml_version: str = "12.550.54.15",
    cuda_version: int = 12040,
) -> str:
    """The scenario file text for these devices and library-wide settings."""
    lines = [
        "# fake NVML scenario (tests/fakenvml/README.md)",
        f"init_error {init_error}",
        f"driver_version {driver_version}",
        f"nvml_version {nvml_version}",
        f"cuda_version {cuda_version}",
        f"devices {len(devices)}",
    ]
    lines += [f"missing {fn}" for fn in missing]
    for i, d in enumerate(devices):
        p = f"dev {i}"
        lines += [
            f"{p} uuid {d.uuid or fake_uuid(i)}",
            f"{p} name {d.name}",
            f"{p} arch {d.arch}",
            f"{p} gpm {int(d.gpm)}",
            f"{p} mem_total_mib {d.mem_total_mib}",
            f"{p} power_limit_w {d.power_limit_w}",
            f"{p} sm_clock_max_mhz {d.sm_clock_max_mhz}",
            f"{p} pcie_max {d.pcie_max[0]} {d.pcie_max[1]}",
        ]
        for name in _SERIES:
            values = getattr(d, name)
            if values is not None:
                lines.append(f"{p} series {name} " + " ".join(repr(float(v)) for v in values))
        if d.lost_at is not None:
            lines.append(f"{p} lost_at {d.lost_at}")
        for e in d.errors:
            until = "" if e.until_tick is None else f" {e.until_tick}"
            lines.append(f"{p} error {e.fn} {e.code} {e.from_tick}{until}")
        for metric, code in d.gpm_metric_errors.items():
            lines.append(f"{p} gpm_metric_error {metric} {code}")
        for pr in d.processes:
            sm = -1 if pr.sm_pct is None else pr.sm_pct
            until = "" if pr.until_tick is None else f" {pr.until_tick}"
            lines.append(f"{p} proc {pr.pid} {pr.mem_mib} {sm} {pr.from_tick}{until}")
    return "\n".join(lines) + "\n"


class FakeNvml:
    """A scenario for the fake library in ``directory``, plus how to point a process at it."""

    def __init__(
        self,
        directory: Path | str,
        devices: Sequence[FakeGpu] = (FakeGpu(),),
        *,
        old_driver: bool = False,
        init_error: int = 0,
        missing: Sequence[str] = (),
        driver_version: str = "550.54.15",
        nvml_version: str = "12.550.54.15",
        cuda_version: int = 12040,
    ) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.old_driver = old_driver
        self.lib_dir = build_fake_nvml(old_driver=old_driver)
        self.scenario_path = self.directory / "fake_nvml_scenario.txt"
        self.counts_path = self.directory / "fake_nvml_counts.txt"
        self._settings: dict[str, object] = {
            "init_error": init_error,
            "missing": tuple(missing),
            "driver_version": driver_version,
            "nvml_version": nvml_version,
            "cuda_version": cuda_version,
        }
        self.devices: tuple[FakeGpu, ...] = ()
        self.write(devices)

    def write(self, devices: Sequence[FakeGpu] | None = None, **settings: object) -> None:
        """Rewrite the scenario (atomically).

        A fake already in use (in this process or a subprocess) picks it up at its next
        utilisation read, each device keeping its tick; otherwise at the next nvmlInit.
        """
        if devices is not None:
            self.devices = tuple(devices)
        self._settings.update(settings)
        text = render_scenario(self.devices, **self._settings)  # type: ignore[arg-type]
        tmp = self.scenario_path.with_suffix(".tmp")
        tmp.write_text(text)
        os.replace(tmp, self.scenario_path)

    def env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """An environment for a subprocess that should load this fake as its NVML."""
        env = dict(os.environ if base is None else base)
        old = env.get("LD_LIBRARY_PATH")
        env["LD_LIBRARY_PATH"] = str(self.lib_dir) + (f":{old}" if old else "")
        env["FAKE_NVML_SCENARIO"] = str(self.scenario_path)
        env["FAKE_NVML_COUNTS"] = str(self.counts_path)
        return env

    def counts(self) -> dict[str, int]:
        """Calls per NVML entry point, as written by the fake at nvmlShutdown or exit."""
        out: dict[str, int] = {}
        if not self.counts_path.exists():
            return out
        for line in self.counts_path.read_text().splitlines():
            name, _, n = line.partition(" ")
            out[name] = int(n)
        return out

    # ---- in-process use ------------------------------------------------------

    def activate(self) -> ctypes.CDLL:
        """Load the fake into this process and make its next first nvmlInit use this scenario.

        NVML must not be initialised at the time (close every source first). The
        environment variables are set with ``os.environ`` so the C side sees them.
        """
        if self.old_driver:
            raise RuntimeError("the old-driver build can only be used in a subprocess")
        lib = ctypes.CDLL(str(self.lib_dir / SONAME), mode=ctypes.RTLD_GLOBAL)
        os.environ["FAKE_NVML_SCENARIO"] = str(self.scenario_path)
        os.environ["FAKE_NVML_COUNTS"] = str(self.counts_path)
        if lib.fakeNvmlRefcount() != 0:
            raise RuntimeError("NVML is still initialised in this process; close it first")
        return lib

    def call_count(self, name: str) -> int:
        """In-process: calls to ``name`` since the scenario was last loaded."""
        lib = ctypes.CDLL(str(self.lib_dir / SONAME), mode=ctypes.RTLD_GLOBAL)
        lib.fakeNvmlCallCount.restype = ctypes.c_ulong
        lib.fakeNvmlCallCount.argtypes = [ctypes.c_char_p]
        return int(lib.fakeNvmlCallCount(name.encode()))
