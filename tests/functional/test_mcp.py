"""`gputop mcp` over a real stdio session with the SDK's own client, on the fake NVML."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from pathlib import Path

import anyio
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from tests.fakenvml import FakeGpu, FakeNvml, FakeProc
from tests.harness import gputop_env, run_gputop, start_gputop
from tests.mcputil import Tools, with_session

TOOLS = {"verdicts", "process", "top_culprits", "write_snapshot", "read_bundle"}
MISSING_PID = 2**22 + 7  # above the default pid_max: never a live process


def test_every_tool_answers_and_bad_arguments_are_tool_errors(
    tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    fake = FakeNvml(
        tmp_path / "nvml",
        [FakeGpu(util=[97], sm_util=[12], processes=[FakeProc(pid=sleeper.pid, mem_mib=4000)])],
    )
    state = tmp_path / "state"
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "something/else"}')
    seen: dict[str, object] = {}

    async def body(t: Tools) -> None:
        listed = await t.session.list_tools()
        seen["tools"] = {tool.name: tool for tool in listed.tools}

        v = await t.ok("verdicts")
        seen["verdicts"] = v
        p = await t.ok("process", {"pid": sleeper.pid})
        seen["process"] = p
        seen["any_pid"] = await t.ok("process", {"pid": os.getpid()})
        seen["culprits"] = await t.ok("top_culprits", {"minutes": 1, "limit": 3})
        snap = await t.ok("write_snapshot", {"minutes": 1})
        seen["snapshot"] = snap
        seen["bundle"] = await t.ok("read_bundle", {"path": snap["path"]})

        seen["errors"] = [
            await t.error("process", {"pid": MISSING_PID}),
            await t.error("process", {"pid": -1}),
            await t.error("process", {"pid": "twelve"}),
            await t.error("process", {}),
            await t.error("top_culprits", {"minutes": 0}),
            await t.error("top_culprits", {"minutes": 5, "limit": 10_000}),
            await t.error("write_snapshot", {"minutes": "all"}),
            await t.error("read_bundle", {"path": str(bad)}),
            await t.error("read_bundle", {"path": str(tmp_path / "none.json")}),
            await t.error("read_bundle", {"path": ""}),
            await t.error("no_such_tool", {}),
        ]
        # After every bad call the server still answers.
        seen["after"] = await t.ok("verdicts")

    with (tmp_path / "server.err").open("w") as err:
        with_session(
            ("--no-bpf", "--interval", "0.3"),
            {**fake.env(), "XDG_STATE_HOME": str(state)},
            body,
            errlog=err,
        )

    tools = seen["tools"]
    assert isinstance(tools, dict) and set(tools) == TOOLS
    for name, tool in tools.items():
        assert tool.description, name
        assert tool.annotations is not None
        assert tool.annotations.read_only_hint is (name != "write_snapshot"), name
        assert tool.annotations.destructive_hint is not True

    v = seen["verdicts"]
    assert (
        isinstance(v, dict) and v["sources"]["gpu"] == "nvml" and v["sources"]["sched"] == "procfs"
    )
    (g0,) = v["verdicts"]
    assert g0["gpu"] == 0 and g0["util"] == 97.0 and isinstance(g0["state"], str)
    assert isinstance(g0["evidence"], list) and isinstance(g0["fixes"], list)

    p = seen["process"]
    assert isinstance(p, dict) and p["pid"] == sleeper.pid and p["gpus"] == [0]
    assert p["verdict"]["gpu"] == 0 and p["time_split"]["blocked"] > 90
    assert p["comm"] == "python3" or p["comm"].startswith("python")
    assert seen["any_pid"]["pid"] == os.getpid()  # type: ignore[index]

    c = seen["culprits"]
    assert isinstance(c, dict) and c["frames"] >= 1 and c["gpus"][0]["gpu"] == 0
    assert sum(c["gpus"][0]["states"].values()) == c["frames"]

    snap = seen["snapshot"]
    assert isinstance(snap, dict)
    path = Path(snap["path"])
    assert path.parent == state / "gputop" / "snapshots" and path.stat().st_mode & 0o777 == 0o600
    b = seen["bundle"]
    assert isinstance(b, dict) and b["frames"] == snap["frames"] and b["path"] == str(path)
    assert [x["gpu"] for x in b["verdicts"]] == [0]

    errors = seen["errors"]
    assert isinstance(errors, list)
    assert f"no process {MISSING_PID}" in errors[0]
    assert "greater than 0" in errors[1] and "valid integer" in errors[2]
    assert "pid" in errors[3] and "greater than 0" in errors[4]
    assert "less than or equal to 50" in errors[5] and "valid number" in errors[6]
    assert "not a gputop snapshot" in errors[7] or "schema" in errors[7], errors[7]
    assert "none.json" in errors[8] and "no_such_tool" in errors[10]
    after = seen["after"]
    assert isinstance(after, dict) and [x["gpu"] for x in after["verdicts"]] == [0]
    assert "Traceback" not in (tmp_path / "server.err").read_text()


def test_streamable_http_serves_the_same_tools_on_loopback(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p = start_gputop("mcp", "--no-bpf", "--http", f"127.0.0.1:{port}", env=gputop_env())
    seen: dict[str, object] = {}

    async def main() -> None:
        url = f"http://127.0.0.1:{port}/mcp"
        async with streamable_http_client(url) as (read, write, *_):
            async with ClientSession(read, write) as session:
                await session.initialize()
                seen["tools"] = {t.name for t in (await session.list_tools()).tools}
                r = await session.call_tool("process", {"pid": MISSING_PID})
                seen["error"] = r.is_error
                r = await session.call_tool("verdicts", {})
                seen["verdicts"] = json.loads(r.content[0].text)  # type: ignore[union-attr]

    try:
        assert p.stderr is not None
        assert p.stderr.readline().strip() == f"gputop mcp: serving http://127.0.0.1:{port}/mcp"
        for _ in range(100):  # uvicorn binds a moment after the line
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        anyio.run(main)
    finally:
        p.terminate()
        rc = p.wait(timeout=20)
    assert seen["tools"] == TOOLS and seen["error"] is True
    assert isinstance(seen["verdicts"], dict) and "verdicts" in seen["verdicts"]
    assert rc == 143  # SIGTERM: an orderly exit, the sampler closed


@pytest.mark.parametrize("address", ["nowhere", "127.0.0.1:99999", "::1:80"])
def test_a_bad_http_address_is_one_line_and_status_2(address: str) -> None:
    r = run_gputop("mcp", "--no-bpf", "--http", address)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith("gputop: error: --http: "), r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
