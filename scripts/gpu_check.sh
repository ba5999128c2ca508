#!/usr/bin/env bash
# The prepared GPU check (scripts/gpu_check.py): gputop on a real NVIDIA GPU in at most
# 4 minutes, no network needed. README.md, "Checking gputop on a GPU", says when and how.
#   scripts/gpu_check.sh --dry-run          list the checks
#   scripts/gpu_check.sh --out DIR          run them all; one tarball in DIR
#   scripts/gpu_check.sh --only sync,nvml   run some
#   scripts/gpu_check.sh --fake             the same with no GPU (fake NVML and libcuda)
# The Python is the machine's own (with PyTorch): $GPUCHECK_PYTHON, else this checkout's
# .venv where there is one, else python3.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
py=${GPUCHECK_PYTHON:-}
if [ -z "$py" ]; then
  if [ -x "$root/.venv/bin/python" ]; then py=$root/.venv/bin/python; else py=python3; fi
fi
exec "$py" "$root/scripts/gpu_check.py" "$@"
