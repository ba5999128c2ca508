#!/usr/bin/env bash
# Installs everything gputop's test suite needs on a fresh Debian 12 machine
# (apt packages when root, a venv with the test extras and CPU PyTorch), then
# runs the whole test suite. `.ci/run` calls exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  need=()
  # prometheus: promtool and a real server for the rules and scrape tests; bpftool: the
  # tests that check nothing stays attached after gputop exits; libbpf1 loads the probe
  # object built ahead of time, clang rebuilds it (the suite checks it matches bpf/).
  for pkg in python3-bpfcc linux-headers-amd64 tmux gcc linux-perf bpfcc-tools bpftool prometheus \
    libbpf1 clang; do
    dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
  done
  if [ ${#need[@]} -gt 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  fi
  # Debian starts the Prometheus services on install where systemd runs; the tests start
  # their own servers on free ports, so keep the packaged ones from holding ports.
  if command -v systemctl >/dev/null; then
    for svc in prometheus prometheus-node-exporter; do
      if systemctl is-active --quiet "$svc" 2>/dev/null; then
        systemctl disable --now "$svc" >/dev/null 2>&1 || true
      fi
    done
  fi
  bash scripts/link-kernel-headers.sh
  bash scripts/mount-tracefs.sh
fi

py=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$py" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test,torch,pyspy]' \
  2>pip-install.log || { cat pip-install.log >&2; exit 1; }

if [ $# -gt 0 ]; then
  exec .venv/bin/python -m pytest "$@"
fi
# The whole suite, in two runs. Tests that measure time or CPU shares against their own clock
# or the kernel's (marked `serial`: most system tests) run one at a time on a quiet machine,
# after the rest, which run on four workers, a test file per worker (pytest-xdist; they wait
# on subprocesses and pilots often enough that more workers than CPUs pay: on two CPUs,
# 211 s with two, 183-217 s with three, 193 s with four, over several runs). Both run
# whatever happens; the status is the first failure's. Only tests/system holds `serial` tests
# (tests/conftest.py marks them there), so the second run collects only that tree (4-6 s less
# than importing every test module to deselect them).
rc=0
.venv/bin/python -m pytest -n 4 --dist loadfile -m "not serial" || rc=$?
.venv/bin/python -m pytest -m serial tests/system || { s=$?; [ "$rc" -ne 0 ] || rc=$s; }
exit "$rc"
