"""Uprobes on the CUDA driver's synchronizing calls and host-to-device copies, in the libcuda
each watched trainer maps.

A trainer's CUDA initialises late (its first CUDA call), so every tick the
probe hands the trainers it watches to ``CudaProbes.update()``, which looks for
a mapped ``libcuda.so*`` in ``/proc/PID/maps`` (a trainer without one is looked
at again at most once a second) and attaches the probe's programs as uprobe and
uretprobe at each function of that file (``PROBES``): ``on_sync_enter`` /
``on_sync_exit`` at the synchronizing ones, ``on_h2d_enter`` / ``on_h2d_exit`` at the
host-to-device copies, ``on_copy_enter`` / ``on_copy_exit`` at the copies whose
direction their pointers give: once per distinct library file (device and inode), shared by every
trainer that maps it; with one uprobe_multi link per direction where the kernel has
them (Linux 6.6+), else one perf event per function and direction. The file is
reached through ``/proc/PID/root``, so a trainer in a container (its own mount
namespace) is probed in its own copy of the library. The programs count only
processes the probe watches.

Kernel launches are not probed (thousands per second): only calls that wait.
A uprobe fires at the function's address whoever called it, so how the CUDA
runtime reaches the driver does not matter as long as the address it calls is an
exported one: the runtime gets its driver entry points from ``cuGetProcAddress``;
with the fake driver (tests/fakecuda/) the addresses it hands out are the exported
functions' and calls through them are counted, and ``scripts/gpu_check.sh``
compares the two (``dladdr``) on a real driver.
"""

from __future__ import annotations

import os
import struct
import time
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from gputop.sources.bpf_attach import Attachment, attach_uprobe, attach_uprobe_multi
from gputop.sources.bpf_handover import detach
from gputop.sources.bpf_syscall import BpfError

# Every driver call that can wait for the GPU, in each form the driver exports: the
# unversioned legacy name, the ``_v2`` (and CUDA 13's newer) versions, and the
# per-thread default stream forms (``_ptsz`` for calls on a stream, ``_ptds`` for the
# synchronous ones). A name the library does not export is skipped.
SYNC_CALLS = (
    "cuCtxSynchronize",
    "cuCtxSynchronize_v2",
    "cuStreamSynchronize",
    "cuStreamSynchronize_ptsz",
    "cuEventSynchronize",
)
# Copies into host memory. A synchronous one returns when the copy is done, so after
# the stream's earlier work; an asynchronous one into pageable memory (a tensor's
# ``.item()`` or blocking ``.cpu()``) does the same inside the call, staged through
# pinned memory, before any cuStreamSynchronize: time inside it is GPU wait.
TO_HOST_COPIES = (
    "cuMemcpyDtoH",
    "cuMemcpyDtoH_v2",
    "cuMemcpyDtoH_v2_ptds",
    "cuMemcpyDtoHAsync",
    "cuMemcpyDtoHAsync_v2",
    "cuMemcpyDtoHAsync_v2_ptsz",
    "cuMemcpyAtoH",
    "cuMemcpyAtoH_v2",
    "cuMemcpyAtoH_v2_ptds",
    "cuMemcpyAtoHAsync",
    "cuMemcpyAtoHAsync_v2",
    "cuMemcpyAtoHAsync_v2_ptsz",
)
# Copies whose direction the pointers give (unified addressing): a host-to-device copy where
# the source is host memory as far as the probe can tell (a readable anonymous or file
# mapping of the trainer: the CO-RE build's bpf_find_vma), else a wait for the GPU.
DIRECTED_COPIES = (
    "cuMemcpy",
    "cuMemcpy_ptds",
    "cuMemcpyAsync",
    "cuMemcpyAsync_ptsz",
)
# Copies whose direction a descriptor gives, or between devices: they can be copies to the
# host, so they are probed as waits for the GPU. The copies from host memory (below) are
# not waits: their time is the driver copying pageable memory (what pinned memory avoids).
ANY_WAY_COPIES = (
    "cuMemcpyPeer",
    "cuMemcpyPeer_ptds",
    "cuMemcpy2D",
    "cuMemcpy2D_v2",
    "cuMemcpy2D_v2_ptds",
    "cuMemcpy2DUnaligned",
    "cuMemcpy2DUnaligned_v2",
    "cuMemcpy2DUnaligned_v2_ptds",
    "cuMemcpy2DAsync",
    "cuMemcpy2DAsync_v2",
    "cuMemcpy2DAsync_v2_ptsz",
    "cuMemcpy3D",
    "cuMemcpy3D_v2",
    "cuMemcpy3D_v2_ptds",
    "cuMemcpy3DAsync",
    "cuMemcpy3DAsync_v2",
    "cuMemcpy3DAsync_v2_ptsz",
    "cuMemcpy3DPeer",
    "cuMemcpy3DPeer_ptds",
    "cuMemcpyBatchAsync",
    "cuMemcpyBatchAsync_ptsz",
    "cuMemcpyBatchAsync_v2",
    "cuMemcpyBatchAsync_v2_ptsz",
    "cuMemcpy3DBatchAsync",
    "cuMemcpy3DBatchAsync_ptsz",
    "cuMemcpy3DBatchAsync_v2",
    "cuMemcpy3DBatchAsync_v2_ptsz",
)
# Every driver call that can wait for the GPU (the directed copies when not from the host).
SYNC_FUNCTIONS = SYNC_CALLS + TO_HOST_COPIES + DIRECTED_COPIES + ANY_WAY_COPIES
# Copies from host memory to the device or a device array, in every exported form: a
# pageable source is staged by the driver through pinned memory on a CPU, the call
# returning once staged (asynchronous ones too), so their time is the trainer's copying.
H2D_COPIES = (
    "cuMemcpyHtoD",
    "cuMemcpyHtoD_v2",
    "cuMemcpyHtoD_v2_ptds",
    "cuMemcpyHtoDAsync",
    "cuMemcpyHtoDAsync_v2",
    "cuMemcpyHtoDAsync_v2_ptsz",
    "cuMemcpyHtoA",
    "cuMemcpyHtoA_v2",
    "cuMemcpyHtoA_v2_ptds",
    "cuMemcpyHtoAAsync",
    "cuMemcpyHtoAAsync_v2",
    "cuMemcpyHtoAAsync_v2_ptsz",
)
PROBED_FUNCTIONS = SYNC_FUNCTIONS + H2D_COPIES
ENTER_PROGRAM = "on_sync_enter"
EXIT_PROGRAM = "on_sync_exit"
# Each set of functions and its (entry, return) programs.
PROBES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    (ENTER_PROGRAM, EXIT_PROGRAM, SYNC_CALLS + TO_HOST_COPIES + ANY_WAY_COPIES),
    ("on_h2d_enter", "on_h2d_exit", H2D_COPIES),
    ("on_copy_enter", "on_copy_exit", DIRECTED_COPIES),
)
# The programs the probe loads for them (left unattached until a trainer maps a libcuda).
UPROBE_PROGRAMS = tuple(p for enter, leave, _ in PROBES for p in (enter, leave))
LIBRARY_PREFIX = "libcuda.so"
# A trainer whose libcuda is not mapped yet is looked at again at most this often. The
# sampler looks once a tick (its prepare()); under the default 1 s tick, so a tick that
# ends a few milliseconds early does not put the next look off by a whole tick.
RECHECK_S = 0.9

_SHT_DYNSYM = 11
_STT_FUNC = 2
_PT_LOAD = 1


def function_offsets(path: str, names: Collection[str]) -> dict[str, int]:
    """File offsets of the defined functions ``names`` in the ELF shared library ``path``.

    Reads only the headers and the dynamic symbol table (a driver library is tens
    of MiB). A uprobe is placed at a file offset: the symbol's address minus its
    loadable segment's address plus the segment's offset in the file.
    """
    want = set(names)
    with open(path, "rb") as f:
        ident = f.read(64)
        if ident[:4] != b"\x7fELF" or ident[4] != 2 or ident[5] != 1:
            raise ValueError(f"{path} is not a 64-bit little-endian ELF file")
        phoff, shoff = struct.unpack_from("<QQ", ident, 0x20)
        phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", ident, 0x36)
        f.seek(phoff)
        ph = f.read(phentsize * phnum)
        loads = []
        for i in range(phnum):
            p_type, _, p_offset, p_vaddr, _, p_filesz, _, _ = struct.unpack_from(
                "<IIQQQQQQ", ph, i * phentsize
            )
            if p_type == _PT_LOAD:
                loads.append((p_vaddr, p_filesz, p_offset))
        f.seek(shoff)
        sh = f.read(shentsize * shnum)
        sections = [struct.unpack_from("<IIQQQQIIQQ", sh, i * shentsize) for i in range(shnum)]
        out: dict[str, int] = {}
        for _, sh_type, _, _, sym_off, sym_size, link, _, _, entsize in sections:
            if sh_type != _SHT_DYNSYM or not entsize:
                continue
            str_off, str_size = sections[link][4], sections[link][5]
            f.seek(str_off)
            strtab = f.read(str_size)
            f.seek(sym_off)
            syms = f.read(sym_size)
            for j in range(sym_size // entsize):
                st_name, st_info, _, st_shndx, st_value, _ = struct.unpack_from(
                    "<IBBHQQ", syms, j * entsize
                )
                if st_info & 0xF != _STT_FUNC or st_shndx == 0 or not st_value:
                    continue
                end = strtab.find(b"\0", st_name)
                name = strtab[st_name:end].decode(errors="replace")
                if name not in want or name in out:
                    continue
                for vaddr, filesz, offset in loads:
                    if vaddr <= st_value < vaddr + filesz:
                        out[name] = st_value - vaddr + offset
                        break
        return out


@dataclass(frozen=True, slots=True)
class MappedFile:
    """A mapped library: its path inside the process's mount namespace, device and inode."""

    path: str
    dev: str
    inode: int


def mapped_library(maps_text: str, prefix: str = LIBRARY_PREFIX) -> MappedFile | None:
    """The first mapping of a file whose name starts with ``prefix``, from ``/proc/PID/maps``."""
    for line in maps_text.splitlines():
        parts = line.split(None, 5)
        if len(parts) < 6:
            continue
        path = parts[5]
        if os.path.basename(path).startswith(prefix) and not path.endswith(" (deleted)"):
            try:
                return MappedFile(path, parts[3], int(parts[4]))
            except ValueError:
                continue
    return None


class CudaProbes:
    """Which trainers' libcuda is probed, and the uprobe attachments, one set per library file.

    ``attachments`` is the probe's own dict of attachments (``Handover.attachments``):
    the uprobes live and die with the rest of the probe.
    """

    def __init__(
        self,
        programs: Mapping[str, int],
        attachments: dict[str, Attachment],
        proc_root: str = "/proc",
        multi: bool = False,
    ) -> None:
        self._programs = programs
        self._attachments = attachments
        # The programs were loaded for BPF_TRACE_UPROBE_MULTI: one link per file and direction.
        self.multi = multi
        self.proc_root = proc_root
        # (dev, inode) -> functions attached, or the reason none could be.
        self._files: dict[tuple[str, int], tuple[str, ...] | str] = {}
        self._probed: dict[int, tuple[str, int]] = {}  # pid -> its library file
        self._looked_at: dict[int, float] = {}
        self.last_error: str | None = None

    def probed(self) -> frozenset[int]:
        """Trainers whose libcuda has its synchronizing calls probed."""
        return frozenset(self._probed)

    def update(self, trainers: Iterable[int], now: float | None = None) -> None:
        """Look for libcuda in trainers not yet probed; attach to each new library file."""
        now = time.monotonic() if now is None else now
        live = set(trainers)
        self._probed = {p: k for p, k in self._probed.items() if p in live}
        self._looked_at = {p: t for p, t in self._looked_at.items() if p in live}
        for pid in live - set(self._probed):
            if now - self._looked_at.get(pid, -RECHECK_S) < RECHECK_S:
                continue
            self._looked_at[pid] = now
            try:
                with open(f"{self.proc_root}/{pid}/maps", encoding="utf-8", errors="replace") as f:
                    lib = mapped_library(f.read())
            except OSError:
                continue
            if lib is None:
                continue
            key = (lib.dev, lib.inode)
            if key not in self._files:
                self._files[key] = self._attach(f"{self.proc_root}/{pid}/root{lib.path}", key)
            if isinstance(self._files[key], tuple):
                self._probed[pid] = key

    def _attach(self, path: str, key: tuple[str, int]) -> tuple[str, ...] | str:
        """Uprobe and uretprobe at every probed function of the file; what was attached."""
        if any(p not in self._programs for p in UPROBE_PROGRAMS):
            return self._failed("the probe has no CUDA synchronization programs")
        try:
            offsets = function_offsets(path, PROBED_FUNCTIONS)
        except (OSError, ValueError, struct.error) as exc:
            return self._failed(f"cannot read {path}: {exc}")
        if not offsets:
            return self._failed(f"{path} exports none of the CUDA synchronization calls")
        done: list[str] = []
        tag = f"uprobe:{key[0]}:{key[1]}"
        try:
            for enter, leave, names in PROBES:
                done += self._attach_set(path, tag, enter, leave, offsets, names)
        except BpfError as exc:
            detach(
                [
                    self._attachments.pop(k)
                    for k in list(self._attachments)
                    if k.startswith(f"{tag}:")
                ]
            )
            return self._failed(f"cannot attach uprobes to {path}: {exc}")
        return tuple(sorted(done))

    def _attach_set(
        self,
        path: str,
        tag: str,
        enter: str,
        leave: str,
        offsets: Mapping[str, int],
        names: tuple[str, ...],
    ) -> list[str]:
        """One program pair at these functions of the file; the names attached."""
        # Names that share an address (an alias, an old unversioned entry point) are one
        # function: probed once, or every call would count twice and cost twice.
        by_offset: dict[int, list[str]] = {}
        for name in sorted(n for n in names if n in offsets):
            by_offset.setdefault(offsets[name], []).append(name)
        if not by_offset:
            return []
        enter_fd, leave_fd = self._programs[enter], self._programs[leave]
        if self.multi:
            # The return probes first: a call in flight can then only miss its start.
            where = sorted(by_offset)
            self._attachments[f"{tag}:{enter}:ret"] = attach_uprobe_multi(
                leave_fd, path, where, True
            )
            self._attachments[f"{tag}:{enter}"] = attach_uprobe_multi(enter_fd, path, where, False)
            return [n for ns in by_offset.values() for n in ns]
        done: list[str] = []
        for off, fns in sorted(by_offset.items(), key=lambda kv: kv[1][0]):
            # The return probe first: a call in flight can then only miss its start.
            self._attachments[f"{tag}:{fns[0]}:ret"] = attach_uprobe(leave_fd, path, off, True)
            self._attachments[f"{tag}:{fns[0]}"] = attach_uprobe(enter_fd, path, off, False)
            done.extend(fns)
        return done

    def _failed(self, why: str) -> str:
        self.last_error = why
        return why

    def functions(self) -> dict[tuple[str, int], tuple[str, ...]]:
        """Each probed library file and the functions attached in it."""
        return {k: v for k, v in self._files.items() if isinstance(v, tuple)}
