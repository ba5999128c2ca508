"""The window's packed frames: a bundle written from them is byte for byte the bundle the eager
encoding (each frame's JSON object made as it arrived) wrote for the same frames."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gputop.model.frame import (
    CpuLimitSample,
    Frame,
    GpuSample,
    HostSample,
    NetPeer,
    OpenStorage,
    Preemptor,
    ProcessSample,
    ThreadSample,
    Verdict,
    WorkersTime,
)
from gputop.model.framestore import FrameStore, pack_frame, unpack_frame
from gputop.snapshot import encode_bundle, writer
from tests.bundles import META, synthetic_frame

DEMO_FRAMES = Path(__file__).resolve().parent.parent / "demo_frames.jsonl"


class EagerStore(FrameStore):
    """What the store did before: each frame's JSON object encoded as it arrived, decoded back."""

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self._json: list[bytes] = []

    def append(self, frame: Frame, *, held: bool = False) -> None:
        super().append(frame, held=True)
        text = json.dumps(frame.to_dict(), separators=(",", ":"))
        self._json = [*self._json, text.encode()][-self.capacity :]

    def dicts(self, *, newest_first: bool = False) -> Iterator[dict[str, Any]]:
        items = reversed(self._json) if newest_first else iter(self._json)
        for item in items:
            yield json.loads(item)


def every_field_frame() -> Frame:
    """A recorded frame whose first process and GPU hold every field the recordings lack:
    each nested part, NaN and infinities, control characters and a lone surrogate."""
    base = _recorded()[0]
    p = base.processes[0]
    full = replace(
        p,
        cmdline="python3 -c 'x\ny' --token=s3cret \udcff end",
        comm="py\tthon",
        h2d_copy_pct=12.5,
        h2d_copy_cpu_pct=math.nan,
        h2d_copy_runq_pct=math.inf,
        net_wait_pct=-math.inf,
        peers=(NetPeer("10.0.4.12", 9000), NetPeer("2001:db8::7", 443)),
        workers_time=WorkersTime(2, 40.0, 10.0, None, 5.5, math.nan, 44.5),
        cpu_limit=CpuLimitSample("/job", "cpu.max", None, 10, 3, 1.5, "bpf"),
        storage=(OpenStorage("/data", "nfs4", "server:/export"), OpenStorage("", "x", "/dev/y")),
        preemptors=(Preemptor(9, "stress", 40.0, True),),
        container_id="0123456789ab",
        container_runtime="containerd",
        pod_uid="u-1",
        pod_name="trainer-0",
        pod_namespace="ml",
        job_id="run-7",
        rank=1,
        world_size=4,
        local_rank=1,
        slurm_job_id="4242",
        slurm_step_id="batch",
        threads=(ThreadSample(p.pid, "main", 1.0, 2.0, None, 3.0, math.nan),),
    )
    g = base.gpus[0]
    gpu = replace(
        g,
        pcie_gen=4,
        pcie_gen_max=5,
        pcie_width=16,
        pcie_width_max=16,
        pcie_tx_kb_s=1.5e6,
        pcie_rx_kb_s=math.nan,
        lost_gpu_s={"cpu_contention": 12.25, "cpu_limit": 0.0},
    )
    return replace(
        base,
        sampler_cpu_pct=math.nan,
        processes=(full, *base.processes[1:]),
        gpus=(gpu, *base.gpus[1:]),
        others=(replace(p, pid=99_999),),
    )


def _recorded() -> list[Frame]:
    lines = DEMO_FRAMES.read_text().splitlines()
    return [Frame.from_dict(json.loads(line)["frame"]) for line in lines]


def window() -> list[Frame]:
    """Every recorded demo's frame, synthetic frames and the every-field frame, in time order."""
    frames = [*_recorded(), *(synthetic_frame(i) for i in range(3)), every_field_frame()]
    return [replace(f, t=1_763_769_600.125 + i, seq=i + 1) for i, f in enumerate(frames)]


def test_the_frames_cover_every_field_the_json_holds() -> None:
    # A field added later and never set here would go untested: fail until it is covered.
    frames = window()
    parts: list[tuple[type, list[Any]]] = [
        (ProcessSample, [p for f in frames for p in f.processes]),
        (GpuSample, [g for f in frames for g in f.gpus]),
        (Verdict, [v for f in frames for v in f.verdicts]),
        (HostSample, [f.host for f in frames]),
    ]
    for cls, objs in parts:
        unset = [
            fl.name
            for fl in dataclasses.fields(cls)
            if all(getattr(o, fl.name) in (None, (), "") for o in objs)
        ]
        assert unset == [], f"{cls.__name__}: no frame sets {unset}"


def _bundles(frames: list[Frame], capacity: int, redact: bool) -> tuple[bytes, bytes]:
    packed, eager = FrameStore(capacity), EagerStore(capacity)
    for f in frames:
        packed.append(f)
        eager.append(f)
    return (
        encode_bundle(packed, META, redact, "shot.svg"),
        encode_bundle(eager, META, redact, "shot.svg"),
    )


@pytest.mark.parametrize("redact", [True, False])
def test_a_bundle_from_packed_frames_is_byte_identical_to_the_eager_encoding(
    monkeypatch: pytest.MonkeyPatch, redact: bool
) -> None:
    monkeypatch.setattr(writer.time, "time", lambda: 1_763_770_000.0)
    packed, eager = _bundles(window(), 100, redact)
    assert packed == eager
    doc = json.loads(packed)
    assert len(doc["frames"]) == len(window())
    assert doc["frames"][-1]["processes"][0]["slurm_step_id"] == "batch"


def test_a_full_window_drops_the_same_oldest_frames_either_way(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(writer.time, "time", lambda: 1_763_770_000.0)
    frames = window()
    packed, eager = _bundles(frames, 5, redact=True)
    assert packed == eager
    assert [f["seq"] for f in json.loads(packed)["frames"]] == [f.seq for f in frames[-5:]]


def test_a_packed_frame_unpacks_to_the_same_parts_without_threads_and_others() -> None:
    frame = every_field_frame()
    back = unpack_frame(pack_frame(frame))
    # NaN is not equal to itself: the JSON texts, where it is a token, are compared.
    assert json.dumps(back.to_dict()) == json.dumps(frame.to_dict())
    assert back.others == () and all(p.threads == () for p in back.processes)
    p = back.processes[0]
    assert p.cmdline == frame.processes[0].cmdline
    assert isinstance(p.workers_time, WorkersTime) and isinstance(p.cpu_limit, CpuLimitSample)
    assert p.peers is not None and isinstance(p.peers[1], NetPeer)
    assert back.processes[1:] == frame.processes[1:]
