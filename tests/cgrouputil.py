"""How each container runtime names the cgroup of one container (docker, containerd and
CRI-O under the kubelet, the systemd and cgroupfs drivers), with the ids in those names."""

from __future__ import annotations

CID = "4f1c" + "0123456789abcdef" * 3 + "0a1b2c3d4e5f"
POD_UID = "8d1b6f2e-3c4a-4b5d-9e6f-0a1b2c3d4e5f"
POD_UID_ = POD_UID.replace("-", "_")


# How each runtime names the cgroup of one container, relative to the test's parent.
LAYOUTS = {
    "docker-systemd": (f"system.slice/docker-{CID}.scope", "docker", None),
    "docker-cgroupfs": (f"docker/{CID}", "docker", None),
    "kubelet-containerd-systemd": (
        "kubepods.slice/kubepods-burstable.slice/"
        f"kubepods-burstable-pod{POD_UID_}.slice/cri-containerd-{CID}.scope",
        "containerd",
        POD_UID,
    ),
    "kubelet-crio-systemd": (
        f"kubepods.slice/kubepods-pod{POD_UID_}.slice/crio-{CID}.scope",
        "cri-o",
        POD_UID,
    ),
    "kubelet-cgroupfs": (f"kubepods/besteffort/pod{POD_UID}/{CID}", None, POD_UID),
}
