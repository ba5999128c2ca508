"""Command line (CONTRACT.md section 1). Bad input: one line on stderr, exit 2."""

from __future__ import annotations

import argparse
import math
import signal
import sys
from collections.abc import Sequence
from typing import IO, TYPE_CHECKING, Any, NoReturn

# Imported first and kept light: main() must own the exit signals before the heavy
# modules load, so a Ctrl-C during start-up is an exit status, never a traceback.
from gputop import __version__, signals
from gputop.errors import UsageError

if TYPE_CHECKING:
    from gputop.config import Config
    from gputop.runtime import Options

# The sampler's floor (gputop.sampler.MIN_INTERVAL_S; a test keeps them equal).
MIN_INTERVAL_S = 0.1

PROG = "gputop"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def _seconds(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"not a finite number of seconds: {text}")
    return v


def _interval(text: str) -> float:
    v = _seconds(text)
    if v < MIN_INTERVAL_S:
        raise argparse.ArgumentTypeError(f"must be at least {MIN_INTERVAL_S} s, got {text}")
    return v


def _duration(text: str) -> float:
    v = _seconds(text)
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text}")
    return v


def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text}")
    return v


def _price(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a price in USD per GPU-hour: {text!r}") from None
    if not math.isfinite(v) or v <= 0:
        raise argparse.ArgumentTypeError(
            f"must be a positive price in USD per GPU-hour, got {text}"
        )
    return v


def _dcgm_url(text: str) -> str:
    """``off``, or a dcgm-exporter URL; ``/metrics`` is added when there is no path."""
    if text == "off":
        return text
    from urllib.parse import urlsplit

    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise argparse.ArgumentTypeError(f"expected http://HOST:PORT[/PATH] or off, got {text!r}")
    return text if parts.path not in ("", "/") else text.rstrip("/") + "/metrics"


def _add_common(p: argparse.ArgumentParser, suppress: bool) -> None:
    """Global options, accepted before or after the subcommand."""

    def d(value: Any) -> Any:
        return argparse.SUPPRESS if suppress else value

    p.add_argument(
        "--interval",
        type=_interval,
        default=d(None),
        metavar="S",
        help=f"seconds between samples (default 1, min {MIN_INTERVAL_S})",
    )
    p.add_argument(
        "--no-bpf",
        action="store_true",
        default=d(False),
        help="do not load the eBPF probe; read scheduler signals from /proc",
    )
    p.add_argument(
        "--top",
        type=_positive_int,
        default=d(30),
        metavar="N",
        help="also show the N busiest other processes (default 30)",
    )
    p.add_argument(
        "--gpu-price",
        type=_price,
        default=d(None),
        metavar="USD_PER_HOUR",
        help="what one GPU-hour costs, for every GPU: lost GPU-hours are also shown as money"
        " (default: [gpu_price] of config.toml per GPU model; no built-in price)",
    )
    p.add_argument(
        "--dcgm",
        type=_dcgm_url,
        default=d(None),
        metavar="URL",
        help="dcgm-exporter for SM activity where GPM is missing "
        "(default: http://localhost:9400/metrics if it answers; off to disable)",
    )


def build_parser() -> argparse.ArgumentParser:
    """The whole command line; also used by the tests and the README."""
    p = _Parser(
        prog=PROG,
        description="Live GPU and host monitor: shows when a 'busy' GPU is starving for its host.",
    )
    p.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    _add_common(p, suppress=False)
    p.add_argument("--demo", metavar="NAME", help="run the TUI on a built-in demo scenario")
    p.add_argument("--replay", metavar="FILE", help="open a snapshot bundle in the TUI")
    p.add_argument("--readonly", action="store_true", help="disable killing processes")
    p.add_argument(
        "--no-redact", action="store_true", help="keep secrets in command lines in snapshots"
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    rec = sub.add_parser("record", help="headless: one JSON frame per tick (JSON Lines)")
    _add_common(rec, suppress=True)
    rec.add_argument("--duration", type=_duration, metavar="S", help="stop after S seconds")
    rec.add_argument("-o", "--output", default="-", metavar="FILE", help="file, or - for stdout")
    rec.add_argument(
        "--demo", default=argparse.SUPPRESS, metavar="NAME", help="record a built-in demo scenario"
    )

    snap = sub.add_parser("snapshot", help="headless: write one snapshot bundle, print its path")
    _add_common(snap, suppress=True)
    snap.add_argument(
        "--duration", type=_duration, default=5.0, metavar="S", help="seconds to sample (default 5)"
    )
    snap.add_argument("-o", "--output", metavar="FILE", help="where to write the bundle")
    snap.add_argument(
        "--demo",
        default=argparse.SUPPRESS,
        metavar="NAME",
        help="snapshot a built-in demo scenario",
    )
    snap.add_argument("--no-redact", action="store_true", default=argparse.SUPPRESS)

    demo = sub.add_parser("demo", help="built-in demo scenarios")
    demo.add_argument("--list", action="store_true", help="list demo scenarios")

    doc = sub.add_parser("doctor", help="explain which sources work here and how to fix the others")
    _add_common(doc, suppress=True)

    exp = sub.add_parser("export", help="serve metrics and verdicts for Prometheus")
    _add_common(exp, suppress=True)
    exp.add_argument(
        "--listen",
        default=None,
        metavar="HOST:PORT",
        help="serve /metrics here (default 127.0.0.1:19400 unless --textfile is given)",
    )
    exp.add_argument(
        "--textfile",
        metavar="DIR",
        help="write DIR/gputop.prom every frame for node-exporter's textfile collector",
    )
    exp.add_argument(
        "--host-label",
        metavar="NAME",
        help="value of the Hostname label (default: this host's name; in a pod, the node's)",
    )
    exp.add_argument(
        "--demo", default=argparse.SUPPRESS, metavar="NAME", help="export a built-in demo scenario"
    )

    mcp = sub.add_parser("mcp", help="a Model Context Protocol server for agents (stdio)")
    _add_common(mcp, suppress=True)
    mcp.add_argument(
        "--http",
        nargs="?",
        const="127.0.0.1:19401",
        default=None,
        metavar="HOST:PORT",
        help="serve streamable HTTP instead of stdio (default address 127.0.0.1:19401)",
    )
    mcp.add_argument(
        "--demo", default=argparse.SUPPRESS, metavar="NAME", help="serve a built-in demo scenario"
    )
    return p


def options_from(args: argparse.Namespace, config: Config) -> Options:
    """The options for every command: the command line, then the config file, then defaults."""
    from gputop.model.diagnosis import Thresholds
    from gputop.model.ledger import GpuPrices
    from gputop.runtime import DEFAULT_INTERVAL_S, Options

    interval_s = args.interval
    if interval_s is None:
        interval_s = DEFAULT_INTERVAL_S if config.interval_s is None else config.interval_s
    return Options(
        interval_s=interval_s,
        thresholds=Thresholds.from_mapping(config.thresholds),
        no_bpf=args.no_bpf,
        demo=getattr(args, "demo", None),
        top_n=args.top,
        dcgm_url=args.dcgm,
        gpu_prices=GpuPrices.from_config(config.gpu_price, flat=args.gpu_price),
    )


def _open_output(path: str) -> IO[str]:
    if path == "-":
        return sys.stdout
    try:
        return open(path, "w", encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror}") from None


def _dispatch(args: argparse.Namespace) -> int:
    from gputop.config import load_config

    config = load_config()
    if config.warning is not None:
        print(f"{PROG}: warning: {config.warning}", file=sys.stderr)
    opts = options_from(args, config)
    if args.command == "record":
        with signals.deferred():
            from gputop.record import record

        out = _open_output(args.output)
        try:
            return record(opts, out, args.duration)
        finally:
            if out is not sys.stdout:
                out.close()
    if args.command == "snapshot":
        with signals.deferred():
            from gputop.snapshot import snapshot_command

        return snapshot_command(args, opts)
    if args.command == "demo":
        with signals.deferred():
            from gputop.demo import demo_command

        return demo_command(args)
    if args.command == "doctor":
        with signals.deferred():
            from gputop.doctor import doctor_command

        return doctor_command(args, opts)
    if args.command == "export":
        with signals.deferred():
            from gputop.export import export_command

        return export_command(args, opts)
    if args.command == "mcp":
        with signals.deferred():
            from gputop.mcp_server import mcp_command

        return mcp_command(args, opts)
    with signals.deferred():
        from gputop.tui import run_app

    return run_app(args, opts, config)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `gputop` command.

    SIGINT, SIGTERM and SIGHUP end any command with status 128 + the signal
    number after its cleanup ran (gputop.signals); the handlers are restored on
    return so a caller that runs main() in-process keeps its own.
    """
    saved = {sig: signal.getsignal(sig) for sig in signals.EXIT_SIGNALS}
    signals.install_headless()
    try:
        args = build_parser().parse_args(argv)
        return _dispatch(args)
    except UsageError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return signals.exit_status(signal.SIGINT)
    finally:
        for sig, old in saved.items():
            signal.signal(sig, old)
