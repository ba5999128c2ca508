"""The join stage, pure: /proc and probe readings (built here) in, rows and the pipeline out.

No /proc, no probe, no clock: each test writes what the sources would have read.
"""

from __future__ import annotations

from gputop.model.frame import HostSample, ThreadSample
from gputop.model.hostjoin import TRAINER_GRACE_S, HostJoin, input_pipeline
from gputop.model.readings import (
    GpuUse,
    PreemptorTime,
    ProbeReading,
    ProcDetail,
    ProcScan,
    ProcStat,
    TaskSched,
)

HOST = HostSample(cpu_pct=10.0, ncpu=2, load1=0.5)
MS = 1_000_000
TRAINER, WORKER, NEW_WORKER, HOG, IDLE = 100, 101, 102, 200, 300


def stat(pid: int, ppid: int = 1, comm: str = "python", cpu: float = 0.0) -> ProcStat:
    return ProcStat(
        pid=pid, ppid=ppid, comm=comm, state="S", start=pid * 10, nthreads=1, kthread=False,
        cpu_pct=cpu,
    )  # fmt: skip


def scan(*procs: ProcStat, dt: float | None = 1.0) -> ProcScan:
    return ProcScan(host=HOST, procs={p.pid: p for p in procs}, dt=dt)


def thread(tid: int, comm: str = "python", off: float = 50.0, runq: float = 5.0) -> ThreadSample:
    return ThreadSample(
        tid=tid, comm=comm, cpu_pct=100 - off, offcpu_pct=off, runq_pct=runq, preempt_per_s=1.0,
        vcsw_per_s=2.0,
    )  # fmt: skip


def detail(*threads: ThreadSample, rates: bool = True) -> ProcDetail:
    return ProcDetail(
        cmdline="python train.py",
        user="alice",
        threads=threads,
        switch_totals={t.tid: (7, 3) for t in threads},
        d_vol=20,
        d_invol=10,
        rates=rates,
        vcsw_total=70,
        preempt_total=30,
        cpus_allowed=(0, 1),
        cpu_quota=None,
    )


def job() -> ProcScan:
    """A trainer with one DataLoader worker, a busy hog and an idle process."""
    return scan(
        stat(TRAINER, cpu=80.0),
        stat(WORKER, ppid=TRAINER, comm="pt_data_worker", cpu=30.0),
        stat(HOG, comm="stress", cpu=99.0),
        stat(IDLE, comm="sleep", cpu=0.0),
    )


def tick(j: HostJoin, s: ProcScan, probe: ProbeReading | None = None, now: float = 1.0):  # type: ignore[no-untyped-def]
    choice = j.choose(s, now, (), lambda pid, start: "python train.py")
    details = {pid: detail(thread(pid)) for pid in choice.detail}
    return choice, j.join(s, choice, details, {}, probe)


def test_roles_and_rows_come_from_the_process_tree_and_cpu() -> None:
    choice, got = tick(HostJoin(top_n=1), job())
    rows = {p.pid: p for p in got.processes}
    assert rows[TRAINER].role == "trainer" and rows[WORKER].role == "dataloader"
    assert rows[WORKER].trainer_pid == TRAINER
    assert HOG in rows, "the top CPU consumer"
    assert IDLE not in rows, "idle processes do not pad the table once rates exist"
    # CPU limits are read for the training job only.
    assert choice.detail == {TRAINER: True, WORKER: True, HOG: False}
    assert rows[HOG].cpus_allowed is None and rows[TRAINER].cpus_allowed == (0, 1)


def test_the_pipeline_for_the_probe_names_workers_and_watched_processes() -> None:
    _, got = tick(HostJoin(), job())
    assert dict(got.pipeline.feeds) == {WORKER: TRAINER}
    assert got.pipeline.watched == {TRAINER, WORKER}
    assert got.pipeline == input_pipeline(got.processes)


def test_a_trainer_keeps_its_role_for_a_grace_period_without_workers() -> None:
    j = HostJoin()
    tick(j, job(), now=1.0)
    alone = scan(stat(TRAINER, cpu=5.0))
    _, got = tick(j, alone, now=1.0 + TRAINER_GRACE_S - 1)
    assert {p.pid: p.role for p in got.processes}[TRAINER] == "trainer"
    _, got = tick(j, alone, now=1.0 + 2 * TRAINER_GRACE_S + 1)
    assert not any(p.pid == TRAINER and p.role == "trainer" for p in got.processes)


def test_a_process_with_a_pin_memory_thread_is_a_trainer_with_a_row_for_the_thread() -> None:
    j = HostJoin()
    s = scan(stat(TRAINER, cpu=50.0))
    choice = j.choose(s, 1.0, (), lambda p, st: "")
    assert choice.detail == {TRAINER: False}
    d = detail(thread(TRAINER), thread(TRAINER + 5, comm="pt_data_pin"))
    got = j.join(s, choice, {TRAINER: d}, {}, None)
    rows = {p.pid: p for p in got.processes}
    assert rows[TRAINER].role == "trainer"
    pin = rows[TRAINER + 5]
    assert (pin.role, pin.trainer_pid, pin.preempt_total, pin.vcsw_total) == (
        "pin_memory",
        TRAINER,
        3,
        7,
    )
    assert got.pipeline.feeds == {TRAINER + 5: TRAINER}
    assert got.pipeline.watched == {TRAINER}, "a thread of its trainer is not watched apart"
    # Next tick its CPU limits are read too: it is a training job now.
    assert j.choose(s, 2.0, (), lambda p, st: "").detail == {TRAINER: True}


def test_the_probe_replaces_procs_estimates_where_it_saw_the_whole_interval() -> None:
    main = TaskSched(runq_ns=300 * MS, blocked_ns=200 * MS, oncpu_ns=500 * MS, wait_irq_ns=150 * MS)
    group = TaskSched(nivcsw=40, nvcsw=10, longest_offcpu_ns=90 * MS, hist=(1,) * 40)
    probe = ProbeReading(dt_ns=1000 * MS, per_tgid={TRAINER: group}, per_tid={TRAINER: main})
    _, got = tick(HostJoin(), job(), probe)
    rows = {p.pid: p for p in got.processes}
    t = rows[TRAINER]
    assert (t.offcpu_pct, t.runq_pct, t.blocked_pct, t.wait_irq_pct) == (50.0, 30.0, 20.0, 15.0)
    assert (t.preempt_per_s, t.vcsw_per_s, t.longest_stall_ms) == (40.0, 10.0, 90.0)
    assert t.sched_source == "bpf"
    w = rows[WORKER]
    assert (w.offcpu_pct, w.runq_pct, w.wait_input_pct, w.sched_source) == (
        50.0,
        5.0,
        None,
        "procfs",
    ), "no probe numbers for it: /proc's estimates, and the split stays null"


def test_without_rates_yet_the_first_tick_has_no_sched_source() -> None:
    j = HostJoin()
    s = scan(stat(TRAINER, cpu=1.0), dt=None)
    choice = j.choose(s, 1.0, (TRAINER,), lambda p, st: "")
    got = j.join(s, choice, {TRAINER: detail(thread(TRAINER), rates=False)}, {}, None)
    (row,) = got.processes
    assert row.sched_source is None and row.preempt_per_s == 0.0
    assert row.role == "trainer", "a GPU holder is a trainer"


def test_a_worker_the_probe_did_not_know_yet_counts_as_input_once() -> None:
    # The probe had last tick's pipeline: NEW_WORKER (born since) woke the trainer
    # as "another process". This tick's roles know it is a worker.
    j = HostJoin()
    s = scan(
        stat(TRAINER, cpu=50.0),
        stat(WORKER, ppid=TRAINER, comm="pt_data_worker", cpu=10.0),
        stat(NEW_WORKER, ppid=TRAINER, comm="pt_data_worker", cpu=10.0),
    )
    main = TaskSched(
        blocked_ns=400 * MS,
        wait_input_ns=100 * MS,
        wait_other_ns=300 * MS,
        other_wakers=((NEW_WORKER, 250 * MS), (HOG, 50 * MS)),
        wait_totals_ns=(1000 * MS, 0, 0, 300 * MS),
    )
    probe = ProbeReading(dt_ns=1000 * MS, per_tgid={}, per_tid={TRAINER: main})
    _, got = tick(j, s, probe)
    t = {p.pid: p for p in got.processes}[TRAINER]
    assert (t.wait_input_pct, t.wait_other_pct) == (35.0, 5.0)
    assert (t.wait_input_total_ms, t.wait_other_total_ms) == (1250.0, 50.0)
    # Next interval: nothing new moved, the running total remembers what was.
    main2 = TaskSched(wait_totals_ns=(1100 * MS, 0, 0, 300 * MS))
    _, got = tick(j, s, ProbeReading(dt_ns=1000 * MS, per_tgid={}, per_tid={TRAINER: main2}))
    t = {p.pid: p for p in got.processes}[TRAINER]
    assert (t.wait_input_total_ms, t.wait_other_total_ms) == (1350.0, 50.0)


def test_preemptors_are_named_and_shared_out() -> None:
    probe = ProbeReading(
        dt_ns=1000 * MS,
        per_tgid={},
        per_tid={},
        preemptors={
            TRAINER: (PreemptorTime(HOG, 300 * MS, 30), PreemptorTime(999, 100 * MS, 1)),
            WORKER: (),
        },
    )
    _, got = tick(HostJoin(), job(), probe)
    rows = {p.pid: p for p in got.processes}
    assert [(p.pid, p.comm, p.share_pct) for p in rows[TRAINER].preemptors or ()] == [
        (HOG, "stress", 75.0),
        (999, "?", 25.0),
    ]
    assert rows[WORKER].preemptors == ()
    assert rows[HOG].preemptors is None, "only watched processes are measured"


def test_a_preemptors_share_is_of_all_the_run_queue_time_not_only_the_charged_part() -> None:
    # The case: the job waited 900 ms for a CPU (3 threads), mostly while its CPU
    # limit held it back and the CPU idled (charged to nobody); a kernel thread ran 1 ms.
    probe = ProbeReading(
        dt_ns=1000 * MS,
        per_tgid={TRAINER: TaskSched(runq_ns=900 * MS), WORKER: TaskSched(runq_ns=0)},
        per_tid={},
        preemptors={TRAINER: (PreemptorTime(77, 1 * MS, 1), PreemptorTime(HOG, 89 * MS, 9))},
    )
    _, got = tick(HostJoin(), job(), probe)
    rows = {p.pid: p for p in got.processes}
    t = rows[TRAINER]
    assert [(p.pid, p.share_pct) for p in t.preemptors or ()] == [(77, 0.1), (HOG, 9.9)]
    assert t.runq_threads_pct == 90.0, "all its threads' wait: the shares' base"
    assert rows[HOG].runq_threads_pct is None, "only where preemptors are kept"


def test_gpu_use_reaches_the_row_and_makes_a_trainer() -> None:
    j = HostJoin()
    s = scan(stat(TRAINER, cpu=1.0))
    use = GpuUse().plus(0, 1000, 40.0).plus(1, 500, None)
    choice = j.choose(s, 1.0, {TRAINER}, lambda p, st: "")
    got = j.join(s, choice, {TRAINER: detail(thread(TRAINER))}, {TRAINER: use}, None)
    (row,) = got.processes
    assert (row.role, row.gpus, row.gpu_mem_mib, row.gpu_sm_pct) == ("trainer", (0, 1), 1500, 40.0)


def test_gpu_sync_is_null_unless_the_processs_cuda_library_was_probed() -> None:
    main = TaskSched(sync_ns=600 * MS, sync_oncpu_ns=100 * MS, sync_runq_ns=50 * MS)
    probe = ProbeReading(dt_ns=1000 * MS, per_tgid={}, per_tid={TRAINER: main, WORKER: main})
    probed = ProbeReading(
        dt_ns=1000 * MS,
        per_tgid={},
        per_tid={TRAINER: main, WORKER: TaskSched()},
        cuda_tgids=frozenset({TRAINER, WORKER}),
    )
    _, got = tick(HostJoin(), job(), probe)
    t = {p.pid: p for p in got.processes}[TRAINER]
    assert t.gpu_sync_pct is None and t.runq_after_input_pct == 0.0, "measured, 0"
    _, got = tick(HostJoin(), job(), probed)
    rows = {p.pid: p for p in got.processes}
    t = rows[TRAINER]
    assert (t.gpu_sync_pct, t.gpu_sync_spin_pct, t.gpu_sync_runq_pct) == (60.0, 10.0, 5.0)
    assert rows[WORKER].gpu_sync_pct == 0.0, "probed and never waited: a measured 0"


def _limited(j: HostJoin, s: ProcScan, probe: ProbeReading | None, runq: dict[int, float]):  # type: ignore[no-untyped-def]
    """One tick of a job whose cgroup (0.25 CPUs) the kernel throttled for 600 ms summed over
    its CPUs in the interval; each process's main thread waited ``runq[pid]`` % for a CPU."""
    from dataclasses import replace

    from gputop.model.readings import CpuLimitReading

    limit = CpuLimitReading(
        cgroup="/sys/fs/cgroup/cpu/job", quota_cpus=0.25, limit_file="cpu.cfs_quota_us",
        periods=10, throttled_periods=9, throttled_ns=600 * MS,
    )  # fmt: skip
    choice = j.choose(s, 1.0, (), lambda pid, start: "python train.py")
    details = {
        pid: replace(detail(thread(pid, runq=runq.get(pid, 0.0))), cpu_quota=0.25, cpu_limit=limit)
        for pid in choice.detail
    }
    return {p.pid: p for p in j.join(s, choice, details, {}, probe).processes}


def test_without_the_probes_measure_the_throttled_share_is_inferred_from_cpu_stat() -> None:
    # 600 ms throttled of the 1000 ms the job's threads waited for a CPU in all (700 + 300):
    # 60 % of each one's run-queue time was its limit.
    rows = _limited(HostJoin(), job(), None, {TRAINER: 70.0, WORKER: 30.0})
    t, w = rows[TRAINER], rows[WORKER]
    assert (t.cpu_throttled_pct, t.cpu_throttled_source) == (42.0, "cpu.stat")
    assert (w.cpu_throttled_pct, w.cpu_throttled_source) == (18.0, "cpu.stat")
    lim = t.cpu_limit
    assert lim is not None
    assert (lim.periods, lim.throttled_periods, lim.throttled_ms) == (10, 9, 600.0)
    assert (lim.file, lim.cgroup) == ("cpu.cfs_quota_us", "/sys/fs/cgroup/cpu/job")
    assert rows[HOG].cpu_throttled_pct is None and rows[HOG].cpu_limit is None


def test_the_probes_measured_throttled_time_is_taken_as_is() -> None:
    main = TaskSched(runq_ns=500 * MS, throttled_ns=450 * MS, oncpu_ns=500 * MS)
    probe = ProbeReading(
        dt_ns=1000 * MS, per_tgid={}, per_tid={TRAINER: main}, throttle_measured=True
    )
    rows = _limited(HostJoin(), job(), probe, {TRAINER: 70.0, WORKER: 30.0})
    t, w = rows[TRAINER], rows[WORKER]
    assert (t.runq_pct, t.cpu_throttled_pct, t.cpu_throttled_source) == (50.0, 45.0, "bpf")
    # The worker's thread had no probe row this interval: inferred from what is left of
    # the cgroup's 600 ms once the trainer's measured 450 ms are taken out: 150 ms of the
    # worker's 300 ms in the run queue, half of its 30 %.
    assert (w.cpu_throttled_pct, w.cpu_throttled_source) == (15.0, "cpu.stat")
    # A probe that cannot tell (bcc's build): inferred for both.
    unmeasured = ProbeReading(dt_ns=1000 * MS, per_tgid={}, per_tid={TRAINER: main})
    rows = _limited(HostJoin(), job(), unmeasured, {TRAINER: 70.0, WORKER: 30.0})
    assert rows[TRAINER].cpu_throttled_source == "cpu.stat"


def test_io_wait_is_the_main_threads_uninterruptible_sleep_and_null_without_the_probe() -> None:
    # The worker's main thread blocked 700 ms, 450 ms of it in D; another of its threads
    # (its tgid total) is not what the row reports.
    main = TaskSched(blocked_ns=700 * MS, io_wait_ns=450 * MS, oncpu_ns=300 * MS)
    probe = ProbeReading(
        dt_ns=1000 * MS,
        per_tgid={WORKER: TaskSched(blocked_ns=1700 * MS, io_wait_ns=1400 * MS)},
        per_tid={WORKER: main, TRAINER: TaskSched(blocked_ns=800 * MS)},
    )
    _, got = tick(HostJoin(), job(), probe)
    rows = {p.pid: p for p in got.processes}
    assert (rows[WORKER].blocked_pct, rows[WORKER].io_wait_pct) == (70.0, 45.0)
    assert rows[TRAINER].io_wait_pct == 0.0, "measured, never in D"
    _, got = tick(HostJoin(), job(), None)
    assert {p.io_wait_pct for p in got.processes} == {None}


def test_network_wait_is_the_main_threads_and_the_trainer_carries_its_workers_split() -> None:
    # The worker's main thread: on a CPU 200 ms, waiting for one 100 ms, blocked 700 ms of
    # which 500 ms until network receive processing woke it and 100 ms in D.
    main = TaskSched(
        oncpu_ns=200 * MS, runq_ns=100 * MS, blocked_ns=700 * MS, wait_net_ns=500 * MS,
        io_wait_ns=100 * MS,
    )  # fmt: skip
    probe = ProbeReading(
        dt_ns=1000 * MS,
        per_tgid={},
        per_tid={WORKER: main, TRAINER: TaskSched(blocked_ns=800 * MS)},
    )
    _, got = tick(HostJoin(), job(), probe)
    rows = {p.pid: p for p in got.processes}
    assert rows[WORKER].net_wait_pct == 50.0 and rows[TRAINER].net_wait_pct == 0.0
    wt = rows[TRAINER].workers_time
    assert wt is not None and wt.workers == 1
    assert (wt.io_wait_pct, wt.net_wait_pct) == (10.0, 50.0)
    assert (wt.cpu_pct, wt.runq_pct, wt.blocked_pct) == (
        100.0 - rows[WORKER].offcpu_pct,  # type: ignore[operator]
        rows[WORKER].runq_pct,
        rows[WORKER].offcpu_pct - rows[WORKER].runq_pct - 60.0,  # type: ignore[operator]
    )
    assert rows[WORKER].workers_time is None, "only a trainer carries its workers' split"
    # Without the probe: the split's measured parts are unknown, never 0.
    _, got = tick(HostJoin(), job(), None)
    procs = {p.pid: p for p in got.processes}
    assert procs[WORKER].net_wait_pct is None
    wt = procs[TRAINER].workers_time
    assert wt is None or (wt.net_wait_pct is None and wt.io_wait_pct is None)


def test_a_job_process_that_waited_on_the_network_has_its_peers_read_the_next_tick() -> None:
    from dataclasses import replace

    from gputop.model.frame import NetPeer

    j = HostJoin()
    waits = ProbeReading(
        dt_ns=1000 * MS,
        per_tgid={},
        per_tid={WORKER: TaskSched(blocked_ns=900 * MS, wait_net_ns=800 * MS)},
    )
    choice, _ = tick(j, job(), waits)
    assert choice.peers == frozenset(), "nothing waited before the first probe reading"
    choice = j.choose(job(), 2.0, (), lambda pid, start: "python train.py")
    assert choice.peers == {WORKER}, "the worker waited on the network: read its sockets"
    peer = NetPeer("10.0.4.12", 9000)
    details = {pid: detail(thread(pid)) for pid in choice.detail}
    details[WORKER] = replace(details[WORKER], peers=(peer,))
    got = j.join(job(), choice, details, {}, None)
    assert {p.pid: p.peers for p in got.processes}[WORKER] == (peer,)
    # A quiet interval (no probe, no network wait): not read again.
    assert j.choose(job(), 3.0, (), lambda pid, start: "python train.py").peers == frozenset()


def test_a_ranks_environment_names_its_job_and_its_launcher_names_it_where_unreadable() -> None:
    from dataclasses import replace

    from gputop.model.readings import RankEnv

    launcher, r0, r1, w0 = 50, 100, 110, 101
    s = scan(
        stat(launcher, comm="torchrun"),
        stat(r0, ppid=launcher, cpu=80.0),
        stat(r1, ppid=launcher, cpu=80.0),
        stat(w0, ppid=r0, comm="pt_data_worker", cpu=30.0),
    )
    j = HostJoin()
    cmdlines = {launcher: "/venv/bin/python /venv/bin/torchrun --nproc_per_node=2 train.py"}
    choice = j.choose(s, 1.0, (r0, r1), lambda pid, start: cmdlines.get(pid, "python train.py"))
    assert choice.launchers == {r0: launcher, r1: launcher}
    env = RankEnv(rank=0, local_rank=0, world_size=2, run_id="none", master="10.0.0.1:29500")
    details = {pid: detail(thread(pid)) for pid in choice.detail}
    details[r0] = replace(details[r0], rank_env=env)  # r1's environment was not readable
    details[w0] = replace(details[w0], rank_env=env)  # a worker inherits its rank's
    rows = {p.pid: p for p in j.join(s, choice, details, {}, None).processes}
    assert (rows[r0].job_id, rows[r0].rank, rows[r0].world_size) == ("10.0.0.1:29500", 0, 2)
    assert (rows[r1].job_id, rows[r1].rank) == (f"launcher-{launcher}", None)
    assert rows[w0].job_id is None and rows[w0].rank is None
