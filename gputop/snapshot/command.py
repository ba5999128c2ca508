"""`gputop snapshot`: sample for a while through the usual sampler, write one bundle."""

from __future__ import annotations

import argparse
import dataclasses
import sys

from gputop.model.frame import Frame
from gputop.runtime import Options

# `gputop snapshot` has no top-N cap (CONTRACT.md: "all of them in snapshots"): every
# process that used CPU in the window is in the bundle, not only the busiest 30.
ALL_PROCESSES = 1_000_000


def snapshot_command(args: argparse.Namespace, opts: Options) -> int:
    """`gputop snapshot`: sample for --duration seconds, write one bundle, print its path."""
    # Imported here: gputop.api reads and writes bundles through this package.
    from gputop import api

    sampler = api.Monitor(dataclasses.replace(opts, top_n=ALL_PROCESSES))
    frames: list[Frame] = []
    interrupted = False
    try:
        sampler.run(frames.append, args.duration)
    except KeyboardInterrupt:
        # Ctrl-C ends sampling early; what was seen so far is still worth writing.
        interrupted = True
    finally:
        statuses = sampler.statuses()
        sampler.close()
    if not frames:
        return 130 if interrupted else 1
    path = api.write_snapshot(
        frames, statuses, redact=not getattr(args, "no_redact", False), path=args.output
    )
    print(path, file=sys.stdout, flush=True)
    return 0
