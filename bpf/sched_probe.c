// gputop's scheduler probe: per-thread and per-process off-CPU time, split into
// run-queue wait and blocked time, with context-switch counts and a log2
// histogram of off-CPU stretches. Loaded by gputop/sources/sched_probe.py.
//
// sched:sched_switch does the work; sched:sched_waking classifies who woke a
// blocked thread (its input pipeline, its process's collective-communication
// threads, another thread of its process, interrupt context, another process); sched:sched_wakeup stamps when it became runnable
// again; sched:sched_process_exit frees entries. The irq, softirq, timer and
// x86 vector entry/exit tracepoints only keep a per-CPU interrupt nesting depth,
// so a wake-up raised in an interrupt is never blamed on the task it interrupted;
// the softirq pair also marks network receive processing (NET_RX), and
// sock:sk_data_ready a network socket's data-ready outside it: a wake-up by either
// ended a wait for a remote peer's data.
// Uprobes on the CUDA driver's synchronizing calls (attached by user space to the
// libcuda each watched trainer maps) mark a thread as inside one: all its time
// there, on a CPU (spinning), runnable or blocked, is waiting for the GPU.
//
// Every handler returns 1: for a tracepoint program, 0 tells the kernel to drop
// the event for every perf consumer of that tracepoint (perf record, other
// tools), and the result of several programs is ANDed.
//
// It reads only what each event hands it and helper values: in the CO-RE object
// the raw tracepoints' arguments and a few fields of the tasks they name (pid,
// scheduling state, CPU), relocated by libbpf against the running kernel's BTF;
// under bcc the tracepoint records, laid out as tracefs describes them. So no
// field is read at a wrong offset whatever kernel the program was built against.
//
// Everything is aggregated here, in maps; nothing is sent per event. User space
// reads the maps once per tick and takes differences.
//
// Built two ways from this one file (dialect.h): ahead of time into a CO-RE
// object that libbpf loads where the kernel has BTF, or by bcc at run time
// where it has not. Constants and map value layouts shared with user space are
// in probe_abi.h, generated from gputop/model/probe_abi.py. What differs per
// node is set by the loader: the map bounds (MAX_THREADS, MAX_TGIDS,
// MAX_PIPELINE, MAX_PREEMPT, MAX_CPU_SLOTS), MAX_CPUS (possible CPUs) and, for
// bcc's tracepoint records, NOT_RUNNABLE_MASK (prev_state bits meaning "not
// runnable", read from this kernel's sched_switch format) and DEAD_MASK (those
// of an exiting task).

#include "dialect.h"

// include/linux/interrupt.h: the network receive softirq's number (unchanged since 2.6).
#define NET_RX_SOFTIRQ 3
// include/linux/socket.h: the internet address families.
#define AF_INET 2
#define AF_INET6 10
// A waking this soon after a socket's data-ready, by the same task at the same interrupt
// depth, is that data-ready's (the wake-up follows it within microseconds).
#define NET_READY_NS 50000

// Per thread, keyed by tid.
GT_HASH(threads, u32, struct thread_t, MAX_THREADS);
// Per thread group, keyed by tgid.
GT_HASH(groups, u32, struct group_t, MAX_TGIDS);
// Threads between sched_process_exit and their last switch-out, so a switch in
// that window does not create their entries again. LRU: a missed last switch
// can never fill it.
GT_LRU_HASH(exiting, u32, u8, MAX_THREADS);
// User space's view of the training jobs, refreshed each tick from the roles:
// a DataLoader worker process (tgid), pin-memory thread or thread worker (tid)
// -> the tgid of the trainer it feeds; a collective-communication thread of a
// distributed rank (gloo's, by name) -> its rank's tgid | PIPE_COLLECTIVE.
GT_HASH(pipeline, u32, u32, MAX_PIPELINE);
// tgids whose preemptors are recorded (trainers and their workers).
GT_HASH(watched, u32, u8, MAX_PIPELINE);
// Preempted run-queue time of a watched process, per process that took the CPU.
GT_HASH(preempt, struct preempt_key_t, struct preempt_val_t, MAX_PREEMPT);
// Watched threads waiting in each CPU's run queue (preempted there, or woken
// with that CPU as target), so whoever runs on that CPU meanwhile is charged
// for their wait. A few slots per CPU; a victim finding none free is not charged.
GT_ARRAY(cpu_waiters, struct waiters_t, MAX_CPU_SLOTS);
// Blocked time of a watched thread woken by another process, per waking process.
// User space moves it to "input" when that process turns out to be one of the
// trainer's workers (a worker born after the last pipeline update).
GT_HASH(other_wakers, struct woke_key_t, struct woke_val_t, MAX_PREEMPT);
// Interrupt nesting depth of each CPU (hard irq, softirq, timer callbacks,
// x86 vectors), from their entry/exit tracepoints; indexed by CPU, each on its
// own cache line so CPUs do not bounce one line between them at every interrupt.
GT_ARRAY(irq_depth, struct irq_depth_t, MAX_CPU_SLOTS);
// [0] user space's interval counter, flipped once per read.
GT_ARRAY(epoch, u32, 1);
// Failed map updates, by ERR_* index.
GT_ARRAY(errors, u64, ERROR_SLOTS);
// Processes that ran (a thread left a CPU), exited or exec'd since user space last
// drained the map (ACT_* flags): /proc is read for these only, an idle process costs
// nothing. Marked at most once per thread per interval.
GT_HASH(activity, u32, u8, MAX_TGIDS);
// The task on each CPU since its last switch (its tid; 0: idle): a thread that runs
// without ever switching is active too.
GT_ARRAY(running, u32, MAX_CPU_SLOTS);
// One group_t nobody writes: a new group's first value, kept off the 512-byte stack
// (a zeroed group_t there and a thread_t beside it in on_switch exceed it).
GT_ARRAY(blank_group, struct group_t, 1);

static __always_inline u64 max_u64(u64 a, u64 b) {
    return a > b ? a : b;
}

// floor(log2(v)) for v > 0, without a loop for the verifier to unroll.
static __always_inline u32 floor_log2(u64 v) {
    u32 r = 0;
    if (v >> 32) {
        v >>= 32;
        r += 32;
    }
    if (v >> 16) {
        v >>= 16;
        r += 16;
    }
    if (v >> 8) {
        v >>= 8;
        r += 8;
    }
    if (v >> 4) {
        v >>= 4;
        r += 4;
    }
    if (v >> 2) {
        v >>= 2;
        r += 2;
    }
    if (v >> 1)
        r += 1;
    return r;
}

static __always_inline void count_error(u32 idx) {
    u64 *e = GT_LOOKUP(errors, &idx);
    if (e)
        __sync_fetch_and_add(e, 1);
}

static __always_inline u32 current_epoch(void) {
    u32 zero = 0;
    u32 *ep = GT_LOOKUP(epoch, &zero);
    return ep ? *ep : 0;
}

// Keep the longest stretch per epoch in two slots so user space can read the
// finished interval's slot while the next interval fills the other one.
static __always_inline void note_longest(u64 *ns, u32 *ep, u32 cur, u64 d) {
    u32 i = cur & 1;
    if (ep[i] != cur) {
        ep[i] = cur;
        ns[i] = d;
    } else if (d > ns[i]) {
        ns[i] = d;
    }
}

static __always_inline void mark_activity(u32 tgid, u8 flags) {
    u8 *v = GT_LOOKUP(activity, &tgid);
    if (v) {
        *v |= flags;
        return;
    }
    if (GT_UPDATE(activity, &tgid, &flags) != 0)
        count_error(ERR_ACTIVITY_FULL);
}

static __always_inline struct group_t *group_of(u32 tgid) {
    struct group_t *g = GT_LOOKUP(groups, &tgid);
    if (g)
        return g;
    u32 first = 0;
    struct group_t *zero = GT_LOOKUP(blank_group, &first);
    if (!zero)
        return NULL;
    if (GT_INSERT(groups, &tgid, zero) != 0) {
        // -EEXIST means another CPU created it first: not an error.
        g = GT_LOOKUP(groups, &tgid);
        if (!g)
            count_error(ERR_GROUP_MAP_FULL);
        return g;
    }
    return GT_LOOKUP(groups, &tgid);
}

// Split the off-CPU stretch [out, end) into run-queue wait and blocked time,
// and the blocked part by who woke it. A blocked stretch turns into run-queue
// wait at its wakeup, as the kernel's own run_delay does.
static __always_inline void account_woke_by(u32 tid, struct thread_t *t, u64 blocked) {
    struct woke_key_t k = {.tid = tid, .waker = t->waker_tgid};
    struct woke_val_t *v = GT_LOOKUP(other_wakers, &k);
    if (!v) {
        struct woke_val_t zero = {.tgid = t->tgid};
        GT_INSERT(other_wakers, &k, &zero);
        v = GT_LOOKUP(other_wakers, &k);
        if (!v) {
            count_error(ERR_AUX_MAP_FULL);
            return;
        }
    }
    __sync_fetch_and_add(&v->ns, blocked);
}

// A thread in a CUDA synchronization call cannot have returned from it while off
// its CPU, so the whole stretch was inside the call: it was waiting for the GPU,
// whoever woke it (usually the GPU's interrupt).
static __always_inline void account_offcpu(u32 tid, struct thread_t *t, u64 out, u64 end) {
    if (t->runnable) {
        t->runq_ns += end - out;
        // Held back by its cgroup's CPU limit: run-queue time nobody else took.
        if (t->throttled)
            t->throttled_ns += end - out;
        if (t->sync_depth)
            t->sync_runq_ns += end - out;
        else if (t->h2d_depth)
            t->h2d_runq_ns += end - out;
        return;
    }
    u64 blocked = end - out;
    u64 runq = 0;
    if (t->wake_ts > out && t->wake_ts <= end) {
        blocked = t->wake_ts - out;
        runq = end - t->wake_ts;
        t->runq_ns += runq;
    }
    t->blocked_ns += blocked;
    // Uninterruptible sleep (D) up to its wakeup: mostly waiting for a disk.
    if (t->io_wait)
        t->io_wait_ns += blocked;
    u32 cls = t->wake_class;
    if (cls >= WAKE_CLASSES)
        cls = WAKE_NONE;
    if (t->sync_depth) {
        cls = WAKE_SYNC;
        t->sync_runq_ns += runq;
    } else if (t->h2d_depth) {
        // Blocked inside a host-to-device copy (the driver waiting for a DMA chunk).
        cls = WAKE_H2D;
        t->h2d_runq_ns += runq;
    } else if (cls == WAKE_INPUT) {
        // The batch arrived; waiting for a CPU to take it is still getting the batch.
        t->runq_after_input_ns += runq;
    }
    t->wait_ns[cls] += blocked;
    if (cls == WAKE_OTHER && t->waker_tgid != 0)
        account_woke_by(tid, t, blocked);
}

static __always_inline void charge(u32 victim, u32 by, u64 ns) {
    struct preempt_key_t k = {.victim = victim, .by = by};
    struct preempt_val_t *v = GT_LOOKUP(preempt, &k);
    if (!v) {
        struct preempt_val_t zero = {};
        GT_INSERT(preempt, &k, &zero);
        v = GT_LOOKUP(preempt, &k);
        if (!v) {
            count_error(ERR_AUX_MAP_FULL);
            return;
        }
    }
    __sync_fetch_and_add(&v->ns, ns);
    __sync_fetch_and_add(&v->count, 1);
}

// A watched thread starts waiting for a CPU on `cpu`: take a free slot there.
static __always_inline void start_waiting(struct thread_t *t, u32 tid, u32 cpu, u64 now) {
    if (cpu >= MAX_CPUS)
        return;
    struct waiters_t *w = GT_LOOKUP(cpu_waiters, &cpu);
    if (!w)
        return;
#pragma unroll
    for (int i = 0; i < WAIT_SLOTS; i++) {
        if (w->tid[i] == 0) {
            w->tid[i] = tid;
            w->tgid[i] = t->tgid;
            w->since[i] = now;
            t->wait_slot = cpu * WAIT_SLOTS + i + 1;
            return;
        }
    }
}

// It got a CPU (any CPU): free its slot.
static __always_inline void stop_waiting(struct thread_t *t, u32 tid) {
    u32 slot = t->wait_slot;
    if (slot == 0)
        return;
    t->wait_slot = 0;
    u32 cpu = (slot - 1) / WAIT_SLOTS;
    u32 i = (slot - 1) % WAIT_SLOTS;
    struct waiters_t *w = GT_LOOKUP(cpu_waiters, &cpu);
    if (w && i < WAIT_SLOTS && w->tid[i] == tid)
        w->tid[i] = 0;
}

// `prev` ran on this CPU until now: charge that run to each watched thread that
// waited here meanwhile (the part of the run after it started waiting).
static __always_inline void charge_waiters(u32 prev, u32 prev_tgid, u64 prev_in, u64 now) {
    if (prev_tgid == 0)
        return;
    u32 cpu = bpf_get_smp_processor_id();
    struct waiters_t *w = GT_LOOKUP(cpu_waiters, &cpu);
    if (!w)
        return;
#pragma unroll
    for (int i = 0; i < WAIT_SLOTS; i++) {
        u32 tid = w->tid[i];
        if (tid == 0 || tid == prev)
            continue;
        u64 from = w->since[i] > prev_in ? w->since[i] : prev_in;
        if (now > from)
            charge(w->tgid[i], prev_tgid, now - from);
    }
}

// A thread is gone: keep its totals in its group, then free its entry.
static __always_inline void retire_thread(u32 tid) {
    struct thread_t *t = GT_LOOKUP(threads, &tid);
    if (!t)
        return;
    stop_waiting(t, tid);
    u32 tgid = t->tgid;
    struct group_t *g = GT_LOOKUP(groups, &tgid);
    if (g) {
        __sync_fetch_and_add(&g->dead_runq_ns, t->runq_ns);
        __sync_fetch_and_add(&g->dead_throttled_ns, t->throttled_ns);
        __sync_fetch_and_add(&g->dead_blocked_ns, t->blocked_ns);
        __sync_fetch_and_add(&g->dead_io_wait_ns, t->io_wait_ns);
        __sync_fetch_and_add(&g->dead_oncpu_ns, t->oncpu_ns);
        __sync_fetch_and_add(&g->dead_nivcsw, t->nivcsw);
        __sync_fetch_and_add(&g->dead_nvcsw, t->nvcsw);
        __sync_fetch_and_add(&g->dead_missed, t->missed);
    }
    GT_DELETE(threads, &tid);
}

// A context switch on this CPU from `prev` to `next` (0: the idle task); `how`
// the outgoing thread left: still runnable (preempted or yielding), throttled by its
// cgroup's CPU limit, blocked in uninterruptible sleep (I/O wait), otherwise blocked,
// or dead.
static __always_inline int on_switch(u32 prev, u32 next, u32 how) {
    u64 now = bpf_ktime_get_ns();
    u32 cur = current_epoch();
    struct thread_t *tn = next != 0 ? GT_LOOKUP(threads, &next) : NULL;
    u32 cpu_id = bpf_get_smp_processor_id();
    u32 *on_cpu = GT_LOOKUP(running, &cpu_id);
    if (on_cpu)
        *on_cpu = next;

    // The outgoing thread. pid 0 is each CPU's idle task: not a thread to track.
    if (prev != 0) {
        if (how == SWITCH_DEAD) {
            // Its last switch: nothing after this can end an off-CPU stretch.
            mark_activity(bpf_get_current_pid_tgid() >> 32, ACT_RAN);
            retire_thread(prev);
            GT_DELETE(exiting, &prev);
        } else {
            u64 id = bpf_get_current_pid_tgid();
            if ((u32)id != prev)
                count_error(ERR_NOT_PREV);
            struct thread_t *t = GT_LOOKUP(threads, &prev);
            if (!t && !GT_LOOKUP(exiting, &prev)) {
                struct thread_t zero = {};
                if (GT_INSERT(threads, &prev, &zero) != 0)
                    count_error(ERR_THREAD_MAP_FULL);
                t = GT_LOOKUP(threads, &prev);
            }
            if (!t)
                mark_activity(id >> 32, ACT_RAN);
            if (t) {
                // At sched_switch "current" is still prev: its tgid comes from the helper.
                t->tgid = id >> 32;
                if (t->active_ep != cur + 1) {
                    t->active_ep = cur + 1;
                    mark_activity(t->tgid, ACT_RAN);
                }
                if (t->in_ts != 0 && now > t->in_ts) {
                    t->oncpu_ns += now - t->in_ts;
                    if (t->sync_depth)
                        t->sync_oncpu_ns += now - max_u64(t->in_ts, t->sync_since);
                    else if (t->h2d_depth)
                        t->h2d_oncpu_ns += now - max_u64(t->in_ts, t->h2d_since);
                } else if (t->out_ts != 0) {
                    // Its switch-in never reached us (about 1% of switches do
                    // not; docs/ebpf.md). A woken thread was blocked until its
                    // wakeup; the rest of the stretch is unknown.
                    t->missed += 1;
                    if (!t->runnable && t->wake_ts > t->out_ts && t->wake_ts <= now)
                        account_offcpu(prev, t, t->out_ts, t->wake_ts);
                }
                charge_waiters(prev, t->tgid, t->in_ts, now);
                t->in_ts = 0;
                t->wake_ts = 0;
                t->wake_class = WAKE_NONE;
                t->waker_tgid = 0;
                t->out_ts = now;
                stop_waiting(t, prev);  // it ran, so its switch-in was missed
                // Runnable (preempted, or yielding) is how the kernel picks nivcsw
                // over nvcsw.
                // A throttled thread waits for its cgroup's next period, not for
                // whoever runs here next: nobody is charged for that wait.
                t->throttled = how == SWITCH_THROTTLED;
                t->io_wait = how == SWITCH_IO_WAIT;
                if (how == SWITCH_BLOCKED || how == SWITCH_IO_WAIT) {
                    t->runnable = 0;
                    t->nvcsw += 1;
                } else {
                    t->runnable = 1;
                    t->nivcsw += 1;
                    u32 tgid = t->tgid;
                    if (how == SWITCH_RUNNABLE && GT_LOOKUP(watched, &tgid))
                        start_waiting(t, prev, bpf_get_smp_processor_id(), now);
                }
            }
        }
    }

    // The incoming thread: end its off-CPU stretch, if we saw it begin.
    if (next == 0)
        return 1;
    struct thread_t *t = tn;
    if (!t)
        return 1;
    u64 out = t->out_ts;
    if (out == 0 && t->in_ts != 0)
        t->missed += 1;  // its switch-out was not delivered: that stretch is lost
    t->in_ts = now;
    stop_waiting(t, next);
    if (out == 0 || now <= out)
        return 1;
    u64 d = now - out;
    account_offcpu(next, t, out, now);
    t->out_ts = 0;
    t->wake_ts = 0;
    t->wake_class = WAKE_NONE;
    t->waker_tgid = 0;
    note_longest(t->longest_ns, t->longest_ep, cur, d);

    struct group_t *g = group_of(t->tgid);
    if (!g)
        return 1;
    note_longest(g->longest_ns, g->longest_ep, cur, d);
    u32 slot = floor_log2(d);
    if (slot >= HIST_SLOTS)
        slot = HIST_SLOTS - 1;
    __sync_fetch_and_add(&g->hist[slot], 1);
    return 1;
}

static __always_inline struct irq_depth_t *irq_ctx(void) {
    u32 cpu = bpf_get_smp_processor_id();
    return GT_LOOKUP(irq_depth, &cpu);
}

// Whether `waker` (at interrupt depth `depth`) wakes from network receive processing:
// inside the NET_RX softirq at its own depth (a hard interrupt nested in it is not), or
// right after it signalled a network socket's data-ready on this CPU at this depth (the
// receive path outside the softirq: threaded NAPI, busy polling, a socket's backlog run
// by the thread that held its lock).
static __always_inline int net_receive(struct irq_depth_t *d, u32 waker, u32 depth) {
    if (!d)
        return 0;
    if (d->net_rx_at != 0 && d->net_rx_at == depth)
        return 1;
    if (d->ready_ts == 0 || d->ready_tid != waker || d->ready_depth != depth)
        return 0;
    return bpf_ktime_get_ns() - d->ready_ts <= NET_READY_NS;
}

// Who is waking a blocked, tracked thread. It fires in the waker's context
// (sched_wakeup may fire later on the target CPU, from an IPI), before the
// wakee is queued; the first waking of a blocked stretch decides its class.
static __always_inline int on_waking(u32 tid) {
    struct thread_t *t = GT_LOOKUP(threads, &tid);
    if (!t || t->out_ts == 0 || t->runnable || t->wake_class != WAKE_NONE)
        return 1;
    struct irq_depth_t *d = irq_ctx();
    u32 depth = d ? d->depth : 0;
    u64 id = bpf_get_current_pid_tgid();
    u32 waker = id;
    u32 waker_tgid = id >> 32;
    u32 cls;
    if (depth > 0 || waker == 0) {
        // In an interrupt "current" is whatever ran when it hit: not the waker.
        // The idle task wakes nobody by itself: an untraced interrupt vector.
        // Network receive processing runs as a softirq: data for a socket it waits on.
        cls = net_receive(d, waker, depth) ? WAKE_NET : WAKE_IRQ;
    } else {
        u32 *feeds = GT_LOOKUP(pipeline, &waker);
        if (!feeds)
            feeds = GT_LOOKUP(pipeline, &waker_tgid);
        if (feeds && *feeds == t->tgid)
            cls = WAKE_INPUT;
        else if (feeds && *feeds == (t->tgid | PIPE_COLLECTIVE))
            cls = WAKE_COLLECTIVE;
        else if (net_receive(d, waker, 0))
            cls = WAKE_NET;
        else if (waker_tgid == t->tgid)
            cls = WAKE_THREAD;
        else {
            cls = WAKE_OTHER;
            u32 wakee_tgid = t->tgid;
            if (GT_LOOKUP(watched, &wakee_tgid))
                t->waker_tgid = waker_tgid;
        }
    }
    t->wake_class = cls;
    return 1;
}

// The end of a blocked stretch: from here on the thread waits for a CPU.
static __always_inline int on_wakeup(u32 tid, u32 target_cpu) {
    struct thread_t *t = GT_LOOKUP(threads, &tid);
    if (t && t->out_ts != 0 && !t->runnable && t->wake_ts == 0) {
        u64 now = bpf_ktime_get_ns();
        t->wake_ts = now;
        u32 tgid = t->tgid;
        if (t->wait_slot == 0 && GT_LOOKUP(watched, &tgid))
            start_waiting(t, tid, target_cpu, now);
    }
    return 1;
}

// A thread leaves (do_exit, in its own context); `group_dead`: its process's last.
static __always_inline int on_task_exit(u32 tid, int group_dead) {
    u8 one = 1;
    retire_thread(tid);
    GT_UPDATE(exiting, &tid, &one);
    if (group_dead) {
        // The group's last thread is leaving; its totals are of no further use.
        u32 tgid = bpf_get_current_pid_tgid() >> 32;
        GT_DELETE(groups, &tgid);
    }
    return 1;
}

// exec replaces a process's name and command line: user space reads them again.
static __always_inline int on_exec(u32 tgid) {
    mark_activity(tgid, ACT_EXEC | ACT_RAN);
    return 1;
}

// The scheduler events, as each build receives them (dialect.h): raw tracepoints
// with the kernel's own arguments in the CO-RE object, tracepoint records in bcc's.
GT_SCHED_EVENT(sched_switch) {
    return on_switch(GT_SWITCH_PREV(args), GT_SWITCH_NEXT(args), GT_SWITCH_HOW(args));
}

GT_SCHED_EVENT(sched_waking) {
    return on_waking(GT_WAKEE(args));
}

GT_SCHED_EVENT(sched_wakeup) {
    return on_wakeup(GT_WAKEE(args), GT_WAKEE_CPU(args));
}

GT_SCHED_EVENT(sched_process_exit) {
    u32 tid;
    int group_dead;
    GT_EXIT_EVENT(args, tid, group_dead);
    return on_task_exit(tid, group_dead);
}

GT_SCHED_EVENT(sched_process_exec) {
    return on_exec(GT_EXEC_TGID(args));
}

// Interrupt nesting. User space attaches each event's pair to whichever of these
// tracepoints this kernel has (probe_plan.IRQ_EVENT_PAIRS); an exit seen without its
// entry (the probe attached in between) leaves depth at 0.
//
// One program per tracepoint, never one shared by all: a raw tracepoint's program
// does not run while the same program already runs on that CPU (the kernel's
// per-program recursion guard). With one shared exit program, a hard interrupt
// arriving while it ran for a softirq's exit would count its entry and lose its
// exit, leaving the CPU "in an interrupt" for good and every wake-up there blamed
// on interrupts. Hard interrupts do not nest, nor do softirqs, so an event's own
// program is never interrupted by the same event.
static __always_inline int irq_enter(void) {
    struct irq_depth_t *d = irq_ctx();
    if (d)
        d->depth += 1;
    return 1;
}

static __always_inline int irq_exit(void) {
    struct irq_depth_t *d = irq_ctx();
    if (d && d->depth > 0)
        d->depth -= 1;
    return 1;
}

#define GT_IRQ_PAIR(event)                \
    GT_PROGRAM(on_##event##_entry) {      \
        return irq_enter();               \
    }                                     \
    GT_PROGRAM(on_##event##_exit) {       \
        return irq_exit();                \
    }

// Softirqs also say which one runs: NET_RX (network receive processing) is marked at
// the depth it runs at. Softirqs do not nest, so the next softirq exit at that depth
// is its own.
GT_PROGRAM(on_softirq_entry) {
    struct irq_depth_t *d = irq_ctx();
    if (!d)
        return 1;
    d->depth += 1;
    if (GT_SOFTIRQ_VEC(ctx) == NET_RX_SOFTIRQ)
        d->net_rx_at = d->depth;
    return 1;
}

GT_PROGRAM(on_softirq_exit) {
    struct irq_depth_t *d = irq_ctx();
    if (!d)
        return 1;
    if (d->net_rx_at == d->depth)
        d->net_rx_at = 0;
    if (d->depth > 0)
        d->depth -= 1;
    return 1;
}

// sock:sk_data_ready (Linux 6.6+; attached where the kernel has it): data has arrived
// on a socket and its waiters are about to be woken, in this context. Only the
// network's families: a Unix socket or netlink is local, not a remote read.
GT_PROGRAM(on_sk_data_ready) {
    u32 family = GT_SK_FAMILY(ctx);
    if (family != AF_INET && family != AF_INET6)
        return 1;
    struct irq_depth_t *d = irq_ctx();
    if (!d)
        return 1;
    d->ready_tid = (u32)bpf_get_current_pid_tgid();
    d->ready_depth = d->depth;
    d->ready_ts = bpf_ktime_get_ns();
    return 1;
}

GT_IRQ_PAIR(irq_handler)
GT_IRQ_PAIR(hrtimer_expire)
GT_IRQ_PAIR(timer_expire)
GT_IRQ_PAIR(local_timer)
GT_IRQ_PAIR(call_function)
GT_IRQ_PAIR(call_function_single)
GT_IRQ_PAIR(reschedule)
GT_IRQ_PAIR(x86_platform_ipi)
GT_IRQ_PAIR(thermal_apic)
GT_IRQ_PAIR(error_apic)
GT_IRQ_PAIR(spurious_apic)
GT_IRQ_PAIR(ipi)

// CUDA synchronization calls (cuStreamSynchronize, cuEventSynchronize,
// cuCtxSynchronize, their per-thread-stream variants, synchronous copies).
// Attached by user space as uprobes and uretprobes on the libcuda each watched
// trainer maps, once per library file; only watched processes are counted.
// Nested calls (a copy that synchronizes inside) count once, from the outermost.

// The calling thread's entry, made where a watched process has none yet; NULL where the
// process is not watched.
static __always_inline struct thread_t *watched_thread(void) {
    u64 id = bpf_get_current_pid_tgid();
    u32 tgid = id >> 32;
    if (!GT_LOOKUP(watched, &tgid))
        return NULL;
    u32 tid = id;
    struct thread_t *t = GT_LOOKUP(threads, &tid);
    if (!t) {
        struct thread_t zero = {.tgid = tgid};
        if (GT_INSERT(threads, &tid, &zero) != 0)
            count_error(ERR_THREAD_MAP_FULL);
        t = GT_LOOKUP(threads, &tid);
    }
    return t;
}

static __always_inline struct thread_t *current_thread(void) {
    u32 tid = bpf_get_current_pid_tgid();
    return GT_LOOKUP(threads, &tid);
}

static __always_inline void sync_begin(struct thread_t *t) {
    if (t->sync_depth == 0)
        t->sync_since = bpf_ktime_get_ns();
    t->sync_depth += 1;
}

// Zero depth: a call that began before the probe was attached (never counted).
static __always_inline void sync_end(struct thread_t *t) {
    if (t->sync_depth == 0)
        return;
    t->sync_depth -= 1;
    if (t->sync_depth != 0)
        return;
    u64 now = bpf_ktime_get_ns();
    if (now > t->sync_since)
        t->sync_ns += now - t->sync_since;
    // The on-CPU stretch in progress, from the later of its start and the call's.
    u64 from = max_u64(t->in_ts, t->sync_since);
    if (t->in_ts && now > from)
        t->sync_oncpu_ns += now - from;
    t->sync_since = 0;
}

// Host-to-device copies: the same accounting, in fields of their own. Time inside one is
// the trainer's copying (pageable memory staged by the driver on a CPU), not a wait for
// the GPU; a synchronization inside one is the GPU's (sync_depth comes first).
static __always_inline void h2d_begin(struct thread_t *t) {
    if (t->h2d_depth == 0)
        t->h2d_since = bpf_ktime_get_ns();
    t->h2d_depth += 1;
}

static __always_inline void h2d_end(struct thread_t *t) {
    if (t->h2d_depth == 0)
        return;
    t->h2d_depth -= 1;
    if (t->h2d_depth != 0)
        return;
    u64 now = bpf_ktime_get_ns();
    if (now > t->h2d_since)
        t->h2d_ns += now - t->h2d_since;
    u64 from = max_u64(t->in_ts, t->h2d_since);
    if (t->in_ts && now > from && !t->sync_depth)
        t->h2d_oncpu_ns += now - from;
    t->h2d_since = 0;
}

GT_UPROBE(on_sync_enter) {
    struct thread_t *t = watched_thread();
    if (t)
        sync_begin(t);
    return 0;
}

GT_URETPROBE(on_sync_exit) {
    struct thread_t *t = current_thread();
    if (t)
        sync_end(t);
    return 0;
}

// The driver's host-to-device copies (cuMemcpyHtoD*, cuMemcpyHtoA*, every form).
GT_UPROBE(on_h2d_enter) {
    struct thread_t *t = watched_thread();
    if (t)
        h2d_begin(t);
    return 0;
}

GT_URETPROBE(on_h2d_exit) {
    struct thread_t *t = current_thread();
    if (t)
        h2d_end(t);
    return 0;
}

// Copies whose direction the pointers give (cuMemcpy, cuMemcpyAsync and their per-thread
// forms): a host-to-device copy where the source is host memory as far as the probe can
// tell (GT_COPY_FROM_HOST: dialect.h), else a wait for the GPU as the other copies. They
// never nest in one another, so one flag says which the call in progress is.
GT_UPROBE(on_copy_enter) {
    struct thread_t *t = watched_thread();
    if (!t)
        return 0;
    if (GT_COPY_FROM_HOST(ctx)) {
        t->copy_h2d = 1;
        h2d_begin(t);
    } else {
        t->copy_h2d = 0;
        sync_begin(t);
    }
    return 0;
}

GT_URETPROBE(on_copy_exit) {
    struct thread_t *t = current_thread();
    if (!t)
        return 0;
    if (t->copy_h2d) {
        t->copy_h2d = 0;
        h2d_end(t);
    } else {
        sync_end(t);
    }
    return 0;
}
