"""The mount table parser of gputop/sources/storage.py on fixture lines (escapes, bind
mounts, network filesystems), how long mount tables are kept, and how storage is quoted;
a real process's open files are read in tests/functional/test_storage_real.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gputop.model.frame import OpenStorage
from gputop.sources.storage import MOUNTS_TTL_S, StorageReader, parse_mountinfo

MOUNTINFO = r"""22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
30 22 254:0 /srv/data /mnt/bound rw,relatime shared:1 - ext4 /dev/vda rw
41 22 0:52 / /datasets rw,relatime shared:20 - nfs4 filer:/export/imagenet rw,vers=4.2
42 22 0:53 / /mnt/with\040space rw - fuse.s3fs s3fs rw
43 22 259:3 / /scratch rw,relatime - xfs /dev/nvme0n1p1 rw
bad line without separator
"""


def test_the_mount_table_maps_each_device_to_its_mounts_longest_first() -> None:
    table = parse_mountinfo(MOUNTINFO)
    assert table[os.makedev(254, 0)] == [
        ("/mnt/bound", "ext4", "/dev/vda"),
        ("/", "ext4", "/dev/vda"),
    ]
    assert table[os.makedev(0, 52)] == [("/datasets", "nfs4", "filer:/export/imagenet")]
    assert table[os.makedev(0, 53)] == [("/mnt/with space", "fuse.s3fs", "s3fs")]
    assert table[os.makedev(259, 3)] == [("/scratch", "xfs", "/dev/nvme0n1p1")]
    assert len(table) == 4


def _process_in_namespace(proc: Path, pid: int, ns: str, data: Path) -> None:
    """A fake /proc entry: ``pid`` in mount namespace ``ns``, reading ``data`` (a real file)."""
    (proc / str(pid) / "ns").mkdir(parents=True)
    (proc / str(pid) / "ns" / "mnt").symlink_to(f"mnt:[{ns}]")
    (proc / str(pid) / "fd").mkdir()
    (proc / str(pid) / "fd" / "3").symlink_to(data)
    dev = data.stat().st_dev
    (proc / str(pid) / "mountinfo").write_text(
        f"22 1 {os.major(dev)}:{os.minor(dev)} / /data{pid} rw - xfs /dev/sdz rw\n"
    )


def test_a_mount_namespace_no_longer_seen_loses_its_table_at_the_next_read_after_its_ttl(
    tmp_path: Path,
) -> None:
    data = tmp_path / "batch.bin"
    data.write_bytes(b"x")
    proc = tmp_path / "proc"
    _process_in_namespace(proc, 10, "4026531001", data)
    _process_in_namespace(proc, 20, "4026531002", data)
    now = [100.0]
    reader = StorageReader(str(proc), clock=lambda: now[0])
    assert reader.read(10) == (OpenStorage("/data10", "xfs", "/dev/sdz"),)
    now[0] += MOUNTS_TTL_S / 2
    assert reader.read(20) == (OpenStorage("/data20", "xfs", "/dev/sdz"),)
    assert sorted(reader._mounts) == ["mnt:[4026531001]", "mnt:[4026531002]"]
    # The first container's table is out of date now, but a read whose table is fresh
    # does no sweeping: it goes when a table is read again.
    now[0] += MOUNTS_TTL_S / 2
    assert reader.read(20) == (OpenStorage("/data20", "xfs", "/dev/sdz"),)
    now[0] += MOUNTS_TTL_S / 2
    assert reader.read(20) == (OpenStorage("/data20", "xfs", "/dev/sdz"),)
    assert sorted(reader._mounts) == ["mnt:[4026531002]"], "the first container's table is gone"
    assert reader._mounts["mnt:[4026531002]"][0] == now[0], "read again after its TTL"


def test_storage_describes_itself_as_evidence_quotes_it() -> None:
    assert OpenStorage("/scratch", "xfs", "/dev/nvme0n1p1").describe() == (
        "/scratch (xfs on /dev/nvme0n1p1)"
    )
    assert OpenStorage("", "block device", "/dev/loop3").describe() == "/dev/loop3 (block device)"


def test_storage_survives_a_frames_json_round_trip() -> None:
    import json

    from gputop.model.frame import Frame, HostSample, ProcessSample, Sources

    worker = ProcessSample(
        pid=4000, ppid=3999, comm="pt_data_worker", cmdline="python train.py",
        role="dataloader", trainer_pid=3999, cpu_pct=2.0, offcpu_pct=98.0, runq_pct=0.5,
        preempt_per_s=20.0, preempt_total=40, vcsw_per_s=60.0,
        storage=(OpenStorage("", "block device", "/dev/loop0"), OpenStorage("/d", "xfs", "/sdb")),
    )  # fmt: skip
    frame = Frame(
        t=1.0, interval=1.0, sources=Sources("nvml", "bpf"),
        host=HostSample(cpu_pct=10.0, ncpu=2, load1=0.5, procs_running=1), processes=(worker,),
    )  # fmt: skip
    d = json.loads(json.dumps(frame.to_dict()))
    assert d["processes"][0]["storage"][1] == {"mount": "/d", "fstype": "xfs", "source": "/sdb"}
    assert Frame.from_dict(d) == frame
    d["processes"][0]["storage"] = [{"mount": 3, "fstype": "xfs", "source": "/sdb"}]
    with pytest.raises(ValueError, match="mount"):
        Frame.from_dict(d)


def test_with_no_data_fd_the_shared_readable_mappings_are_read_and_code_is_not(
    tmp_path: Path,
) -> None:
    data = tmp_path / "shard.bin"
    data.write_bytes(b"x")
    proc = tmp_path / "proc"
    _process_in_namespace(proc, 30, "4026531003", data)
    (proc / "30" / "fd" / "3").unlink()  # the dataset's fd closed after mapping it
    dev = data.stat().st_dev
    hexdev = f"{os.major(dev):02x}:{os.minor(dev):02x}"
    # The same device is also the root filesystem: whatever is wrongly taken names "/".
    with open(proc / "30" / "mountinfo", "a") as f:
        f.write(f"21 1 {os.major(dev)}:{os.minor(dev)} / / rw - ext4 /dev/vda rw\n")
    (proc / "30" / "maps").write_text(
        # The dataset: shared, readable, on /data30.
        f"7f0000000000-7f0040000000 r--s 00000000 {hexdev} 1234 /data30/shard.bin\n"
        # A library: code and read-only data, private; a locale archive, private.
        f"7f1000000000-7f1000100000 r-xp 00000000 {hexdev} 99 /usr/lib/libx.so\n"
        f"7f1000100000-7f1000200000 r--p 00100000 {hexdev} 99 /usr/lib/libx.so\n"
        f"7f2000000000-7f2000300000 r--p 00000000 {hexdev} 98 /usr/lib/locale/locale-archive\n"
        # Shared and readable but small: a system cache (glibc's gconv-modules.cache).
        f"7f2800000000-7f2800007000 r--s 00000000 {hexdev} 96 /usr/lib/gconv/gconv-modules.cache\n"
        # Shared but also executable somewhere: code, not data.
        f"7f3000000000-7f3000200000 r--s 00000000 {hexdev} 97 /opt/jit.bin\n"
        f"7f3000200000-7f3000201000 r-xs 00200000 {hexdev} 97 /opt/jit.bin\n"
        # Shared but not readable (a guard region).
        f"7f3800000000-7f3800200000 ---s 00000000 {hexdev} 95 /opt/guard.bin\n"
        # Anonymous memory, the heap, and a device with no mount in the table.
        "7f4000000000-7f4000001000 rw-s 00000000 00:01 5 /SYSV00000000 (deleted)\n"
        "55d000000000-55d000021000 rw-p 00000000 00:00 0                  [heap]\n"
        "7f5000000000-7f5000001000 rw-p 00000000 00:00 0 \n"
    )
    reader = StorageReader(str(proc))
    assert reader.read(30) == (OpenStorage("/data30", "xfs", "/dev/sdz"),)
    # An fd open on a file (its path outside /data30, so under "/"): the maps are not read.
    (proc / "30" / "fd" / "4").symlink_to(data)
    assert reader.read(30) == (OpenStorage("/", "ext4", "/dev/vda"),)
