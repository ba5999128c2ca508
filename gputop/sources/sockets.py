"""Whom a process reads from over the network: the peers of its connected TCP sockets.

Read for a training job's process that waited on the network in the last interval (its
``net_wait_pct``), so the diagnosis can say where batches wait ("10.0.4.12:9000"): the
socket inodes of ``/proc/PID/fd`` (links ``socket:[N]``), looked up in the TCP tables of
the process's own network namespace (``/proc/PID/net/tcp`` and ``tcp6``: a container's
connections, as it sees them). Only established connections count (a listening socket
serves, it does not read). The tables are read once per network namespace per tick
(``begin()`` starts a tick), however many processes share it.
"""

from __future__ import annotations

import os
import socket
import struct

from gputop.model.frame import NetPeer

__all__ = ["SocketReader", "parse_tcp_table"]

MAX_FDS = 512  # a process with more open files is read in part (the first ones listed)
MAX_PEERS = 8
_ESTABLISHED = "01"
_TCP_TABLES = ("tcp", "tcp6")


def _address(hex_addr: str) -> str | None:
    """The text of a /proc/net/tcp address: each 32-bit word in the host's byte order."""
    try:
        raw = bytes.fromhex(hex_addr)
    except ValueError:
        return None
    if len(raw) == 4:
        return socket.inet_ntop(socket.AF_INET, struct.pack("=I", *struct.unpack(">I", raw)))
    if len(raw) != 16:
        return None
    words = struct.unpack(">4I", raw)
    packed = struct.pack("=4I", *words)
    if packed[:12] == b"\0" * 10 + b"\xff\xff":
        return socket.inet_ntop(socket.AF_INET, packed[12:])  # an IPv4-mapped address
    return socket.inet_ntop(socket.AF_INET6, packed)


def parse_tcp_table(text: str) -> dict[int, NetPeer]:
    """Socket inode -> its remote peer, for the established connections of one table."""
    out: dict[int, NetPeer] = {}
    for line in text.splitlines()[1:]:
        parts = line.split()
        if len(parts) < 10 or parts[3] != _ESTABLISHED:
            continue
        addr, _, port = parts[2].partition(":")
        host = _address(addr)
        try:
            inode = int(parts[9])
            peer_port = int(port, 16)
        except ValueError:
            continue
        if host is None or inode == 0:
            continue
        out[inode] = NetPeer(host, peer_port)
    return out


class SocketReader:
    """Reads the TCP peers of processes; one per ``/proc`` root."""

    def __init__(self, proc_root: str = "/proc") -> None:
        self.root = proc_root.rstrip("/")
        # Network namespace -> inode -> peer, for this tick.
        self._tables: dict[str, dict[int, NetPeer]] = {}

    def begin(self) -> None:
        """A new tick: the tables are read again when next needed."""
        self._tables = {}

    def _table(self, pid: int) -> dict[int, NetPeer]:
        try:
            ns = os.readlink(f"{self.root}/{pid}/ns/net")
        except OSError:
            ns = f"pid:{pid}"
        table = self._tables.get(ns)
        if table is None:
            table = {}
            for name in _TCP_TABLES:
                try:
                    with open(f"{self.root}/{pid}/net/{name}", encoding="ascii") as f:
                        table.update(parse_tcp_table(f.read()))
                except (OSError, UnicodeDecodeError):
                    continue
            self._tables[ns] = table
        return table

    def read(self, pid: int) -> tuple[NetPeer, ...]:
        """The peers of ``pid``'s established TCP connections, once each, in the order of its
        fds; () where none (or its fds cannot be read)."""
        base = f"{self.root}/{pid}/fd"
        try:
            fds = os.listdir(base)[:MAX_FDS]
        except OSError:
            return ()
        inodes = []
        for fd in fds:
            try:
                target = os.readlink(f"{base}/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                try:
                    inodes.append(int(target[8:-1]))
                except ValueError:
                    continue
        if not inodes:
            return ()
        table = self._table(pid)
        found: dict[NetPeer, None] = {}
        for inode in inodes:
            peer = table.get(inode)
            if peer is not None:
                found[peer] = None
        return tuple(found)[:MAX_PEERS]
