"""Built-in demo scenarios: a real host workload plus a modelled GPU (docs/demo.md)."""

from __future__ import annotations

import argparse
import sys

from gputop.demo.scenarios import SCENARIOS, Scenario, get_scenario
from gputop.sources.base import GpuSource

__all__ = ["SCENARIOS", "Scenario", "demo_command", "demo_gpu_source", "get_scenario"]


def demo_gpu_source(name: str, probe: bool = True) -> GpuSource:
    """The modelled GPUs of scenario ``name`` (UsageError naming the valid ones if unknown, or
    saying what the scenario needs that is missing: root, the probe, a C compiler, CPUs).

    ``probe``: the eBPF probe will run (no ``--no-bpf``)."""
    from gputop.demo.source import DemoGpuSource

    return DemoGpuSource(get_scenario(name), probe=probe)


def demo_command(args: argparse.Namespace) -> int:
    """`gputop demo --list`: the scenarios, what each shows and the verdict to expect."""
    width = max(len(n) for n in SCENARIOS)
    for sc in SCENARIOS.values():
        print(f"{sc.name:<{width}}  {sc.expect:<17}  {sc.summary}", file=sys.stdout)
    if not getattr(args, "list", False):
        print("\nrun one with: gputop --demo NAME   (or: gputop record --demo NAME)")
    return 0
