/*
 * A fake libnvidia-ml.so.1 for gputop's tests.
 *
 * It exports the NVML entry points that nvidia-ml-py calls for gputop, with the
 * same C ABI and struct layouts, and answers them from a scenario file named by
 * the FAKE_NVML_SCENARIO environment variable (format: README.md beside this
 * file). The scenario is (re)read whenever the init reference count goes from 0
 * to 1, and on demand through fakeNvmlReload(), so one process can run many
 * scenarios; a scenario file replaced while in use is picked up at the next
 * utilisation read, keeping each device's tick.
 *
 * Each device keeps its own tick counter, advanced by every
 * nvmlDeviceGetUtilizationRates call on that device; per-tick values, injected
 * errors, process lists and "lost" are all expressed in that device's ticks.
 *
 * Built with -DFAKE_OLD_DRIVER it lacks the newer symbols (clock-event reasons,
 * the v3 process list, ProcessesUtilizationInfo, GPM), like an older driver.
 *
 * Every entry point counts its calls; the counts are written as "name count"
 * lines to the file named by FAKE_NVML_COUNTS at nvmlShutdown and at exit, and
 * can be read in-process with fakeNvmlCallCount().
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

typedef int nvmlReturn_t;

enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_FUNCTION_NOT_FOUND = 13,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
};

#define MAX_DEV 16
#define MAX_TICKS 512
#define MAX_PROCS 64
#define MAX_ERRS 32
#define MAX_MISSING 64
#define MAX_COUNTERS 96
#define GPM_METRIC_MAX 477 /* nvidia-ml-py's NVML_GPM_METRIC_MAX: sizes nvmlGpmMetricsGet_t */

enum series_id {
    S_UTIL,
    S_MEM_UTIL,
    S_POWER_W,
    S_MEM_USED_MIB,
    S_TEMPERATURE_C,
    S_SM_CLOCK_MHZ,
    S_THROTTLE,
    S_SM_UTIL,
    S_SM_OCCUPANCY,
    S_TENSOR_UTIL,
    S_DRAM_UTIL,
    S_PCIE_GEN,
    S_PCIE_WIDTH,
    S_PCIE_TX_KB_S,
    S_PCIE_RX_KB_S,
    N_SERIES
};

static const char *series_names[N_SERIES] = {
    "util",   "mem_util", "power_w",      "mem_used_mib", "temperature_c", "sm_clock_mhz",
    "throttle", "sm_util", "sm_occupancy", "tensor_util", "dram_util",
    "pcie_gen", "pcie_width", "pcie_tx_kb_s", "pcie_rx_kb_s",
};


struct fake_err {
    char fn[64];
    int code;
    int from_tick;
    int until_tick; /* exclusive; -1 = forever */
};

struct fake_proc {
    unsigned pid;
    unsigned long long used_mib;
    int sm; /* -1: no utilisation sample for this process */
    int from_tick;
    int until_tick;
};

struct fake_dev {
    int magic; /* handles point here; checked on every call */
    int index;
    char uuid[96];
    char name[96];
    unsigned arch;
    int gpm;
    unsigned long long mem_total_mib;
    unsigned power_limit_w;
    unsigned sm_clock_max_mhz;
    unsigned pcie_gen_max, pcie_width_max;
    double series[N_SERIES][MAX_TICKS];
    int nvals[N_SERIES];
    int lost_at;
    struct fake_err errs[MAX_ERRS];
    int nerrs;
    struct {
        unsigned metric;
        int code;
    } gpm_errs[16];
    int ngpm_errs;
    struct fake_proc procs[MAX_PROCS];
    int nprocs;
    /* run-time state */
    int tick;
    unsigned long long tick_us;
    double energy_mj;
    double energy_at_s;
};

struct gpm_sample {
    unsigned magic;
    int dev;
    double t_s;
    double vals[4];
    int have[4];
};

#define DEV_MAGIC 0x6e766d6c
#define SAMPLE_MAGIC 0x67706d73

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct fake_dev devs[MAX_DEV];
static int ndev;
static int init_error;
static int refcount;
static char driver_version[80];
static char nvml_version[80];
static int cuda_version;
static char missing[MAX_MISSING][64];
static int nmissing;
static struct {
    char name[64];
    unsigned long count;
} counters[MAX_COUNTERS];
static int ncounters;

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static unsigned long long wall_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (unsigned long long)ts.tv_sec * 1000000ULL + (unsigned long long)ts.tv_nsec / 1000ULL;
}

static void bump(const char *name) {
    for (int i = 0; i < ncounters; i++) {
        if (strcmp(counters[i].name, name) == 0) {
            counters[i].count++;
            return;
        }
    }
    if (ncounters < MAX_COUNTERS) {
        snprintf(counters[ncounters].name, sizeof counters[ncounters].name, "%s", name);
        counters[ncounters].count = 1;
        ncounters++;
    }
}

static void write_counts(void) {
    const char *path = getenv("FAKE_NVML_COUNTS");
    if (!path || !*path)
        return;
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return;
    for (int i = 0; i < ncounters; i++)
        fprintf(f, "%s %lu\n", counters[i].name, counters[i].count);
    fclose(f);
    rename(tmp, path);
}

__attribute__((destructor)) static void at_exit_counts(void) { write_counts(); }

static void reset_scenario(void) {
    memset(devs, 0, sizeof devs);
    ndev = 0;
    init_error = 0;
    nmissing = 0;
    cuda_version = 12040;
    snprintf(driver_version, sizeof driver_version, "550.54.15");
    snprintf(nvml_version, sizeof nvml_version, "12.550.54.15");
    for (int i = 0; i < MAX_DEV; i++) {
        struct fake_dev *d = &devs[i];
        d->magic = DEV_MAGIC;
        d->index = i;
        snprintf(d->uuid, sizeof d->uuid, "GPU-fa4e0000-0000-4000-8000-%012d", i);
        snprintf(d->name, sizeof d->name, "NVIDIA H100 80GB HBM3");
        d->arch = 9;
        d->gpm = 1;
        d->mem_total_mib = 81559;
        d->power_limit_w = 700;
        d->sm_clock_max_mhz = 1980;
        d->pcie_gen_max = 5;
        d->pcie_width_max = 16;
        d->lost_at = -1;
        d->tick = -1;
        d->energy_mj = 1.0e9;
    }
}

static int series_by_name(const char *s) {
    for (int i = 0; i < N_SERIES; i++)
        if (strcmp(series_names[i], s) == 0)
            return i;
    return -1;
}

/* Returns 0, or -1 on a malformed line (reported on stderr, then ignored). */
static int parse_line(char *line, int lineno) {
    char *save = NULL;
    char *key = strtok_r(line, " \t\r\n", &save);
    if (!key || key[0] == '#')
        return 0;
    char *rest = save;
#define NEXT() strtok_r(NULL, " \t\r\n", &save)
    if (strcmp(key, "init_error") == 0) {
        char *v = NEXT();
        if (!v)
            goto bad;
        init_error = atoi(v);
    } else if (strcmp(key, "driver_version") == 0) {
        char *v = NEXT();
        if (!v)
            goto bad;
        snprintf(driver_version, sizeof driver_version, "%s", v);
    } else if (strcmp(key, "nvml_version") == 0) {
        char *v = NEXT();
        if (!v)
            goto bad;
        snprintf(nvml_version, sizeof nvml_version, "%s", v);
    } else if (strcmp(key, "cuda_version") == 0) {
        char *v = NEXT();
        if (!v)
            goto bad;
        cuda_version = atoi(v);
    } else if (strcmp(key, "devices") == 0) {
        char *v = NEXT();
        if (!v)
            goto bad;
        ndev = atoi(v);
        if (ndev < 0 || ndev > MAX_DEV)
            goto bad;
    } else if (strcmp(key, "missing") == 0) {
        char *v = NEXT();
        if (!v || nmissing >= MAX_MISSING)
            goto bad;
        snprintf(missing[nmissing++], 64, "%s", v);
    } else if (strcmp(key, "dev") == 0) {
        char *ix = NEXT();
        char *what = NEXT();
        if (!ix || !what)
            goto bad;
        int i = atoi(ix);
        if (i < 0 || i >= MAX_DEV)
            goto bad;
        struct fake_dev *d = &devs[i];
        if (strcmp(what, "uuid") == 0) {
            char *v = NEXT();
            if (!v)
                goto bad;
            snprintf(d->uuid, sizeof d->uuid, "%s", v);
        } else if (strcmp(what, "name") == 0) {
            /* the rest of the line, spaces included */
            char *v = save;
            while (v && (*v == ' ' || *v == '\t'))
                v++;
            if (!v || !*v)
                goto bad;
            snprintf(d->name, sizeof d->name, "%s", v);
            d->name[strcspn(d->name, "\r\n")] = 0;
        } else if (strcmp(what, "arch") == 0) {
            char *v = NEXT();
            if (!v)
                goto bad;
            d->arch = (unsigned)atoi(v);
        } else if (strcmp(what, "gpm") == 0) {
            char *v = NEXT();
            if (!v)
                goto bad;
            d->gpm = atoi(v);
        } else if (strcmp(what, "mem_total_mib") == 0) {
            char *v = NEXT();
            if (!v)
                goto bad;
            d->mem_total_mib = strtoull(v, NULL, 10);
        } else if (strcmp(what, "power_limit_w") == 0) {
            char *v = NEXT();
            if (!v)
                goto bad;
            d->power_limit_w = (unsigned)atoi(v);
        } else if (strcmp(what, "sm_clock_max_mhz") == 0) {
            char *v = NEXT();
            if (!v)
                goto bad;
            d->sm_clock_max_mhz = (unsigned)atoi(v);
        } else if (strcmp(what, "pcie_max") == 0) {
            char *gen = NEXT();
            char *width = gen ? NEXT() : NULL;
            if (!width)
                goto bad;
            d->pcie_gen_max = (unsigned)atoi(gen);
            d->pcie_width_max = (unsigned)atoi(width);
        } else if (strcmp(what, "lost_at") == 0) {
            char *v = NEXT();
            if (!v)
                goto bad;
            d->lost_at = atoi(v);
        } else if (strcmp(what, "series") == 0) {
            char *name = NEXT();
            int s = name ? series_by_name(name) : -1;
            if (s < 0)
                goto bad;
            d->nvals[s] = 0;
            for (char *v = NEXT(); v && d->nvals[s] < MAX_TICKS; v = NEXT())
                d->series[s][d->nvals[s]++] = strtod(v, NULL);
        } else if (strcmp(what, "error") == 0) {
            char *fn = NEXT();
            char *code = NEXT();
            char *from = NEXT();
            char *until = from ? NEXT() : NULL;
            if (!fn || !code || d->nerrs >= MAX_ERRS)
                goto bad;
            struct fake_err *e = &d->errs[d->nerrs++];
            snprintf(e->fn, sizeof e->fn, "%s", fn);
            e->code = atoi(code);
            e->from_tick = from ? atoi(from) : 0;
            e->until_tick = until ? atoi(until) : -1;
        } else if (strcmp(what, "gpm_metric_error") == 0) {
            char *m = NEXT();
            char *code = NEXT();
            if (!m || !code || d->ngpm_errs >= 16)
                goto bad;
            d->gpm_errs[d->ngpm_errs].metric = (unsigned)atoi(m);
            d->gpm_errs[d->ngpm_errs].code = atoi(code);
            d->ngpm_errs++;
        } else if (strcmp(what, "proc") == 0) {
            char *pid = NEXT();
            char *mib = NEXT();
            char *sm = NEXT();
            char *from = sm ? NEXT() : NULL;
            char *until = from ? NEXT() : NULL;
            if (!pid || !mib || !sm || d->nprocs >= MAX_PROCS)
                goto bad;
            struct fake_proc *p = &d->procs[d->nprocs++];
            p->pid = (unsigned)strtoul(pid, NULL, 10);
            p->used_mib = strtoull(mib, NULL, 10);
            p->sm = atoi(sm);
            p->from_tick = from ? atoi(from) : 0;
            p->until_tick = until ? atoi(until) : -1;
        } else {
            goto bad;
        }
    } else {
        goto bad;
    }
    (void)rest;
    return 0;
#undef NEXT
bad:
    fprintf(stderr, "fake_nvml: scenario line %d not understood\n", lineno);
    return -1;
}

static dev_t loaded_dev;
static ino_t loaded_ino;
static struct timespec loaded_mtime;

static int load_scenario(const char *path) {
    reset_scenario();
    loaded_ino = 0;
    if (!path || !*path) {
        /* No scenario: behave like a machine whose driver is not loaded. */
        init_error = NVML_ERROR_DRIVER_NOT_LOADED;
        return -1;
    }
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "fake_nvml: cannot open scenario %s\n", path);
        init_error = NVML_ERROR_DRIVER_NOT_LOADED;
        return -1;
    }
    struct stat st;
    if (fstat(fileno(f), &st) == 0) {
        loaded_dev = st.st_dev;
        loaded_ino = st.st_ino;
        loaded_mtime = st.st_mtim;
    }
    char line[8192];
    int lineno = 0, bad = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        if (parse_line(line, lineno) != 0)
            bad++;
    }
    fclose(f);
    return bad ? -1 : 0;
}

/*
 * A scenario file replaced while NVML is in use takes effect at once; the devices
 * keep their ticks and energy counters, so a test can change values or process
 * lists mid-run (e.g. add a trainer's pid once it has started).
 */
static void reload_if_changed(void) {
    const char *path = getenv("FAKE_NVML_SCENARIO");
    struct stat st;
    if (!path || !*path || stat(path, &st) != 0)
        return;
    if (st.st_dev == loaded_dev && st.st_ino == loaded_ino &&
        st.st_mtim.tv_sec == loaded_mtime.tv_sec && st.st_mtim.tv_nsec == loaded_mtime.tv_nsec)
        return;
    static struct fake_dev saved[MAX_DEV];
    memcpy(saved, devs, sizeof devs);
    load_scenario(path);
    init_error = 0; /* already initialised: an init error applies to the next session */
    for (int i = 0; i < MAX_DEV; i++) {
        devs[i].tick = saved[i].tick;
        devs[i].tick_us = saved[i].tick_us;
        devs[i].energy_mj = saved[i].energy_mj;
        devs[i].energy_at_s = saved[i].energy_at_s;
    }
}

/* ---- test control (not NVML) ------------------------------------------- */

int fakeNvmlReload(void) {
    pthread_mutex_lock(&mu);
    int r = load_scenario(getenv("FAKE_NVML_SCENARIO"));
    ncounters = 0;
    pthread_mutex_unlock(&mu);
    return r;
}

unsigned long fakeNvmlCallCount(const char *name) {
    unsigned long n = 0;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < ncounters; i++)
        if (strcmp(counters[i].name, name) == 0)
            n = counters[i].count;
    pthread_mutex_unlock(&mu);
    return n;
}

int fakeNvmlRefcount(void) { return refcount; }

/* ---- helpers ------------------------------------------------------------ */

static int is_missing(const char *fn) {
    for (int i = 0; i < nmissing; i++)
        if (strcmp(missing[i], fn) == 0)
            return 1;
    return 0;
}

static double value(const struct fake_dev *d, int s, double dflt) {
    int n = d->nvals[s];
    if (n == 0)
        return dflt;
    int t = d->tick < 0 ? 0 : d->tick;
    return d->series[s][t < n ? t : n - 1];
}

/* Common entry: count, "missing" and initialised checks. */
#define ENTER(fn)                                                                                  \
    pthread_mutex_lock(&mu);                                                                       \
    bump(fn);                                                                                      \
    if (is_missing(fn))                                                                            \
        RETURN(NVML_ERROR_FUNCTION_NOT_FOUND);                                                     \
    if (refcount <= 0)                                                                             \
        RETURN(NVML_ERROR_UNINITIALIZED)

#define RETURN(code)                                                                               \
    do {                                                                                           \
        int r_ = (code);                                                                           \
        pthread_mutex_unlock(&mu);                                                                 \
        return r_;                                                                                 \
    } while (0)

/* A device entry: ENTER plus handle, lost and injected-error checks. */
#define ENTER_DEV(fn, handle, dptr)                                                                \
    ENTER(fn);                                                                                     \
    struct fake_dev *dptr = check_dev(handle);                                                     \
    if (!dptr)                                                                                     \
        RETURN(NVML_ERROR_INVALID_ARGUMENT);                                                       \
    {                                                                                              \
        int e_ = injected(dptr, fn);                                                               \
        if (e_)                                                                                    \
            RETURN(e_);                                                                            \
    }

static struct fake_dev *check_dev(void *handle) {
    struct fake_dev *d = (struct fake_dev *)handle;
    if (d < devs || d >= devs + ndev || d->magic != DEV_MAGIC)
        return NULL;
    return d;
}

static int injected(const struct fake_dev *d, const char *fn) {
    int t = d->tick < 0 ? 0 : d->tick;
    if (d->lost_at >= 0 && t >= d->lost_at)
        return NVML_ERROR_GPU_IS_LOST;
    for (int i = 0; i < d->nerrs; i++) {
        const struct fake_err *e = &d->errs[i];
        if (strcmp(e->fn, fn) == 0 && t >= e->from_tick && (e->until_tick < 0 || t < e->until_tick))
            return e->code;
    }
    return 0;
}

static int proc_active(const struct fake_dev *d, const struct fake_proc *p) {
    int t = d->tick < 0 ? 0 : d->tick;
    return t >= p->from_tick && (p->until_tick < 0 || t < p->until_tick);
}

/* ---- init and system ---------------------------------------------------- */

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    pthread_mutex_lock(&mu);
    if (refcount == 0) {
        /* a fresh session: a fresh scenario and fresh call counts */
        load_scenario(getenv("FAKE_NVML_SCENARIO"));
        ncounters = 0;
    }
    bump("nvmlInitWithFlags");
    if (init_error)
        RETURN(init_error);
    refcount++;
    RETURN(NVML_SUCCESS);
}

nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }

nvmlReturn_t nvmlShutdown(void) {
    pthread_mutex_lock(&mu);
    bump("nvmlShutdown");
    if (refcount <= 0)
        RETURN(NVML_ERROR_UNINITIALIZED);
    refcount--;
    if (refcount == 0)
        write_counts();
    RETURN(NVML_SUCCESS);
}

const char *nvmlErrorString(nvmlReturn_t r) {
    switch (r) {
    case NVML_SUCCESS:
        return "Success";
    case NVML_ERROR_GPU_IS_LOST:
        return "GPU is lost";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH:
        return "Argument version mismatch";
    default:
        return "Fake NVML error";
    }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *buf, unsigned int len) {
    ENTER("nvmlSystemGetDriverVersion");
    if (!buf || len < strlen(driver_version) + 1)
        RETURN(NVML_ERROR_INSUFFICIENT_SIZE);
    snprintf(buf, len, "%s", driver_version);
    RETURN(NVML_SUCCESS);
}

nvmlReturn_t nvmlSystemGetNVMLVersion(char *buf, unsigned int len) {
    ENTER("nvmlSystemGetNVMLVersion");
    if (!buf || len < strlen(nvml_version) + 1)
        RETURN(NVML_ERROR_INSUFFICIENT_SIZE);
    snprintf(buf, len, "%s", nvml_version);
    RETURN(NVML_SUCCESS);
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v) {
    ENTER("nvmlSystemGetCudaDriverVersion");
    if (!v)
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    *v = cuda_version;
    RETURN(NVML_SUCCESS);
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v) {
    ENTER("nvmlSystemGetCudaDriverVersion_v2");
    if (!v)
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    *v = cuda_version;
    RETURN(NVML_SUCCESS);
}

/* ---- devices -------------------------------------------------------------- */

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *n) {
    ENTER("nvmlDeviceGetCount_v2");
    if (!n)
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    *n = (unsigned)ndev;
    RETURN(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, void **out) {
    ENTER("nvmlDeviceGetHandleByIndex_v2");
    if (!out || i >= (unsigned)ndev)
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    int e = injected(&devs[i], "nvmlDeviceGetHandleByIndex_v2");
    if (e)
        RETURN(e);
    *out = &devs[i];
    RETURN(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetIndex(void *h, unsigned int *i) {
    ENTER_DEV("nvmlDeviceGetIndex", h, d);
    *i = (unsigned)d->index;
    RETURN(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetUUID(void *h, char *buf, unsigned int len) {
    ENTER_DEV("nvmlDeviceGetUUID", h, d);
    if (!buf || len < strlen(d->uuid) + 1)
        RETURN(NVML_ERROR_INSUFFICIENT_SIZE);
    snprintf(buf, len, "%s", d->uuid);
    RETURN(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetName(void *h, char *buf, unsigned int len) {
    ENTER_DEV("nvmlDeviceGetName", h, d);
    if (!buf || len < strlen(d->name) + 1)
        RETURN(NVML_ERROR_INSUFFICIENT_SIZE);
    snprintf(buf, len, "%s", d->name);
    RETURN(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetArchitecture(void *h, unsigned int *arch) {
    ENTER_DEV("nvmlDeviceGetArchitecture", h, d);
    *arch = d->arch;
    RETURN(NVML_SUCCESS);
}

typedef struct {
    unsigned int gpu;
    unsigned int memory;
} nvmlUtilization_t;

nvmlReturn_t nvmlDeviceGetUtilizationRates(void *h, nvmlUtilization_t *u) {
    pthread_mutex_lock(&mu);
    if (refcount > 0)
        reload_if_changed();
    struct fake_dev *d0 = check_dev(h);
    if (d0 && refcount > 0) {
        /* the device clock: one tick per utilisation read */
        d0->tick++;
        d0->tick_us = wall_us();
    }
    pthread_mutex_unlock(&mu);
    ENTER_DEV("nvmlDeviceGetUtilizationRates", h, d);
    if (!u)
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    u->gpu = (unsigned)value(d, S_UTIL, 0);
    u->memory = (unsigned)value(d, S_MEM_UTIL, 0);
    RETURN(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetPowerUsage(void *h, unsigned int *mw) {
    ENTER_DEV("nvmlDeviceGetPowerUsage", h, d);
    *mw = (unsigned)(value(d, S_POWER_W, 100) * 1000.0);
    RETURN(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(void *h, unsigned int *mw) {
    ENTER_DEV("nvmlDeviceGetEnforcedPowerLimit", h, d);
    *mw = d->power_limit_w * 1000U;
    RETURN(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(void *h, unsigned long long *mj) {
    ENTER_DEV("nvmlDeviceGetTotalEnergyConsumption", h, d);
    double now = mono_s();
    if (d->energy_at_s > 0)
        d->energy_mj += value(d, S_POWER_W, 100) * (now - d->energy_at_s) * 1000.0;
    d->energy_at_s = now;
    *mj = (unsigned long long)d->energy_mj;
    RETURN(NVML_SUCCESS);
}

typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;

nvmlReturn_t nvmlDeviceGetMemoryInfo(void *h, nvmlMemory_t *m) {
    ENTER_DEV("nvmlDeviceGetMemoryInfo", h, d);
    unsigned long long total = d->mem_total_mib << 20;
    unsigned long long used = (unsigned long long)value(d, S_MEM_USED_MIB, 0) << 20;
    m->total = total;
    m->used = used;
    m->free = total > used ? total - used : 0;
    RETURN(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetTemperature(void *h, unsigned int sensor, unsigned int *t) {
    ENTER_DEV("nvmlDeviceGetTemperature", h, d);
    if (sensor != 0)
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    *t = (unsigned)value(d, S_TEMPERATURE_C, 40);
    RETURN(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetClockInfo(void *h, unsigned int type, unsigned int *mhz) {
    ENTER_DEV("nvmlDeviceGetClockInfo", h, d);
    if (type != 1)
        RETURN(NVML_ERROR_NOT_SUPPORTED);
    *mhz = (unsigned)value(d, S_SM_CLOCK_MHZ, d->sm_clock_max_mhz);
    RETURN(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetMaxClockInfo(void *h, unsigned int type, unsigned int *mhz) {
    ENTER_DEV("nvmlDeviceGetMaxClockInfo", h, d);
    if (type != 1)
        RETURN(NVML_ERROR_NOT_SUPPORTED);
    *mhz = d->sm_clock_max_mhz;
    RETURN(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(void *h, unsigned long long *r) {
    ENTER_DEV("nvmlDeviceGetCurrentClocksThrottleReasons", h, d);
    *r = (unsigned long long)value(d, S_THROTTLE, 0);
    RETURN(NVML_SUCCESS);
}

#ifndef FAKE_OLD_DRIVER
nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(void *h, unsigned long long *r) {
    ENTER_DEV("nvmlDeviceGetCurrentClocksEventReasons", h, d);
    *r = (unsigned long long)value(d, S_THROTTLE, 0);
    RETURN(NVML_SUCCESS);
}
#endif

/* ---- processes ----------------------------------------------------------- */

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlProcessInfo_t;

static nvmlReturn_t running(struct fake_dev *d, unsigned int *count, nvmlProcessInfo_t *out) {
    unsigned n = 0;
    for (int i = 0; i < d->nprocs; i++)
        n += proc_active(d, &d->procs[i]) ? 1 : 0;
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (*count < n || (!out && n > 0)) {
        *count = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    unsigned k = 0;
    for (int i = 0; i < d->nprocs; i++) {
        if (!proc_active(d, &d->procs[i]))
            continue;
        out[k].pid = d->procs[i].pid;
        out[k].usedGpuMemory = d->procs[i].used_mib << 20;
        out[k].gpuInstanceId = 0xFFFFFFFFU;
        out[k].computeInstanceId = 0xFFFFFFFFU;
        k++;
    }
    *count = n;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(void *h, unsigned int *c, nvmlProcessInfo_t *p) {
    ENTER_DEV("nvmlDeviceGetComputeRunningProcesses_v2", h, d);
    RETURN(running(d, c, p));
}

#ifndef FAKE_OLD_DRIVER
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(void *h, unsigned int *c, nvmlProcessInfo_t *p) {
    ENTER_DEV("nvmlDeviceGetComputeRunningProcesses_v3", h, d);
    RETURN(running(d, c, p));
}
#endif

/* Samples of active processes newer than last_seen; the sample time is the tick time. */
static unsigned new_samples(const struct fake_dev *d, unsigned long long last_seen) {
    if (d->tick < 0 || d->tick_us <= last_seen)
        return 0;
    unsigned n = 0;
    for (int i = 0; i < d->nprocs; i++)
        n += (proc_active(d, &d->procs[i]) && d->procs[i].sm >= 0) ? 1 : 0;
    return n;
}

typedef struct {
    unsigned int pid;
    unsigned long long timeStamp;
    unsigned int smUtil, memUtil, encUtil, decUtil;
} nvmlProcessUtilizationSample_t;

nvmlReturn_t nvmlDeviceGetProcessUtilization(void *h, nvmlProcessUtilizationSample_t *s,
                                             unsigned int *count, unsigned long long last_seen) {
    ENTER_DEV("nvmlDeviceGetProcessUtilization", h, d);
    if (!count)
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    unsigned n = new_samples(d, last_seen);
    if (n == 0)
        RETURN(NVML_ERROR_NOT_FOUND);
    if (!s || *count < n) {
        *count = n;
        RETURN(NVML_ERROR_INSUFFICIENT_SIZE);
    }
    unsigned k = 0;
    for (int i = 0; i < d->nprocs; i++) {
        const struct fake_proc *p = &d->procs[i];
        if (!proc_active(d, p) || p->sm < 0)
            continue;
        s[k].pid = p->pid;
        s[k].timeStamp = d->tick_us;
        s[k].smUtil = (unsigned)p->sm;
        s[k].memUtil = 0;
        s[k].encUtil = 0;
        s[k].decUtil = 0;
        k++;
    }
    *count = k;
    RETURN(NVML_SUCCESS);
}

#ifndef FAKE_OLD_DRIVER
typedef struct {
    unsigned long long timeStamp;
    unsigned int pid, smUtil, memUtil, encUtil, decUtil, jpgUtil, ofaUtil;
} nvmlProcessUtilizationInfo_v1_t;

typedef struct {
    unsigned int version;
    unsigned int processSamplesCount;
    unsigned long long lastSeenTimeStamp;
    nvmlProcessUtilizationInfo_v1_t *procUtilArray;
} nvmlProcessesUtilizationInfo_t;

#define PROCESSES_UTILIZATION_INFO_V1 0x01000018U

nvmlReturn_t nvmlDeviceGetProcessesUtilizationInfo(void *h, nvmlProcessesUtilizationInfo_t *info) {
    ENTER_DEV("nvmlDeviceGetProcessesUtilizationInfo", h, d);
    if (!info)
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    if (info->version != PROCESSES_UTILIZATION_INFO_V1)
        RETURN(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    unsigned n = new_samples(d, info->lastSeenTimeStamp);
    if (n == 0)
        RETURN(NVML_ERROR_NOT_FOUND);
    if (!info->procUtilArray || info->processSamplesCount < n) {
        info->processSamplesCount = n;
        RETURN(NVML_ERROR_INSUFFICIENT_SIZE);
    }
    unsigned k = 0;
    for (int i = 0; i < d->nprocs; i++) {
        const struct fake_proc *p = &d->procs[i];
        if (!proc_active(d, p) || p->sm < 0)
            continue;
        nvmlProcessUtilizationInfo_v1_t *o = &info->procUtilArray[k++];
        memset(o, 0, sizeof *o);
        o->timeStamp = d->tick_us;
        o->pid = p->pid;
        o->smUtil = (unsigned)p->sm;
    }
    info->processSamplesCount = k;
    RETURN(NVML_SUCCESS);
}

/* ---- GPM ------------------------------------------------------------------ */

/* GPM metric ids (nvmlGpmMetricId_t) and the series that feeds each. */
static const struct {
    unsigned id;
    int series;
} gpm_metrics[] = {{2, S_SM_UTIL}, {3, S_SM_OCCUPANCY}, {5, S_TENSOR_UTIL}, {10, S_DRAM_UTIL}};

typedef struct {
    unsigned int version;
    unsigned int isSupportedDevice;
} nvmlGpmSupport_t;

typedef struct {
    unsigned int metricId;
    nvmlReturn_t nvmlReturn;
    double value;
    struct {
        char *shortName;
        char *longName;
        char *unit;
    } metricInfo;
} nvmlGpmMetric_t;

typedef struct {
    unsigned int version;
    unsigned int numMetrics;
    struct gpm_sample *sample1;
    struct gpm_sample *sample2;
    nvmlGpmMetric_t metrics[GPM_METRIC_MAX];
} nvmlGpmMetricsGet_t;

nvmlReturn_t nvmlGpmQueryDeviceSupport(void *h, nvmlGpmSupport_t *s) {
    ENTER_DEV("nvmlGpmQueryDeviceSupport", h, d);
    if (!s)
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    if (s->version != 1)
        RETURN(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    s->isSupportedDevice = d->gpm ? 1 : 0;
    RETURN(NVML_SUCCESS);
}

nvmlReturn_t nvmlGpmSampleAlloc(struct gpm_sample **out) {
    ENTER("nvmlGpmSampleAlloc");
    if (!out)
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    struct gpm_sample *s = calloc(1, sizeof *s);
    if (!s)
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    s->magic = SAMPLE_MAGIC;
    s->dev = -1;
    *out = s;
    RETURN(NVML_SUCCESS);
}

nvmlReturn_t nvmlGpmSampleFree(struct gpm_sample *s) {
    ENTER("nvmlGpmSampleFree");
    if (!s || s->magic != SAMPLE_MAGIC)
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    s->magic = 0;
    free(s);
    RETURN(NVML_SUCCESS);
}

nvmlReturn_t nvmlGpmSampleGet(void *h, struct gpm_sample *s) {
    ENTER_DEV("nvmlGpmSampleGet", h, d);
    if (!s || s->magic != SAMPLE_MAGIC)
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    if (!d->gpm)
        RETURN(NVML_ERROR_NOT_SUPPORTED);
    s->dev = d->index;
    s->t_s = mono_s();
    for (int m = 0; m < 4; m++) {
        int sid = gpm_metrics[m].series;
        s->have[m] = d->nvals[sid] > 0;
        s->vals[m] = value(d, sid, 0);
    }
    RETURN(NVML_SUCCESS);
}

static char gpm_short[] = "fake";
static char gpm_long[] = "fake GPM metric";
static char gpm_unit[] = "%";

nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t *g) {
    ENTER("nvmlGpmMetricsGet");
    if (!g)
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    if (g->version != 1)
        RETURN(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    if (g->numMetrics > GPM_METRIC_MAX || !g->sample1 || !g->sample2 ||
        g->sample1->magic != SAMPLE_MAGIC || g->sample2->magic != SAMPLE_MAGIC ||
        g->sample1->dev < 0 || g->sample1->dev != g->sample2->dev)
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    if (g->sample2->t_s - g->sample1->t_s < 0.1)
        bump("gpm_pairs_under_100ms");
    const struct fake_dev *d = &devs[g->sample2->dev];
    for (unsigned i = 0; i < g->numMetrics; i++) {
        nvmlGpmMetric_t *m = &g->metrics[i];
        m->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        m->value = 0;
        m->metricInfo.shortName = gpm_short;
        m->metricInfo.longName = gpm_long;
        m->metricInfo.unit = gpm_unit;
        for (int k = 0; k < 4; k++) {
            if (gpm_metrics[k].id == m->metricId && g->sample2->have[k]) {
                m->nvmlReturn = NVML_SUCCESS;
                m->value = g->sample2->vals[k];
            }
        }
        for (int k = 0; k < d->ngpm_errs; k++)
            if (d->gpm_errs[k].metric == m->metricId)
                m->nvmlReturn = d->gpm_errs[k].code;
    }
    RETURN(NVML_SUCCESS);
}
#endif

/* The PCIe link and its throughput: a file of their own, built into this one. */
#include "fake_nvml_pcie.c"
