#!/usr/bin/env bash
# TEST-ENVIRONMENT STEP, not part of gputop: minimal VMs and containers may boot
# without tracefs, which bcc needs to read the sched_switch tracepoint's layout.
# gputop itself never mounts anything; its status line tells the user to.
set -euo pipefail
if [ -r /sys/kernel/tracing/events/sched/sched_switch/format ] \
  || [ -r /sys/kernel/debug/tracing/events/sched/sched_switch/format ]; then
  exit 0
fi
mount -t tracefs nodev /sys/kernel/tracing
echo "mount-tracefs: mounted tracefs on /sys/kernel/tracing"
