"""Root and eBPF, torch, CPU hogs, perf, Prometheus: the slow, privileged end to end tests."""
