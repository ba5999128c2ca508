"""The window's frames, kept compactly: each one encoded once, when it arrives.

A frame as objects (a few dozen ``ProcessSample``s and their floats) takes about
20 KiB; its JSON object (CONTRACT.md section 2, as ``Frame.to_dict`` writes it),
compressed, takes a tenth of that. The TUI draws from the series and the newest
frame; the whole window is read back only to write a snapshot bundle, so it is
stored the way the bundle needs it.
"""

from __future__ import annotations

import json
import zlib
from collections import deque
from collections.abc import Iterator
from typing import Any

from gputop.model.frame import Frame

# zlib's fastest level: a frame of 40 processes (~34 KB of JSON) packs to ~3 KB in ~0.2 ms.
_LEVEL = 1


def encode_frame(frame: Frame) -> bytes:
    """The frame's JSON object (without threads), compressed.

    NaN and infinity are kept as JSON's NaN tokens; whoever writes the object out
    turns them into null (the bundle writer's ``jsonable``).
    """
    text = json.dumps(frame.to_dict(), separators=(",", ":"))
    return zlib.compress(text.encode("utf-8"), _LEVEL)


def decode_frame(blob: bytes) -> dict[str, Any]:
    """The JSON object ``encode_frame`` packed."""
    d: dict[str, Any] = json.loads(zlib.decompress(blob))
    return d


class FrameStore:
    """The newest ``capacity`` frames, oldest first, each encoded once (``encode_frame``).

    A frame added with ``held=True`` is referenced instead: its owner keeps it for
    as long as the store does (a replay's timeline), so a copy would only cost
    time. ``last`` is the newest frame as given, threads included.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._items: deque[bytes | Frame] = deque(maxlen=capacity)
        self.last: Frame | None = None

    def __len__(self) -> int:
        return len(self._items)

    def append(self, frame: Frame, *, held: bool = False) -> None:
        """Keep ``frame`` (encoded unless ``held``); the oldest falls out when full."""
        self._items.append(frame if held else encode_frame(frame))
        self.last = frame

    @property
    def nbytes(self) -> int:
        """Bytes of the encoded frames (held frames count nothing: their owner keeps them)."""
        return sum(len(x) for x in self._items if isinstance(x, bytes))

    def clear(self) -> None:
        self._items.clear()
        self.last = None

    def copy(self) -> FrameStore:
        """A store with the same frames that later appends do not change (for a thread)."""
        out = FrameStore(self.capacity)
        out._items = self._items.copy()
        out.last = self.last
        return out

    def dicts(self, *, newest_first: bool = False) -> Iterator[dict[str, Any]]:
        """Every frame's JSON object (CONTRACT.md section 2), decoded one at a time."""
        items = reversed(self._items) if newest_first else iter(self._items)
        for item in items:
            yield item.to_dict() if isinstance(item, Frame) else decode_frame(item)
