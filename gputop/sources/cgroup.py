"""Which container and Kubernetes pod a process runs in, from its cgroup path (and which
SLURM job: sources/slurm.py).

Container runtimes and the kubelet name cgroups after what they hold, so the path
in ``/proc/PID/cgroup`` says it without asking any daemon:

* docker, systemd driver: ``/system.slice/docker-<64 hex>.scope``
* docker, cgroupfs driver: ``/docker/<64 hex>``
* kubelet and containerd, systemd driver: ``/kubepods.slice/kubepods-burstable.slice/
  kubepods-burstable-pod<uid with _ for ->.slice/cri-containerd-<64 hex>.scope``
* kubelet, cgroupfs driver: ``/kubepods/besteffort/pod<uid>/<64 hex>``
* CRI-O: ``.../crio-<64 hex>.scope``; podman: ``.../libpod-<64 hex>.scope``

The pod's name and namespace are not in the path. The kubelet keeps each pod's logs
in ``/var/log/pods/<namespace>_<name>_<uid>/`` (names cannot hold ``_``), so with
that directory mounted (read-only) the UID gives both.

``ContainerTagger`` is the one place gputop reads this: the /proc source whose
``details()`` also carry each shown process's identity (its SLURM job too, from the
cgroup file or, failing that, its environment), read once per process
(pid and start time) and kept while the process is shown; the join stage copies
it into the process's row.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Collection, Mapping
from dataclasses import replace

from gputop.model.readings import ContainerIdentity, ProcDetail, ProcScan
from gputop.sources.procfs import ProcSource
from gputop.sources.slurm import read_environ, slurm_of

POD_LOG_ROOT = "/var/log/pods"
# How often an unknown pod UID may trigger a new listing of the pod log directory.
POD_INDEX_REFRESH_S = 10.0

_ID = r"([0-9a-f]{64})"
_CONTAINER = (
    ("docker", re.compile(rf"^docker-{_ID}\.scope$")),
    ("containerd", re.compile(rf"^cri-containerd-{_ID}\.scope$")),
    ("cri-o", re.compile(rf"^crio-{_ID}\.scope$")),
    ("podman", re.compile(rf"^libpod-{_ID}\.scope$")),
)
_BARE_ID = re.compile(rf"^{_ID}$")
_POD = re.compile(
    r"^(?:kubepods-(?:burstable-|besteffort-)?pod([0-9a-f_]{36})\.slice|pod([0-9a-f-]{36}))$"
)


def cgroup_path(text: str) -> str | None:
    """The process's cgroup path from ``/proc/PID/cgroup``.

    The unified (v2) line ``0::PATH`` when it is below the root; on hybrid hosts,
    where that line reads ``/``, the first v1 hierarchy with a path below the root.
    """
    v1: str | None = None
    for line in text.splitlines():
        hid, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hid == "0" and not controllers:
            if path not in ("", "/"):
                return path
        elif v1 is None and path not in ("", "/"):
            v1 = path
    return v1


def identity_from_path(path: str) -> ContainerIdentity | None:
    """Container and pod identity from a cgroup path, or None outside any container."""
    container_id = runtime = pod_uid = None
    parts = [p for p in path.split("/") if p]
    for i, part in enumerate(parts):
        m = _POD.match(part)
        if m:
            pod_uid = (m.group(1) or m.group(2)).replace("_", "-")
            continue
        for name, rx in _CONTAINER:
            m = rx.match(part)
            if m:
                container_id, runtime = m.group(1), name
                break
        else:
            m = _BARE_ID.match(part)
            # cgroupfs drivers: /docker/<id>, /kubepods/<qos>/pod<uid>/<id>
            if m and i > 0 and (parts[i - 1] == "docker" or _POD.match(parts[i - 1])):
                container_id = m.group(1)
                runtime = "docker" if parts[i - 1] == "docker" else None
    if container_id is None and pod_uid is None:
        return None
    return ContainerIdentity(container_id, runtime, pod_uid)


class PodIndex:
    """Pod UID -> (namespace, name) from the kubelet's pod log directories."""

    def __init__(self, root: str = POD_LOG_ROOT) -> None:
        self.root = root
        self._pods: dict[str, tuple[str, str]] = {}
        self._listed_at: float | None = None

    def lookup(self, uid: str) -> tuple[str, str] | None:
        """(namespace, name) of the pod, listing the directory again at most every 10 s."""
        if uid not in self._pods:
            now = time.monotonic()
            if self._listed_at is None or now - self._listed_at >= POD_INDEX_REFRESH_S:
                self._listed_at = now
                self._pods = self._list()
        return self._pods.get(uid)

    def _list(self) -> dict[str, tuple[str, str]]:
        try:
            names = os.listdir(self.root)
        except OSError:
            return {}
        out = {}
        for entry in names:
            parts = entry.split("_")
            if len(parts) == 3:
                out[parts[2]] = (parts[0], parts[1])
        return out


class ContainerTagger(ProcSource):
    """The /proc source, with each shown process's container and pod identity read too."""

    def __init__(self, proc_root: str = "/proc", pod_log_root: str = POD_LOG_ROOT) -> None:
        super().__init__(proc_root=proc_root)
        self.pods = PodIndex(pod_log_root)
        self._ids: dict[tuple[int, int], ContainerIdentity | None] = {}

    def details(
        self,
        wanted: Mapping[int, bool],
        scan: ProcScan,
        peers: Collection[int] = (),
        idle: Collection[int] = (),
    ) -> dict[int, ProcDetail]:
        out = super().details(wanted, scan, peers, idle)
        ids: dict[tuple[int, int], ContainerIdentity | None] = {}
        for pid, d in out.items():
            ident = self._identity(pid, scan.procs[pid].start, ids)
            if ident is not None:
                out[pid] = replace(d, identity=ident)
        self._ids = ids  # processes no longer shown are forgotten
        return out

    def _identity(
        self, pid: int, start: int, ids: dict[tuple[int, int], ContainerIdentity | None]
    ) -> ContainerIdentity | None:
        key = (pid, start)
        if key in self._ids:
            ident = self._ids[key]
        else:
            try:
                with open(f"{self.root}/{pid}/cgroup") as fh:
                    text = fh.read()
            except OSError:
                text = ""
            path = cgroup_path(text)
            ident = None if path is None else identity_from_path(path)
            slurm = slurm_of(text, read_environ(f"{self.root}/{pid}/environ"))
            if slurm is not None:
                ident = replace(ident or ContainerIdentity(), slurm=slurm)
        if ident is not None and ident.pod_uid is not None and ident.pod_name is None:
            named = self.pods.lookup(ident.pod_uid)
            if named is not None:
                ident = replace(ident, pod_namespace=named[0], pod_name=named[1])
        ids[key] = ident
        return ident
