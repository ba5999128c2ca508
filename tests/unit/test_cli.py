"""The config file under the command line: its interval and thresholds, the command line
winning, and the documented example accepted by the loader."""

from __future__ import annotations

from tests.harness import user_config


def test_config_file_sets_interval_and_thresholds_and_the_command_line_wins(tmp_path, monkeypatch):
    from gputop.cli import build_parser, options_from
    from gputop.config import load_config

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    user_config(tmp_path, "interval = 2.0\n[thresholds]\nsm_low_pct = 30\n")
    config = load_config()
    opts = options_from(build_parser().parse_args(["record"]), config)
    assert opts.interval_s == 2.0 and opts.thresholds.sm_low_pct == 30.0
    opts = options_from(build_parser().parse_args(["--interval", "1", "record"]), config)
    assert opts.interval_s == 1.0 and opts.thresholds.sm_low_pct == 30.0


def test_the_config_docstring_example_is_a_config_the_loader_accepts(tmp_path):
    import textwrap

    import gputop.config
    from gputop.config import load_config
    from gputop.model.diagnosis import Thresholds

    doc = gputop.config.__doc__ or ""
    example = textwrap.dedent(doc.split("Example::", 1)[1].split("\n\nA missing file", 1)[0])
    path = tmp_path / "config.toml"
    path.write_text(example)
    config = load_config(path)
    assert config.interval_s == 2.0 and config.keys["kill"] == "F9"
    assert Thresholds.from_mapping(config.thresholds).sm_low_pct == 30.0
    assert config.gpu_price == {"H100": 3.5}


def test_a_gpu_price_from_the_command_line_wins_over_the_configs_price_per_model(
    tmp_path, monkeypatch
):
    from gputop.cli import build_parser, options_from
    from gputop.config import load_config

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    user_config(tmp_path, '[gpu_price]\n"H100" = 3.5\n"A10" = 1\n')
    config = load_config()
    opts = options_from(build_parser().parse_args(["record"]), config)
    assert opts.gpu_prices.price("NVIDIA H100 80GB HBM3") == 3.5
    assert opts.gpu_prices.price("NVIDIA A10") == 1.0
    assert opts.gpu_prices.price("NVIDIA L4") is None
    for argv in (["--gpu-price", "2.25", "record"], ["record", "--gpu-price", "2.25"]):
        opts = options_from(build_parser().parse_args(argv), config)
        assert opts.gpu_prices.price("NVIDIA L4") == opts.gpu_prices.price("H100") == 2.25
    # No price anywhere: none built in.
    user_config(tmp_path, "")
    opts = options_from(build_parser().parse_args(["record"]), load_config())
    assert opts.gpu_prices.price("NVIDIA H100 80GB HBM3") is None
