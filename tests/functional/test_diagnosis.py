"""A config naming a removed threshold stops every command with one line (gputop run for real)."""

from __future__ import annotations

from pathlib import Path

# ---- thresholds -------------------------------------------------------------------


def test_an_old_config_with_a_removed_threshold_stops_every_command_with_one_line(
    tmp_path: Path,
) -> None:
    from tests.harness import gputop_env, run_gputop

    (tmp_path / "gputop").mkdir()
    (tmp_path / "gputop" / "config.toml").write_text("[thresholds]\npreempt_high_per_s = 50\n")
    r = run_gputop(
        "record", "--duration", "0.2", "--no-bpf", env=gputop_env(XDG_CONFIG_HOME=str(tmp_path))
    )
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "'preempt_high_per_s' was removed" in lines[0], r.stderr
    assert "runq_high_pct" in lines[0]
