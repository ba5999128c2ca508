"""`gputop record`: one JSON frame per tick (JSON Lines), headless."""

from __future__ import annotations

import json
import sys
from typing import IO

from gputop.api import Monitor, Options
from gputop.heap import HeapSettler


def record(opts: Options, out: IO[str], duration_s: float | None) -> int:
    """Write frames to ``out`` until ``duration_s`` passes or the user interrupts."""
    monitor = Monitor(opts)
    heap = HeapSettler()
    try:
        for frame in monitor.frames(duration_s):
            out.write(json.dumps(frame.to_dict(), separators=(",", ":")) + "\n")
            out.flush()
            heap.frame_done()
    except KeyboardInterrupt:
        pass
    except BrokenPipeError:
        # The reader (e.g. `head`) went away: that is a normal way to stop.
        sys.stderr.close()
    finally:
        monitor.close()
    return 0
