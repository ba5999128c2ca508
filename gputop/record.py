"""`gputop record`: one JSON frame per tick (JSON Lines), headless."""

from __future__ import annotations

import json
import sys
from typing import IO

from gputop.model.frame import Frame
from gputop.runtime import Options, build_sampler


def record(opts: Options, out: IO[str], duration_s: float | None) -> int:
    """Write frames to ``out`` until ``duration_s`` passes or the user interrupts."""
    sampler = build_sampler(opts)

    def emit(frame: Frame) -> None:
        out.write(json.dumps(frame.to_dict(), separators=(",", ":")) + "\n")
        out.flush()

    try:
        sampler.run(emit, duration_s)
    except KeyboardInterrupt:
        pass
    except BrokenPipeError:
        # The reader (e.g. `head`) went away: that is a normal way to stop.
        sys.stderr.close()
    finally:
        sampler.close()
    return 0
