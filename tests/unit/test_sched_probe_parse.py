"""The probe's pure parts: prev_state masks from tracefs, capabilities, where the program is."""

from __future__ import annotations

import os
from pathlib import Path

from gputop.sources.bcc_loader import state_masks
from gputop.sources.bpf_build import object_inputs_sha256
from gputop.sources.probe_plan import (
    bpf_object_path,
    bpf_source_path,
    has_bpf_capabilities,
    kernel_headers_present,
)

# sched_switch's print format as kernel 6.18 writes it (TASK_REPORT_MAX = 0x100).
FMT_6_18 = (
    'print fmt: "prev_comm=%s prev_pid=%d prev_prio=%d prev_state=%s%s ==> next_comm=%s", '
    "REC->prev_comm, REC->prev_pid, REC->prev_prio, (REC->prev_state & ((((0x00000000 | "
    "0x00000001 | 0x00000002 | 0x00000004 | 0x00000008 | 0x00000010 | 0x00000020 | 0x00000040)"
    " + 1) << 1) - 1)) ? __print_flags(REC->prev_state & ((((0x00000000 | 0x00000001 | "
    "0x00000002 | 0x00000004 | 0x00000008 | 0x00000010 | 0x00000020 | 0x00000040) + 1) << 1) - 1),"
    ' "|", { 0x00000001, "S" }, { 0x00000002, "D" }, { 0x00000004, "T" }, { 0x00000008, "t" },'
    ' { 0x00000010, "X" }, { 0x00000020, "Z" }, { 0x00000040, "P" }, { 0x00000080, "I" }) : "R",'
    " REC->prev_state & (((0x00000000 | 0x00000001 | 0x00000002 | 0x00000004 | 0x00000008 |"
    ' 0x00000010 | 0x00000020 | 0x00000040) + 1) << 1) ? "+" : "", REC->next_comm'
)

# A 4.x-era format: different state values (W, K, N) and decimal-free hex without padding.
FMT_OLD = (
    'print fmt: "prev_state=%s%s", REC->prev_state & (2048-1) ? __print_flags(REC->prev_state'
    ' & (2048-1), "|", { 1, "S" }, { 2, "D" }, { 4, "T" }, { 8, "t" }, { 16, "X" }, { 32, "Z" },'
    ' { 64, "x" }, { 128, "K" }, { 256, "W" }, { 512, "P" }, { 1024, "N" }) : "R",'
    ' REC->prev_state & 2048 ? "+" : ""'
)


def test_masks_from_618_format_treat_r_and_r_plus_as_runnable():
    not_runnable, dead = state_masks(FMT_6_18) or (0, 0)
    assert not_runnable == 0xFF
    assert dead == 0x30
    preempted_r_plus = 0x100
    assert preempted_r_plus & not_runnable == 0
    assert 0 & not_runnable == 0
    for sleeping in (0x1, 0x2, 0x80):  # S, D, I
        assert sleeping & not_runnable


def test_masks_follow_the_kernels_own_flag_values():
    not_runnable, dead = state_masks(FMT_OLD) or (0, 0)
    assert not_runnable == 2047
    assert dead == 16 | 32
    assert 2048 & not_runnable == 0


def test_format_without_flags_gives_no_masks():
    assert state_masks('print fmt: "prev_pid=%d", REC->prev_pid') is None


def test_capabilities_need_sys_admin_or_bpf_plus_perfmon():
    def status(caps: int) -> str:
        return f"Name:\tx\nCapEff:\t{caps:016x}\n"

    assert has_bpf_capabilities(status(1 << 21))
    assert has_bpf_capabilities(status((1 << 39) | (1 << 38)))
    assert not has_bpf_capabilities(status(1 << 39))
    assert not has_bpf_capabilities(status(1 << 38))
    assert not has_bpf_capabilities(status(0))


def test_the_bpf_program_and_its_object_are_found_from_the_source_tree():
    path = bpf_source_path()
    assert os.path.isfile(path)
    with open(path) as f:
        src = f.read()
    assert "GT_SCHED_EVENT(sched_switch)" in src
    assert "GT_SCHED_EVENT(sched_process_exit)" in src
    obj = Path(bpf_object_path())
    assert obj.parent == Path(path).parent
    assert object_inputs_sha256(obj) is not None


def test_headers_check_matches_bccs_own_kconfig_test(tmp_path, monkeypatch):
    monkeypatch.setenv("BCC_KERNEL_SOURCE", str(tmp_path))
    (tmp_path / "include").mkdir()
    if not os.path.exists("/sys/kernel/kheaders.tar.xz"):
        # An include/ without linux/kconfig.h is what bcc rejects (printing to stdout).
        assert not kernel_headers_present("any")
    (tmp_path / "include" / "linux").mkdir()
    (tmp_path / "include" / "linux" / "kconfig.h").write_text("")
    assert kernel_headers_present("any")
