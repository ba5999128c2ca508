"""The prepared GPU check's pure parts (scripts/gpu_check.py, gpu_bundle.py,
gpu_check_procaddr.py): the loop's clock read back and clipped to gputop's frames,
uprobe counts per step, the check list and its command line, and the offline bundle
unpacked from wheels. The check itself runs in tests/system/test_gpu_check.py."""

from __future__ import annotations

import importlib.util
import json
import sys
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

from tests.harness import ROOT


def _script(name: str) -> ModuleType:
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


check = _script("gpu_check")
bundle = _script("gpu_bundle")
procaddr = _script("gpu_check_procaddr")


def test_steps_are_read_from_whole_lines_only(tmp_path: Path) -> None:
    path = tmp_path / "steps.txt"
    path.write_text("item 1.0 1.2 1.5 1.6\nnot a step\ncpu 2.0 2.1 2.4 2.5\nevent 3.0 3.1")
    steps = check.read_steps(path)
    assert [(s.kind, s.wait_start, s.wait_end) for s in steps] == [
        ("item", 1.2, 1.5),
        ("cpu", 2.1, 2.4),
    ]


def test_wait_share_clips_each_wait_to_the_window() -> None:
    steps = [
        check.Step("item", 0.0, 0.5, 1.5, 1.6),  # half of it inside [1, 3]
        check.Step("item", 1.6, 2.0, 2.5, 2.6),  # all inside
        check.Step("item", 2.6, 3.5, 4.0, 4.1),  # outside
    ]
    assert check.wait_share(steps, 1.0, 3.0) == pytest.approx(50.0)


def test_per_step_keeps_the_entry_points_most_steps_reach() -> None:
    before = {"cuMemcpyDtoHAsync_v2": 10, "cuStreamSynchronize": 10, "cuMemcpy": 3}
    after = {"cuMemcpyDtoHAsync_v2": 30, "cuStreamSynchronize": 50, "cuMemcpy": 5}
    assert check.per_step(before, after, 20) == {
        "cuMemcpyDtoHAsync_v2": 1.0,
        "cuStreamSynchronize": 2.0,
    }
    assert check.per_step(before, after, 0) == {}


def _frame(t: float, pid: int, pct: float | None) -> dict[str, object]:
    row = {"pid": pid, "gpu_sync_pct": pct}
    return {"t": t, "interval": 1.0, "processes": [row]}


def test_a_phase_compares_the_frames_inside_it_with_the_loop_clock() -> None:
    # The loop waits 0.6 s of every second from t=10 (monotonic); frames are stamped
    # in Unix time, 1000 s ahead.
    steps = [check.Step("item", 10.0 + i, 10.0 + i, 10.6 + i, 11.0 + i) for i in range(6)]
    frames = [_frame(1000.0 + t, 7, pct) for t, pct in ((11, 55.0), (12, 62.0), (13, 60.0))]
    frames.append(_frame(1017.0, 7, 0.0))  # after the phase: not counted
    data = {"pid": 7, "offset": 1000.0, "steps": steps, "frames": frames}
    phase = check.Phase("item", False, start=10.0, end=16.0)
    got = check._phase_numbers(data, phase)
    assert got["frames"] == 3
    assert got["loop"] == pytest.approx(60.0)
    assert got["gputop"] == pytest.approx(59.0)
    assert got["steps_per_s"] == pytest.approx(1.0)


def test_a_phase_with_an_unmeasured_frame_has_no_gputop_number() -> None:
    steps = [check.Step("item", 10.0, 10.0, 10.6, 11.0)]
    frames = [_frame(1011.0, 7, 50.0), _frame(1012.0, 7, None)]
    data = {"pid": 7, "offset": 1000.0, "steps": steps, "frames": frames}
    got = check._phase_numbers(data, check.Phase("cpu", True, start=10.0, end=12.0))
    assert "gputop" not in got and got["frames"] == 2


def test_sync_rows_pass_within_the_points_and_fail_beyond() -> None:
    row = {"kind": "item", "hogs": False, "steps_per_s": 40.0}
    good = {**row, "loop": 60.0, "gputop": 58.0, "per_step": {"cuMemcpyDtoHAsync_v2": 1.0}}
    far = {**row, "hogs": True, "loop": 60.0, "gputop": 30.0, "per_step": {"x": 1.0}}
    unprobed = {**row, "kind": "event", "loop": 60.0, "gputop": 60.0, "per_step": {}}
    assert check.judge_sync([good])[0] == []
    assert check.judge_sync([good, far])[0] == ["item+hogs -30.0"]
    assert check.judge_sync([unprobed])[0] == ["event: reaches no probed entry point"]
    assert check.judge_sync([row])[0] == ["item: no measured frame"]


def test_dry_run_lists_every_check(capsys: pytest.CaptureFixture[str]) -> None:
    assert check.main(["--dry-run"]) == 0
    out = capsys.readouterr().out
    for c in check.CHECKS:
        assert f"  {c.name} " in out
    assert check.main(["--dry-run", "--only", "sync"]) == 0
    marked = [ln.split()[0] for ln in capsys.readouterr().out.splitlines() if ln[0] == " "]
    assert marked == ["sync"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--only", "doctor,nope"], "unknown check 'nope'"),
        (["--only", ","], "--only names no check"),
        (["--budget-s", "-5"], "--budget-s must be positive"),
        (["--budget-s", "soon"], "invalid float value: 'soon'"),
        (["--fast"], "unrecognized arguments: --fast"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert check.main([*args, "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and "Traceback" not in err


def test_summary_table_has_a_row_per_result() -> None:
    table = check.summary_table(
        [check.Result("doctor", "PASS", "fine"), check.Result("overhead", "INFO", "3 steps/s")]
    )
    assert table.splitlines()[1:] == [
        "doctor    PASS    fine",
        "overhead  INFO    3 steps/s",
    ]


def test_procaddr_asks_for_base_names() -> None:
    assert procaddr.base_name("cuMemcpyDtoHAsync_v2_ptsz") == "cuMemcpyDtoHAsync"
    assert procaddr.base_name("cuStreamSynchronize_ptsz") == "cuStreamSynchronize"
    assert procaddr.base_name("cuMemcpy_ptds") == "cuMemcpy"
    assert procaddr.base_name("cuCtxSynchronize") == "cuCtxSynchronize"


# ---- the offline bundle ---------------------------------------------------------------


def _wheel(path: Path, files: dict[str, str]) -> None:
    with zipfile.ZipFile(path, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)


def _bundle(tmp_path: Path, *pythons: str) -> Path:
    b = tmp_path / "bundle"
    (b / "wheels").mkdir(parents=True)
    _wheel(
        b / "wheels" / "demo-1.0-py3-none-any.whl",
        {
            "demo/__init__.py": "X = 1\n",
            "demo-1.0.data/purelib/demo_extra.py": "Y = 2\n",
            "demo-1.0.data/scripts/demo-cli": "#!/bin/sh\n",
            "demo-1.0.dist-info/METADATA": "Name: demo\n",
        },
    )
    _wheel(b / "wheels" / "other-1.0-py3-none-any.whl", {"other.py": "Z = 3\n"})
    sets = {p: ["demo-1.0-py3-none-any.whl"] for p in pythons}
    sets["2.7"] = ["other-1.0-py3-none-any.whl"]
    manifest = {"wheels": sets, "digest": "d1"}
    (b / "MANIFEST.json").write_text(json.dumps(manifest))
    return b


def test_install_unpacks_this_pythons_wheels_with_their_purelib_data(tmp_path: Path) -> None:
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    site = bundle.install(_bundle(tmp_path, "3.0", here), tmp_path / "site")
    assert not (site / "other.py").exists()  # another Python's set
    assert (site / "demo" / "__init__.py").read_text() == "X = 1\n"
    assert (site / "demo_extra.py").read_text() == "Y = 2\n"
    assert not (site / "demo-cli").exists()
    assert (site / "demo-1.0.dist-info" / "METADATA").exists()
    (site / "demo" / "__init__.py").write_text("X = 3\n")
    assert bundle.install(tmp_path / "bundle", site) == site  # the same bundle: kept as is
    assert (site / "demo" / "__init__.py").read_text() == "X = 3\n"


def test_install_refuses_a_bundle_for_another_python(tmp_path: Path) -> None:
    with pytest.raises(bundle.BundleError, match=r"for Python 3\.0, 2\.7, this is 3\."):
        bundle.install(_bundle(tmp_path, "3.0"), tmp_path / "site")
    with pytest.raises(bundle.BundleError, match="no bundle"):
        bundle.install(tmp_path / "nothing", tmp_path / "site")


def test_the_bundle_carries_gputops_runtime_dependencies_for_each_python(
    tmp_path: Path,
) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(
        '[project]\ndependencies = ["textual>=0.80", "tomli>=2; python_version < \'3.11\'"]\n'
    )
    assert bundle.runtime_requirements("3.12", pyproject) == ["textual>=0.80"]
    assert bundle.runtime_requirements("3.10", pyproject) == ["textual>=0.80", "tomli>=2"]
    real = bundle.runtime_requirements("3.12")
    names = {r.split(">")[0].split("=")[0].split("<")[0] for r in real}
    assert {"textual", "nvidia-ml-py", "psutil"} <= names


def test_a_verdict_line_names_its_state_cause_and_first_evidence() -> None:
    v = {
        "state": "busy_but_starving",
        "cause": "cpu_contention",
        "evidence": ["GPU 0: GPU_UTIL 97%, SM activity 12%, efficiency 0.12, power 140 W of 700 W"],
    }
    assert check.verdict_line(v) == (
        "busy_but_starving (cpu_contention): GPU 0: GPU_UTIL 97%, SM activity 12%,"
        " efficiency 0.12, ..."
    )
    assert check.verdict_line({"state": "ok", "cause": None, "evidence": []}) == "ok: "


def test_recorded_frames_are_the_whole_lines_written_so_far(tmp_path: Path) -> None:
    parts = _script("gpu_check_parts")
    rec = parts.Recorder(proc=None, path=tmp_path / "frames.jsonl")
    assert rec.frames() == []  # gputop has not opened the file yet
    rec.path.write_text('{"seq": 1, "processes": []}\n{"seq": 2, "proc')
    assert [f["seq"] for f in rec.frames()] == [1]
    frame = {"processes": [{"pid": 5, "gpu_sync_pct": 12.5}]}
    assert parts.row_of(frame, 5) == {"pid": 5, "gpu_sync_pct": 12.5}
    assert parts.row_of(frame, 6) is None
