"""The default command: the live TUI, a demo, or a replay of a snapshot bundle."""

from __future__ import annotations

import argparse
import dataclasses
import sys

from gputop.api import Monitor, Options
from gputop.app import GputopApp
from gputop.config import Config
from gputop.driver import stop_input_threads
from gputop.errors import UsageError
from gputop.feeds import Feed, SamplerFeed, replay_feed
from gputop.signals import LoopStopper


def run_app(args: argparse.Namespace, opts: Options, config: Config) -> int:
    """The default command: the live TUI, a demo, or a replay of a snapshot bundle.

    Exit status: 0 after q, F10 or Ctrl-C; 128 + N after signal N (SIGINT 130,
    SIGTERM 143, SIGHUP 129) at any moment, start-up included.
    """
    feed: Feed
    if getattr(args, "replay", None):
        feed = replay_feed(args.replay)
    else:
        # Built (nothing opened, nothing started) before the terminal is asked for, so a bad
        # --demo is told as such, terminal or not. The table lists every process (as htop
        # does), so a filter finds any of them.
        feed = SamplerFeed(Monitor(dataclasses.replace(opts, list_all=True)))
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise UsageError(
            "the TUI needs a terminal; without one use `gputop record` (JSON frames) "
            "or `gputop export` (Prometheus)"
        )
    app: GputopApp | None = None

    def stop(status: int) -> None:
        if app is not None:
            app.exit(return_code=status)

    with LoopStopper(stop) as stopper:
        app = GputopApp(
            feed,
            interval_s=opts.interval_s,
            readonly=bool(getattr(args, "readonly", False)),
            redact=not getattr(args, "no_redact", False),
            config=config,
            stopper=stopper,
            diagnosis_window_s=opts.thresholds.window_s,
            prices=opts.gpu_prices,
            settle_heap=True,
        )
        try:
            result = app.run()
        finally:
            # A hung-up terminal may leave an input thread behind; it must not keep us alive.
            stop_input_threads()
    if stopper.status is not None:
        return stopper.status
    return 0 if result is None else int(result)
