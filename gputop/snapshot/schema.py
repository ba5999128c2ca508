"""The bundle's schema name and the limits that writer and loader share.

Every bundle the writer produces must pass the loader's checks, so both take
their limits, the shape check and the JSON clean-up from here.
"""

from __future__ import annotations

import math
from typing import Any

SCHEMA = "gputop.snapshot/1"
SCHEMA_PREFIX = "gputop.snapshot/"

# Loader limits. A real bundle (10 minutes at 1 s, ~40 processes) is ~10 MiB.
MAX_BYTES = 64 * 1024 * 1024
MAX_FRAMES = 6000
MAX_LIST_ITEMS = 100_000
MAX_STRING_CHARS = 65_536
MAX_DEPTH = 12
MAX_META_NODES = 100_000


def jsonable(obj: Any) -> Any:
    """Plain JSON values; non-finite floats become None ("cannot report"), long strings cut."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, str):
        return obj if len(obj) <= MAX_STRING_CHARS else obj[:MAX_STRING_CHARS]
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    return obj


def check_shape(obj: Any, depth: int = 0) -> int:
    """Reject absurd structure (nesting, list lengths, string sizes); returns the node count."""
    if depth > MAX_DEPTH:
        raise ValueError(f"nested deeper than {MAX_DEPTH} levels")
    if isinstance(obj, str):
        if len(obj) > MAX_STRING_CHARS:
            raise ValueError(f"a string of {len(obj)} characters (limit {MAX_STRING_CHARS})")
        return 1
    if isinstance(obj, list):
        if len(obj) > MAX_LIST_ITEMS:
            raise ValueError(f"a list of {len(obj)} items (limit {MAX_LIST_ITEMS})")
        return 1 + sum(check_shape(v, depth + 1) for v in obj)
    if isinstance(obj, dict):
        if len(obj) > MAX_LIST_ITEMS:
            raise ValueError(f"an object with {len(obj)} keys (limit {MAX_LIST_ITEMS})")
        return 1 + sum(check_shape(v, depth + 1) for v in obj.values())
    return 1


def size_text(n: int) -> str:
    """A byte count as MiB or KiB, for messages."""
    if n >= 2**20:
        return f"{n / 2**20:.0f} MiB"
    return f"{n / 2**10:.0f} KiB"


def one_line(exc: BaseException) -> str:
    """An exception's message on one line, cut to 300 characters."""
    return " ".join(str(exc).split())[:300]
