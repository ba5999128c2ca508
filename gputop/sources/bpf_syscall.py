"""BPF maps read and written with the raw ``bpf(2)`` system call, through ctypes.

This is what the long-lived gputop process uses instead of bcc: bcc links LLVM
and costs about 65 MiB of memory just to import, while reading a map needs
nothing but a system call. The compiler runs in a short-lived child
(``bpf_handover``); this module only works on the file descriptors it hands over.

Layouts of ``union bpf_attr`` and of the info structs are those of
``include/uapi/linux/bpf.h``; only the leading fields gputop needs are
declared (the kernel accepts a shorter info buffer and fills what fits).
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
from collections.abc import Iterator
from typing import Any

# The system call number of bpf(2) on each architecture Debian ships.
_SYS_BPF = {
    "x86_64": 321,
    "aarch64": 280,
    "riscv64": 280,
    "loongarch64": 280,
    "ppc64le": 361,
    "s390x": 351,
    "armv7l": 386,
    "i686": 357,
}

BPF_MAP_LOOKUP_ELEM = 1
BPF_MAP_UPDATE_ELEM = 2
BPF_MAP_DELETE_ELEM = 3
BPF_MAP_GET_NEXT_KEY = 4
BPF_PROG_GET_NEXT_ID = 11
BPF_PROG_GET_FD_BY_ID = 13
BPF_OBJ_GET_INFO_BY_FD = 15
BPF_MAP_LOOKUP_BATCH = 24
BPF_MAP_LOOKUP_AND_DELETE_BATCH = 25
BPF_LINK_GET_NEXT_ID = 31

BPF_ANY = 0
# Per-CPU map types hold one value per possible CPU: not supported by this reader.
_PERCPU_TYPES = {5, 6, 10, 21}  # PERCPU_HASH, PERCPU_ARRAY, LRU_PERCPU_HASH, PERCPU_CGROUP_STORAGE
_ENOTSUPP = 524  # the kernel's internal "not supported", seen by user space on old kernels
_BATCH_ENTRIES = 1024  # per call; the widest values here (392 bytes) make a 400 KB buffer


class BpfError(OSError):
    """A ``bpf(2)`` call failed; ``errno`` says why."""


class _ElemAttr(ctypes.Structure):
    _fields_ = (
        ("map_fd", ctypes.c_uint32),
        ("_pad", ctypes.c_uint32),
        ("key", ctypes.c_uint64),
        ("value", ctypes.c_uint64),  # also next_key for GET_NEXT_KEY
        ("flags", ctypes.c_uint64),
    )


class _BatchAttr(ctypes.Structure):
    _fields_ = (
        ("in_batch", ctypes.c_uint64),
        ("out_batch", ctypes.c_uint64),
        ("keys", ctypes.c_uint64),
        ("values", ctypes.c_uint64),
        ("count", ctypes.c_uint32),
        ("map_fd", ctypes.c_uint32),
        ("elem_flags", ctypes.c_uint64),
        ("flags", ctypes.c_uint64),
    )


class _InfoAttr(ctypes.Structure):
    _fields_ = (
        ("bpf_fd", ctypes.c_uint32),
        ("info_len", ctypes.c_uint32),
        ("info", ctypes.c_uint64),
    )


class _IdAttr(ctypes.Structure):
    _fields_ = (
        ("id", ctypes.c_uint32),  # start_id for GET_NEXT_ID, prog_id for GET_FD_BY_ID
        ("next_id", ctypes.c_uint32),
        ("open_flags", ctypes.c_uint32),
    )


class MapInfo(ctypes.Structure):
    """The leading fields of ``struct bpf_map_info``."""

    _fields_ = (
        ("type", ctypes.c_uint32),
        ("id", ctypes.c_uint32),
        ("key_size", ctypes.c_uint32),
        ("value_size", ctypes.c_uint32),
        ("max_entries", ctypes.c_uint32),
        ("map_flags", ctypes.c_uint32),
        ("name", ctypes.c_char * 16),
    )


class ProgInfo(ctypes.Structure):
    """The leading fields of ``struct bpf_prog_info``, up to its name."""

    _fields_ = (
        ("type", ctypes.c_uint32),
        ("id", ctypes.c_uint32),
        ("tag", ctypes.c_uint8 * 8),
        ("jited_prog_len", ctypes.c_uint32),
        ("xlated_prog_len", ctypes.c_uint32),
        ("jited_prog_insns", ctypes.c_uint64),
        ("xlated_prog_insns", ctypes.c_uint64),
        ("load_time", ctypes.c_uint64),
        ("created_by_uid", ctypes.c_uint32),
        ("nr_map_ids", ctypes.c_uint32),
        ("map_ids", ctypes.c_uint64),
        ("name", ctypes.c_char * 16),
    )


_libc: Any = None


def _syscall_nr(table: dict[str, int], what: str) -> int:
    nr = table.get(platform.machine())
    if nr is None:
        raise BpfError(errno.ENOSYS, f"{what} number unknown on {platform.machine()}")
    return nr


def _libc_handle() -> Any:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.syscall.restype = ctypes.c_long
        _libc.ioctl.restype = ctypes.c_int
    return _libc


def _checked(ret: int) -> int:
    if ret < 0:
        err = ctypes.get_errno()
        raise BpfError(err, os.strerror(err))
    return ret


def bpf(cmd: int, attr: ctypes.Structure) -> int:
    """One ``bpf(2)`` call; raises BpfError with the errno on failure."""
    libc = _libc_handle()
    return _checked(
        int(
            libc.syscall(
                ctypes.c_long(_syscall_nr(_SYS_BPF, "bpf(2)")),
                ctypes.c_int(cmd),
                ctypes.byref(attr),
                ctypes.c_uint(ctypes.sizeof(attr)),
            )
        )
    )


def map_info(fd: int) -> MapInfo:
    """The kernel's description of the map behind ``fd`` (type, sizes, id, name)."""
    info = MapInfo()
    attr = _InfoAttr(fd, ctypes.sizeof(info), ctypes.addressof(info))
    bpf(BPF_OBJ_GET_INFO_BY_FD, attr)
    return info


def prog_info(fd: int) -> ProgInfo:
    """The kernel's description of the program behind ``fd`` (id, type, name)."""
    info = ProgInfo()
    attr = _InfoAttr(fd, ctypes.sizeof(info), ctypes.addressof(info))
    bpf(BPF_OBJ_GET_INFO_BY_FD, attr)
    return info


def _all_ids(cmd: int) -> set[int]:
    ids: set[int] = set()
    attr = _IdAttr(0, 0, 0)
    while True:
        try:
            bpf(cmd, attr)
        except BpfError as exc:
            if exc.errno == errno.ENOENT:
                return ids
            raise
        ids.add(attr.next_id)
        attr.id = attr.next_id


def loaded_program_ids() -> set[int]:
    """Ids of every BPF program loaded in the kernel now (what ``bpftool prog show`` lists)."""
    return _all_ids(BPF_PROG_GET_NEXT_ID)


def link_ids() -> set[int]:
    """Ids of every BPF link in the kernel now (what ``bpftool link show`` lists)."""
    return _all_ids(BPF_LINK_GET_NEXT_ID)


class LayoutMismatch(Exception):
    """A ctypes mirror of a BPF map's key or value does not match the loaded program."""


def _field_names(desc: Any) -> list[str] | None:
    """Field names of a struct in bcc's JSON type description, None for a scalar."""
    if isinstance(desc, list) and len(desc) >= 2 and isinstance(desc[1], list):
        # bcc names the padding it inserts "__pad_N"; a mirror gets it from ctypes.
        return [
            str(f[0])
            for f in desc[1]
            if isinstance(f, list) and f and not str(f[0]).startswith("__pad_")
        ]
    return None


class BpfMap:
    """One BPF map, read and written through its file descriptor.

    ``Key`` and ``Leaf`` are ctypes types mirrored from the C program; they are
    checked against the kernel's key and value sizes (and, where bcc described
    the type, its field names in order) when the map is opened, so a mirror that
    drifted from ``bpf/*.c`` fails loudly instead of reading garbage. Iteration,
    item assignment and ``del`` follow bcc's table API.
    """

    def __init__(
        self,
        fd: int,
        name: str,
        key_type: Any,
        leaf_type: Any,
        key_desc: Any = None,
        leaf_desc: Any = None,
    ) -> None:
        info = map_info(fd)
        self.fd = fd
        self.name = name
        self.map_type = int(info.type)
        self.max_entries = int(info.max_entries)
        self.Key = key_type
        self.Leaf = leaf_type
        ks, vs = ctypes.sizeof(key_type), ctypes.sizeof(leaf_type)
        if self.map_type in _PERCPU_TYPES:
            raise LayoutMismatch(f"map {name}: per-CPU maps are not supported")
        if (ks, vs) != (info.key_size, info.value_size):
            raise LayoutMismatch(
                f"map {name}: key/value are {info.key_size}/{info.value_size} bytes in the"
                f" loaded program but {ks}/{vs} in gputop's mirror of the C structs"
            )
        for what, ctype, desc in (("key", key_type, key_desc), ("value", leaf_type, leaf_desc)):
            want = _field_names(desc)
            have = [f[0] for f in getattr(ctype, "_fields_", ())]
            if want is not None and want != have:
                raise LayoutMismatch(
                    f"map {name}: {what} fields are {want} in the loaded program but {have}"
                    " in gputop's mirror of the C structs"
                )
        self._batch_ok = True
        self._pop_batch_ok = True

    def __getitem__(self, key: Any) -> Any:
        k = self._key(key)
        v = self.Leaf()
        attr = _ElemAttr(self.fd, 0, ctypes.addressof(k), ctypes.addressof(v), 0)
        try:
            bpf(BPF_MAP_LOOKUP_ELEM, attr)
        except BpfError as exc:
            if exc.errno == errno.ENOENT:
                raise KeyError(key) from None
            raise
        return v

    def __setitem__(self, key: Any, value: Any) -> None:
        k = self._key(key)
        attr = _ElemAttr(self.fd, 0, ctypes.addressof(k), ctypes.addressof(value), BPF_ANY)
        bpf(BPF_MAP_UPDATE_ELEM, attr)

    def __delitem__(self, key: Any) -> None:
        k = self._key(key)
        attr = _ElemAttr(self.fd, 0, ctypes.addressof(k), 0, 0)
        try:
            bpf(BPF_MAP_DELETE_ELEM, attr)
        except BpfError as exc:
            if exc.errno == errno.ENOENT:
                raise KeyError(key) from None
            raise

    def _key(self, key: Any) -> Any:
        return key if isinstance(key, self.Key) else self.Key(key)

    def items(self) -> list[tuple[Any, Any]]:
        """Every (key, value) now: batched where the kernel can, else key by key.

        Keys of a scalar type come back as ints, like bcc's batch reads.
        """
        if self._batch_ok:
            try:
                return self._items_batch()
            except BpfError as exc:
                if exc.errno not in (errno.EINVAL, errno.EOPNOTSUPP, _ENOTSUPP, errno.ENOSYS):
                    raise
                self._batch_ok = False
        return list(self._items_one_by_one())

    def pop_all(self) -> list[tuple[Any, Any]]:
        """Every (key, value), each removed as it is read (a hash map drained atomically per
        entry where the kernel can: an entry added meanwhile is kept for the next drain)."""
        if self._pop_batch_ok:
            try:
                return self._items_batch(BPF_MAP_LOOKUP_AND_DELETE_BATCH)
            except BpfError as exc:
                if exc.errno not in (errno.EINVAL, errno.EOPNOTSUPP, _ENOTSUPP, errno.ENOSYS):
                    raise
                self._pop_batch_ok = False
        out = self.items()
        for k, _ in out:
            try:
                del self[k]
            except KeyError:
                pass
        return out

    def get(self, key: Any) -> Any:
        """The value at ``key``, or None."""
        try:
            return self[key]
        except KeyError:
            return None

    def keys(self) -> list[Any]:
        """Every key now."""
        return [k for k, _ in self.items()]

    def values(self) -> list[Any]:
        """Every value now."""
        return [v for _, v in self.items()]

    def _items_batch(self, cmd: int = BPF_MAP_LOOKUP_BATCH) -> list[tuple[Any, Any]]:
        out: list[tuple[Any, Any]] = []
        n = min(max(1, self.max_entries), _BATCH_ENTRIES)
        # The resume token is a bucket index (u32) for hash maps, a key for arrays.
        token_size = max(ctypes.sizeof(self.Key), 8)
        tok_in = ctypes.create_string_buffer(token_size)
        tok_out = ctypes.create_string_buffer(token_size)
        first = True
        while True:
            keys = (self.Key * n)()
            values = (self.Leaf * n)()
            attr = _BatchAttr(
                0 if first else ctypes.addressof(tok_in),
                ctypes.addressof(tok_out),
                ctypes.addressof(keys),
                ctypes.addressof(values),
                n,
                self.fd,
                0,
                0,
            )
            done = False
            try:
                bpf(cmd, attr)
            except BpfError as exc:
                if exc.errno == errno.ENOSPC and attr.count == 0:
                    # One hash bucket holds more entries than fit: retry bigger.
                    n *= 2
                    continue
                if exc.errno != errno.ENOENT:
                    raise
                done = True
            out.extend(zip(keys[: attr.count], values[: attr.count], strict=True))
            if done:
                return out
            ctypes.memmove(tok_in, tok_out, token_size)
            first = False

    def _items_one_by_one(self) -> Iterator[tuple[Any, Any]]:
        cur = self.Key()
        nxt = self.Key()
        attr = _ElemAttr(self.fd, 0, 0, ctypes.addressof(nxt), 0)
        # A key deleted under us makes the kernel start over from the first key.
        seen: set[bytes] = set()
        while True:
            try:
                bpf(BPF_MAP_GET_NEXT_KEY, attr)
            except BpfError as exc:
                if exc.errno == errno.ENOENT:
                    return
                raise
            raw = bytes(nxt)
            if raw in seen:
                return
            seen.add(raw)
            ctypes.memmove(ctypes.addressof(cur), ctypes.addressof(nxt), ctypes.sizeof(nxt))
            attr.key = ctypes.addressof(cur)
            key = self.Key.from_buffer_copy(cur)
            try:
                value = self[key]
            except KeyError:
                continue  # deleted between the two calls
            yield (key.value if hasattr(key, "value") else key), value
