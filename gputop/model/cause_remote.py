"""Cause ``input_remote``: the batches wait on a remote source, their DataLoader workers on the
network (a dataset service, an object store, a database; or a network filesystem).

Workers that wait on round trips use little CPU: the fixes overlap the round trips (more
workers than CPUs, more batches in flight) or remove them (fewer, larger requests; a
local copy), never a cheaper batch. The evidence names whom they read from: the peers of
their TCP connections (``/proc/PID/net/tcp``, read while they waited), or the server of
the network filesystem they read.
"""

from __future__ import annotations

from gputop.model.frame import OpenStorage
from gputop.model.job import WorkersSummary
from gputop.model.wording import pct

# Filesystems whose reads cross a network (a remote server or an object store).
NETWORK_FS = frozenset(
    {"nfs", "nfs4", "cifs", "smb3", "ceph", "lustre", "glusterfs", "9p", "beegfs", "gpfs"}
)
PEERS_SHOWN = 3  # peers named in the evidence (the most seen first)


def network_fs(s: OpenStorage) -> bool:
    """A filesystem whose reads cross a network (NFS, SMB, Lustre, a FUSE object store)."""
    return s.fstype in NETWORK_FS or s.fstype.startswith("fuse.")


def server_of(s: OpenStorage) -> str:
    """The server a network filesystem is mounted from: ``filer`` of ``filer:/export``,
    ``fs1`` of ``//fs1/share``; the whole source where it names none."""
    src = s.source
    if src.startswith("//"):
        return src[2:].split("/", 1)[0] or src
    if ":" in src and not src.startswith("["):
        return src.split(":", 1)[0] or src
    return src


def where_from(wk: WorkersSummary) -> str:
    """Whom the workers read from, as the evidence names it."""
    fs = [s for s in wk.storage if network_fs(s)]
    parts = []
    if wk.peers:
        shown = ", ".join(p.describe() for p in wk.peers[:PEERS_SHOWN])
        more = len(wk.peers) - PEERS_SHOWN
        parts.append(f"reading from {shown}" + (f" and {more} more" if more > 0 else "") + " (tcp)")
    if fs:
        parts.append(
            f"reading {fs[0].describe()}, a network filesystem served by {server_of(fs[0])}"
        )
    if not parts:
        return "whom they read from was not seen (their sockets are read while they wait)"
    return "; ".join(parts)


def remote_line(wk: WorkersSummary, remote_pct: float) -> str:
    """The workers' wait on the network against their time on a CPU, and whom they read."""
    each = " each" if wk.count != 1 else ""
    return (
        f"its DataLoader workers waited on the network: blocked until a remote peer's data"
        f" arrived {pct(remote_pct)} of the time{each}, on a CPU or waiting for one"
        f" {pct(wk.busy_pct)} (measured); {where_from(wk)}"
    )


def remote_fixes(wk: WorkersSummary, free: int) -> tuple[str, ...]:
    """Overlap the round trips, or remove them; never "make each batch cheaper"."""
    more = max(2 * wk.count, wk.count + 2)
    source = wk.peers[0].describe() if wk.peers else "the remote source"
    fs = next((s for s in wk.storage if network_fs(s)), None)
    if fs is not None and not wk.peers:
        source = fs.describe()
    return (
        f"raise num_workers from {wk.count} toward {more}: workers waiting on the network use"
        f" little CPU ({pct(wk.busy_pct)} each), so more of them than the {free} free CPU(s)"
        " overlap more round trips",
        "DataLoader(..., prefetch_factor=8, persistent_workers=True): more requests in flight"
        " hide each round trip, and persistent workers keep their connections",
        "fewer, larger requests: fetch a batch's samples in one request (a batched sampler or"
        " the dataset's __getitems__), or read sharded archives (WebDataset tar shards,"
        " TFRecord, MosaicML streaming) instead of one object per sample",
        f"a local cache: copy the dataset from {source} onto local NVMe once (or cache it"
        " there on first read): it removes the round trips instead of hiding them",
    )
