/* The lab's burner: burns the cpu and holds the memory a usage series dictates, or does a fixed
 * amount of cpu work and exits. Built static (gcc -static -O2 -pthread) into kalena/lab-burner:test.
 *
 *   burner series STEP_S REPEAT CPU_M,CPU_M,... MEMORY_MIB,MEMORY_MIB,...
 *       step i of the series holds from i*STEP_S to (i+1)*STEP_S seconds after start; REPEAT 1
 *       starts over after the last step, 0 holds the last step. Runs until killed.
 *   burner work CPU_M MEMORY_MIB DURATION_S
 *       holds MEMORY_MIB and burns at CPU_M until CPU_M/1000 * DURATION_S cpu-seconds are done
 *       (a throttled container takes longer), then exits 0; stopped (SIGTERM) before that, exits 143.
 *
 * CPU: every 100 ms period each worker thread spins until its own cpu time in the period reaches
 * its share of the target (thread cpu clock, so time spent throttled or preempted is not counted
 * as burnt), then sleeps to the end of the period; what a period could not burn is owed to the
 * next (at most one period's share), so a busy host shifts usage rather than losing it; ceil(max CPU_M / 1000) workers, each burning at most one
 * cpu. Memory: 1 MiB blocks mmap'ed and written page by page (every page charged to the cgroup),
 * unmapped again when the target falls.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define PERIOD_NS 100000000L
#define MIB (1024L * 1024L)

static long *cpu_series, *mem_series;
static int n_steps, repeat_series;
static double step_s;
static volatile long target_mcpu;   /* what the workers burn now */
static volatile int done;
static int n_workers;
static char **blocks;
static long n_blocks, max_blocks;

static long now_ns(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

static void sleep_until(long deadline_ns) {
    struct timespec ts = {deadline_ns / 1000000000L, deadline_ns % 1000000000L};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0) {}
}

static void *worker(void *arg) {
    long index = (long)arg;
    long period_start = now_ns(CLOCK_MONOTONIC);
    long debt = 0;   /* cpu time owed from earlier periods (preempted or throttled), at most one period's share */
    while (!done) {
        long share = target_mcpu - index * 1000;
        if (share > 1000) share = 1000;
        if (share < 0) share = 0;
        long target = share * (PERIOD_NS / 1000);
        long want = target + debt, burnt = 0;
        if (want > 0) {
            long cpu0 = now_ns(CLOCK_THREAD_CPUTIME_ID);
            volatile unsigned long spin = 0;
            while ((burnt = now_ns(CLOCK_THREAD_CPUTIME_ID) - cpu0) < want &&
                   now_ns(CLOCK_MONOTONIC) < period_start + PERIOD_NS)
                spin++;
        }
        debt = want - burnt;
        if (debt > target) debt = target;
        if (debt < 0) debt = 0;
        period_start += PERIOD_NS;
        long now = now_ns(CLOCK_MONOTONIC);
        if (period_start < now) period_start = now;  /* fell behind: the debt carries what was missed */
        sleep_until(period_start);
    }
    return NULL;
}

static void hold_memory(long mib) {
    if (mib > max_blocks) mib = max_blocks;
    while (n_blocks < mib) {
        char *b = mmap(NULL, MIB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (b == MAP_FAILED) return;
        for (long off = 0; off < MIB; off += 4096) b[off] = 1;
        blocks[n_blocks++] = b;
    }
    while (n_blocks > mib) munmap(blocks[--n_blocks], MIB);
}

static int parse_list(const char *text, long **out) {
    int n = 1;
    for (const char *p = text; *p; p++) n += *p == ',';
    *out = calloc(n, sizeof(long));
    char *copy = strdup(text), *save = NULL;
    int i = 0;
    for (char *tok = strtok_r(copy, ",", &save); tok && i < n; tok = strtok_r(NULL, ",", &save)) {
        char *end;
        long v = strtol(tok, &end, 10);
        if (*end || v < 0) { fprintf(stderr, "burner: %s is not a number >= 0\n", tok); exit(2); }
        (*out)[i++] = v;
    }
    free(copy);
    return i;
}

static void start_workers(long max_mcpu) {
    n_workers = (int)((max_mcpu + 999) / 1000);
    if (n_workers < 1) n_workers = 1;
    for (long i = 0; i < n_workers; i++) {
        pthread_t t;
        pthread_create(&t, NULL, worker, (void *)i);
        pthread_detach(t);
    }
}

/* A series (production) stops cleanly on SIGTERM; unfinished work reports it was stopped, as a
 * program killed by SIGTERM does (128 + 15): a stopped batch pod is Failed, never Succeeded. */
static volatile int work_mode;
static void on_term(int sig) { (void)sig; _exit(work_mode ? 143 : 0); }

static int usage(void) {
    fprintf(stderr, "usage: burner series STEP_S REPEAT CPU_M,... MEMORY_MIB,...\n"
                    "       burner work CPU_M MEMORY_MIB DURATION_S\n");
    return 2;
}

int main(int argc, char **argv) {
    signal(SIGTERM, on_term);
    signal(SIGINT, on_term);
    setvbuf(stdout, NULL, _IOLBF, 0);
    max_blocks = 1L << 20;
    blocks = calloc(max_blocks, sizeof(char *));
    if (argc == 6 && strcmp(argv[1], "series") == 0) {
        step_s = atof(argv[2]);
        repeat_series = atoi(argv[3]);
        n_steps = parse_list(argv[4], &cpu_series);
        if (parse_list(argv[5], &mem_series) != n_steps || step_s <= 0) return usage();
        long max_mcpu = 0;
        for (int i = 0; i < n_steps; i++) if (cpu_series[i] > max_mcpu) max_mcpu = cpu_series[i];
        target_mcpu = cpu_series[0];
        start_workers(max_mcpu);
        long t0 = now_ns(CLOCK_MONOTONIC);
        int shown = -1;
        for (;;) {
            double t = (now_ns(CLOCK_MONOTONIC) - t0) / 1e9;
            long i = (long)(t / step_s);
            if (i >= n_steps) i = repeat_series ? i % n_steps : n_steps - 1;
            target_mcpu = cpu_series[i];
            hold_memory(mem_series[i]);
            if (i != shown) { printf("step %ld: %ld m, %ld MiB\n", i, cpu_series[i], mem_series[i]); shown = (int)i; }
            usleep(100000);
        }
    }
    if (argc == 5 && strcmp(argv[1], "work") == 0) {
        work_mode = 1;
        long mcpu = atol(argv[2]), mib = atol(argv[3]);
        double duration = atof(argv[4]);
        if (mcpu < 0 || mib < 0 || duration < 0) return usage();
        hold_memory(mib);
        target_mcpu = mcpu;
        double work_s = mcpu / 1000.0 * duration;
        if (mcpu > 0) start_workers(mcpu);
        long t0 = now_ns(CLOCK_MONOTONIC);
        for (;;) {
            double burnt = now_ns(CLOCK_PROCESS_CPUTIME_ID) / 1e9;
            if (mcpu == 0 ? (now_ns(CLOCK_MONOTONIC) - t0) / 1e9 >= duration : burnt >= work_s) break;
            usleep(50000);
        }
        done = 1;
        printf("work done: %.2f cpu-s in %.2f s\n", now_ns(CLOCK_PROCESS_CPUTIME_ID) / 1e9,
               (now_ns(CLOCK_MONOTONIC) - t0) / 1e9);
        return 0;
    }
    return usage();
}
