"""Whom a process reads from over the network, from a fake /proc: its sockets' inodes in its
network namespace's TCP tables, established connections only, each table read once a tick."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gputop.model.frame import NetPeer
from gputop.sources.sockets import SocketReader, parse_tcp_table

HEAD = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"  # noqa: E501


def _row(sl: int, local: str, remote: str, state: str, inode: int) -> str:
    return (
        f"  {sl}: {local} {remote} {state} 00000000:00000000 00:00000000 00000000 0 0 {inode} 1 0\n"
    )


# 127.0.0.1:40000 -> 127.0.0.1:9000 established (inode 501); a listener (502); an
# established one to 10.0.4.12:443 (503).
TCP = (
    HEAD
    + _row(0, "0100007F:9C40", "0100007F:2328", "01", 501)
    + _row(1, "00000000:1F90", "00000000:0000", "0A", 502)
    + _row(2, "0100007F:9C41", "0C04000A:01BB", "01", 503)
)
# ::ffff:10.0.0.9 port 8080 (an IPv4-mapped peer, 601) and 2001:db8::7 port 9000 (602).
TCP6 = (
    HEAD
    + _row(0, "0" * 32 + ":9C42", "0000000000000000FFFF00000900000A:1F90", "01", 601)
    + _row(1, "0" * 32 + ":9C43", "B80D0120000000000000000007000000:2328", "01", 602)
)


def test_the_tcp_tables_give_each_established_sockets_peer() -> None:
    assert parse_tcp_table(TCP) == {
        501: NetPeer("127.0.0.1", 9000),
        503: NetPeer("10.0.4.12", 443),
    }
    assert parse_tcp_table(TCP6) == {
        601: NetPeer("10.0.0.9", 8080),
        602: NetPeer("2001:db8::7", 9000),
    }
    assert NetPeer("2001:db8::7", 9000).describe() == "[2001:db8::7]:9000"
    assert parse_tcp_table(HEAD + "  garbage line\n") == {}


def _proc(root: Path, pid: int, inodes: list[int], ns: str = "net:[4026531840]") -> None:
    fd = root / str(pid) / "fd"
    fd.mkdir(parents=True)
    (root / str(pid) / "ns").mkdir()
    os.symlink(ns, root / str(pid) / "ns" / "net")
    os.symlink("/dev/null", fd / "0")
    os.symlink("pipe:[77]", fd / "3")
    for i, inode in enumerate(inodes):
        os.symlink(f"socket:[{inode}]", fd / str(10 + i))
    net = root / str(pid) / "net"
    net.mkdir()
    (net / "tcp").write_text(TCP)
    (net / "tcp6").write_text(TCP6)


def test_a_process_reads_from_the_peers_of_its_established_sockets(tmp_path: Path) -> None:
    _proc(tmp_path, 40, [502, 501, 602, 999])
    reader = SocketReader(str(tmp_path))
    reader.begin()
    # The listener and an inode in no table are not peers; the order is its fds'.
    assert reader.read(40) == (NetPeer("127.0.0.1", 9000), NetPeer("2001:db8::7", 9000))
    assert reader.read(41) == (), "gone: nothing"


def test_the_tables_are_read_once_per_namespace_and_tick(tmp_path: Path) -> None:
    _proc(tmp_path, 40, [501])
    _proc(tmp_path, 41, [503])
    reader = SocketReader(str(tmp_path))
    reader.begin()
    assert reader.read(40) == (NetPeer("127.0.0.1", 9000),)
    # Same namespace, same tick: the table read for pid 40 answers (pid 41's file is gone).
    (tmp_path / "41" / "net" / "tcp").unlink()
    assert reader.read(41) == (NetPeer("10.0.4.12", 443),)
    reader.begin()
    assert reader.read(41) == (), "a new tick reads its own table again"


@pytest.mark.parametrize("inodes", [[], [502]])
def test_no_established_socket_is_no_peer(tmp_path: Path, inodes: list[int]) -> None:
    _proc(tmp_path, 40, inodes)
    reader = SocketReader(str(tmp_path))
    reader.begin()
    assert reader.read(40) == ()
