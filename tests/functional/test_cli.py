"""The command line run for real: the JSON frame contract to a file, global options, --help
and --version, bad input and bad config in one line, a reader that goes away, and the
headless modules' imports (no Textual; the import-linter contract)."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from gputop import __version__
from tests.contract import check_frame
from tests.harness import ROOT, gputop_cmd, gputop_env, run_gputop, user_config


def test_record_to_file(tmp_path):
    out = tmp_path / "frames.jsonl"
    r = run_gputop("record", "--duration", "0.5", "--interval", "0.25", "-o", str(out), "--no-bpf")
    assert r.returncode == 0 and r.stdout == ""
    for line in out.read_text().splitlines():
        check_frame(json.loads(line))


def test_global_options_work_before_the_subcommand():
    r = run_gputop("--interval", "0.2", "--no-bpf", "record", "--duration", "0.4")
    assert r.returncode == 0, r.stderr
    frames = [json.loads(x) for x in r.stdout.splitlines()]
    assert frames and all(abs(f["interval"] - 0.2) < 0.15 for f in frames)


def test_version():
    r = run_gputop("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"gputop {__version__}"


def test_help_lists_every_contract_command():
    r = run_gputop("--help")
    assert r.returncode == 0
    for cmd in ("record", "snapshot", "demo", "doctor", "export", "--replay", "--demo", "--no-bpf"):
        assert cmd in r.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["--interval", "0.05"],
        ["--interval", "abc"],
        ["--interval", "nan"],
        ["record", "--duration", "-1"],
        ["record", "--duration", "soon"],
        ["record", "--bogus"],
        ["--top", "0"],
        ["--gpu-price", "0"],
        ["record", "--gpu-price", "-3.5"],
        ["--gpu-price", "three"],
        ["--gpu-price", "inf"],
        ["nosuchcommand"],
        ["record", "-o", "/nonexistent-dir/x.jsonl", "--duration", "0.2"],
    ],
)
def test_bad_arguments_give_one_line_and_exit_2(args):
    r = run_gputop(*args)
    assert r.returncode == 2
    assert r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("gputop: error: ")
    assert "Traceback" not in r.stderr


def test_record_stops_quietly_when_reader_goes_away():
    p = subprocess.Popen(
        f"{shlex.join(gputop_cmd('record', '--interval', '0.1', '--no-bpf'))} | head -n 2",
        shell=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=gputop_env(),
        cwd=ROOT,
        text=True,
    )
    out, err = p.communicate(timeout=30)
    assert len(out.splitlines()) == 2
    assert "Traceback" not in err


def test_core_modules_never_import_textual():
    mods = [
        "gputop.model.frame",
        "gputop.model.history",
        "gputop.model.framestore",
        "gputop.model.roles",
        "gputop.sources.procfs",
        "gputop.sources.base",
        "gputop.sources.dcgm",
        "gputop.signals",
        "gputop.sampler",
        "gputop.runtime",
        "gputop.api",
        "gputop.record",
        "gputop.procctl",
        "gputop.cli",
    ]
    code = (
        "import importlib, sys\n"
        f"for m in {mods!r}: importlib.import_module(m)\n"
        "ui = ('textual', 'textual_plotext')\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ui)\n"
        "print(','.join(bad))\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert r.stdout.strip() == ""


def test_import_linter_contract_holds():
    r = subprocess.run(
        [str(Path(sys.executable).with_name("lint-imports"))],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=gputop_env(),
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "KEPT" in r.stdout


def test_headless_record_uses_the_config_interval(tmp_path):
    env = user_config(tmp_path, "interval = 0.2\n")
    r = run_gputop("record", "--duration", "0.6", "--no-bpf", env=gputop_env(**env))
    assert r.returncode == 0, r.stderr
    frames = [json.loads(x) for x in r.stdout.splitlines()]
    assert len(frames) >= 2 and all(f["interval"] < 0.5 for f in frames)


@pytest.mark.parametrize(
    "text",
    [
        "interval = [",
        "[thresholds]\nsm_low_pct = 'low'\n",
        "[thresholds]\nnope = 1\n",
        '[gpu_price]\n"H100" = "3.5"\n',
        '[gpu_price]\n"H100" = -1\n',
        "gpu_price = 3.5\n",
    ],
)
def test_bad_config_is_one_line_and_exit_2_for_every_command(tmp_path, text):
    env = user_config(tmp_path, text)
    for args in (["record", "--duration", "0.2"], ["snapshot", "--duration", "0.2"]):
        r = run_gputop(*args, env=gputop_env(**env))
        assert r.returncode == 2, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
