"""The probe built ahead of time: its object matches its sources, installs without clang, and
carries the probe on nodes without kernel headers or bcc, with bcc taking over where the
kernel has no BTF.

The object (``bpf/sched_probe.bpf.o``) is committed; ``scripts/build_bpf.py`` rebuilds it.
It records the hash of the sources it was built from, so a change to ``bpf/`` or to
``gputop/model/probe_abi.py`` without a rebuild fails here.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from gputop.model import probe_abi
from gputop.sources.bpf_build import (
    OBJECT_NAME,
    compile_object,
    inputs_sha256,
    object_inputs_sha256,
    stale_inputs,
    trim_vmlinux,
)
from gputop.sources.bpf_syscall import loaded_program_ids
from gputop.sources.libbpf_loader import LibbpfError, TracepointAttach, kernel_btf_problem, load
from gputop.sources.sched_probe import MAP_TYPES, BpfSchedProbe, plan_loader
from tests.bpfutil import BPF, CLANG, needs_clang
from tests.harness import ROOT

IS_ROOT = os.geteuid() == 0
needs_root_btf = pytest.mark.skipif(
    not IS_ROOT or kernel_btf_problem() is not None, reason="needs root and a kernel with BTF"
)


def test_the_shipped_object_was_built_from_the_current_sources() -> None:
    assert stale_inputs(BPF, probe_abi.c_header()) == []
    assert object_inputs_sha256(BPF / OBJECT_NAME) == inputs_sha256(BPF)


@pytest.mark.parametrize(
    ("name", "change"),
    [
        ("sched_probe.c", "\n// a changed program\n"),
        ("dialect.h", "\n#define A_NEW_MACRO 1\n"),
        ("vmlinux.h", "\nstruct a_new_type { int x; };\n"),
    ],
)
def test_a_stale_object_fails_the_check(tmp_path: Path, name: str, change: str) -> None:
    copy = tmp_path / "bpf"
    shutil.copytree(BPF, copy)
    assert stale_inputs(copy, probe_abi.c_header()) == []
    with open(copy / name, "a") as f:
        f.write(change)
    problems = stale_inputs(copy, probe_abi.c_header())
    assert len(problems) == 1 and OBJECT_NAME in problems[0], problems


def test_a_header_that_drifted_from_the_python_definition_fails_the_check(tmp_path: Path) -> None:
    copy = tmp_path / "bpf"
    shutil.copytree(BPF, copy)
    header = (copy / "probe_abi.h").read_text()
    (copy / "probe_abi.h").write_text(header.replace("#define WAKE_IRQ 3", "#define WAKE_IRQ 4"))
    problems = stale_inputs(copy, probe_abi.c_header())
    assert any("probe_abi.h does not match" in p for p in problems), problems


def test_the_check_script_exits_1_and_names_what_is_stale(tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, "scripts/build_bpf.py", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr


def test_the_abi_header_defines_every_shared_constant_and_struct() -> None:
    header = probe_abi.c_header()
    for name in probe_abi.CONSTANTS:
        assert f"#define {name} {getattr(probe_abi, name)}\n" in header
    for s in probe_abi.STRUCTS:
        assert f"struct {s._c_name_} {{" in header
    # The wait classes index thread_t.wait_ns.
    wait_ns = dict(probe_abi.ThreadT._fields_)["wait_ns"]
    assert wait_ns._length_ == probe_abi.WAKE_CLASSES


def test_vmlinux_h_keeps_what_the_records_need_and_nothing_else() -> None:
    full = "\n\n".join(
        [
            "typedef unsigned int __u32;",
            "typedef __u32 u32;",
            "typedef int __kernel_pid_t;",
            "typedef __kernel_pid_t pid_t;",
            "struct unused {\n\tint a;\n};",
            "struct trace_entry {\n\tshort unsigned int type;\n\tint pid;\n};",
            "typedef struct {\n\tu32 type;\n} unrelated_t;",
            "struct trace_event_raw_sched_switch {\n\tstruct trace_entry ent;\n"
            "\tpid_t prev_pid;\n\tlong int prev_state;\n};",
        ]
    )
    text = trim_vmlinux(full, ["trace_event_raw_sched_switch", "u32"], "6.18-test")
    for kept in ("typedef __kernel_pid_t pid_t;", "struct trace_entry {", "typedef __u32 u32;"):
        assert kept in text
    assert "struct unused" not in text and "unrelated_t" not in text
    assert text.index("struct trace_entry {") < text.index("struct trace_event_raw_sched_switch {")
    assert "preserve_access_index" in text


@needs_clang
def test_clang_rebuilds_an_object_that_records_the_same_hash(tmp_path: Path) -> None:
    assert CLANG is not None
    out = tmp_path / OBJECT_NAME
    digest = compile_object(BPF, out, CLANG)
    assert digest == inputs_sha256(BPF)
    assert object_inputs_sha256(out) == object_inputs_sha256(BPF / OBJECT_NAME)


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
    config = probe_abi.ProbeConfig(not_runnable_mask=0xFF, dead_mask=0x30, max_cpus=os.cpu_count())
    events = ("sched_switch", "sched_waking", "sched_wakeup", "sched_process_exit")
    ho = load(
        obj,
        config,
        probe.max_entries(),
        [TracepointAttach(f"tracepoint__sched__{e}", f"sched:{e}") for e in events],
    )
    try:
        assert set(ho.attachments) == {f"tracepoint:sched:{e}" for e in events}
        threads = ho.open_maps(MAP_TYPES)["threads"]
        subprocess.run([sys.executable, "-c", "import time; time.sleep(0.05)"], check=True)
        assert threads.items(), "sched_switch ran and created thread entries"
        ids = set(ho.program_ids().values())
        assert ids <= loaded_program_ids()
    finally:
        ho.close()
    assert not (_held("prog_id") & ids)


@needs_root_btf
def test_a_config_of_the_wrong_size_is_refused_before_load() -> None:
    class Short(ctypes.Structure):
        _fields_ = (("not_runnable_mask", ctypes.c_uint64),)

    before = _held("prog_id")
    with pytest.raises(LibbpfError, match="probe_config is 24 bytes, gputop's is 8"):
        load(BPF / OBJECT_NAME, Short(0xFF), BpfSchedProbe().max_entries(), [])
    assert _held("prog_id") == before


@needs_root_btf
def test_the_libbpf_loader_is_chosen_where_the_kernel_has_btf() -> None:
    plan = plan_loader("")
    assert not isinstance(plan, type(None))
    assert getattr(plan, "loader", None) == "libbpf", plan
    assert "BTF" in plan.why  # type: ignore[union-attr]


def _clean_copy(dest: Path) -> None:
    """What a clean clone of this tree holds: tracked and new files, none that git ignores."""
    files = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout.split(b"\0")
    for name in filter(None, files):
        src = ROOT / os.fsdecode(name)
        if src.is_file():
            (dest / os.fsdecode(name)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / os.fsdecode(name))


@pytest.mark.skipif(not (ROOT / ".git").exists(), reason="needs a git checkout to clone")
def test_install_from_a_clean_clone_without_clang_gets_the_shipped_object(tmp_path: Path) -> None:
    clone = tmp_path / "clone"
    _clean_copy(clone)
    target = tmp_path / "site"
    # No clang anywhere on PATH: only the interpreter's own directory.
    env = dict(os.environ, PATH=os.path.dirname(sys.executable))
    env.pop("GPUTOP_CLANG", None)
    started = time.monotonic()
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(target),
            str(clone),
        ],
        env=env,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    installed = target / "gputop" / "bpf" / OBJECT_NAME
    assert installed.read_bytes() == (clone / "bpf" / OBJECT_NAME).read_bytes()
    assert object_inputs_sha256(installed) == inputs_sha256(clone / "bpf")
    # The installed package finds its own object, not a source tree's.
    code = "from gputop.sources.sched_probe import bpf_object_path; print(bpf_object_path())"
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=dict(env, PYTHONPATH=str(target)),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert Path(out) == installed, (out, time.monotonic() - started)


def _wheel_object(tmp_path: Path, path_env: str) -> bytes:
    code = (
        "import sys; from hatchling.builders.wheel import WheelBuilder;"
        "print(*WheelBuilder('.').build(directory=sys.argv[1]))"
    )
    env = dict(os.environ, PATH=path_env)
    env.pop("GPUTOP_CLANG", None)
    r = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    with zipfile.ZipFile(r.stdout.strip()) as zf:
        names = zf.namelist()
        assert names.count(f"gputop/bpf/{OBJECT_NAME}") == 1, names
        assert {"gputop/bpf/sched_probe.c", "gputop/bpf/dialect.h"} <= set(names)
        return zf.read(f"gputop/bpf/{OBJECT_NAME}")


@needs_clang
def test_a_wheel_built_with_clang_carries_a_rebuilt_object_with_the_same_hash(
    tmp_path: Path,
) -> None:
    data = _wheel_object(tmp_path, os.environ.get("PATH", ""))
    (tmp_path / "from_wheel.o").write_bytes(data)
    assert object_inputs_sha256(tmp_path / "from_wheel.o") == inputs_sha256(BPF)


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
