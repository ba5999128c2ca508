"""gputop's tests, in three tiers by folder.

- ``tests/unit``: pure (no root, no processes, no sleeps, no Pilot); seconds, any user.
- ``tests/functional``: Textual Pilot and snapshots, real /proc of processes the test
  starts, gputop subprocesses, the fake NVML.
- ``tests/system``: root and eBPF, torch, CPU hogs, perf, Prometheus.

Fixtures shared by the tiers are in ``conftest.py``; helpers every tier may import are
the modules beside this file (``harness``, ``procutil``, ``fakeproc``, ``fakenvml`` ...).
"""
