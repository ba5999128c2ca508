"""The garbage collector set for a monitor that runs for hours: start-up's objects frozen out.

A collection of the oldest generation walks every object the collector tracks: in the TUI
~70,000 once it is up (modules, classes, functions, Textual's widgets and styles), which
never become garbage, for a gen2 collection every 20-50 s that cost the UI thread 1.0-1.4 ms
per tick, averaged (docs/tui.md). ``gc.freeze()`` moves them to a generation no collection
walks; everything allocated afterwards is collected as before. A freeze would keep whatever
garbage the heap holds at that moment, so a full collection comes first.

Most of what a tick allocates and keeps past a young collection (rendered lines, Textual's
strips and their caches) is dropped by reference counting a few ticks later, so each young
collection mostly walks survivors: a collection every 5,000 allocations instead of 700 took
the TUI's young and middle collections from 1.6 to 0.9 ms a tick (docs/tui.md).
"""

from __future__ import annotations

import gc

# Frames handled before the heap is settled: the first frames build the screen's lines,
# styles and caches (and the probe's maps load meanwhile).
SETTLE_AFTER_FRAMES = 3
# Net allocations of tracked objects between young collections (CPython's default: 700).
YOUNG_THRESHOLD = 5000


def settle_heap() -> None:
    """Collect start-up's garbage, freeze what is left out of every later collection, and
    collect the young generation less often."""
    gc.collect()
    gc.freeze()
    _young, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)


class HeapSettler:
    """Settles the heap once, after the ``after_frames``-th frame was handled.

    Off (``enabled=False``) inside a test run: a freeze there would keep the test
    session's own garbage alive.
    """

    def __init__(self, enabled: bool = True, after_frames: int = SETTLE_AFTER_FRAMES) -> None:
        self.enabled = enabled
        self.after_frames = after_frames
        self.frames = 0
        self.settled = False

    def frame_done(self) -> bool:
        """Count a handled frame; settle the heap at the ``after_frames``-th. True if it did now."""
        if not self.enabled or self.settled:
            return False
        self.frames += 1
        if self.frames < self.after_frames:
            return False
        settle_heap()
        self.settled = True
        return True
