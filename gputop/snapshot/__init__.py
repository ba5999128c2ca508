"""Snapshot bundles: one JSON file that holds what gputop saw, for bug reports and replay.

The schema is documented in docs/snapshot.md. One module per concern:

- ``hostfacts``: the machine, NVML and the trainers' PyTorch, for ``meta``
- ``writer``: encoding within the size budget, redaction, atomic 0600 writes
- ``loader``: the validating loader (any problem is one ``UsageError`` line)
- ``command``: ``gputop snapshot``
- ``schema``: the schema name and the limits writer and loader share
"""

from gputop.snapshot.command import snapshot_command
from gputop.snapshot.hostfacts import collect_meta, torch_version
from gputop.snapshot.loader import Bundle, load_bundle
from gputop.snapshot.schema import MAX_BYTES, MAX_FRAMES, MAX_LIST_ITEMS, SCHEMA
from gputop.snapshot.writer import atomic_write, default_snapshot_dir, encode_bundle, write_bundle

__all__ = [
    "MAX_BYTES",
    "MAX_FRAMES",
    "MAX_LIST_ITEMS",
    "SCHEMA",
    "Bundle",
    "atomic_write",
    "collect_meta",
    "default_snapshot_dir",
    "encode_bundle",
    "load_bundle",
    "snapshot_command",
    "torch_version",
    "write_bundle",
]
