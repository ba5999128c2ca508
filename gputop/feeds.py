"""Where the TUI's frames come from: the sampler's thread (live, demo) or a recorded timeline.

The app only starts a feed, stops it and asks it for the sources' statuses; a feed hands
frames to the app through ``FrameSink`` (``GputopApp`` is one): one frame at a time from
the sampler's thread (``offer_frame``, thread-safe) or a whole timeline at once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from gputop.errors import UsageError
from gputop.model.frame import Frame, SourceStatus


class FrameSink(Protocol):
    """What a feed hands frames to (the app)."""

    def offer_frame(self, frame: Frame) -> None:
        """Thread-safe: one new frame from the sampler's thread."""
        ...

    def load_timeline(self, frames: list[Frame]) -> None:
        """A recorded timeline, all at once."""
        ...


class Feed(Protocol):
    """Where frames come from. The app only starts, stops and asks for statuses."""

    live: bool

    def start(self, app: FrameSink) -> None: ...

    def stop(self) -> None: ...

    def statuses(self) -> list[SourceStatus]: ...

    @property
    def error(self) -> BaseException | None:
        """Why the feed stopped delivering frames, if it did."""
        ...


class FrameSampler(Protocol):
    """What SamplerFeed needs of a sampler (gputop.api.Monitor is one)."""

    @property
    def error(self) -> BaseException | None: ...

    def start(self, on_frame: Callable[[Frame], None]) -> None: ...

    def close(self) -> None: ...

    def statuses(self) -> Sequence[SourceStatus]: ...


class SamplerFeed:
    """Live or demo data: the sampler's thread offers every frame to the app."""

    live = True

    def __init__(self, sampler: FrameSampler) -> None:
        self.sampler = sampler

    def start(self, app: FrameSink) -> None:
        self.sampler.start(app.offer_frame)

    def stop(self) -> None:
        self.sampler.close()

    def statuses(self) -> list[SourceStatus]:
        return list(self.sampler.statuses())

    @property
    def error(self) -> BaseException | None:
        """Why the sampler thread stopped, if it did."""
        return self.sampler.error


class ReplayFeed:
    """A recorded list of frames (a snapshot bundle or test fixture) on a timeline."""

    live = False

    def __init__(self, frames: list[Frame], meta: dict[str, Any] | None = None) -> None:
        self.frames = frames
        self.meta = meta or {}

    def start(self, app: FrameSink) -> None:
        app.load_timeline(self.frames)

    def stop(self) -> None:
        return None

    def statuses(self) -> list[SourceStatus]:
        return []

    @property
    def error(self) -> BaseException | None:
        """A recorded timeline never fails after loading."""
        return None


def replay_feed(path: str) -> ReplayFeed:
    """The timeline of a snapshot bundle (a bad bundle: UsageError), its lost GPU time
    counted over the bundle's own window."""
    from gputop.model.ledger import restamped
    from gputop.snapshot import load_bundle

    bundle = load_bundle(path)
    if not bundle.frames:
        raise UsageError(f"{path}: the bundle holds no frames")
    return ReplayFeed(restamped(list(bundle.frames)), dict(bundle.meta))
