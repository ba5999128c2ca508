// The two ways sched_probe.c is built, behind one set of macros.
//
// GPUTOP_CORE: compiled ahead of time by clang (scripts/build_bpf.py) into a
// CO-RE object that libbpf loads on any kernel with BTF. Types come from
// vmlinux.h (generated with bpftool, trimmed to what the probe reads) and the
// few task_struct fields below, every struct marked preserve_access_index so
// libbpf relocates its fields against the running kernel. The scheduler events
// are BTF-typed raw tracepoints (tp_btf): the kernel's own arguments, attached
// as BPF links. Unlike a perf-event tracepoint, closing one never waits for an
// RCU grace period (the probe is freed after one), so gputop's exit does not
// wait on the kernel, and an event costs no trace record. Map bounds are
// resized and probe_config is set by the loader before the program loads. No
// other header: the object is built from this directory and clang alone.
//
// Otherwise: bcc, at run time, on a kernel without BTF (the fallback):
// perf-event tracepoints, whose record layouts come from tracefs; map bounds
// and probe_config come as -D flags.
#ifndef GPUTOP_DIALECT_H
#define GPUTOP_DIALECT_H

// How sched_switch's outgoing thread left its CPU (each build works it out below).
#define SWITCH_RUNNABLE 0
#define SWITCH_BLOCKED 1
#define SWITCH_DEAD 2
// Runnable, but held back by its cgroup's CPU limit (CFS bandwidth throttling): only the
// CO-RE build can tell (it reads the task's throttle state); bcc's never says so.
#define SWITCH_THROTTLED 3
// Blocked in uninterruptible sleep (D: disk I/O, a page fault on a mapped file), which
// the kernel counts as I/O wait; an idle kernel thread (I: TASK_IDLE) is not.
#define SWITCH_IO_WAIT 4

#ifdef GPUTOP_CORE

#include "vmlinux.h"
#include "probe_abi.h"

#define NULL ((void *)0)
#define SEC(name) __attribute__((section(name), used))
#define __always_inline inline __attribute__((always_inline))

// Helper ids from the kernel's UAPI (enum bpf_func_id); they never change.
static void *(*bpf_map_lookup_elem)(void *map, const void *key) = (void *)1;
static long (*bpf_map_update_elem)(void *map, const void *key, const void *value,
                                   u64 flags) = (void *)2;
static long (*bpf_map_delete_elem)(void *map, const void *key) = (void *)3;
static u64 (*bpf_ktime_get_ns)(void) = (void *)5;
static u32 (*bpf_get_smp_processor_id)(void) = (void *)8;
static u64 (*bpf_get_current_pid_tgid)(void) = (void *)14;
static long (*bpf_probe_read_kernel)(void *dst, u32 size, const void *unsafe_ptr) = (void *)113;
static void *(*bpf_get_current_task_btf)(void) = (void *)158;
static long (*bpf_find_vma)(void *task, u64 addr, void *callback_fn, void *callback_ctx,
                            u64 flags) = (void *)180;

#define GT_ANY 0      // BPF_ANY
#define GT_NOEXIST 1  // BPF_NOEXIST

// BTF-described maps (libbpf's .maps section convention).
#define GT_MAP(name, kind, K, V, N)           \
    struct {                                   \
        int (*type)[kind];                     \
        int (*max_entries)[N];                 \
        typeof(K) *key;                        \
        typeof(V) *value;                      \
    } name SEC(".maps")
#define GT_HASH(name, K, V, N) GT_MAP(name, 1, K, V, N)      // BPF_MAP_TYPE_HASH
#define GT_ARRAY(name, V, N) GT_MAP(name, 2, u32, V, N)      // BPF_MAP_TYPE_ARRAY
#define GT_LRU_HASH(name, K, V, N) GT_MAP(name, 9, K, V, N)  // BPF_MAP_TYPE_LRU_HASH

#define GT_LOOKUP(map, key) bpf_map_lookup_elem(&map, key)
#define GT_INSERT(map, key, val) bpf_map_update_elem(&map, key, val, GT_NOEXIST)
#define GT_UPDATE(map, key, val) bpf_map_update_elem(&map, key, val, GT_ANY)
#define GT_DELETE(map, key) bpf_map_delete_elem(&map, key)

// The task_struct fields the probe reads, by name: libbpf finds each one's
// offset in the running kernel. Fields that moved between kernels are read only
// where bpf_core_field_exists says this kernel has them.
struct thread_info {
    u32 cpu;  // Linux 5.16+ (with THREAD_INFO_IN_TASK)
} __attribute__((preserve_access_index));
struct cfs_rq {
    int throttle_count;  // CONFIG_CFS_BANDWIDTH: > 0 while it or an ancestor is throttled
} __attribute__((preserve_access_index));
struct sched_entity {
    struct cfs_rq *cfs_rq;  // CONFIG_FAIR_GROUP_SCHED: the run queue it is queued on
} __attribute__((preserve_access_index));
struct task_struct {
    struct thread_info thread_info;
    unsigned int __state;  // Linux 5.14+
    unsigned int cpu;      // before 5.16
    int exit_state;
    pid_t pid;
    struct sched_entity se;
    bool throttled;  // Linux 6.18+ (task-based throttling): dequeued by its cgroup's limit
} __attribute__((preserve_access_index));
struct task_struct___pre514 {
    long state;
} __attribute__((preserve_access_index));
// What the probe reads of a memory mapping (a copy's source): its flags, and its file's mode.
struct inode {
    unsigned short i_mode;
} __attribute__((preserve_access_index));
struct file {
    struct inode *f_inode;
} __attribute__((preserve_access_index));
struct vm_area_struct {
    unsigned long vm_flags;  // in an anonymous union since Linux 6.3: found by name
    struct file *vm_file;
} __attribute__((preserve_access_index));
#define VM_READ 0x1        // include/linux/mm.h, unchanged since 2.6
#define S_IFMT 00170000    // include/uapi/linux/stat.h
#define S_IFREG 0100000
// The one socket field the probe reads (sock:sk_data_ready's socket): its address family.
struct sock_common {
    unsigned short skc_family;
} __attribute__((preserve_access_index));
struct sock {
    struct sock_common __sk_common;
} __attribute__((preserve_access_index));

#define GT_FIELD_EXISTS(field) __builtin_preserve_field_info(field, 2 /* BPF_FIELD_EXISTS */)
#define EXIT_DEAD 0x10    // include/linux/sched.h: exit_state, unchanged since 2.6
#define EXIT_ZOMBIE 0x20
#define TASK_UNINTERRUPTIBLE 0x2  // include/linux/sched.h: __state, unchanged since 2.6
#define TASK_NOLOAD 0x400         // with TASK_UNINTERRUPTIBLE: TASK_IDLE, reported as I

static __always_inline u32 gt_task_pid(u64 task) {
    return ((struct task_struct *)task)->pid;
}

// task_cpu(p), as the sched_wakeup record's target_cpu.
static __always_inline u32 gt_task_cpu(u64 task) {
    struct task_struct *t = (void *)task;
    if (GT_FIELD_EXISTS(t->thread_info.cpu))
        return t->thread_info.cpu;
    return t->cpu;
}

// Whether a runnable `prev` leaves because its cgroup's CPU limit holds it back.
// Linux 6.18+ throttles task by task: the task dequeues itself on its way back to
// user space and is marked `throttled` until its group gets runtime again. Before
// that, the whole group run queue was dequeued at once, its throttle_count (own and
// inherited) above zero. A task preempted in the kernel while its group is throttled
// on 6.18+ is not throttled yet: it runs again to reach user space.
static __always_inline int gt_throttled(struct task_struct *prev) {
    if (GT_FIELD_EXISTS(prev->throttled))
        return prev->throttled;
    if (GT_FIELD_EXISTS(prev->se.cfs_rq)) {
        struct cfs_rq *rq = prev->se.cfs_rq;
        if (rq && GT_FIELD_EXISTS(rq->throttle_count))
            return rq->throttle_count > 0;
    }
    return 0;
}

// How sched_switch's `prev` left the CPU, as the tracepoint record would say it:
// preempted (R+) or still TASK_RUNNING is runnable (throttled where its cgroup's
// limit holds it back); EXIT_ZOMBIE/EXIT_DEAD in its exit_state is its last switch;
// TASK_UNINTERRUPTIBLE without TASK_NOLOAD is I/O wait (the record's D); any other
// state is blocked. The state is read from the task, which works whether or not
// this kernel passes it (5.18+).
static __always_inline u32 gt_switch_how(u64 *args) {
    struct task_struct *prev = (void *)args[1];
    if (args[0] & 0xff)  // bool preempt
        return gt_throttled(prev) ? SWITCH_THROTTLED : SWITCH_RUNNABLE;
    if (prev->exit_state & (EXIT_DEAD | EXIT_ZOMBIE))
        return SWITCH_DEAD;
    long state;
    if (GT_FIELD_EXISTS(prev->__state))
        state = prev->__state;
    else
        state = ((struct task_struct___pre514 *)prev)->state;
    if ((state & (TASK_UNINTERRUPTIBLE | TASK_NOLOAD)) == TASK_UNINTERRUPTIBLE)
        return SWITCH_IO_WAIT;
    if (state != 0)
        return SWITCH_BLOCKED;
    return gt_throttled(prev) ? SWITCH_THROTTLED : SWITCH_RUNNABLE;
}

// A scheduler event's program; `args` holds the tracepoint's arguments (see the
// kernel's btf_trace_<event> typedefs). The name is the one bcc gives a
// TRACEPOINT_PROBE, so both builds name them alike.
#define GT_SCHED_EVENT(event) \
    SEC("tp_btf/" #event)     \
    int tracepoint__sched__##event(unsigned long long *args)
#define GT_SWITCH_PREV(args) gt_task_pid((args)[1])
#define GT_SWITCH_NEXT(args) gt_task_pid((args)[2])
#define GT_SWITCH_HOW(args) gt_switch_how(args)
#define GT_WAKEE(args) gt_task_pid((args)[0])
#define GT_WAKEE_CPU(args) gt_task_cpu((args)[0])
// exec runs in the task itself, which has become its group's leader: pid == tgid.
#define GT_EXEC_TGID(args) gt_task_pid((args)[0])
// A program user space attaches to several tracepoints by name (raw, no arguments read).
#define GT_PROGRAM(name) SEC("raw_tp") int name(void *ctx)
// A raw tracepoint's arguments: softirq_entry/exit's vector number, sk_data_ready's socket.
#define GT_SOFTIRQ_VEC(ctx) ((u32)((u64 *)(ctx))[0])
static __always_inline u32 gt_sk_family(void *ctx) {
    struct sock *sk = (void *)((u64 *)ctx)[0];
    unsigned short family = 0;
    bpf_probe_read_kernel(&family, sizeof(family), &sk->__sk_common.skc_family);
    return family;
}
#define GT_SK_FAMILY(ctx) gt_sk_family(ctx)
// Programs user space attaches as uprobes / uretprobes (kprobe-type programs).
#define GT_UPROBE(name) SEC("uprobe") int name(void *ctx)
#define GT_URETPROBE(name) SEC("uretprobe") int name(void *ctx)

// What differs per node, set in .rodata by the loader before load.
const volatile struct probe_config probe_config = {};
#define MAX_CPUS (probe_config.max_cpus)

// Whether an address of the current process is host memory, as far as the probe can tell:
// a readable mapping that is anonymous or of a regular file (the heap, a stack, a mapped
// dataset). A device's memory is not: no mapping in the process, a reservation it cannot
// read, or a mapping of the driver's character device.
static long gt_host_vma(void *task, struct vm_area_struct *vma, void *data) {
    u32 *host = data;
    unsigned long flags = 0;
    struct file *file = NULL;
    bpf_probe_read_kernel(&flags, sizeof(flags), &vma->vm_flags);
    bpf_probe_read_kernel(&file, sizeof(file), &vma->vm_file);
    if (!(flags & VM_READ))
        return 0;
    if (!file) {
        *host = 1;
        return 0;
    }
    struct inode *inode = NULL;
    unsigned short mode = 0;
    bpf_probe_read_kernel(&inode, sizeof(inode), &file->f_inode);
    if (inode)
        bpf_probe_read_kernel(&mode, sizeof(mode), &inode->i_mode);
    *host = (mode & S_IFMT) == S_IFREG;
    return 0;
}

// A uprobe's second argument (a copy's source), from the register the loader named. One
// function per machine, never inlined: a single load at an offset chosen at run time would
// be a load through a modified context pointer, which the verifier refuses.
static __attribute__((noinline)) u64 gt_arg2_x86_64(void *ctx) {
    return ((u64 *)ctx)[ARG2_X86_64];
}

static __attribute__((noinline)) u64 gt_arg2_aarch64(void *ctx) {
    return ((u64 *)ctx)[ARG2_AARCH64];
}

static __always_inline u64 gt_arg2(void *ctx) {
    if (probe_config.arg2_reg == ARG2_X86_64)
        return gt_arg2_x86_64(ctx);
    if (probe_config.arg2_reg == ARG2_AARCH64)
        return gt_arg2_aarch64(ctx);
    return 0;
}

static __always_inline int gt_copy_from_host(void *ctx) {
    u64 src = gt_arg2(ctx);
    u32 host = 0;
    if (src)
        bpf_find_vma(bpf_get_current_task_btf(), src, gt_host_vma, &host, 0);
    return host;
}
#define GT_COPY_FROM_HOST(ctx) gt_copy_from_host(ctx)

// sched_process_exit gained its group_dead argument in Linux 6.16, with its own
// record type (which is how this build tells); older kernels pass the task alone.
#define GT_EXIT_EVENT(args, tid, group_dead)                                            \
    do {                                                                                \
        tid = gt_task_pid((args)[0]);                                                   \
        group_dead = 0;                                                                 \
        if (__builtin_preserve_type_info(*(struct trace_event_raw_sched_process_exit *)0, \
                                         0 /* BPF_TYPE_EXISTS */))                      \
            group_dead = (args)[1] & 0xff;                                              \
    } while (0)

char LICENSE[] SEC("license") = "Dual MIT/GPL";

// The hash of the sources this object was built from (scripts/build_bpf.py).
#ifdef GPUTOP_INPUTS_SHA256
const char gputop_inputs_sha256[] SEC("gputop.inputs") = GPUTOP_INPUTS_SHA256;
#endif

#else  // bcc

#include <uapi/linux/ptrace.h>
#include "probe_abi.h"

#define MAX_CPU_SLOTS MAX_CPUS

#define GT_HASH(name, K, V, N) BPF_HASH(name, K, V, N)
#define GT_ARRAY(name, V, N) BPF_ARRAY(name, V, N)
#define GT_LRU_HASH(name, K, V, N) BPF_TABLE("lru_hash", K, V, name, N)

// bcc rewrites map calls only where they are written out, never inside a macro
// ("cannot use map function inside a macro"), so its loader writes each
// GT_LOOKUP/GT_INSERT/GT_UPDATE/GT_DELETE(map, ...) out as map.lookup(...) and so
// on before compiling (gputop/sources/bpf_child.py, bcc_source()).

// The tracepoint records, laid out as this kernel's tracefs describes them.
#define GT_SCHED_EVENT(event) TRACEPOINT_PROBE(sched, event)
#define GT_SWITCH_PREV(args) ((args)->prev_pid)
#define GT_SWITCH_NEXT(args) ((args)->next_pid)
// R (state 0) and R+ (preempted: only the bit above the report mask) are runnable.
// The record reports TASK_IDLE as I (its own bit), so its D bit (0x2, unchanged since
// 2.6) is uninterruptible sleep alone.
#define REPORT_D 0x2
#define GT_SWITCH_HOW(args)                                                   \
    (((args)->prev_state & DEAD_MASK)          ? SWITCH_DEAD                 \
     : ((args)->prev_state & REPORT_D)          ? SWITCH_IO_WAIT              \
     : ((args)->prev_state & NOT_RUNNABLE_MASK) ? SWITCH_BLOCKED : SWITCH_RUNNABLE)
#define GT_WAKEE(args) ((args)->pid)
#define GT_WAKEE_CPU(args) ((args)->target_cpu)
#define GT_EXEC_TGID(args) ((args)->pid)
#define GT_PROGRAM(name) int name(void *ctx)
// The records of the tracepoints a GT_PROGRAM reads (their layout since they were added:
// the 8-byte common header, then the event's own fields).
struct gt_softirq_rec {
    u64 common;
    u32 vec;
};
struct gt_sk_data_ready_rec {
    u64 common;
    u64 skaddr;
    u16 family;
};
#define GT_SOFTIRQ_VEC(ctx) (((struct gt_softirq_rec *)(ctx))->vec)
#define GT_SK_FAMILY(ctx) (((struct gt_sk_data_ready_rec *)(ctx))->family)
#define GT_UPROBE(name) int name(struct pt_regs *ctx)
// bcc's build runs where the kernel has no BTF, so no bpf_find_vma: a generic copy's
// direction cannot be told, and it counts as a wait for the GPU like the other copies.
#define GT_COPY_FROM_HOST(ctx) 0
#define GT_URETPROBE(name) int name(struct pt_regs *ctx)

// NOT_RUNNABLE_MASK, DEAD_MASK, MAX_CPUS and HAVE_GROUP_DEAD come as -D flags.
#if HAVE_GROUP_DEAD
#define GT_EXIT_EVENT(args, tid, group_dead) \
    do {                                     \
        tid = (args)->pid;                   \
        group_dead = (args)->group_dead;     \
    } while (0)
#else
#define GT_EXIT_EVENT(args, tid, group_dead) \
    do {                                     \
        tid = (args)->pid;                   \
        group_dead = 0;                      \
    } while (0)
#endif

#endif  // GPUTOP_CORE

#ifndef MAX_THREADS
#define MAX_THREADS DEFAULT_MAX_THREADS
#endif
#ifndef MAX_TGIDS
#define MAX_TGIDS DEFAULT_MAX_TGIDS
#endif
#ifndef MAX_PIPELINE
#define MAX_PIPELINE DEFAULT_MAX_PIPELINE
#endif
#ifndef MAX_PREEMPT
#define MAX_PREEMPT DEFAULT_MAX_PREEMPT
#endif
#ifndef MAX_CPU_SLOTS
#define MAX_CPU_SLOTS DEFAULT_MAX_CPUS
#endif

#endif  // GPUTOP_DIALECT_H
