"""`gputop record --demo` with an unknown scenario, a scenario that needs root without it, one
whose verdict needs the eBPF probe with ``--no-bpf``, or the straggler demo on one CPU: one
line and exit 2 (no workload starts)."""

from __future__ import annotations

import os
import shutil

import pytest

from tests.harness import as_nobody, gputop_env, run_gputop


def test_record_with_unknown_demo_exits_2_with_one_line() -> None:
    r = run_gputop("record", "--demo", "nope", "--duration", "1", timeout=30)
    assert r.returncode == 2
    assert r.stdout == ""
    assert r.stderr.count("\n") == 1 and "unknown demo 'nope'" in r.stderr


NEEDS_ROOT = {
    "cpu-limit": "the cpu-limit demo needs root: it runs the job in a cgroup it makes",
    "storage": "the storage demo needs root: it makes a loop device and throttles its reads",
    "trainer-work": "the trainer-work demo needs root: its verdict rests on the eBPF probe's"
    " measurements",
    "straggler": "the straggler demo needs root: its verdict rests on the eBPF probe's"
    " measurements",
}


@pytest.mark.parametrize("name", sorted(NEEDS_ROOT))
def test_a_demo_that_needs_root_says_so_in_one_line_and_exits_2(name: str) -> None:
    # As root, the same command run as nobody (setpriv): the check is gputop's own, for real.
    prefix = as_nobody()
    # A home that user can read (none: the config file's defaults).
    env = gputop_env(HOME="/nonexistent", XDG_CONFIG_HOME="/nonexistent")
    r = run_gputop("record", "--demo", name, "--duration", "1", timeout=30, prefix=prefix, env=env)
    assert r.returncode == 2, r.stderr
    assert r.stdout == ""
    assert r.stderr == f"gputop: error: {NEEDS_ROOT[name]}\n"


@pytest.mark.skipif(os.geteuid() != 0, reason="as root, so that only --no-bpf is missing")
@pytest.mark.parametrize("name", ["trainer-work", "straggler"])
def test_a_demo_whose_verdict_needs_the_probe_refuses_no_bpf_in_one_line(name: str) -> None:
    r = run_gputop("record", "--demo", name, "--no-bpf", "--duration", "1", timeout=30)
    assert r.returncode == 2, r.stderr
    assert r.stdout == ""
    assert r.stderr == (
        f"gputop: error: the {name} demo's verdict rests on the eBPF probe's measurements:"
        " run it without --no-bpf\n"
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="as root, so that only the second CPU is missing")
def test_the_straggler_demo_on_one_cpu_says_it_needs_one_per_rank() -> None:
    taskset = shutil.which("taskset")
    if taskset is None:
        pytest.skip("needs taskset to give gputop one CPU")
    r = run_gputop(
        "record", "--demo", "straggler", "--duration", "1", timeout=30, prefix=(taskset, "-c", "0")
    )
    assert r.returncode == 2, r.stderr
    assert r.stdout == ""
    assert r.stderr == "gputop: error: the straggler demo needs 2 CPUs (one per rank)\n"
