"""Build fake /proc trees under tmp_path for edge cases the real kernel won't produce on demand."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class FakeThread:
    tid: int
    name: str = "python3"
    vol: int = 0
    invol: int = 0
    oncpu_ns: int = 0
    run_delay_ns: int = 0


@dataclass
class FakeProc:
    pid: int
    comm: str = "python3"
    ppid: int = 1
    ticks: int = 0
    start: int = 1000
    flags: int = 0
    cmdline: str = "python3 train.py"
    threads: list[FakeThread] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.threads:
            self.threads = [FakeThread(self.pid, self.comm)]


def stat_line(p: FakeProc) -> str:
    # Fields 3..22 of /proc/PID/stat; utime=ticks, stime=0.
    rest = ["S", str(p.ppid), "1", "1", "0", "-1", str(p.flags), "0", "0", "0", "0"]
    rest += [str(p.ticks), "0", "0", "0", "20", "0", str(len(p.threads)), "0", str(p.start)]
    rest += ["0"] * 30
    return f"{p.pid} ({p.comm}) " + " ".join(rest) + "\n"


def status_text(t: FakeThread) -> str:
    return (
        f"Name:\t{t.name}\nState:\tS (sleeping)\nTgid:\t{t.tid}\n"
        f"voluntary_ctxt_switches:\t{t.vol}\nnonvoluntary_ctxt_switches:\t{t.invol}\n"
    )


class FakeProcTree:
    """A directory shaped like /proc with just the files gputop reads."""

    def __init__(self, root: Path, ncpu: int = 2) -> None:
        self.root = root
        self.ncpu = ncpu
        root.mkdir(parents=True, exist_ok=True)
        self.set_cpu(0, 0)
        (root / "loadavg").write_text("1.50 1.00 0.50 3/200 999\n")
        (root / "meminfo").write_text("MemTotal: 2048000 kB\nMemAvailable: 1024000 kB\n")
        (root / "self").mkdir(exist_ok=True)
        (root / "self" / "schedstat").write_text("0 0 0\n")

    def set_cpu(self, busy: int, idle: int) -> None:
        lines = [f"cpu  {busy * self.ncpu} 0 0 {idle * self.ncpu} 0 0 0 0 0 0"]
        lines += [f"cpu{i} {busy} 0 0 {idle} 0 0 0 0 0 0" for i in range(self.ncpu)]
        lines.append("procs_running 3")
        (self.root / "stat").write_text("\n".join(lines) + "\n")

    def write(self, p: FakeProc) -> None:
        d = self.root / str(p.pid)
        (d / "task").mkdir(parents=True, exist_ok=True)
        (d / "stat").write_text(stat_line(p))
        (d / "cmdline").write_bytes(
            p.cmdline.replace(" ", "\0").encode() + (b"\0" if p.cmdline else b"")
        )
        for old in (d / "task").iterdir():
            if int(old.name) not in {t.tid for t in p.threads}:
                for f in old.iterdir():
                    f.unlink()
                old.rmdir()
        for t in p.threads:
            td = d / "task" / str(t.tid)
            td.mkdir(exist_ok=True)
            (td / "status").write_text(status_text(t))
            (td / "schedstat").write_text(f"{t.oncpu_ns} {t.run_delay_ns} 1\n")

    def remove(self, pid: int) -> None:
        import shutil

        shutil.rmtree(self.root / str(pid))
