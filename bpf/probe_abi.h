// Generated from gputop/model/probe_abi.py by scripts/build_bpf.py: do not edit.
// What the BPF program and gputop share: constants and the layouts of map values.
#ifndef GPUTOP_PROBE_ABI_H
#define GPUTOP_PROBE_ABI_H

#define WAKE_NONE 0
#define WAKE_INPUT 1
#define WAKE_THREAD 2
#define WAKE_IRQ 3
#define WAKE_OTHER 4
#define WAKE_SYNC 5
#define WAKE_COLLECTIVE 6
#define WAKE_NET 7
#define WAKE_H2D 8
#define WAKE_CLASSES 9
#define PIPE_COLLECTIVE 2147483648
#define HIST_SLOTS 40
#define WAIT_SLOTS 4
#define ACT_RAN 1
#define ACT_EXEC 2
#define ERR_THREAD_MAP_FULL 0
#define ERR_GROUP_MAP_FULL 1
#define ERR_NOT_PREV 2
#define ERR_AUX_MAP_FULL 3
#define ERR_ACTIVITY_FULL 4
#define ERROR_SLOTS 5
#define ARG2_X86_64 13
#define ARG2_AARCH64 1
#define DEFAULT_MAX_THREADS 32768
#define DEFAULT_MAX_TGIDS 8192
#define DEFAULT_MAX_PIPELINE 4096
#define DEFAULT_MAX_PREEMPT 8192
#define DEFAULT_MAX_CPUS 64

struct thread_t {
    u64 out_ts;  // when it last left a CPU; 0 while on a CPU or unknown
    u64 wake_ts;  // when it was woken after leaving blocked; 0 if not (yet)
    u64 in_ts;  // when it last got a CPU; 0 while off or unknown
    u64 runq_ns;  // runnable, waiting for a CPU: preempted, or woken and not yet run
    u64 blocked_ns;  // blocked: from a blocking switch-out to its wakeup
    u64 oncpu_ns;
    u64 nivcsw;  // switched out runnable (preempted, yielded)
    u64 nvcsw;  // switched out blocked
    u64 missed;  // switches the probe did not see (detected afterwards)
    u64 longest_ns[2];  // longest stretch ended in epoch longest_ep[i]
    u32 longest_ep[2];
    u32 tgid;
    u32 runnable;  // state at the last switch-out
    u64 wait_ns[9];  // blocked time by who ended it (WAKE_*); [WAKE_NONE]: no sched_waking seen
    u64 sync_since;  // when the outermost CUDA synchronization call in progress began
    u64 sync_ns;  // time inside CUDA synchronization calls that have returned
    u64 sync_oncpu_ns;  // of which on a CPU (spinning)
    u64 sync_runq_ns;  // of which runnable, waiting for a CPU (blocked: wait_ns[WAKE_SYNC])
    u64 runq_after_input_ns;  // run-queue wait right after a wake-up by the input pipeline
    u64 throttled_ns;  // of runq_ns: held back by its cgroup's CPU limit (CO-RE build only)
    u64 io_wait_ns;  // of blocked_ns: in uninterruptible sleep (D), up to its wakeup
    u64 h2d_since;  // when the outermost host-to-device copy in progress began
    u64 h2d_ns;  // time inside host-to-device copies that have returned
    u64 h2d_oncpu_ns;  // of which on a CPU (the driver staging pageable memory, or spinning)
    u64 h2d_runq_ns;  // of which runnable, waiting for a CPU (blocked: wait_ns[WAKE_H2D])
    u32 wake_class;  // class of the waking that ended the current blocked stretch
    u32 wait_slot;  // a watched thread waiting for a CPU: its slot in cpu_waiters + 1
    u32 waker_tgid;  // WAKE_OTHER of a watched thread: the waking process
    u32 sync_depth;  // CUDA synchronization calls in progress (nested calls count once)
    u32 active_ep;  // epoch + 1 in which its process was last marked in the activity map
    u32 throttled;  // the last runnable switch-out was its cgroup's CPU limit (SWITCH_THROTTLED)
    u32 io_wait;  // the last blocked switch-out was in uninterruptible sleep (SWITCH_IO_WAIT)
    u32 h2d_depth;  // host-to-device copies in progress (nested calls count once)
    u32 copy_h2d;  // the generic copy in progress (cuMemcpy, cuMemcpyAsync) reads host memory
    u32 pad;
};

struct group_t {
    u64 dead_runq_ns;  // totals folded in from threads that have exited
    u64 dead_throttled_ns;
    u64 dead_blocked_ns;
    u64 dead_io_wait_ns;
    u64 dead_oncpu_ns;
    u64 dead_nivcsw;
    u64 dead_nvcsw;
    u64 dead_missed;
    u64 longest_ns[2];
    u32 longest_ep[2];
    u64 hist[40];  // off-CPU stretches by floor(log2(ns))
};

struct preempt_key_t {
    u32 victim;  // tgid
    u32 by;  // tgid (a kernel thread's pid)
};

struct preempt_val_t {
    u64 ns;
    u64 count;
};

struct woke_key_t {
    u32 tid;  // the wakee
    u32 waker;  // tgid
};

struct woke_val_t {
    u64 ns;
    u32 tgid;  // the wakee's
    u32 pad;
};

struct waiters_t {
    u32 tid[4];
    u32 tgid[4];
    u64 since[4];
};

struct irq_depth_t {
    u32 depth;
    u32 net_rx_at;  // the depth at which the NET_RX softirq runs on this CPU; 0: not in it
    u32 ready_tid;  // who last signalled a network socket's data-ready here (sock:sk_data_ready)
    u32 ready_depth;  // at which interrupt depth
    u64 ready_ts;  // and when
    u32 pad[10];
};

struct probe_config {
    u32 max_cpus;  // bound of the per-CPU slots (possible CPUs)
    u32 arg2_reg;  // a function's second argument: its u64 index in pt_regs (ARG2_*; 0: unknown)
};

#endif
