/* SPDX-License-Identifier: MIT */
/*
 * bench/lockstep.h - the rounds of a multi-threaded micro-benchmark: N threads (the caller is
 * thread 0) each run the same number of operations per round, started and finished together at
 * two barriers, so a round's wall time is the time of its slowest thread. Thread i is pinned to
 * the i-th CPU of the suite's initial set (bench_pin_cpu()). With one thread there is no
 * barrier and no other thread.
 *
 * Used by the suites whose cases are "n operations on each of T threads": bench_iova.c and
 * bench_dma.c.
 */
#ifndef DG_BENCH_LOCKSTEP_H
#define DG_BENCH_LOCKSTEP_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define BENCH_LOCKSTEP_MAX 8

struct bench_lockstep;

struct bench_lockstep_arg {
	struct bench_lockstep *ls;
	unsigned int id;
};

struct bench_lockstep {
	unsigned int nthr;
	char *thr; /* thread i's state: thr + i * stride */
	size_t stride;
	void (*run)(void *thr, uint64_t n); /* n operations on one thread */
	void (*leave)(void *thr);	    /* a worker thread's last call, or NULL */
	void (*enter)(void *thr);	    /* a worker thread's first call, or NULL */
	uint64_t todo;			    /* this round's n (written before the start barrier) */
	atomic_bool quit;
	pthread_barrier_t start, end;
	pthread_t tid[BENCH_LOCKSTEP_MAX];
	struct bench_lockstep_arg arg[BENCH_LOCKSTEP_MAX];
};

/*
 * Start threads 1..nthr-1 (each calls @enter, then runs rounds until bench_lockstep_stop(),
 * then calls @leave) and pin the caller to CPU 0. The caller does its own set-up for thread 0.
 * Returns 0 or -EINVAL (nthr 0 or above BENCH_LOCKSTEP_MAX). A thread that cannot be created
 * ends the process with a message (the others already wait at a barrier that needs it).
 */
int bench_lockstep_start(struct bench_lockstep *ls, unsigned int nthr, void *thr, size_t stride,
			 void (*run)(void *thr, uint64_t n), void (*enter)(void *thr),
			 void (*leave)(void *thr));

/* One round: @n operations on every thread; returns the round's wall time in ns. */
uint64_t bench_lockstep_round(struct bench_lockstep *ls, uint64_t n);

/*
 * How many operations per round make a round last about @budget_ns: doubles a probe round from
 * 1 until it takes 5 ms or a tenth of the budget (or the probe passes @max_probe), then scales.
 * At least @min.
 */
uint64_t bench_lockstep_calibrate(struct bench_lockstep *ls, double budget_ns, uint64_t min,
				  uint64_t max_probe);

/* Stop and join the worker threads. */
void bench_lockstep_stop(struct bench_lockstep *ls);

#endif /* DG_BENCH_LOCKSTEP_H */
