// The two ways sched_probe.c is built, behind one set of macros.
//
// GPUTOP_CORE: compiled ahead of time by clang (scripts/build_bpf.py) into a
// CO-RE object that libbpf loads on any kernel with BTF. Types come from
// vmlinux.h (generated with bpftool, trimmed to what the probe reads, every
// struct marked preserve_access_index so libbpf relocates its fields against
// the running kernel). Map bounds are resized and probe_config is set by the
// loader before the program loads. No other header: the object is built from
// this directory and clang alone.
//
// Otherwise: bcc, at run time, on a kernel without BTF (the fallback). Tracepoint
// layouts come from tracefs; map bounds and probe_config come as -D flags.
#ifndef GPUTOP_DIALECT_H
#define GPUTOP_DIALECT_H

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

// A program on one tracepoint; `args` is the kernel's record of the event. The
// name is the one bcc gives a TRACEPOINT_PROBE, so both builds name them alike.
#define GT_TRACEPOINT(cat, event, record) \
    SEC("tp/" #cat "/" #event)            \
    int tracepoint__##cat##__##event(struct record *args)
// A program user space attaches to several tracepoints.
#define GT_PROGRAM(name) SEC("tp") int name(void *ctx)
// Programs user space attaches as uprobes / uretprobes (kprobe-type programs).
#define GT_UPROBE(name) SEC("uprobe") int name(void *ctx)
#define GT_URETPROBE(name) SEC("uretprobe") int name(void *ctx)

// What differs per node, set in .rodata by the loader before load.
const volatile struct probe_config probe_config = {};
#define NOT_RUNNABLE_MASK (probe_config.not_runnable_mask)
#define DEAD_MASK (probe_config.dead_mask)
#define MAX_CPUS (probe_config.max_cpus)

// sched_process_exit gained group_dead in Linux 6.16 (its own record type);
// older kernels share the sched_process_template record, without it.
#define GT_EXIT_EVENT(args, tid, group_dead)                                           \
    do {                                                                               \
        if (__builtin_preserve_type_info(*(struct trace_event_raw_sched_process_exit *)0, \
                                         0 /* BPF_TYPE_EXISTS */)) {                   \
            struct trace_event_raw_sched_process_exit *e_ = (void *)(args);            \
            tid = e_->pid;                                                             \
            group_dead = e_->group_dead;                                               \
        } else {                                                                       \
            struct trace_event_raw_sched_process_template *e_ = (void *)(args);        \
            tid = e_->pid;                                                             \
            group_dead = 0;                                                            \
        }                                                                              \
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

#define GT_TRACEPOINT(cat, event, record) TRACEPOINT_PROBE(cat, event)
#define GT_PROGRAM(name) int name(void *ctx)
#define GT_UPROBE(name) int name(struct pt_regs *ctx)
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
