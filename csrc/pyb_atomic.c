/* pyb_atomic.c - futex wait/wake and clocks for the atomics layer (Linux). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "pyb_atomic.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

void pyb_futex_wait(_Atomic uint32_t *word, uint32_t expected)
{
    /* FUTEX_WAIT re-checks *word == expected atomically in the kernel, so a wake that happened
     * between our caller's check and this call is not lost. */
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
}

int pyb_futex_wait_ns(_Atomic uint32_t *word, uint32_t expected, uint64_t timeout_ns)
{
    if (!timeout_ns) {
        pyb_futex_wait(word, expected);
        return 0;
    }
    /* FUTEX_WAIT's timeout is relative (CLOCK_MONOTONIC). */
    struct timespec ts = {(time_t)(timeout_ns / 1000000000ull), (long)(timeout_ns % 1000000000ull)};
    if (syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT_PRIVATE, expected, &ts, NULL, 0) != 0 &&
        errno == ETIMEDOUT)
        return ETIMEDOUT;
    return 0;
}

void pyb_futex_wake_all(_Atomic uint32_t *word)
{
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

uint64_t pyb_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t pyb_thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
