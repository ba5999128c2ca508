"""The window's frames, kept compactly: each one packed as it arrives, its JSON built only
for a snapshot.

A frame as objects (its ``ProcessSample``s, their floats and threads) takes 10-30 KiB, so
600 of them would add 6-18 MiB to the TUI. Its JSON object (CONTRACT.md section 2, as
``Frame.to_dict`` writes it), compressed, takes a tenth of that but costs about 1 ms to build
per frame, on the UI thread, for bundles that are rarely written. A frame is packed instead:
the values of its fields in field order (``operator.attrgetter``, at C speed), nested
dataclasses the same way, ``marshal``-ed and compressed, in a seventh of the time and less
room than the JSON. The JSON object is built back from the packed values (the same frozen
dataclasses, then ``to_dict``) only when a snapshot is written, so a bundle holds exactly
what the eager encoding wrote.
"""

from __future__ import annotations

import dataclasses
import marshal
import operator
import typing
import zlib
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from gputop.model import frame as frame_module
from gputop.model.frame import Frame

# zlib's fastest level: a frame of 30 processes packs to ~2 KB in ~0.1 ms.
_LEVEL = 1
# Never in a frame's JSON object: the threads (``to_dict(threads=False)``) and the TUI-only
# list of other processes; both are their class's last field, so the rest rebuild positionally.
_LEFT_OUT = frozenset({"threads", "others"})


@dataclasses.dataclass(frozen=True)
class _Layout:
    """How one dataclass is packed: its kept fields' getter and which of them nest dataclasses."""

    cls: type
    values: Callable[[Any], tuple[Any, ...]]
    # (field index, its dataclass, whether the field holds a tuple of them)
    nested: tuple[tuple[int, type, bool], ...]


_LAYOUTS: dict[type, _Layout] = {}


def _dataclass_in(hint: Any, in_tuple: bool = False) -> tuple[type, bool] | None:
    """The dataclass a field's type names (``X``, ``X | None``, ``tuple[X, ...]``), if any."""
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return hint, in_tuple
    in_tuple = in_tuple or typing.get_origin(hint) is tuple
    for arg in typing.get_args(hint):
        found = _dataclass_in(arg, in_tuple)
        if found is not None:
            return found
    return None


def _layout(cls: type) -> _Layout:
    layout = _LAYOUTS.get(cls)
    if layout is None:
        hints = typing.get_type_hints(cls, vars(frame_module))
        every = [f.name for f in dataclasses.fields(cls)]
        names = [n for n in every if n not in _LEFT_OUT]
        assert every[: len(names)] == names, f"{cls.__name__}: a left-out field is not last"
        nested = []
        for i, name in enumerate(names):
            found = _dataclass_in(hints[name])
            if found is not None:
                nested.append((i, *found))
        getter = operator.attrgetter(*names)
        values = getter if len(names) > 1 else lambda obj: (getter(obj),)
        layout = _LAYOUTS[cls] = _Layout(cls, values, tuple(nested))
    return layout


def _pack(obj: Any) -> tuple[Any, ...]:
    layout = _layout(type(obj))
    values = layout.values(obj)
    if not layout.nested:
        return values
    out = list(values)
    for i, _, many in layout.nested:
        v = out[i]
        if v is not None:
            out[i] = tuple([_pack(x) for x in v]) if many else _pack(v)
    return tuple(out)


def _unpack(cls: type, values: tuple[Any, ...]) -> Any:
    layout = _layout(cls)
    if layout.nested:
        out = list(values)
        for i, inner, many in layout.nested:
            v = out[i]
            if v is not None:
                out[i] = tuple([_unpack(inner, x) for x in v]) if many else _unpack(inner, v)
        values = tuple(out)
    return cls(*values)


def pack_frame(frame: Frame) -> bytes:
    """The frame's fields as its JSON object holds them (no threads, no others), compressed."""
    return zlib.compress(marshal.dumps(_pack(frame)), _LEVEL)


def unpack_frame(blob: bytes) -> Frame:
    """The frame ``pack_frame`` packed, without its threads and other processes."""
    frame: Frame = _unpack(Frame, marshal.loads(zlib.decompress(blob)))
    return frame


class FrameStore:
    """The newest ``capacity`` frames, oldest first, each packed once (``pack_frame``).

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
        """Keep ``frame`` (packed unless ``held``); the oldest falls out when full."""
        self._items.append(frame if held else pack_frame(frame))
        self.last = frame

    @property
    def nbytes(self) -> int:
        """Bytes of the packed frames (held frames count nothing: their owner keeps them)."""
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

    def frames(self, *, newest_first: bool = False) -> Iterator[Frame]:
        """Every frame (packed ones without threads), unpacked one at a time."""
        items = reversed(self._items) if newest_first else iter(self._items)
        for item in items:
            yield item if isinstance(item, Frame) else unpack_frame(item)

    def dicts(self, *, newest_first: bool = False) -> Iterator[dict[str, Any]]:
        """Every frame's JSON object (CONTRACT.md section 2), built one at a time."""
        for frame in self.frames(newest_first=newest_first):
            yield frame.to_dict()
