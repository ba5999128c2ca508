"""The user's TUI settings: ``$XDG_CONFIG_HOME/gputop/config.toml``.

Example::

    interval = 2.0                 # seconds between samples (command line wins)
    theme = "nord"                 # any Textual theme name
    snapshot_dir = "~/gputop-snapshots"

    [keys]                         # binding id = comma-separated keys
    quit = "q,f10,ctrl+q"
    kill = "F9"

    [thresholds]                   # the diagnosis engine's Thresholds (docs/diagnosis.md)
    sm_low_pct = 30

    [gpu_price]                    # USD per GPU-hour by model (part of NVML's name);
    "H100" = 3.50                  # --gpu-price sets one for every GPU instead

A missing file is an empty config, and so is one that cannot be read (with a warning: a
home the user may not read is no reason to stop); a malformed one is a one-line UsageError.
The command line reads it once (``cli._dispatch``) and hands it to whichever command runs.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gputop.errors import UsageError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised only on Python 3.10
    import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]

KNOWN_KEYS = {"interval", "theme", "snapshot_dir", "keys", "thresholds", "gpu_price"}


@dataclass(frozen=True)
class Config:
    """Settings read from config.toml; every field is optional."""

    interval_s: float | None = None
    theme: str | None = None
    snapshot_dir: str | None = None
    keys: dict[str, str] = field(default_factory=dict)
    thresholds: dict[str, Any] = field(default_factory=dict)
    gpu_price: dict[str, float] = field(default_factory=dict)
    """USD per GPU-hour by GPU model (a case-insensitive part of NVML's name)."""
    path: str | None = None
    warning: str | None = None
    """Why the file could not be read (the defaults are used): said, not a stop."""


def config_path() -> Path:
    """Where the config lives: $XDG_CONFIG_HOME/gputop/config.toml (default ~/.config)."""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "gputop" / "config.toml"


def load_config(path: Path | None = None) -> Config:
    """Read and check the config; a missing file gives the defaults."""
    path = path or config_path()
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return Config()
    except OSError as exc:
        # A home the user may not read (sudo -u, a service account), a path through a file:
        # nothing was configured that could be read, so the defaults hold, and gputop says so.
        return Config(warning=f"cannot read {path}: {exc.strerror}; using the default settings")
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: {exc}".splitlines()[0]) from None
    return parse_config(data, str(path))


def _prices(table: Any, where: str) -> dict[str, float]:
    """``[gpu_price]``: GPU model -> USD per GPU-hour, each a finite positive number."""
    if not isinstance(table, dict):
        raise UsageError(f'{where}: [gpu_price] must map GPU models to USD per hour: "H100" = 3.5')
    from gputop.model.ledger import check_price

    return {m: check_price(usd, f"{where}: [gpu_price] {m!r}") for m, usd in table.items()}


def parse_config(data: dict[str, Any], where: str = "config.toml") -> Config:
    """Check the parsed TOML table and build the Config."""
    unknown = sorted(set(data) - KNOWN_KEYS)
    if unknown:
        raise UsageError(f"{where}: unknown setting {unknown[0]!r}")
    interval = data.get("interval")
    if interval is not None:
        if isinstance(interval, bool) or not isinstance(interval, (int, float)):
            raise UsageError(f"{where}: interval must be a number of seconds")
        from gputop.sampler import MIN_INTERVAL_S

        if not MIN_INTERVAL_S <= float(interval) < float("inf"):
            raise UsageError(f"{where}: interval must be at least {MIN_INTERVAL_S} s")
        interval = float(interval)
    for name in ("theme", "snapshot_dir"):
        if name in data and not isinstance(data[name], str):
            raise UsageError(f"{where}: {name} must be a string")
    keys = data.get("keys", {})
    if not isinstance(keys, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and v.strip() for k, v in keys.items()
    ):
        raise UsageError(f'{where}: [keys] must map binding names to key strings, e.g. quit = "q"')
    thresholds = data.get("thresholds", {})
    if not isinstance(thresholds, dict):
        raise UsageError(f"{where}: [thresholds] must be a table")
    snapshot_dir = data.get("snapshot_dir")
    return Config(
        gpu_price=_prices(data.get("gpu_price", {}), where),
        interval_s=interval,
        theme=data.get("theme"),
        snapshot_dir=os.path.expanduser(snapshot_dir) if snapshot_dir else None,
        keys={k: ",".join(s.strip() for s in v.split(",")) for k, v in keys.items()},
        thresholds=dict(thresholds),
        path=where,
    )
