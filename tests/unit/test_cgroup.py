"""Container and pod identity from cgroup paths: each runtime's naming, paths outside
containers, the unified line over v1, and the TUI filter on pod and namespace."""

from __future__ import annotations

import pytest

from gputop.sources.cgroup import cgroup_path, identity_from_path
from tests.cgrouputil import CID, LAYOUTS


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_identity_from_each_runtimes_path(layout: str) -> None:
    path, runtime, pod = LAYOUTS[layout]
    ident = identity_from_path("/" + path)
    assert ident is not None
    assert (ident.container_id, ident.runtime, ident.pod_uid) == (CID, runtime, pod)


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/user.slice/user-0.slice/session-3.scope",
        "/system.slice/ssh.service",
        "/process_api/d2356716ae5208ccd03f3c0191d57572",  # an id of unknown shape
    ],
)
def test_no_identity_outside_containers(path: str) -> None:
    assert identity_from_path(path) is None


def test_cgroup_path_prefers_the_unified_line_and_falls_back_to_v1() -> None:
    assert cgroup_path("0::/system.slice/x.scope\n") == "/system.slice/x.scope"
    hybrid = "4:memory:/docker/abc\n1:cpu:/\n0::/\n"
    assert cgroup_path(hybrid) == "/docker/abc"
    assert cgroup_path("0::/\n") is None


def test_the_tui_filter_finds_processes_by_pod_and_namespace() -> None:
    from dataclasses import replace

    from gputop.widgets.table_layout import arrange
    from tests.frames_fixture import make_frame

    procs = list(make_frame(0).processes)
    procs[0] = replace(procs[0], pod_name="resnet-train-7f9c", pod_namespace="ml-team")
    assert [p.pid for p, _ in arrange(procs, needle="ml-team/resnet")] == [procs[0].pid]
    assert [p.pid for p, _ in arrange(procs, needle="RESNET-TRAIN")] == [procs[0].pid]
