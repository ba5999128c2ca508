"""Snapshot bundles for real: a write failing midway (a child over its file size limit), the
host's own metadata, and `gputop snapshot` on the fake NVML and on a bad output."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

from gputop.model.frame import SourceStatus
from gputop.redact import REDACTED
from gputop.snapshot import collect_meta, load_bundle, write_bundle
from tests.bundles import META, synthetic_frame
from tests.contract import check_frame
from tests.fakenvml import ARCH_AMPERE, SW_POWER_CAP, FakeGpu, FakeNvml, FakeProc, fake_uuid
from tests.harness import PY, ROOT, run_gputop

_FAILING_WRITER = textwrap.dedent(
    """
    import resource, signal, sys
    from gputop.errors import UsageError
    from gputop.snapshot import load_bundle, write_bundle
    frames = load_bundle(sys.argv[1]).frames
    # The kernel refuses writes past this size (EFBIG): the write fails midway.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (2048, 2048))
    try:
        write_bundle(frames, {}, None, "<svg/>", True, path=sys.argv[2])
    except UsageError as exc:
        print(exc)
        sys.exit(2)
    sys.exit(0)
    """
)


def test_a_write_failing_midway_leaves_the_old_file_and_no_partial_or_orphan_file(
    tmp_path: Path,
) -> None:
    src = write_bundle(
        [synthetic_frame(i) for i in range(100)],
        META,
        str(tmp_path),
        None,
        True,
        path=str(tmp_path / "src.json"),
    )
    assert os.path.getsize(src) > 2048
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    target = out_dir / "bundle.json"
    target.write_text("previous bundle")
    r = subprocess.run(
        [PY, "-c", _FAILING_WRITER, src, str(target)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    assert r.returncode == 2, r.stderr
    assert r.stdout.count("\n") == 1
    assert "too large" in r.stdout.lower()
    assert target.read_text() == "previous bundle"
    assert [p.name for p in out_dir.iterdir()] == ["bundle.json"]


# ---- the command ------------------------------------------------------------


def test_snapshot_with_fake_nvml_has_gpu_frames_driver_facts_and_the_gpu_process(
    tmp_path: Path,
) -> None:
    sleeper = subprocess.Popen([PY, "-c", "import time; time.sleep(60)", "--token=abc123secret"])
    try:
        fake = FakeNvml(
            tmp_path / "nvml",
            [
                FakeGpu(
                    util=[97],
                    sm_util=[12],
                    power_w=[140],
                    throttle=[SW_POWER_CAP],
                    processes=[FakeProc(pid=sleeper.pid, mem_mib=60000, sm_pct=11)],
                ),
                FakeGpu(name="NVIDIA A100-SXM4-80GB", arch=ARCH_AMPERE, gpm=False),
            ],
        )
        out = tmp_path / "s.json"
        r = run_gputop(
            *("snapshot", "--duration", "0.6", "--interval", "0.2", "--no-bpf", "-o", str(out)),
            env=fake.env(),
        )
    finally:
        sleeper.terminate()
        sleeper.wait(timeout=10)
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    for f in doc["frames"]:
        check_frame(f)
    b = load_bundle(str(out))
    nvml = b.meta["nvml"]
    assert (nvml["ok"], nvml["driver_version"], nvml["cuda_version"]) == (True, "550.54.15", "12.4")
    assert [(g["index"], g["uuid"], g["gpm_supported"]) for g in nvml["gpus"]] == [
        (0, fake_uuid(0), True),
        (1, fake_uuid(1), False),
    ]
    last = b.frames[-1]
    assert [(g.util, g.sm_active, g.power_w) for g in last.gpus] == [
        (97.0, 12.0, 140.0),
        (0.0, None, 100.0),
    ]
    assert last.gpus[0].throttle == ("sw_power_cap",)
    holder = next(p for p in b.processes if p.pid == sleeper.pid)
    assert (holder.role, holder.gpus, holder.gpu_mem_mib) == ("trainer", (0,), 60000)
    assert holder.cmdline.endswith(f"--token={REDACTED}")
    assert next(s for s in b.meta["sources"] if s["name"] == "gpu")["live"] is True


def test_snapshot_command_reports_an_unwritable_output_in_one_line(tmp_path: Path) -> None:
    r = run_gputop(
        "snapshot", "--duration", "0.2", "--interval", "0.1", "-o", str(tmp_path / "x" / "y.json")
    )
    assert r.returncode == 2
    assert r.stderr.startswith("gputop: error: cannot write")
    assert r.stderr.count("\n") == 1


def test_collect_meta_reports_this_host_and_the_sources() -> None:
    st_ = SourceStatus("gpu", "none", False, "no GPU", "install the driver")
    meta = collect_meta([st_])
    assert meta["host"]["kernel"] == os.uname().release
    assert meta["host"]["ncpu"] == os.cpu_count()
    with open("/proc/meminfo") as f:
        total_kb = int(f.readline().split()[1])
    assert meta["host"]["mem_total_mib"] == total_kb // 1024
    assert meta["host"]["cpu_model"]
    assert meta["sources"] == [
        {
            "name": "gpu",
            "kind": "none",
            "live": False,
            "reason": "no GPU",
            "fix": "install the driver",
        }
    ]
    assert set(meta["nvml"]) >= {"ok", "reason"}
    json.dumps(meta, allow_nan=False)
