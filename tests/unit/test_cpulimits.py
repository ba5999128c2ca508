"""CPU lists (the kernel's cpus_allowed_list and cpuset form) parsed as the kernel writes them."""

from __future__ import annotations

from gputop.sources.cpulimits import parse_cpu_list


def test_cpu_lists_parse_like_the_kernel_writes_them() -> None:
    assert parse_cpu_list("0-3,8,10-11\n") == (0, 1, 2, 3, 8, 10, 11)
    assert parse_cpu_list("") == ()
    assert parse_cpu_list("x") == ()
