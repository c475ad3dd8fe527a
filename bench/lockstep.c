/* SPDX-License-Identifier: MIT */
/*
 * bench/lockstep.c - rounds of N threads started and finished together (lockstep.h).
 *
 * A round: the caller stores n in todo, all threads meet at the start barrier, each runs n
 * operations, all meet at the end barrier. The barriers order todo and quit (written by the
 * caller before the start barrier) before the workers read them, and every worker's round
 * before the caller's end time.
 */
#include "lockstep.h"

#include "bench.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *thr_of(struct bench_lockstep *ls, unsigned int i)
{
	return ls->thr + (size_t)i * ls->stride;
}

static void *worker(void *arg)
{
	struct bench_lockstep_arg *a = arg;
	struct bench_lockstep *ls = a->ls;
	void *t = thr_of(ls, a->id);

	bench_pin_cpu(a->id);
	if (ls->enter)
		ls->enter(t);
	for (;;) {
		pthread_barrier_wait(&ls->start);
		if (atomic_load_explicit(&ls->quit, memory_order_relaxed))
			break;
		ls->run(t, ls->todo);
		pthread_barrier_wait(&ls->end);
	}
	if (ls->leave)
		ls->leave(t);
	return NULL;
}

int bench_lockstep_start(struct bench_lockstep *ls, unsigned int nthr, void *thr, size_t stride,
			 void (*run)(void *thr, uint64_t n), void (*enter)(void *thr),
			 void (*leave)(void *thr))
{
	if (!nthr || nthr > BENCH_LOCKSTEP_MAX)
		return -EINVAL;
	*ls = (struct bench_lockstep){.nthr = nthr,
				      .thr = thr,
				      .stride = stride,
				      .run = run,
				      .enter = enter,
				      .leave = leave};
	atomic_init(&ls->quit, false);
	if (nthr > 1) {
		pthread_barrier_init(&ls->start, NULL, nthr);
		pthread_barrier_init(&ls->end, NULL, nthr);
		for (unsigned int i = 1; i < nthr; i++) {
			int e;

			ls->arg[i] = (struct bench_lockstep_arg){.ls = ls, .id = i};
			e = pthread_create(&ls->tid[i], NULL, worker, &ls->arg[i]);
			if (e) {
				/* The threads already started wait at a barrier that needs all of
				 * them: nothing can release them, so the benchmark ends here. */
				fprintf(stderr, "bench: cannot start thread %u: %s\n", i,
					strerror(e));
				exit(1);
			}
		}
	}
	bench_pin_cpu(0);
	return 0;
}

uint64_t bench_lockstep_round(struct bench_lockstep *ls, uint64_t n)
{
	uint64_t t0, t1;

	ls->todo = n;
	if (ls->nthr > 1)
		pthread_barrier_wait(&ls->start);
	t0 = bench_now_ns();
	ls->run(thr_of(ls, 0), n);
	if (ls->nthr > 1)
		pthread_barrier_wait(&ls->end);
	t1 = bench_now_ns();
	return t1 - t0;
}

uint64_t bench_lockstep_calibrate(struct bench_lockstep *ls, double budget_ns, uint64_t min,
				  uint64_t max_probe)
{
	uint64_t probe = 1, ns, per;

	for (;;) {
		ns = bench_lockstep_round(ls, probe);
		if (ns > 5e6 || ns > budget_ns / 10 || probe > max_probe)
			break;
		probe *= 2;
	}
	per = (uint64_t)(budget_ns * (double)probe / (double)(ns ? ns : 1));
	return per < min ? min : per;
}

void bench_lockstep_stop(struct bench_lockstep *ls)
{
	if (ls->nthr < 2)
		return;
	atomic_store_explicit(&ls->quit, true, memory_order_relaxed);
	pthread_barrier_wait(&ls->start);
	for (unsigned int i = 1; i < ls->nthr; i++)
		pthread_join(ls->tid[i], NULL);
	pthread_barrier_destroy(&ls->start);
	pthread_barrier_destroy(&ls->end);
}
