"""Snapshot bundles written and read back here: round trip, redaction, 0600, atomic replace,
symlinks, the default directory, the size limit, and any frames (hypothesis)."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gputop.errors import UsageError
from gputop.model.frame import (
    ROLES,
    VERDICT_STATES,
    Frame,
    GpuSample,
    HostSample,
    ProcessSample,
    Sources,
    ThreadSample,
    Verdict,
)
from gputop.redact import REDACTED
from gputop.snapshot import SCHEMA, default_snapshot_dir, encode_bundle, load_bundle, write_bundle
from tests.bundles import META, synthetic_frame

FRAMES = [synthetic_frame(i) for i in range(5)]


def test_write_then_load_gives_back_the_same_frames(tmp_path: Path) -> None:
    path = write_bundle(FRAMES, META, str(tmp_path), None, redact=False)
    b = load_bundle(path)
    assert b.frames == FRAMES
    assert [f.to_dict() for f in b.frames] == [f.to_dict() for f in FRAMES]
    assert b.meta["host"] == {"kernel": "6.1.0"}
    assert b.redacted is False


def test_the_full_process_table_keeps_threads(tmp_path: Path) -> None:
    b = load_bundle(write_bundle(FRAMES, META, str(tmp_path), None, redact=False))
    assert b.processes == FRAMES[-1].processes
    assert [p.threads for p in b.processes] == [p.threads for p in FRAMES[-1].processes]
    assert b.processes[0].threads[1].comm == "pt_data_pin"


def test_bundle_has_the_documented_top_level_fields(tmp_path: Path) -> None:
    doc = json.loads(Path(write_bundle(FRAMES, META, str(tmp_path), None, True)).read_text())
    assert doc["schema"] == SCHEMA == "gputop.snapshot/1"
    assert set(doc) >= {"schema", "created_t", "meta", "window", "frames", "processes", "verdicts"}
    assert [f["t"] for f in doc["frames"]] == sorted(f["t"] for f in doc["frames"])
    assert doc["window"] == {
        "start_t": FRAMES[0].t,
        "end_t": FRAMES[-1].t,
        "frames": 5,
        "dropped_frames": 0,
    }
    assert doc["verdicts"][0]["state"] == "busy_but_starving"
    assert doc["verdicts"][0]["evidence"] == ["train.py off-CPU 52% of the last 10 s"]


def test_secrets_are_redacted_by_default_and_kept_on_request(tmp_path: Path) -> None:
    red = Path(write_bundle(FRAMES, META, str(tmp_path), None, redact=True))
    assert "hunter2" not in red.read_text()
    b = load_bundle(str(red))
    assert b.redacted is True
    assert b.processes[0].cmdline == f"python3 train.py --api-key={REDACTED} --lr 0.1"
    assert all(f"--api-key={REDACTED}" in p.cmdline for f in b.frames for p in f.processes)
    kept = Path(write_bundle(FRAMES, META, str(tmp_path), None, redact=False))
    assert "hunter2" in kept.read_text()


@pytest.mark.parametrize("umask", [0o000, 0o022, 0o077])
def test_bundle_and_screenshot_are_mode_0600_whatever_the_umask(tmp_path: Path, umask: int) -> None:
    old = os.umask(umask)
    try:
        path = write_bundle(FRAMES, META, str(tmp_path), "<svg/>", True)
    finally:
        os.umask(old)
    svg = Path(path).with_suffix(".svg")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(svg).st_mode) == 0o600
    assert svg.read_text() == "<svg/>"
    assert load_bundle(path).screenshot == svg.name


def test_overwriting_an_existing_file_leaves_it_0600(tmp_path: Path) -> None:
    target = tmp_path / "bundle.json"
    target.write_text("old")
    target.chmod(0o644)
    write_bundle(FRAMES, META, None, None, False, path=str(target))
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert load_bundle(str(target)).frames == FRAMES


def test_a_symlink_at_the_target_is_refused_and_its_target_untouched(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious")
    link = tmp_path / "snap.json"
    link.symlink_to(victim)
    with pytest.raises(UsageError, match="symlink"):
        write_bundle(FRAMES, META, None, None, True, path=str(link))
    assert victim.read_text() == "precious"
    assert link.is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["snap.json", "victim"]


def test_a_dangling_symlink_at_the_target_is_refused(tmp_path: Path) -> None:
    link = tmp_path / "snap.json"
    link.symlink_to(tmp_path / "would-be-created")
    with pytest.raises(UsageError, match="symlink"):
        write_bundle(FRAMES, META, None, None, True, path=str(link))
    assert not (tmp_path / "would-be-created").exists()


def test_default_directory_follows_xdg_state_home() -> None:
    assert default_snapshot_dir({"XDG_STATE_HOME": "/s", "HOME": "/h"}) == "/s/gputop/snapshots"
    assert default_snapshot_dir({"HOME": "/h"}) == "/h/.local/state/gputop/snapshots"
    # The spec says a relative XDG_STATE_HOME is invalid and must be ignored.
    assert (
        default_snapshot_dir({"XDG_STATE_HOME": "rel", "HOME": "/h"})
        == "/h/.local/state/gputop/snapshots"
    )


def test_without_a_directory_bundles_go_to_the_default_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    first = write_bundle(FRAMES, META, None, None, True)
    second = write_bundle(FRAMES, META, None, None, True)
    d = tmp_path / "state" / "gputop" / "snapshots"
    assert Path(first).parent == d and Path(second).parent == d
    assert first != second
    assert stat.S_IMODE(d.stat().st_mode) == 0o700


def test_a_configured_directory_is_created_private(tmp_path: Path) -> None:
    d = tmp_path / "a" / "snaps"
    path = write_bundle(FRAMES, META, str(d), None, True)
    assert Path(path).parent == d
    assert stat.S_IMODE(d.stat().st_mode) == 0o700


def test_output_naming_an_existing_directory_writes_a_fresh_name_in_it(tmp_path: Path) -> None:
    path = write_bundle(FRAMES, META, None, None, True, path=str(tmp_path))
    assert Path(path).parent == tmp_path
    assert Path(path).name.startswith("gputop-") and path.endswith(".json")


def test_an_unwritable_place_is_one_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="cannot write"):
        write_bundle(FRAMES, META, None, None, True, path=str(tmp_path / "no" / "such" / "x.json"))
    with pytest.raises(UsageError, match="no frames"):
        write_bundle([], META, str(tmp_path), None, True)


def test_non_finite_numbers_are_written_as_null(tmp_path: Path) -> None:
    nan_gpu = GpuSample(0, "GPU-x", "n", float("nan"), None, float("inf"), None, None, None)
    frame = Frame(1.0, 1.0, Sources("nvml", "procfs"), HostSample(1.0, 1, 0.1), gpus=(nan_gpu,))
    b = load_bundle(write_bundle([frame], {}, str(tmp_path), None, True))
    assert b.frames[0].gpus[0].util is None
    assert b.frames[0].gpus[0].power_w is None


# ---- property: any frames survive the round trip --------------------------

_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=20)
_num = st.floats(allow_nan=False, allow_infinity=False, min_value=-1e9, max_value=1e9)
_pct = st.floats(min_value=0, max_value=100)
_small = st.integers(min_value=0, max_value=2**40)
_threads = st.builds(
    ThreadSample,
    tid=_small,
    comm=_text,
    cpu_pct=_pct,
    offcpu_pct=st.none() | _pct,
    runq_pct=st.none() | _pct,
    preempt_per_s=_num,
    vcsw_per_s=_num,
)
_procs = st.builds(
    ProcessSample,
    pid=_small,
    ppid=_small,
    comm=_text,
    cmdline=_text,
    role=st.sampled_from(ROLES),
    trainer_pid=st.none() | _small,
    cpu_pct=_num,
    offcpu_pct=st.none() | _pct,
    runq_pct=st.none() | _pct,
    preempt_per_s=_num,
    preempt_total=_small,
    vcsw_per_s=_num,
    gpus=st.lists(st.integers(0, 7), max_size=3).map(tuple),
    gpu_mem_mib=st.none() | _small,
    offcpu_hist=st.none() | st.lists(_small, max_size=4).map(tuple),
    threads=st.lists(_threads, max_size=3).map(tuple),
)
_gpus = st.builds(
    GpuSample,
    index=st.integers(0, 7),
    uuid=_text,
    name=_text,
    util=st.none() | _pct,
    sm_active=st.none() | _pct,
    power_w=st.none() | _num,
    power_limit_w=st.none() | _num,
    mem_used_mib=st.none() | _small,
    mem_total_mib=st.none() | _small,
    throttle=st.lists(_text, max_size=3).map(tuple),
    state=st.sampled_from(["ok", "lost"]),
)
_verdicts = st.builds(
    Verdict,
    gpu=st.integers(0, 7),
    state=st.sampled_from(VERDICT_STATES),
    evidence=st.lists(_text, max_size=2).map(tuple),
    fixes=st.lists(_text, max_size=2).map(tuple),
    efficiency=st.none() | st.floats(0, 1),
)


@st.composite
def _frame_lists(draw: st.DrawFn) -> list[Frame]:
    n = draw(st.integers(1, 4))
    t0 = draw(st.integers(0, 2**31))
    return [
        Frame(
            t=t0 + i * 0.5,
            interval=0.5,
            seq=i,
            sources=Sources(draw(_text), draw(_text), tuple(draw(st.lists(_text, max_size=2)))),
            host=HostSample(cpu_pct=draw(_pct), ncpu=draw(st.integers(1, 512)), load1=draw(_num)),
            gpus=tuple(draw(st.lists(_gpus, max_size=2))),
            processes=tuple(draw(st.lists(_procs, max_size=3))),
            verdicts=tuple(draw(st.lists(_verdicts, max_size=2))),
        )
        for i in range(n)
    ]


@pytest.fixture(scope="module")
def prop_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield tmp_path_factory.mktemp("prop")


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(frames=_frame_lists())
def test_any_frames_round_trip_unredacted(prop_dir: Path, frames: list[Frame]) -> None:
    path = write_bundle(
        frames, {"k": [1, "x", None]}, None, None, False, path=str(prop_dir / "p.json")
    )
    b = load_bundle(path)
    assert b.frames == frames
    assert [p.threads for p in b.processes] == [p.threads for p in frames[-1].processes]
    assert b.meta["k"] == [1, "x", None]


def test_a_bundle_over_the_size_limit_keeps_the_newest_frames_that_fit(tmp_path: Path) -> None:
    frames = [synthetic_frame(i) for i in range(100)]
    data = encode_bundle(frames, META, True, max_bytes=60_000)
    assert 30_000 < len(data) <= 60_000
    path = tmp_path / "b.json"
    path.write_bytes(data)
    b = load_bundle(str(path), max_bytes=60_000)
    assert [f.seq for f in b.frames] == [f.seq for f in frames[-len(b.frames) :]]
    assert b.window["dropped_frames"] == 100 - len(b.frames) > 0
    assert b.window["start_t"] == b.frames[0].t


def test_ten_minutes_of_frames_load_back_and_stay_small(tmp_path: Path) -> None:
    frames = [synthetic_frame(i) for i in range(600)]
    path = write_bundle(frames, META, str(tmp_path), None, True)
    # About 4.0 kB a frame: every contract field is written, nulls included (2.01 MB once
    # io_wait_pct and psi_io_some joined, 2.19 MB once each GPU's lost time and each
    # verdict's cost did, 2.30 MB once each process's network wait and workers' split, each
    # network peers and each process's SLURM job did, 2.42 MB once h2d_copy_pct and each
    # GPU's PCIe link did).
    assert os.path.getsize(path) < 2_500_000
    assert len(load_bundle(path).frames) == 600
