/* A fake libcuda.so.1 for tests: the CUDA driver's synchronizing calls, which wait
 * as long as the caller says, asleep (a blocking sync) or spinning on the CPU
 * (CUDA's default while cores are plentiful), the way a GPU step would.
 *
 * fake_cuda_set(ns, spin) sets the wait of every later call, for the whole
 * process. Each function is its own code (noinline, no identical-code folding),
 * so a uprobe on one never fires for another.
 */
#include <stddef.h>
#include <time.h>

typedef int CUresult;
typedef void *CUstream;
typedef void *CUevent;
typedef unsigned long long CUdeviceptr;

static volatile long long wait_ns;
static volatile int spin;

void fake_cuda_set(long long ns, int spin_not_sleep) {
    wait_ns = ns;
    spin = spin_not_sleep;
}

static long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}

static __attribute__((noinline)) CUresult wait_for_gpu(void) {
    long long ns = wait_ns;
    if (ns <= 0)
        return 0;
    if (spin) {
        long long end = now_ns() + ns;
        while (now_ns() < end) {
        }
        return 0;
    }
    struct timespec t = {ns / 1000000000LL, ns % 1000000000LL};
    while (nanosleep(&t, &t) != 0) {
    }
    return 0;
}

#define SYNC(name, ...)                                             \
    __attribute__((noinline)) CUresult name(__VA_ARGS__) {          \
        return wait_for_gpu();                                      \
    }

CUresult cuInit(unsigned int flags) {
    (void)flags;
    return 0;
}

SYNC(cuStreamSynchronize, CUstream s)
SYNC(cuStreamSynchronize_ptsz, CUstream s)
SYNC(cuEventSynchronize, CUevent e)
SYNC(cuCtxSynchronize, void)
SYNC(cuMemcpyDtoH_v2, void *dst, CUdeviceptr src, size_t n)

/* The unversioned name as an alias of the same code: one function, two symbols. */
CUresult cuMemcpyDtoH(void *dst, CUdeviceptr src, size_t n) __attribute__((alias("cuMemcpyDtoH_v2")));

/* A launch is not a wait: never probed. */
CUresult cuLaunchKernel(void *f) {
    (void)f;
    return 0;
}
