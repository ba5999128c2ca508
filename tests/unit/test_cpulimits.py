"""CPU lists (the kernel's cpus_allowed_list and cpuset form) parsed as the kernel writes them;
which cgroup hierarchy holds a controller, from a fake mount table."""

from __future__ import annotations

from pathlib import Path

from gputop.sources.cpulimits import controller_mount, parse_cpu_list


def test_cpu_lists_parse_like_the_kernel_writes_them() -> None:
    assert parse_cpu_list("0-3,8,10-11\n") == (0, 1, 2, 3, 8, 10, 11)
    assert parse_cpu_list("") == ()
    assert parse_cpu_list("x") == ()


def _proc_with_mounts(root: Path, *mounts: tuple[str, str, str]) -> str:
    """A fake /proc whose self/mountinfo lists ``mounts`` (mount point, fstype, options)."""
    (root / "self").mkdir(parents=True)
    (root / "self" / "mountinfo").write_text(
        "".join(
            f"{30 + i} 1 0:{30 + i} / {mnt} rw - {fstype} {fstype} {opts}\n"
            for i, (mnt, fstype, opts) in enumerate(mounts)
        )
    )
    return str(root)


def test_a_controller_is_its_v1_hierarchy_else_the_v2_one_that_lists_it(tmp_path: Path) -> None:
    v2 = tmp_path / "unified"
    v2.mkdir()
    (v2 / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    both = _proc_with_mounts(
        tmp_path / "both",
        (str(v2), "cgroup2", "rw,nsdelegate"),
        ("/sys/fs/cgroup/blkio", "cgroup", "rw,blkio"),
        ("/sys/fs/cgroup/cpu,cpuacct", "cgroup", "rw,cpu,cpuacct"),
    )
    assert controller_mount("blkio", "io", both) == ("/sys/fs/cgroup/blkio", False)
    assert controller_mount("cpu", proc_root=both) == ("/sys/fs/cgroup/cpu,cpuacct", False)
    only_v2 = _proc_with_mounts(tmp_path / "v2", (str(v2), "cgroup2", "rw"))
    assert controller_mount("blkio", "io", only_v2) == (str(v2), True)
    assert controller_mount("cpu", proc_root=only_v2) == (str(v2), True)
    assert controller_mount("hugetlb", proc_root=only_v2) is None, "v2 does not list it"
    assert controller_mount("cpu", proc_root=_proc_with_mounts(tmp_path / "none")) is None
