#!/usr/bin/env bash
# TEST-ENVIRONMENT STEP, not part of gputop: on machines whose custom kernel has no
# headers package, point /lib/modules/$(uname -r)/{build,source} at Debian's
# generic linux-headers so bcc can compile. The BPF program reads only tracepoint
# fields and helper values, so headers of another kernel version are safe for it.
set -euo pipefail
mod=/lib/modules/$(uname -r)
if [ -e "$mod/build/include" ]; then
  exit 0
fi
amd=$(ls -d /usr/src/linux-headers-*-amd64 2>/dev/null | sort -V | tail -n 1 || true)
common=$(ls -d /usr/src/linux-headers-*-common 2>/dev/null | sort -V | tail -n 1 || true)
if [ -z "$amd" ] || [ -z "$common" ]; then
  echo "link-kernel-headers: no /usr/src/linux-headers-*-amd64 (apt-get install linux-headers-amd64)" >&2
  exit 1
fi
mkdir -p "$mod"
ln -sfn "$amd" "$mod/build"
ln -sfn "$common" "$mod/source"
echo "link-kernel-headers: $mod/build -> $amd, source -> $common"
