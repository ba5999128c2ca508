"""This process reads its own PID namespace from the real /proc."""

from __future__ import annotations

import os

from gputop.sources.pidns import nspid


def test_this_machine_reads_its_own_namespace() -> None:
    own = nspid("/proc/self/status")
    assert own and own[0] == os.getpid()
