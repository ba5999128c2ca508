"""The TUI shows where a process runs (its pod or container) and where SM activity comes
from, only when there is something to say: screens without containers are unchanged."""

from __future__ import annotations

from dataclasses import replace

from gputop.app import GputopApp
from gputop.feeds import ReplayFeed
from gputop.model.frame import Frame
from gputop.widgets.gpu_panel import GpuPanel
from gputop.widgets.table_layout import row_key
from tests.frames_fixture import make_frames

CID = "4f1c" + "0123456789abcdef" * 3 + "0a1b2c3d4e5f"


def _in_pods(frames: list[Frame]) -> list[Frame]:
    out = []
    for f in frames:
        procs = list(f.processes)
        procs[0] = replace(procs[0], pod_name="resnet-train", pod_namespace="ml-team")
        procs[1] = replace(procs[1], container_id=CID, container_runtime="docker")
        gpus = (replace(f.gpus[0], sm_source="dcgm"), *f.gpus[1:])
        out.append(replace(f, processes=tuple(procs), gpus=gpus))
    return out


def _panel_text(panel: GpuPanel) -> str:
    return "\n".join("".join(text for text, _ in line) for line in panel._lines)


async def test_pod_column_and_dcgm_marker_appear_for_processes_in_pods() -> None:
    frames = _in_pods(make_frames(5))
    app = GputopApp(ReplayFeed(frames))
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.pause()
        table = app.table
        assert "POD/CONTAINER" in table.render_line(0).text
        last = frames[-1].processes
        assert table.cells(row_key(last[0]))["pod"] == "ml-team/resnet-train"
        assert table.cells(row_key(last[1]))["pod"] == CID[:12]
        assert table.cells(row_key(last[2]))["pod"] == ""
        assert table.cells(row_key(last[0]))["command"].startswith(last[0].cmdline[:20])
        panels = list(app.query(GpuPanel))
        assert "SM: dcgm" in _panel_text(panels[0])
        assert "SM: dcgm" not in _panel_text(panels[1])


async def test_no_pod_column_without_containers() -> None:
    app = GputopApp(ReplayFeed(make_frames(5)))
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.pause()
        assert "POD" not in app.table.render_line(0).text
        assert all("SM: dcgm" not in _panel_text(p) for p in app.query(GpuPanel))
