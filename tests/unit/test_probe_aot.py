"""The probe's object built ahead of time matches its sources: the recorded hash, a stale
source or a drifted header fails the check, the ABI header, and the trimmed vmlinux.h.

The object (``bpf/sched_probe.bpf.o``) is committed; ``scripts/build_bpf.py`` rebuilds it.
It records the hash of the sources it was built from, so a change to ``bpf/`` or to
``gputop/model/probe_abi.py`` without a rebuild fails here."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gputop.model import probe_abi
from gputop.sources.bpf_build import (
    OBJECT_NAME,
    inputs_sha256,
    object_inputs_sha256,
    stale_inputs,
    trim_vmlinux,
)
from tests.bpfutil import BPF


def test_the_shipped_object_was_built_from_the_current_sources() -> None:
    assert stale_inputs(BPF, probe_abi.c_header()) == []
    assert object_inputs_sha256(BPF / OBJECT_NAME) == inputs_sha256(BPF)


@pytest.mark.parametrize(
    ("name", "change"),
    [
        ("sched_probe.c", "\n// a changed program\n"),
        ("dialect.h", "\n#define A_NEW_MACRO 1\n"),
        ("vmlinux.h", "\nstruct a_new_type { int x; };\n"),
    ],
)
def test_a_stale_object_fails_the_check(tmp_path: Path, name: str, change: str) -> None:
    copy = tmp_path / "bpf"
    shutil.copytree(BPF, copy)
    assert stale_inputs(copy, probe_abi.c_header()) == []
    with open(copy / name, "a") as f:
        f.write(change)
    problems = stale_inputs(copy, probe_abi.c_header())
    assert len(problems) == 1 and OBJECT_NAME in problems[0], problems


def test_a_header_that_drifted_from_the_python_definition_fails_the_check(tmp_path: Path) -> None:
    copy = tmp_path / "bpf"
    shutil.copytree(BPF, copy)
    header = (copy / "probe_abi.h").read_text()
    (copy / "probe_abi.h").write_text(header.replace("#define WAKE_IRQ 3", "#define WAKE_IRQ 4"))
    problems = stale_inputs(copy, probe_abi.c_header())
    assert any("probe_abi.h does not match" in p for p in problems), problems


def test_the_abi_header_defines_every_shared_constant_and_struct() -> None:
    header = probe_abi.c_header()
    for name in probe_abi.CONSTANTS:
        assert f"#define {name} {getattr(probe_abi, name)}\n" in header
    for s in probe_abi.STRUCTS:
        assert f"struct {s._c_name_} {{" in header
    # The wait classes index thread_t.wait_ns.
    wait_ns = dict(probe_abi.ThreadT._fields_)["wait_ns"]
    assert wait_ns._length_ == probe_abi.WAKE_CLASSES


def test_vmlinux_h_keeps_what_the_records_need_and_nothing_else() -> None:
    full = "\n\n".join(
        [
            "typedef unsigned int __u32;",
            "typedef __u32 u32;",
            "typedef int __kernel_pid_t;",
            "typedef __kernel_pid_t pid_t;",
            "struct unused {\n\tint a;\n};",
            "struct trace_entry {\n\tshort unsigned int type;\n\tint pid;\n};",
            "typedef struct {\n\tu32 type;\n} unrelated_t;",
            "struct trace_event_raw_sched_switch {\n\tstruct trace_entry ent;\n"
            "\tpid_t prev_pid;\n\tlong int prev_state;\n};",
        ]
    )
    text = trim_vmlinux(full, ["trace_event_raw_sched_switch", "u32"], "6.18-test")
    for kept in ("typedef __kernel_pid_t pid_t;", "struct trace_entry {", "typedef __u32 u32;"):
        assert kept in text
    assert "struct unused" not in text and "unrelated_t" not in text
    assert text.index("struct trace_entry {") < text.index("struct trace_event_raw_sched_switch {")
    assert "preserve_access_index" in text
