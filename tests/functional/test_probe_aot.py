"""The probe built ahead of time, built for real: the check script, clang's rebuild with the
same hash, an install from a clean clone without clang, and a wheel built with clang."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from gputop.sources.bpf_build import (
    OBJECT_NAME,
    compile_object,
    inputs_sha256,
    object_inputs_sha256,
)
from tests.bpfutil import BPF, CLANG, needs_clang
from tests.harness import ROOT


def test_the_check_script_exits_1_and_names_what_is_stale(tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, "scripts/build_bpf.py", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr


@needs_clang
def test_clang_rebuilds_an_object_that_records_the_same_hash(tmp_path: Path) -> None:
    assert CLANG is not None
    out = tmp_path / OBJECT_NAME
    digest = compile_object(BPF, out, CLANG)
    assert digest == inputs_sha256(BPF)
    assert object_inputs_sha256(out) == object_inputs_sha256(BPF / OBJECT_NAME)


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
    code = "from gputop.sources.probe_plan import bpf_object_path; print(bpf_object_path())"
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
