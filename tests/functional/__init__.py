"""Pilot and snapshot tests, real /proc of processes the tests start, gputop subprocesses,
the fake NVML."""
