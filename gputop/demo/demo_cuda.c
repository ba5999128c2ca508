/* The trainer-work demo's stand-in for the CUDA driver: one waiting call, as the real
 * libcuda.so.1 exports it, so gputop's eBPF probe finds and probes it as it would the
 * real driver (gputop/sources/cuda_probe.py). The demo's trainer says when its modelled
 * GPU will be done (gputop_demo_gpu_free_at) and waits for that in cuCtxSynchronize,
 * asleep, as torch.cuda.synchronize() waits for a real GPU. Built with cc by
 * gputop/demo/cudastub.py; nothing else in gputop loads it. */
#include <errno.h>
#include <time.h>

static long long free_at_ns;

void gputop_demo_gpu_free_at(long long ns) { free_at_ns = ns; }

int cuCtxSynchronize(void) {
    struct timespec ts = {free_at_ns / 1000000000LL, free_at_ns % 1000000000LL};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, 0) == EINTR) {
    }
    return 0;
}
