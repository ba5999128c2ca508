/* A fake libcuda.so.1 for tests: every CUDA driver call that waits for the GPU,
 * in each form the driver exports (_v2, _ptsz, _ptds, the unversioned legacy
 * names, CUDA 12.8/13's newer versions), each waiting the way a GPU step would:
 * asleep (a blocking sync) or spinning on the CPU (CUDA's default while cores are
 * plentiful).
 *
 * Two ways to say how long a call waits, for the whole process:
 *   fake_cuda_set(ns, spin)  every later waiting call waits ns (0: only for the queue);
 *   fake_cuda_launch(ns)     queue ns of GPU work behind what is queued (a kernel):
 *                            a waiting call returns when the queue is done, as a
 *                            stream synchronization or a copy to pageable host
 *                            memory does. The queue is meant for one launching thread.
 * spin picks spinning or sleeping for both.
 *   fake_cuda_set_h2d(ns, spin)  every later host-to-device copy (cuMemcpyHtoD*,
 *                            cuMemcpyHtoA*) takes ns, on a CPU (spin: the driver
 *                            staging pageable memory) or asleep (waiting for its DMA);
 *                            0, the default: as the waiting calls wait.
 * cuMemAlloc_v2 hands out "device memory": addresses in a reservation the process
 * cannot read (PROT_NONE), as a device's memory is not host memory; a generic copy
 * (cuMemcpy, cuMemcpyAsync) whose source is one waits for the GPU, one from host
 * memory is a host-to-device copy to gputop's probe. Here both only wait.
 *
 * Each function is its own code (noinline, no identical-code folding), so a
 * uprobe on one never fires for another. Two exceptions on purpose:
 * cuMemcpyDtoH is an alias of cuMemcpyDtoH_v2 (one function, two symbols: probed
 * once), and cuMemcpy2D_v2 is a synchronous copy made of two probed calls (the
 * asynchronous copy, then a stream synchronization): a nested wait, counted once.
 *
 * cuGetProcAddress / cuGetProcAddress_v2 hand out these functions' addresses the
 * way the CUDA runtime asks for them (a base name, a CUDA version, per-thread
 * default stream or not), as the real driver's table does (cudaTypedefs.h).
 */
#include <stddef.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

typedef int CUresult;
typedef void *CUstream;

#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_NOT_FOUND 500
#define CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM 2ULL
#define CU_GET_PROC_ADDRESS_SUCCESS 0
#define CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND 1
#define CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT 2

/* The CUDA version this fake driver says it supports (cuDriverGetVersion). */
#define FAKE_DRIVER_VERSION 13000

static volatile long long wait_ns;
static volatile int spin;
static volatile long long queue_done_ns;
static volatile long long h2d_ns;
static volatile int h2d_spin;

static long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}

void fake_cuda_set(long long ns, int spin_not_sleep) {
    wait_ns = ns;
    spin = spin_not_sleep;
}

void fake_cuda_set_h2d(long long ns, int spin_not_sleep) {
    h2d_ns = ns;
    h2d_spin = spin_not_sleep;
}

void fake_cuda_launch(long long ns) {
    long long now = now_ns();
    long long start = queue_done_ns > now ? queue_done_ns : now;
    queue_done_ns = start + ns;
}

static void wait_until(long long until, int spinning) {
    if (spinning) {
        while (now_ns() < until) {
        }
        return;
    }
    struct timespec t = {until / 1000000000LL, until % 1000000000LL};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, NULL) != 0) {
    }
}

static __attribute__((noinline)) CUresult wait_for_gpu(void) {
    long long now = now_ns();
    long long until = queue_done_ns;
    if (wait_ns > 0 && now + wait_ns > until)
        until = now + wait_ns;
    if (until <= now)
        return CUDA_SUCCESS;
    wait_until(until, spin);
    return CUDA_SUCCESS;
}

/* A host-to-device copy: its own time (fake_cuda_set_h2d), else as the waiting calls. */
static __attribute__((noinline)) CUresult copy_to_gpu(void) {
    if (h2d_ns <= 0)
        return wait_for_gpu();
    wait_until(now_ns() + h2d_ns, h2d_spin);
    return CUDA_SUCCESS;
}

/* Arguments are ignored: every entry point is declared without a prototype. */
#define WAITS(name)                                                 \
    __attribute__((noinline)) CUresult name() {                     \
        return wait_for_gpu();                                      \
    }

/* Synchronization. cuCtxSynchronize_v2 (CUDA 13) takes the context to wait for. */
WAITS(cuCtxSynchronize)
WAITS(cuCtxSynchronize_v2)
WAITS(cuStreamSynchronize)
WAITS(cuStreamSynchronize_ptsz)
WAITS(cuEventSynchronize)

/* Copies into host memory: device, then array, to host. */
WAITS(cuMemcpyDtoH_v2)
WAITS(cuMemcpyDtoH_v2_ptds)
WAITS(cuMemcpyDtoHAsync)
WAITS(cuMemcpyDtoHAsync_v2)
WAITS(cuMemcpyDtoHAsync_v2_ptsz)
WAITS(cuMemcpyAtoH)
WAITS(cuMemcpyAtoH_v2)
WAITS(cuMemcpyAtoH_v2_ptds)
WAITS(cuMemcpyAtoHAsync)
WAITS(cuMemcpyAtoHAsync_v2)
WAITS(cuMemcpyAtoHAsync_v2_ptsz)

/* Copies whose direction the pointers or the descriptor give. */
WAITS(cuMemcpy)
WAITS(cuMemcpy_ptds)
WAITS(cuMemcpyAsync)
WAITS(cuMemcpyAsync_ptsz)
WAITS(cuMemcpyPeer)
WAITS(cuMemcpyPeer_ptds)
WAITS(cuMemcpy2D)
WAITS(cuMemcpy2D_v2_ptds)
WAITS(cuMemcpy2DUnaligned)
WAITS(cuMemcpy2DUnaligned_v2)
WAITS(cuMemcpy2DUnaligned_v2_ptds)
WAITS(cuMemcpy2DAsync)
WAITS(cuMemcpy2DAsync_v2)
WAITS(cuMemcpy2DAsync_v2_ptsz)
WAITS(cuMemcpy3D)
WAITS(cuMemcpy3D_v2)
WAITS(cuMemcpy3D_v2_ptds)
WAITS(cuMemcpy3DAsync)
WAITS(cuMemcpy3DAsync_v2)
WAITS(cuMemcpy3DAsync_v2_ptsz)
WAITS(cuMemcpy3DPeer)
WAITS(cuMemcpy3DPeer_ptds)
WAITS(cuMemcpyBatchAsync)
WAITS(cuMemcpyBatchAsync_ptsz)
WAITS(cuMemcpyBatchAsync_v2)
WAITS(cuMemcpyBatchAsync_v2_ptsz)
WAITS(cuMemcpy3DBatchAsync)
WAITS(cuMemcpy3DBatchAsync_ptsz)
WAITS(cuMemcpy3DBatchAsync_v2)
WAITS(cuMemcpy3DBatchAsync_v2_ptsz)

/* Copies from host memory to the device, to a device array, in every form. */
#define COPIES_TO_GPU(name)                                         \
    __attribute__((noinline)) CUresult name() {                     \
        return copy_to_gpu();                                       \
    }

COPIES_TO_GPU(cuMemcpyHtoD)
COPIES_TO_GPU(cuMemcpyHtoD_v2)
COPIES_TO_GPU(cuMemcpyHtoD_v2_ptds)
COPIES_TO_GPU(cuMemcpyHtoDAsync)
COPIES_TO_GPU(cuMemcpyHtoDAsync_v2)
COPIES_TO_GPU(cuMemcpyHtoDAsync_v2_ptsz)
COPIES_TO_GPU(cuMemcpyHtoA)
COPIES_TO_GPU(cuMemcpyHtoA_v2)
COPIES_TO_GPU(cuMemcpyHtoA_v2_ptds)
COPIES_TO_GPU(cuMemcpyHtoAAsync)
COPIES_TO_GPU(cuMemcpyHtoAAsync_v2)
COPIES_TO_GPU(cuMemcpyHtoAAsync_v2_ptsz)

/* Device memory: a reservation the process cannot read, handed out in 4 KiB-aligned
 * pieces (never freed: a test's few allocations). */
#define DEVICE_BYTES (64ULL << 20)
static char *device_base;
static size_t device_used;

CUresult cuMemAlloc_v2(unsigned long long *dptr, size_t bytes) {
    if (!dptr || bytes == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (!device_base) {
        void *p = mmap(NULL, DEVICE_BYTES, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
            return CUDA_ERROR_INVALID_VALUE;
        device_base = p;
    }
    size_t need = (bytes + 4095) & ~(size_t)4095;
    if (device_used + need > DEVICE_BYTES)
        return CUDA_ERROR_INVALID_VALUE;
    *dptr = (unsigned long long)(device_base + device_used);
    device_used += need;
    return CUDA_SUCCESS;
}

/* The unversioned name as an alias of the same code: one function, two symbols. */
CUresult cuMemcpyDtoH() __attribute__((alias("cuMemcpyDtoH_v2")));

/* A synchronous copy made of two waiting calls: the wait nests, and counts once. */
__attribute__((noinline)) CUresult cuMemcpy2D_v2() {
    cuMemcpy2DAsync_v2();
    return cuStreamSynchronize(NULL);
}

/* Not a wait: never probed. A launch queues work. */
CUresult cuLaunchKernel() {
    return CUDA_SUCCESS;
}

CUresult cuInit(unsigned int flags) {
    (void)flags;
    return CUDA_SUCCESS;
}

CUresult cuDriverGetVersion(int *version) {
    if (!version)
        return CUDA_ERROR_INVALID_VALUE;
    *version = FAKE_DRIVER_VERSION;
    return CUDA_SUCCESS;
}

/* cuGetProcAddress's table: a base name, the CUDA version from which this export
 * answers for it, whether it is the per-thread default stream form, the export. */
struct proc {
    const char *base;
    int version;
    int per_thread;
    CUresult (*fn)();
};

#define P(base, version, per_thread, fn) {#base, version, per_thread, fn}
static const struct proc procs[] = {
    P(cuCtxSynchronize, 2000, 0, cuCtxSynchronize),
    P(cuCtxSynchronize, 13000, 0, cuCtxSynchronize_v2),
    P(cuStreamSynchronize, 2000, 0, cuStreamSynchronize),
    P(cuStreamSynchronize, 7000, 1, cuStreamSynchronize_ptsz),
    P(cuEventSynchronize, 2000, 0, cuEventSynchronize),
    P(cuMemcpyDtoH, 2000, 0, cuMemcpyDtoH),
    P(cuMemcpyDtoH, 3020, 0, cuMemcpyDtoH_v2),
    P(cuMemcpyDtoH, 7000, 1, cuMemcpyDtoH_v2_ptds),
    P(cuMemcpyDtoHAsync, 2000, 0, cuMemcpyDtoHAsync),
    P(cuMemcpyDtoHAsync, 3020, 0, cuMemcpyDtoHAsync_v2),
    P(cuMemcpyDtoHAsync, 7000, 1, cuMemcpyDtoHAsync_v2_ptsz),
    P(cuMemcpyAtoH, 2000, 0, cuMemcpyAtoH),
    P(cuMemcpyAtoH, 3020, 0, cuMemcpyAtoH_v2),
    P(cuMemcpyAtoH, 7000, 1, cuMemcpyAtoH_v2_ptds),
    P(cuMemcpyAtoHAsync, 2000, 0, cuMemcpyAtoHAsync),
    P(cuMemcpyAtoHAsync, 3020, 0, cuMemcpyAtoHAsync_v2),
    P(cuMemcpyAtoHAsync, 7000, 1, cuMemcpyAtoHAsync_v2_ptsz),
    P(cuMemcpy, 4000, 0, cuMemcpy),
    P(cuMemcpy, 7000, 1, cuMemcpy_ptds),
    P(cuMemcpyAsync, 4000, 0, cuMemcpyAsync),
    P(cuMemcpyAsync, 7000, 1, cuMemcpyAsync_ptsz),
    P(cuMemcpyPeer, 4000, 0, cuMemcpyPeer),
    P(cuMemcpyPeer, 7000, 1, cuMemcpyPeer_ptds),
    P(cuMemcpy2D, 2000, 0, cuMemcpy2D),
    P(cuMemcpy2D, 3020, 0, cuMemcpy2D_v2),
    P(cuMemcpy2D, 7000, 1, cuMemcpy2D_v2_ptds),
    P(cuMemcpy2DUnaligned, 2000, 0, cuMemcpy2DUnaligned),
    P(cuMemcpy2DUnaligned, 3020, 0, cuMemcpy2DUnaligned_v2),
    P(cuMemcpy2DUnaligned, 7000, 1, cuMemcpy2DUnaligned_v2_ptds),
    P(cuMemcpy2DAsync, 2000, 0, cuMemcpy2DAsync),
    P(cuMemcpy2DAsync, 3020, 0, cuMemcpy2DAsync_v2),
    P(cuMemcpy2DAsync, 7000, 1, cuMemcpy2DAsync_v2_ptsz),
    P(cuMemcpy3D, 2000, 0, cuMemcpy3D),
    P(cuMemcpy3D, 3020, 0, cuMemcpy3D_v2),
    P(cuMemcpy3D, 7000, 1, cuMemcpy3D_v2_ptds),
    P(cuMemcpy3DAsync, 2000, 0, cuMemcpy3DAsync),
    P(cuMemcpy3DAsync, 3020, 0, cuMemcpy3DAsync_v2),
    P(cuMemcpy3DAsync, 7000, 1, cuMemcpy3DAsync_v2_ptsz),
    P(cuMemcpy3DPeer, 4000, 0, cuMemcpy3DPeer),
    P(cuMemcpy3DPeer, 7000, 1, cuMemcpy3DPeer_ptds),
    P(cuMemcpyBatchAsync, 12080, 0, cuMemcpyBatchAsync),
    P(cuMemcpyBatchAsync, 12080, 1, cuMemcpyBatchAsync_ptsz),
    P(cuMemcpyBatchAsync, 13000, 0, cuMemcpyBatchAsync_v2),
    P(cuMemcpyBatchAsync, 13000, 1, cuMemcpyBatchAsync_v2_ptsz),
    P(cuMemcpy3DBatchAsync, 12080, 0, cuMemcpy3DBatchAsync),
    P(cuMemcpy3DBatchAsync, 12080, 1, cuMemcpy3DBatchAsync_ptsz),
    P(cuMemcpy3DBatchAsync, 13000, 0, cuMemcpy3DBatchAsync_v2),
    P(cuMemcpy3DBatchAsync, 13000, 1, cuMemcpy3DBatchAsync_v2_ptsz),
    P(cuMemcpyHtoD, 2000, 0, cuMemcpyHtoD),
    P(cuMemcpyHtoD, 3020, 0, cuMemcpyHtoD_v2),
    P(cuMemcpyHtoD, 7000, 1, cuMemcpyHtoD_v2_ptds),
    P(cuMemcpyHtoDAsync, 2000, 0, cuMemcpyHtoDAsync),
    P(cuMemcpyHtoDAsync, 3020, 0, cuMemcpyHtoDAsync_v2),
    P(cuMemcpyHtoDAsync, 7000, 1, cuMemcpyHtoDAsync_v2_ptsz),
    P(cuMemcpyHtoA, 2000, 0, cuMemcpyHtoA),
    P(cuMemcpyHtoA, 3020, 0, cuMemcpyHtoA_v2),
    P(cuMemcpyHtoA, 7000, 1, cuMemcpyHtoA_v2_ptds),
    P(cuMemcpyHtoAAsync, 2000, 0, cuMemcpyHtoAAsync),
    P(cuMemcpyHtoAAsync, 3020, 0, cuMemcpyHtoAAsync_v2),
    P(cuMemcpyHtoAAsync, 7000, 1, cuMemcpyHtoAAsync_v2_ptsz),
    P(cuLaunchKernel, 4000, 0, cuLaunchKernel),
};

/* The newest form of `symbol` for `version`: the per-thread one where asked for and
 * exported, else the default-stream one. */
CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version,
                             unsigned long long flags, int *status) {
    int per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
    const struct proc *best = NULL;
    int known = 0;
    if (!symbol || !pfn)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof(procs) / sizeof(procs[0]); i++) {
        const struct proc *p = &procs[i];
        if (strcmp(p->base, symbol) != 0)
            continue;
        known = 1;
        if (p->version > version || (p->per_thread && !per_thread))
            continue;
        if (!best || p->per_thread > best->per_thread ||
            (p->per_thread == best->per_thread && p->version > best->version))
            best = p;
    }
    *pfn = best ? (void *)best->fn : NULL;
    if (status)
        *status = best ? CU_GET_PROC_ADDRESS_SUCCESS
                       : known ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                               : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return best ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

CUresult cuGetProcAddress(const char *symbol, void **pfn, int version,
                          unsigned long long flags) {
    return cuGetProcAddress_v2(symbol, pfn, version, flags, NULL);
}
