"""The probe built ahead of time, as root: a fresh object loads, attaches and counts, a
config of the wrong size is refused, libbpf is chosen where the kernel has BTF, and the
probe carries on nodes without kernel headers or bcc, with bcc taking over where the
kernel has no BTF."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gputop.model import probe_abi
from gputop.model.probe_abi import MAP_TYPES
from gputop.sources.bpf_build import OBJECT_NAME, compile_object
from gputop.sources.bpf_syscall import loaded_program_ids
from gputop.sources.libbpf_loader import LibbpfError, TracepointAttach, kernel_btf_problem, load
from gputop.sources.probe_plan import plan_loader
from gputop.sources.sched_probe import BpfSchedProbe
from tests.bpfutil import BPF, CLANG, needs_clang
from tests.harness import ROOT

IS_ROOT = os.geteuid() == 0
needs_root_btf = pytest.mark.skipif(
    not IS_ROOT or kernel_btf_problem() is not None, reason="needs root and a kernel with BTF"
)


def _held(kind: str) -> set[int]:
    """Ids of BPF objects (``prog_id`` or ``link_id``) this process holds descriptors of."""
    ids = set()
    for fd in os.listdir("/proc/self/fdinfo"):
        try:
            with open(f"/proc/self/fdinfo/{fd}") as f:
                for line in f:
                    if line.startswith(f"{kind}:"):
                        ids.add(int(line.split()[1]))
        except OSError:
            pass
    return ids


@needs_clang
@needs_root_btf
def test_a_freshly_built_object_loads_attaches_and_counts(tmp_path: Path) -> None:
    assert CLANG is not None
    obj = tmp_path / OBJECT_NAME
    compile_object(BPF, obj, CLANG)
    probe = BpfSchedProbe()
    config = probe_abi.ProbeConfig(max_cpus=os.cpu_count())
    events = ("sched_switch", "sched_waking", "sched_wakeup", "sched_process_exit")
    links_before = _held("link_id")
    ho = load(
        obj,
        config,
        probe.max_entries(),
        [TracepointAttach(f"tracepoint__sched__{e}", f"sched:{e}") for e in events],
    )
    try:
        assert set(ho.attachments) == {f"raw_tracepoint:sched:{e}" for e in events}
        # Each attachment is a BPF link (a raw tracepoint), none a perf event.
        links = _held("link_id") - links_before
        assert len(links) == len(events), links
        threads = ho.open_maps(MAP_TYPES)["threads"]
        subprocess.run([sys.executable, "-c", "import time; time.sleep(0.05)"], check=True)
        assert threads.items(), "sched_switch ran and created thread entries"
        ids = set(ho.program_ids().values())
        assert ids <= loaded_program_ids()
    finally:
        ho.close()
    assert not (_held("prog_id") & ids)
    assert not (_held("link_id") & links)


@needs_root_btf
def test_a_config_of_the_wrong_size_is_refused_before_load() -> None:
    class Short(ctypes.Structure):
        _fields_ = (("max_cpus", ctypes.c_uint32),)

    before = _held("prog_id")
    with pytest.raises(LibbpfError, match="probe_config is 8 bytes, gputop's is 4"):
        load(BPF / OBJECT_NAME, Short(2), BpfSchedProbe().max_entries(), [])
    assert _held("prog_id") == before


@needs_root_btf
def test_the_libbpf_loader_is_chosen_where_the_kernel_has_btf() -> None:
    plan = plan_loader("")
    assert not isinstance(plan, type(None))
    assert getattr(plan, "loader", None) == "libbpf", plan
    assert "BTF" in plan.why  # type: ignore[union-attr]


# ---- the same accuracy test, on nodes without headers and bcc, or without BTF ----------------

BCC_DIR = "/usr/lib/python3/dist-packages/bcc"
FIRST_FRAME_TEST = (
    "tests/system/test_sched_probe_first_frame.py"
    "::test_every_frame_from_the_first_matches_the_kernel"
)


def _pytest_hiding(paths: list[str], expect_loader: str) -> subprocess.CompletedProcess[str]:
    """The first-frame accuracy test in a private mount namespace where ``paths`` are empty."""
    mounts = " && ".join(["true", *(f"mount -t tmpfs none {p}" for p in paths if os.path.isdir(p))])
    cmd = (
        f"{mounts} && exec {sys.executable} -m pytest -q -p no:cacheprovider -s {FIRST_FRAME_TEST}"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT), GPUTOP_TEST_EXPECT_LOADER=expect_loader)
    env.pop("GPUTOP_BPF_LOADER", None)
    return subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", cmd],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
    )


@needs_root_btf
@pytest.mark.root
@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare(1)")
def test_without_kernel_headers_or_bcc_the_probe_attaches_and_matches_schedstat() -> None:
    release = os.uname().release
    r = _pytest_hiding([f"/lib/modules/{release}", BCC_DIR], "libbpf")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "1 passed" in r.stdout and "loader: libbpf" in r.stdout, r.stdout[-2000:]


@needs_root_btf
@pytest.mark.root
@pytest.mark.skipif(
    shutil.which("unshare") is None or not os.path.isdir(BCC_DIR), reason="needs unshare and bcc"
)
def test_without_btf_bcc_is_chosen_and_matches_schedstat() -> None:
    r = _pytest_hiding(["/sys/kernel/btf"], "bcc")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "1 passed" in r.stdout and "loader: bcc" in r.stdout, r.stdout[-2000:]
