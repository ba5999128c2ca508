"""Lost GPU time added up: each GPU's seconds lost to each cause, and what they cost.

``LostLedger`` turns each frame's verdicts into seconds: a GPU whose verdict has a
cause and a ``lost_pct`` lost ``interval * lost_pct / 100`` of its time in that frame,
to that cause. The sampler keeps one from gputop's start (every command: the TUI,
``record``, ``snapshot``, ``export``); a replayed bundle gets a new one over its own
frames, so the window's sum is worked out from the same recorded numbers in the same
order, and equals the live run's where the bundle holds all of its frames. A GPU is
keyed by its UUID, so one driven by several trainers (ranks) counts once.

``GpuPrices`` is what a GPU-hour costs (``--gpu-price``, or per GPU model in the config
file); gputop has no built-in price. ``gpu_losses`` puts the two together for the screen.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from gputop.errors import UsageError
from gputop.model.frame import CAUSES, Cause, Frame, GpuSample


class LostLedger:
    """Seconds each GPU lost to each cause since the ledger saw it first."""

    def __init__(self) -> None:
        self._lost: dict[str, dict[Cause, float]] = {}
        self._since: dict[str, float] = {}

    def stamp(self, frame: Frame) -> Frame:
        """The frame with each GPU's running totals (``lost_gpu_s``, ``lost_since``)."""
        if not frame.gpus:
            return frame
        verdicts = {v.gpu: v for v in frame.verdicts}
        gpus = []
        for g in frame.gpus:
            key = g.uuid or f"index:{g.index}"
            lost = self._lost.setdefault(key, {})
            since = self._since.setdefault(key, round(frame.t - frame.interval, 3))
            v = verdicts.get(g.index)
            if v is not None and v.cause is not None and v.lost_pct is not None:
                lost[v.cause] = lost.get(v.cause, 0.0) + frame.interval * v.lost_pct / 100.0
            shown = {c: round(s, 3) for c, s in lost.items()}
            gpus.append(replace(g, lost_gpu_s=shown, lost_since=since))
        return replace(frame, gpus=tuple(gpus))


def restamped(frames: list[Frame]) -> list[Frame]:
    """A recorded timeline with its lost time counted over its own window (a replay)."""
    ledger = LostLedger()
    return [ledger.stamp(f) for f in frames]


@dataclass(frozen=True)
class GpuPrices:
    """What one GPU-hour costs, in US dollars: one price for every GPU (``--gpu-price``),
    else per GPU model (``[gpu_price]`` in config.toml: a model name, matched as a
    case-insensitive part of NVML's name, the longest match first)."""

    flat: float | None = None
    by_model: tuple[tuple[str, float], ...] = ()

    def price(self, name: str) -> float | None:
        """USD per hour for a GPU called ``name``; None: no price given."""
        if self.flat is not None:
            return self.flat
        lower = name.lower()
        for model, usd in sorted(self.by_model, key=lambda m: -len(m[0])):
            if model.lower() in lower:
                return usd
        return None

    @classmethod
    def from_config(cls, table: Mapping[str, float], flat: float | None = None) -> GpuPrices:
        """From config.toml's ``[gpu_price]`` table (checked as it was read) and ``--gpu-price``."""
        return cls(flat, tuple(table.items()))


def check_price(value: Any, what: str) -> float:
    """A price in USD per hour: a finite positive number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UsageError(f"{what}: a price in USD per GPU-hour must be a number, got {value!r}")
    usd = float(value)
    if not math.isfinite(usd) or usd <= 0:
        raise UsageError(f"{what}: a price in USD per GPU-hour must be positive, got {value!r}")
    return usd


@dataclass(frozen=True, slots=True)
class GpuLoss:
    """One GPU's lost time since ``since``, by cause (most first), and its price."""

    gpu: int
    by_cause: tuple[tuple[str, float], ...]
    since: float | None
    usd_per_hour: float | None

    @property
    def seconds(self) -> float:
        """All of it, every cause."""
        return sum(s for _, s in self.by_cause)

    @property
    def hours(self) -> float:
        return self.seconds / 3600.0

    @property
    def usd(self) -> float | None:
        """What the lost GPU-hours cost at the price; None without one."""
        return None if self.usd_per_hour is None else self.hours * self.usd_per_hour


def gpu_loss(g: GpuSample, prices: GpuPrices) -> GpuLoss | None:
    """The GPU's lost time as the screen shows it; None where it was not counted."""
    if g.lost_gpu_s is None:
        return None
    order: dict[str, int] = {c: i for i, c in enumerate(CAUSES)}
    ranked = sorted(g.lost_gpu_s.items(), key=lambda cs: (-cs[1], order.get(cs[0], 99)))
    return GpuLoss(g.index, tuple(ranked), g.lost_since, prices.price(g.name))
