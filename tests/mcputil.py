"""A real MCP client session (the SDK's own client over stdio) against `gputop mcp`."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.types import CallToolResult

from tests.harness import ROOT, gputop_cmd, gputop_env


class Tools:
    """Calls tools on one session; ``call`` returns the result, ``ok`` its structured value."""

    def __init__(self, session: ClientSession) -> None:
        self.session = session

    async def call(self, name: str, arguments: Mapping[str, Any] | None = None) -> CallToolResult:
        return await self.session.call_tool(name, dict(arguments or {}))

    async def ok(self, name: str, arguments: Mapping[str, Any] | None = None) -> Any:
        r = await self.call(name, arguments)
        text = r.content[0].text if r.content else ""  # type: ignore[union-attr]
        assert not r.is_error, f"{name}({arguments}) failed: {text}"
        return json.loads(text)

    async def error(self, name: str, arguments: Mapping[str, Any] | None = None) -> str:
        r = await self.call(name, arguments)
        text: str = r.content[0].text if r.content else ""  # type: ignore[union-attr]
        assert r.is_error, f"{name}({arguments}) did not fail: {text}"
        return text


def with_session(
    args: tuple[str, ...],
    env: Mapping[str, str],
    body: Callable[[Tools], Awaitable[None]],
    errlog: Any = None,
) -> None:
    """Start `gputop mcp ARGS` with ``env`` over ``gputop_env()``, run ``body``, close it."""

    async def main() -> None:
        cmd = gputop_cmd("mcp", *args)
        params = StdioServerParameters(
            command=cmd[0], args=cmd[1:], env=gputop_env(env), cwd=str(ROOT)
        )
        kw = {} if errlog is None else {"errlog": errlog}
        async with stdio_client(params, **kw) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                await body(Tools(session))

    anyio.run(main)
