"""Generate screenshots/*.svg of the main screen and the drill-down (never edit them by hand).

    python scripts/make_screenshots.py                 # the deterministic test fixture
    python scripts/make_screenshots.py --demo NAME...  # also record these built-in demo scenarios
    python scripts/make_screenshots.py --all-demos     # ... or every one of them
    python scripts/make_screenshots.py --demo cpu-contention --price 3.5
                                                       # ... and again with a GPU-hour's price

A scenario is a name plus a list of frames; the fixture's frames come from
tests/frames_fixture.py, a demo's are recorded live through the same sampler the
TUI uses (``--seconds`` of ticks). Each scenario gives three SVGs: main screen at
120x40 and 80x24, and the drill-down of its first trainer (else its top process);
the starving fixture also at 60x20 and 200x60, and an 8-GPU fixture. With ``--price``,
each demo is also drawn from the same frames at that price per GPU-hour
(``demo-NAME-priced-*``: the lost GPU-hours in money too).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from gputop.app import GputopApp  # noqa: E402
from gputop.feeds import ReplayFeed  # noqa: E402
from gputop.model.frame import Frame  # noqa: E402
from gputop.model.ledger import GpuPrices  # noqa: E402
from gputop.widgets.table_layout import row_key  # noqa: E402


@dataclass(frozen=True)
class Scenario:
    """A named source of frames for the screenshots."""

    name: str
    frames: Callable[[], list[Frame]]
    # Main-screen sizes besides 120x40 and 80x24.
    extra_sizes: tuple[tuple[int, int], ...] = ()
    prices: GpuPrices | None = None


def fixture_scenarios() -> list[Scenario]:
    from frames_fixture import make_frames

    return [
        Scenario(
            "fixture-starving",
            lambda: make_frames(60, long_verdict=True, starving_from=20),
            extra_sizes=((60, 20), (200, 60)),
        ),
        Scenario("fixture-8-gpus", lambda: make_frames(60, n_gpus=8, starving_from=30)),
        Scenario("fixture-no-gpu", lambda: make_frames(60, gpus=False)),
    ]


def demo_scenario(name: str, seconds: float, interval_s: float) -> Scenario:
    """Record a demo scenario through the sampler (the demo runs its real host workload)."""

    @functools.cache
    def record() -> list[Frame]:
        from gputop.runtime import Options, build_sampler

        frames: list[Frame] = []
        sampler = build_sampler(Options(interval_s=interval_s, demo=name))
        try:
            sampler.run(frames.append, duration_s=seconds)
        finally:
            sampler.close()
        return frames

    return Scenario(f"demo-{name}", record)


async def shoot(scenario: Scenario, out: Path) -> list[Path]:
    frames = scenario.frames()
    if not frames:
        raise SystemExit(f"{scenario.name}: no frames")
    written = []
    shots = [((120, 40), "main"), ((80, 24), "main"), ((120, 40), "process")]
    shots += [(size, "main") for size in scenario.extra_sizes]
    for size, screen in shots:
        app = GputopApp(ReplayFeed(frames), prices=scenario.prices)
        async with app.run_test(size=size) as pilot:
            await pilot.pause()
            if screen == "process":
                last = frames[-1].processes
                target = next((p for p in last if p.role == "trainer"), None)
                if target is None and app.table.selected is not None:
                    target = app.table.selected
                if target is None:
                    continue
                app.table.select_key(row_key(target))
                await pilot.press("enter")
                await pilot.pause()
            path = out / f"{scenario.name}-{screen}-{size[0]}x{size[1]}.svg"
            path.write_text(app.export_screenshot(title=f"gputop — {scenario.name}"))
            written.append(path)
    return written


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--demo", nargs="*", default=[], metavar="NAME", help="demo scenarios to add")
    ap.add_argument("--all-demos", action="store_true", help="add every built-in demo scenario")
    ap.add_argument("--seconds", type=float, default=20.0, help="seconds to record each demo")
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument(
        "--price", type=float, metavar="USD", help="also draw each demo at this price per GPU-hour"
    )
    ap.add_argument("--out", type=Path, default=ROOT / "screenshots")
    args = ap.parse_args()
    names = list(args.demo)
    if args.all_demos:
        from gputop.demo import SCENARIOS  # type: ignore[import-not-found,unused-ignore]

        names += [n for n in SCENARIOS if n not in names]
    demos = [demo_scenario(name, args.seconds, args.interval) for name in names]
    if args.price is not None:
        # The same recorded frames (recorded once), drawn at the price.
        demos += [
            replace(d, name=f"{d.name}-priced", prices=GpuPrices(flat=args.price)) for d in demos
        ]
    scenarios = fixture_scenarios() + demos
    args.out.mkdir(parents=True, exist_ok=True)
    for scenario in scenarios:
        for path in asyncio.run(shoot(scenario, args.out)):
            print(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
