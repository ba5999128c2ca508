"""The Kubernetes DaemonSet and the container recipe, checked against the real command line
parser and the settings docs/kubernetes.md promises (no cluster here to apply them to)."""

from __future__ import annotations

import re
from typing import Any

import yaml

from gputop.cli import build_parser
from gputop.export import DEFAULT_PORT
from tests.harness import ROOT

DAEMONSET = ROOT / "deploy" / "kubernetes" / "gputop-daemonset.yaml"
CONTAINERFILE = ROOT / "deploy" / "container" / "Containerfile"


def _daemonset() -> dict[str, Any]:
    docs = list(yaml.safe_load_all(DAEMONSET.read_text()))
    kinds = [d["kind"] for d in docs]
    assert kinds == ["Namespace", "DaemonSet"]
    ds: dict[str, Any] = docs[1]
    return ds


def test_daemonset_runs_a_command_line_the_parser_accepts() -> None:
    ds = _daemonset()
    (c,) = ds["spec"]["template"]["spec"]["containers"]
    env = {e["name"] for e in c["env"]}
    # $(VAR) is Kubernetes' own expansion; each must name a variable of the container.
    args = [
        re.sub(r"\$\((\w+)\)", lambda m: "node-1" if m.group(1) in env else "?", a)
        for a in c["args"]
    ]
    ns = build_parser().parse_args(args)
    assert ns.command == "export"
    assert ns.listen == f":{DEFAULT_PORT}"
    assert ns.host_label == "node-1"
    assert c["ports"][0]["containerPort"] == DEFAULT_PORT
    node = next(e for e in c["env"] if e["name"] == "NODE_NAME")
    assert node["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"


def test_daemonset_is_host_pid_least_privilege_read_only_and_bounded() -> None:
    ds = _daemonset()
    pod = ds["spec"]["template"]["spec"]
    assert ds["spec"]["selector"]["matchLabels"] == ds["spec"]["template"]["metadata"]["labels"]
    assert pod["hostPID"] is True
    (c,) = pod["containers"]
    sec = c["securityContext"]
    assert sec["privileged"] is False and sec["allowPrivilegeEscalation"] is False
    assert sec["readOnlyRootFilesystem"] is True
    assert sec["capabilities"]["drop"] == ["ALL"]
    # What the eBPF probe needs (gputop doctor checks CAP_BPF and CAP_PERFMON), nothing more.
    assert set(sec["capabilities"]["add"]) == {"BPF", "PERFMON", "SYS_RESOURCE"}
    for kind in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(c["resources"][kind])
    volumes = {v["name"]: v for v in pod["volumes"]}
    for m in c["volumeMounts"]:
        if "hostPath" in volumes[m["name"]]:
            assert m.get("readOnly") is True, m
    mounted = {m["mountPath"] for m in c["volumeMounts"]}
    assert {"/sys/kernel/tracing", "/lib/modules", "/usr/src", "/var/log/pods"} <= mounted


def test_containerfile_installs_distro_bcc_and_runs_the_exporter() -> None:
    text = CONTAINERFILE.read_text()
    assert re.search(r"^FROM \S+debian:12", text, re.M)
    assert "python3-bpfcc" in text
    assert "--system-site-packages" in text
    entry = re.search(r"^ENTRYPOINT (\[.*\])$", text, re.M)
    cmd = re.search(r"^CMD (\[.*\])$", text, re.M)
    assert entry and cmd
    assert yaml.safe_load(entry.group(1)) == ["gputop"]
    args = yaml.safe_load(cmd.group(1))
    ns = build_parser().parse_args(args)
    assert ns.command == "export" and ns.listen == f":{DEFAULT_PORT}"
    assert f"EXPOSE {DEFAULT_PORT}" in text
    assert "pip install --no-cache-dir /src" in text
