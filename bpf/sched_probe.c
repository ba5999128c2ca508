// gputop's scheduler probe: per-thread and per-process off-CPU time, split into
// run-queue wait and blocked time, with context-switch counts and a log2
// histogram of off-CPU stretches. Loaded by bcc (gputop/sources/sched_probe.py).
//
// sched:sched_switch does the work; sched:sched_waking classifies who woke a
// blocked thread (its input pipeline, another thread of its process, interrupt
// context, another process); sched:sched_wakeup stamps when it became runnable
// again; sched:sched_process_exit frees entries. The irq, softirq, timer and
// x86 vector entry/exit tracepoints only keep a per-CPU interrupt nesting depth,
// so a wake-up raised in an interrupt is never blamed on the task it interrupted.
//
// Every handler returns 1: for a tracepoint program, 0 tells the kernel to drop
// the event for every perf consumer of that tracepoint (perf record, other
// tools), and the result of several programs is ANDed.
//
// It reads ONLY the tracepoints' own fields (whose layout bcc takes from tracefs
// at compile time) and helper values. It never reads a kernel struct: the
// headers it is compiled against may belong to another kernel version, and a
// struct read at a wrong offset would return garbage without any error.
//
// Everything is aggregated here, in maps; nothing is sent per event. User space
// reads the maps once per tick and takes differences.
//
// Defined by the loader (-D...):
//   MAX_THREADS, MAX_TGIDS  map bounds (see docs/ebpf.md)
//   NOT_RUNNABLE_MASK       prev_state bits meaning "not runnable" (S D T t X Z P I),
//                           read from this kernel's sched_switch print format
//   DEAD_MASK               prev_state bits of an exiting task (X Z)
//   HIST_SLOTS              log2 histogram buckets
//   MAX_PIPELINE            bound of the pipeline/watched maps (user space fills them)
//   MAX_PREEMPT             bound of the (victim, preemptor) map
//   MAX_CPUS                bound of the per-CPU waiter slots (possible CPUs)

#include <uapi/linux/ptrace.h>

// Who woke a blocked thread (index of thread_t.wait_ns). Same order in user space.
#define WAKE_NONE 0    // no sched_waking seen for this stretch
#define WAKE_INPUT 1   // its input pipeline: a worker or pin-memory thread of its trainer
#define WAKE_THREAD 2  // another thread of its own process
#define WAKE_IRQ 3     // interrupt context (timers, device interrupts, IPIs)
#define WAKE_OTHER 4   // another process
#define WAKE_CLASSES 5

// Per thread, keyed by tid. Written only around that thread's own switches,
// which the scheduler serialises, so plain stores are enough.
struct thread_t {
    u64 out_ts;      // when it last left a CPU; 0 while on a CPU or unknown
    u64 wake_ts;     // when it was woken after leaving blocked; 0 if not (yet)
    u64 in_ts;       // when it last got a CPU; 0 while off or unknown
    u64 runq_ns;     // runnable, waiting for a CPU: preempted, or woken and not yet run
    u64 blocked_ns;  // blocked: from a blocking switch-out to its wakeup
    u64 oncpu_ns;
    u64 nivcsw;      // switched out runnable (preempted, yielded)
    u64 nvcsw;       // switched out blocked
    u64 missed;      // switches the probe did not see (detected afterwards)
    u64 longest_ns[2];     // longest stretch ended in epoch longest_ep[i]
    u32 longest_ep[2];
    u32 tgid;
    u32 runnable;    // state at the last switch-out
    // Blocked time by who ended it (WAKE_* below); [WAKE_NONE]: no sched_waking seen.
    u64 wait_ns[WAKE_CLASSES];
    u32 wake_class;  // class of the waking that ended the current blocked stretch
    u32 wait_slot;   // a watched thread waiting for a CPU: its slot in cpu_waiters + 1
    u32 waker_tgid;  // WAKE_OTHER of a watched thread: the waking process
    u32 pad;
};

// Per thread group, keyed by tgid. Threads of a group switch on several CPUs at
// once, so the shared counters use atomic adds.
struct group_t {
    u64 dead_runq_ns;     // totals folded in from threads that have exited
    u64 dead_blocked_ns;
    u64 dead_oncpu_ns;
    u64 dead_nivcsw;
    u64 dead_nvcsw;
    u64 dead_missed;
    u64 longest_ns[2];
    u32 longest_ep[2];
    u64 hist[HIST_SLOTS]; // off-CPU stretches by floor(log2(ns))
};

// Preempted run-queue time of a watched process, per process that took the CPU.
struct preempt_key_t {
    u32 victim;  // tgid
    u32 by;      // tgid (a kernel thread's pid)
};
struct preempt_val_t {
    u64 ns;
    u64 count;
};

BPF_HASH(threads, u32, struct thread_t, MAX_THREADS);
BPF_HASH(groups, u32, struct group_t, MAX_TGIDS);
// Threads between sched_process_exit and their last switch-out, so a switch in
// that window does not create their entries again. LRU: a missed last switch
// can never fill it.
BPF_TABLE("lru_hash", u32, u8, exiting, MAX_THREADS);
// User space's view of the training jobs, refreshed each tick from the roles:
// a DataLoader worker process (tgid), pin-memory thread or thread worker (tid)
// -> the tgid of the trainer it feeds.
BPF_HASH(pipeline, u32, u32, MAX_PIPELINE);
// tgids whose preemptors are recorded (trainers and their workers).
BPF_HASH(watched, u32, u8, MAX_PIPELINE);
BPF_HASH(preempt, struct preempt_key_t, struct preempt_val_t, MAX_PREEMPT);
// Watched threads waiting in each CPU's run queue (preempted there, or woken
// with that CPU as target), so whoever runs on that CPU meanwhile is charged
// for their wait. A few slots per CPU; a victim finding none free is not charged.
#define WAIT_SLOTS 4
struct waiters_t {
    u32 tid[WAIT_SLOTS];
    u32 tgid[WAIT_SLOTS];
    u64 since[WAIT_SLOTS];
};
BPF_ARRAY(cpu_waiters, struct waiters_t, MAX_CPUS);
// Blocked time of a watched thread woken by another process, per waking process.
// User space moves it to "input" when that process turns out to be one of the
// trainer's workers (a worker born after the last pipeline update).
struct woke_key_t {
    u32 tid;     // the wakee
    u32 waker;   // tgid
};
struct woke_val_t {
    u64 ns;
    u32 tgid;    // the wakee's
    u32 pad;
};
BPF_HASH(other_wakers, struct woke_key_t, struct woke_val_t, MAX_PREEMPT);
// Interrupt nesting depth of each CPU (hard irq, softirq, timer callbacks,
// x86 vectors), from their entry/exit tracepoints; indexed by CPU, each on its
// own cache line so CPUs do not bounce one line between them at every interrupt.
struct irq_depth_t {
    u32 depth;
    u32 pad[15];
};
BPF_ARRAY(irq_depth, struct irq_depth_t, MAX_CPUS);
// [0] user space's interval counter, flipped once per read.
BPF_ARRAY(epoch, u32, 1);
// Failed map updates: [0] thread map full, [1] group map full,
// [2] "current" was not sched_switch's prev (should never happen),
// [3] preemptor or waker map full.
BPF_ARRAY(errors, u64, 4);

static __always_inline void count_error(int idx) {
    u64 *e = errors.lookup(&idx);
    if (e)
        __sync_fetch_and_add(e, 1);
}

static __always_inline u32 current_epoch(void) {
    int zero = 0;
    u32 *ep = epoch.lookup(&zero);
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

static __always_inline struct group_t *group_of(u32 tgid) {
    struct group_t *g = groups.lookup(&tgid);
    if (g)
        return g;
    struct group_t zero = {};
    if (groups.insert(&tgid, &zero) != 0) {
        // -EEXIST means another CPU created it first: not an error.
        g = groups.lookup(&tgid);
        if (!g)
            count_error(1);
        return g;
    }
    return groups.lookup(&tgid);
}

// Split the off-CPU stretch [out, end) into run-queue wait and blocked time,
// and the blocked part by who woke it. A blocked stretch turns into run-queue
// wait at its wakeup, as the kernel's own run_delay does.
static __always_inline void account_woke_by(u32 tid, struct thread_t *t, u64 blocked) {
    struct woke_key_t k = {.tid = tid, .waker = t->waker_tgid};
    struct woke_val_t *v = other_wakers.lookup(&k);
    if (!v) {
        struct woke_val_t zero = {.tgid = t->tgid};
        other_wakers.insert(&k, &zero);
        v = other_wakers.lookup(&k);
        if (!v) {
            count_error(3);
            return;
        }
    }
    __sync_fetch_and_add(&v->ns, blocked);
}

static __always_inline void account_offcpu(u32 tid, struct thread_t *t, u64 out, u64 end) {
    if (t->runnable) {
        t->runq_ns += end - out;
        return;
    }
    u64 blocked = end - out;
    if (t->wake_ts > out && t->wake_ts <= end) {
        blocked = t->wake_ts - out;
        t->runq_ns += end - t->wake_ts;
    }
    t->blocked_ns += blocked;
    u32 cls = t->wake_class;
    if (cls >= WAKE_CLASSES)
        cls = WAKE_NONE;
    t->wait_ns[cls] += blocked;
    if (cls == WAKE_OTHER && t->waker_tgid != 0)
        account_woke_by(tid, t, blocked);
}

static __always_inline void charge(u32 victim, u32 by, u64 ns) {
    struct preempt_key_t k = {.victim = victim, .by = by};
    struct preempt_val_t *v = preempt.lookup(&k);
    if (!v) {
        struct preempt_val_t zero = {};
        preempt.insert(&k, &zero);
        v = preempt.lookup(&k);
        if (!v) {
            count_error(3);
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
    struct waiters_t *w = cpu_waiters.lookup(&cpu);
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
    struct waiters_t *w = cpu_waiters.lookup(&cpu);
    if (w && i < WAIT_SLOTS && w->tid[i] == tid)
        w->tid[i] = 0;
}

// `prev` ran on this CPU until now: charge that run to each watched thread that
// waited here meanwhile (the part of the run after it started waiting).
static __always_inline void charge_waiters(u32 prev, u32 prev_tgid, u64 prev_in, u64 now) {
    if (prev_tgid == 0)
        return;
    u32 cpu = bpf_get_smp_processor_id();
    struct waiters_t *w = cpu_waiters.lookup(&cpu);
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
    struct thread_t *t = threads.lookup(&tid);
    if (!t)
        return;
    stop_waiting(t, tid);
    u32 tgid = t->tgid;
    struct group_t *g = groups.lookup(&tgid);
    if (g) {
        __sync_fetch_and_add(&g->dead_runq_ns, t->runq_ns);
        __sync_fetch_and_add(&g->dead_blocked_ns, t->blocked_ns);
        __sync_fetch_and_add(&g->dead_oncpu_ns, t->oncpu_ns);
        __sync_fetch_and_add(&g->dead_nivcsw, t->nivcsw);
        __sync_fetch_and_add(&g->dead_nvcsw, t->nvcsw);
        __sync_fetch_and_add(&g->dead_missed, t->missed);
    }
    threads.delete(&tid);
}

TRACEPOINT_PROBE(sched, sched_switch) {
    u64 now = bpf_ktime_get_ns();
    u32 prev = args->prev_pid;
    u32 next = args->next_pid;
    long state = args->prev_state;
    u32 cur = current_epoch();
    struct thread_t *tn = next != 0 ? threads.lookup(&next) : NULL;

    // The outgoing thread. pid 0 is each CPU's idle task: not a thread to track.
    if (prev != 0) {
        if (state & DEAD_MASK) {
            // Its last switch: nothing after this can end an off-CPU stretch.
            retire_thread(prev);
            exiting.delete(&prev);
        } else {
            u64 id = bpf_get_current_pid_tgid();
            if ((u32)id != prev)
                count_error(2);
            struct thread_t *t = threads.lookup(&prev);
            if (!t && !exiting.lookup(&prev)) {
                struct thread_t zero = {};
                if (threads.insert(&prev, &zero) != 0)
                    count_error(0);
                t = threads.lookup(&prev);
            }
            if (t) {
                // At sched_switch "current" is still prev: its tgid comes from the helper.
                t->tgid = id >> 32;
                if (t->in_ts != 0 && now > t->in_ts) {
                    t->oncpu_ns += now - t->in_ts;
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
                // R (state 0) and R+ (preempted: only the bit above the report mask)
                // are runnable; this is how the kernel picks nivcsw over nvcsw.
                if (state & NOT_RUNNABLE_MASK) {
                    t->runnable = 0;
                    t->nvcsw += 1;
                } else {
                    t->runnable = 1;
                    t->nivcsw += 1;
                    u32 tgid = t->tgid;
                    if (watched.lookup(&tgid))
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
    u32 slot = bpf_log2l(d) - 1;  // bcc's bpf_log2l is floor(log2) + 1
    if (slot >= HIST_SLOTS)
        slot = HIST_SLOTS - 1;
    __sync_fetch_and_add(&g->hist[slot], 1);
    return 1;
}

static __always_inline u32 *irq_depth_slot(void) {
    u32 cpu = bpf_get_smp_processor_id();
    struct irq_depth_t *d = irq_depth.lookup(&cpu);
    return d ? &d->depth : NULL;
}

// Who is waking a blocked, tracked thread. It fires in the waker's context
// (sched_wakeup may fire later on the target CPU, from an IPI), before the
// wakee is queued; the first waking of a blocked stretch decides its class.
TRACEPOINT_PROBE(sched, sched_waking) {
    u32 tid = args->pid;
    struct thread_t *t = threads.lookup(&tid);
    if (!t || t->out_ts == 0 || t->runnable || t->wake_class != WAKE_NONE)
        return 1;
    u32 *depth = irq_depth_slot();
    u64 id = bpf_get_current_pid_tgid();
    u32 waker = id;
    u32 waker_tgid = id >> 32;
    u32 cls;
    if ((depth && *depth > 0) || waker == 0) {
        // In an interrupt "current" is whatever ran when it hit: not the waker.
        // The idle task wakes nobody by itself: an untraced interrupt vector.
        cls = WAKE_IRQ;
    } else {
        u32 *feeds = pipeline.lookup(&waker);
        if (!feeds)
            feeds = pipeline.lookup(&waker_tgid);
        if (feeds && *feeds == t->tgid)
            cls = WAKE_INPUT;
        else if (waker_tgid == t->tgid)
            cls = WAKE_THREAD;
        else {
            cls = WAKE_OTHER;
            u32 wakee_tgid = t->tgid;
            if (watched.lookup(&wakee_tgid))
                t->waker_tgid = waker_tgid;
        }
    }
    t->wake_class = cls;
    return 1;
}

// The end of a blocked stretch: from here on the thread waits for a CPU.
TRACEPOINT_PROBE(sched, sched_wakeup) {
    u32 tid = args->pid;
    struct thread_t *t = threads.lookup(&tid);
    if (t && t->out_ts != 0 && !t->runnable && t->wake_ts == 0) {
        u64 now = bpf_ktime_get_ns();
        t->wake_ts = now;
        u32 tgid = t->tgid;
        if (t->wait_slot == 0 && watched.lookup(&tgid))
            start_waiting(t, tid, args->target_cpu, now);
    }
    return 1;
}

TRACEPOINT_PROBE(sched, sched_process_exit) {
    u32 tid = args->pid;
    u8 one = 1;
    retire_thread(tid);
    exiting.update(&tid, &one);
    if (args->group_dead) {
        // The group's last thread is leaving; its totals are of no further use.
        u32 tgid = bpf_get_current_pid_tgid() >> 32;
        groups.delete(&tgid);
    }
    return 1;
}

// Interrupt nesting. Attached by user space to whichever of these tracepoints
// this kernel has (IRQ_ENTER_EVENTS / IRQ_EXIT_EVENTS in sched_probe.py); an
// exit seen without its entry (the probe attached in between) leaves depth at 0.
int on_irq_entry(void *ctx) {
    u32 *depth = irq_depth_slot();
    if (depth)
        *depth += 1;
    return 1;
}

int on_irq_exit(void *ctx) {
    u32 *depth = irq_depth_slot();
    if (depth && *depth > 0)
        *depth -= 1;
    return 1;
}
