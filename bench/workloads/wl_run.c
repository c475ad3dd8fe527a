/* SPDX-License-Identifier: MIT */
/*
 * bench/workloads/wl_run.c - one run of a workload under one configuration: the thread pairs,
 * the measured interval, the drain and the checks.
 *
 *   main thread          driver thread i (CPU 2i)        device thread i (CPU 2i+1)
 *   set-up (wl_env.c)
 *   start threads ---->  poll its ports                   burst on its ports, quiesce each
 *   sleep warm-up
 *   snapshot A
 *   sleep duration
 *   snapshot B
 *   phase = DRAIN ---->  stop posting, reap until idle
 *                        drained++  (release)
 *   wait drained (acquire)
 *   phase = STOP ------------------------------------->  offline, exit
 *   join, whole-run checks, teardown
 *
 * The interval lasts --duration seconds, longer if fewer than WL_MIN_IOS I/Os were done by
 * then, or the device did fewer than a quarter of that (on a loaded shared machine a pinned
 * thread can be descheduled for tens of ms while its partner drains a full ring, and under
 * load 10 on 2 CPUs for over a second: the extension is capped at 5 x duration + 30 s, so a
 * run on a healthy machine never waits and a starved one still measures some I/O).
 * Snapshots read the threads' relaxed counters and the library's statistics while the
 * threads run: each counter is exact, the set of them is a few hundred ns apart, which is
 * nothing next to an interval of 10^5..10^6 I/Os. Fixed-count mode (ops) skips the clock:
 * each driver stops posting once it completed ops I/Os, so a run does ops I/Os plus what was
 * in flight, and callgrind counts of two such runs differ by the cost of the difference.
 *
 * A run whose threads make no progress for WL_STUCK_NS while draining (or doing a fixed
 * count) is a bug in a model or the library: it is reported with the workload's dump of
 * its rings, stopped, and left allocated (its mappings are still out), never waited for.
 * "No progress" counts only once every live thread has had the CPU for a while meanwhile
 * (1/WL_RAN_PART of the limit, read from its CPU clock): the threads are pinned (driver i to
 * CPU 2i, device i to 2i+1, so the measurements repeat), and on a loaded machine (sanitizer
 * builds side by side, load 15-20 on 2 CPUs) a pinned thread has been seen to get no CPU at
 * all for over 5 s while its partner looped - a wait for it then is starvation, not a stall.
 * Tests that measure nothing (the stress test) run them unpinned (wl_run_opts.unpinned), so
 * that the scheduler can move a starved thread to the other CPU. Threads that loop without progress burn CPU and are caught
 * after WL_STUCK_NS as before; a thread that never runs again (blocked) after
 * WL_STARVED_TIMES times that. WL_STUCK_STACKS=1 in the environment adds, half-way, the
 * threads' scheduler state and stacks (gdb) to the report.
 *
 * Idle loops spin with a pause hint, yield the CPU after every WL_IDLE_SPINS empty polls
 * (some tens of microseconds) and, once idle for about a millisecond, sleep 20 us per poll:
 * when the CPUs are shared (more thread pairs than CPUs, tests running side by side, a loaded
 * machine), a spinning thread would otherwise hold its CPU while the partner it waits for is
 * queued behind it (a CFS yield does not always give way). A device thread calls
 * dg_dev_quiesce() after every pass over its ports, busy or not, so strict waits complete;
 * before it gives up its CPU it takes its devices offline (dg_dev_offline), as a device does
 * that stops doing DMA for a while: a driver's wait never waits for a thread that is not
 * running. The next translation brings a device back online.
 */
#include "wl.h"

#include "base/clock.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define WL_STUCK_NS	 10000000000ull /* no progress for this long while draining: a bug */
#define WL_RAN_PART	 200		/* ... once every thread ran 1/200 of it (50 ms of CPU) */
#define WL_STARVED_TIMES 6    /* ... or in any case after 6 times that (a thread never ran) */
#define WL_IDLE_SPINS	 1024 /* empty polls between yields */
#define WL_IDLE_SLEEP	 32   /* yields before idle polls start to sleep 20 us each */
/* A measured interval lasts until at least WL_MIN_IOS I/Os (and a quarter as many device units)
   were done, or WL_MIN_IOS_WAIT_S beyond 5 x --duration (a starved pinned thread, load 10 on
   2 CPUs, has been seen to get no CPU for over a second). */
#define WL_MIN_IOS	  256
#define WL_MIN_IOS_WAIT_S 30.0

unsigned int wl_threads_for(const struct wl_workload *wl, unsigned int threads)
{
	if (!threads)
		threads = 1;
	if (wl->max_threads && threads > wl->max_threads)
		threads = wl->max_threads;
	if (threads > WL_MAX_THREADS)
		threads = WL_MAX_THREADS;
	return threads;
}

struct thr_arg {
	struct wl_run *run;
	unsigned int id;
	_Atomic long tid; /* the kernel's thread id, for the stuck-run report */
};

/*
 * Idle time of a thread: a run of empty polls starts a clock (*since) and the next poll that
 * did something adds the run's length to @c, so busy polls read no clock (the busy fraction
 * of the report: which side of a pair limits it).
 */
static void idle_account(_Atomic uint64_t *c, uint64_t *since, bool work)
{
	if (!work && !*since) {
		*since = bench_now_ns();
	} else if (work && *since) {
		wl_ctr_add(c, bench_now_ns() - *since);
		*since = 0;
	}
}

/* One empty poll. @dev: a device thread, whose devices go offline before it yields. */
static void idle(unsigned int *spins, struct wl_dev *dev)
{
	++*spins;
	if (*spins % WL_IDLE_SPINS) {
		dg_cpu_relax();
		return;
	}
	for (unsigned int i = 0; dev && i < dev->ndevs; i++)
		dg_dev_offline(dev->devs[i]);
	if (*spins < WL_IDLE_SLEEP * WL_IDLE_SPINS) {
		sched_yield();
		return;
	}
	/* idle for long: the partner is not running, let anything else have this CPU */
	struct timespec ts = {.tv_nsec = 20000};

	nanosleep(&ts, NULL);
}

static bool my_ports_idle(struct wl_run *r, unsigned int id)
{
	for (unsigned int i = 0; i < r->nports; i++)
		if (r->port[i].drv_thr == id && !r->wl->drv_idle(&r->port[i]))
			return false;
	return true;
}

static void *driver_main(void *arg)
{
	struct thr_arg *a = arg;
	struct wl_run *r = a->run;
	struct wl_drv d = {.run = r, .id = a->id, .ctr = &r->drv[a->id]};
	unsigned int spins = 0;
	uint64_t idle_since = 0;

	atomic_store_explicit(&a->tid, (long)syscall(SYS_gettid), memory_order_relaxed);
	if (!r->unpinned)
		bench_pin_cpu(2 * a->id);
	d.rng = 0x9e3779b97f4a7c15ull ^ ((uint64_t)a->id + 1) * 0x2545f4914f6cdd1dull;
	atomic_fetch_add(&r->started, 1);
	for (;;) {
		int ph = wl_phase(r);
		bool work = false;

		d.posting =
			ph == WL_RUN &&
			(!r->ops_limit ||
			 atomic_load_explicit(&d.ctr->ios, memory_order_relaxed) < r->ops_limit);
		wl_ctr_add(&d.ctr->loops, 1);
		for (unsigned int i = 0; i < r->nports; i++)
			if (r->port[i].drv_thr == a->id)
				work |= r->wl->drv_poll(&d, &r->port[i]);
		if ((!d.posting && my_ports_idle(r, a->id)) || ph == WL_STOP)
			break;
		idle_account(&d.ctr->idle_ns, &idle_since, work);
		if (work)
			spins = 0;
		else
			idle(&spins, NULL);
	}
	/* Release pairs with the acquire load of drained in wl_run_once(). */
	atomic_fetch_add_explicit(&r->drained, 1, memory_order_release);
	return NULL;
}

static void *device_main(void *arg)
{
	struct thr_arg *a = arg;
	struct wl_run *r = a->run;
	struct wl_dev d = {.run = r, .id = a->id, .ctr = &r->dev[a->id]};
	unsigned int spins = 0;
	uint64_t idle_since = 0;

	atomic_store_explicit(&a->tid, (long)syscall(SYS_gettid), memory_order_relaxed);
	if (!r->unpinned)
		bench_pin_cpu(2 * a->id + 1);
	d.scratch = malloc(65536);
	for (unsigned int i = 0; i < r->nports; i++)
		if (r->port[i].dev_thr == a->id)
			d.devs[d.ndevs++] = r->port[i].dev;
	atomic_fetch_add(&r->started, 1);
	while (d.scratch && wl_phase(r) != WL_STOP) {
		bool work = false;

		wl_ctr_add(&d.ctr->loops, 1);

		for (unsigned int i = 0; i < r->nports; i++) {
			struct wl_port *p = &r->port[i];

			if (p->dev_thr != a->id)
				continue;
			work |= r->wl->dev_poll(&d, p);
		}
		wl_dev_quiesce(&d); /* idle or not, every device acknowledges */
		idle_account(&d.ctr->idle_ns, &idle_since, work);
		if (work)
			spins = 0;
		else
			idle(&spins, &d);
	}
	if (!d.scratch)
		wl_ctr_add(&d.ctr->errors, 1);
	for (unsigned int i = 0; i < r->nports; i++)
		if (r->port[i].dev_thr == a->id)
			dg_dev_offline(r->port[i].dev);
	free(d.scratch);
	return NULL;
}

/* ---- snapshots -------------------------------------------------------------------------------- */

struct snap {
	uint64_t t;
	uint64_t ios, bytes, dma_ns, dma_ios, units, xlat_ns, xlat_units, dev_bytes, errors,
		timeouts;
	uint64_t maps, unmaps, subpage_bytes, subpage_max, persistent, win_ns, win_unmaps;
	uint64_t misses, walks, faults, cmds, waits;
	uint64_t drv_idle_ns, dev_idle_ns;
	bool all;
};

static uint64_t ld(_Atomic uint64_t *c)
{
	return atomic_load_explicit(c, memory_order_relaxed);
}

static void snapshot(struct wl_run *r, struct snap *s)
{
	struct dg_iommu_stats is;

	memset(s, 0, sizeof(*s));
	for (unsigned int i = 0; i < r->nthreads; i++) {
		struct wl_ctr *c = &r->drv[i], *v = &r->dev[i];

		s->ios += ld(&c->ios);
		s->bytes += ld(&c->bytes);
		s->dma_ns += ld(&c->dma_ns);
		s->dma_ios += ld(&c->dma_ios);
		s->units += ld(&v->units);
		s->xlat_ns += ld(&v->xlat_ns);
		s->xlat_units += ld(&v->xlat_units);
		s->dev_bytes += ld(&v->dev_bytes);
		s->errors += ld(&c->errors) + ld(&v->errors);
		s->timeouts += ld(&c->timeouts);
		s->drv_idle_ns += ld(&c->idle_ns);
		s->dev_idle_ns += ld(&v->idle_ns);
	}
	for (unsigned int i = 0; i < r->nports; i++) {
		struct dg_dma_stats st;

		dg_dma_dev_stats(r->port[i].dd, &st);
		/* buffers handed to the device: streaming maps and two-step links */
		s->maps += st.maps + st.links;
		s->unmaps += st.unmaps + st.unlinks;
		s->subpage_bytes += st.subpage_bytes;
		s->subpage_max = st.subpage_max > s->subpage_max ? st.subpage_max : s->subpage_max;
		s->persistent += st.persistent_bytes;
		s->win_ns = st.lazy_window_max_ns > s->win_ns ? st.lazy_window_max_ns : s->win_ns;
		s->win_unmaps = st.lazy_window_max_unmaps > s->win_unmaps ?
					st.lazy_window_max_unmaps :
					s->win_unmaps;
		s->all |= st.exposes_all_memory;
		s->errors += st.err_invalid + st.err_range + st.err_not_mapped + st.err_iova_space +
			     st.err_shadow_space + st.err_nomem + st.err_other;
	}
	dg_iommu_stats(r->mmu, &is);
	s->misses = is.iotlb_misses;
	s->walks = is.walks;
	s->faults = is.faults;
	for (unsigned int k = 0; k < DG_INVAL_NR_TYPES; k++)
		s->cmds += is.inval_cmds[k];
	s->waits = is.waits;
	s->t = bench_now_ns();
}

/* The state of a run that stopped making progress. */
static void stuck_report(struct wl_run *r, FILE *out)
{
	char diag[512];

	for (unsigned int i = 0; i < r->nthreads; i++)
		fprintf(out,
			"  thread pair %u: driver %llu loops %llu I/Os, device %llu loops %llu units\n",
			i, (unsigned long long)ld(&r->drv[i].loops),
			(unsigned long long)ld(&r->drv[i].ios),
			(unsigned long long)ld(&r->dev[i].loops),
			(unsigned long long)ld(&r->dev[i].units));
	for (unsigned int i = 0; i < r->nports; i++) {
		struct dg_dev_stats ds;

		dg_dev_stats(r->port[i].dev, &ds);
		fprintf(out,
			"  port %u: device %s, acked %llu, %llu commands applied, %llu flushes, %llu "
			"laps, %llu faults, %llu hits, %llu misses\n",
			i, dg_dev_is_online(r->port[i].dev) ? "online" : "offline",
			(unsigned long long)ds.acked, (unsigned long long)ds.cmds_processed,
			(unsigned long long)ds.flushes, (unsigned long long)ds.laps,
			(unsigned long long)ds.faults, (unsigned long long)ds.iotlb_hits,
			(unsigned long long)ds.iotlb_misses);
		if (r->wl->dump)
			r->wl->dump(&r->port[i], out);
	}
	if (dg_iommu_last_diag(r->mmu, diag, sizeof(diag)))
		fprintf(out, "  last IOMMU diagnostic: %s\n", diag);
}

static void sleep_s(double s);

/* One thread's scheduler state: /proc stat (state, CPU times, last CPU) and schedstat. */
static void thread_sched(const char *who, unsigned int id, long tid, FILE *out)
{
	char path[64], st[512] = "", ss[128] = "";
	FILE *f;

	snprintf(path, sizeof(path), "/proc/self/task/%ld/stat", tid);
	if ((f = fopen(path, "r"))) {
		if (!fgets(st, sizeof(st), f))
			st[0] = '\0';
		fclose(f);
	}
	snprintf(path, sizeof(path), "/proc/self/task/%ld/schedstat", tid);
	if ((f = fopen(path, "r"))) {
		if (!fgets(ss, sizeof(ss), f))
			ss[0] = '\0';
		fclose(f);
	}
	st[strcspn(st, "\n")] = '\0';
	ss[strcspn(ss, "\n")] = '\0';
	/* stat after the command name: state ppid ... utime(14) stime(15) ... processor(39) */
	const char *p = strrchr(st, ')');
	char state = '?';
	unsigned long long ut = 0, stm = 0;
	int cpu = -1;

	if (p) {
		char *q = (char *)p + 2;

		state = *q;
		for (int field = 3; q && field <= 39; field++) {
			if (field == 14)
				ut = strtoull(q, NULL, 10);
			else if (field == 15)
				stm = strtoull(q, NULL, 10);
			else if (field == 39)
				cpu = atoi(q);
			q = strchr(q, ' ');
			if (q)
				q++;
		}
	}
	fprintf(out,
		"  %s %u tid %ld: state %c, utime %llu stime %llu ticks, cpu %d, schedstat %s\n",
		who, id, tid, state, ut, stm, cpu, ss);
}

/*
 * Opt-in (WL_STUCK_STACKS=1 in the environment): half-way to the stuck verdict, the state,
 * the threads' scheduler state twice 1 s apart (schedstat: ns on a CPU, ns waiting on a run
 * queue, time slices), then every thread's stack (gdb attached to this process), while the
 * threads are still where they stalled - once the run is declared stuck they are stopped.
 */
static void stuck_stacks(struct wl_run *r, struct thr_arg *args, unsigned int n)
{
	const char *e = getenv("WL_STUCK_STACKS");
	char cmd[128];

	if (!e || strcmp(e, "1"))
		return;
	fprintf(stderr, "bench workloads: %s/%s: no progress for %.0f s; state:\n", r->wl->name,
		wl_cfg_name[r->cfg], WL_STUCK_NS / 2e9);
	stuck_report(r, stderr);
	for (int k = 0; k < 2; k++) {
		for (unsigned int i = 0; i < n; i++)
			thread_sched(i % 2 ? "device" : "driver", i / 2,
				     atomic_load_explicit(&args[i].tid, memory_order_relaxed),
				     stderr);
		if (!k)
			sleep_s(1);
	}
	snprintf(cmd, sizeof(cmd), "gdb -batch -p %ld -ex 'thread apply all bt' 1>&2",
		 (long)getpid());
	fflush(stderr);
	if (system(cmd))
		fprintf(stderr, "bench workloads: %s failed\n", cmd);
	stuck_report(r, stderr);
}

/* CPU time of the thread of @clk in ns, or -1 if it has exited. */
static int64_t thread_cpu_ns(clockid_t clk)
{
	struct timespec ts;

	if (clock_gettime(clk, &ts))
		return -1;
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

enum wl_watch wl_watch_verdict(uint64_t stalled_ns, uint64_t stuck_ns, const int64_t *ran_ns,
			       unsigned int n)
{
	if (stalled_ns > WL_STARVED_TIMES * stuck_ns)
		return WL_WATCH_STARVED;
	if (stalled_ns <= stuck_ns)
		return WL_WATCH_WAIT;
	for (unsigned int i = 0; i < n; i++)
		if (ran_ns[i] >= 0 && (uint64_t)ran_ns[i] < stuck_ns / WL_RAN_PART)
			return WL_WATCH_WAIT; /* this one has not had its chance yet */
	return WL_WATCH_STUCK;
}

/* What the threads have done so far (the stuck-run watchdog). */
static uint64_t progress(struct wl_run *r)
{
	uint64_t n = 0;

	for (unsigned int i = 0; i < r->nthreads; i++)
		n += ld(&r->drv[i].ios) + ld(&r->drv[i].polls) + ld(&r->dev[i].units);
	return n;
}

static void sleep_s(double s)
{
	struct timespec ts = {.tv_sec = (time_t)s,
			      .tv_nsec = (long)((s - (double)(time_t)s) * 1e9)};

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

static void add_interval(struct wl_totals *t, const struct snap *a, const struct snap *b)
{
	t->seconds += (double)(b->t - a->t) / 1e9;
	t->ios += b->ios - a->ios;
	t->bytes += b->bytes - a->bytes;
	t->dma_ns += b->dma_ns - a->dma_ns;
	t->dma_ios += b->dma_ios - a->dma_ios;
	t->units += b->units - a->units;
	t->xlat_ns += b->xlat_ns - a->xlat_ns;
	t->xlat_units += b->xlat_units - a->xlat_units;
	t->dev_bytes += b->dev_bytes - a->dev_bytes;
	t->errors += b->errors - a->errors;
	t->timeouts += b->timeouts - a->timeouts;
	t->maps += b->maps - a->maps;
	t->unmaps += b->unmaps - a->unmaps;
	t->subpage_bytes += b->subpage_bytes - a->subpage_bytes;
	t->iotlb_misses += b->misses - a->misses;
	t->walks += b->walks - a->walks;
	t->faults += b->faults - a->faults;
	t->inval_cmds += b->cmds - a->cmds;
	t->waits += b->waits - a->waits;
	t->drv_idle_ns += b->drv_idle_ns - a->drv_idle_ns;
	t->dev_idle_ns += b->dev_idle_ns - a->dev_idle_ns;
}

static void add_run(struct wl_totals *t, const struct snap *z)
{
	t->run_maps += z->maps;
	t->run_unmaps += z->unmaps;
	t->run_faults += z->faults;
	t->run_errors += z->errors;
	t->subpage_max = z->subpage_max > t->subpage_max ? z->subpage_max : t->subpage_max;
	t->persistent_bytes = z->persistent > t->persistent_bytes ? z->persistent :
								    t->persistent_bytes;
	t->lazy_window_ns = z->win_ns > t->lazy_window_ns ? z->win_ns : t->lazy_window_ns;
	t->lazy_window_unmaps = z->win_unmaps > t->lazy_window_unmaps ? z->win_unmaps :
									t->lazy_window_unmaps;
	t->exposes_all |= z->all;
}

int wl_run_once(const struct wl_workload *wl, enum wl_cfg cfg, const struct wl_run_opts *o,
		struct wl_totals *tot, double *throughput)
{
	struct wl_run *r = aligned_alloc(64, sizeof(*r));
	pthread_t drv[WL_MAX_THREADS], dev[WL_MAX_THREADS];
	struct thr_arg args[2 * WL_MAX_THREADS];
	unsigned int ndrv = 0, ndev = 0;
	struct snap a, b, z;
	int rc;

	*throughput = 0;
	if (!r)
		return -ENOMEM;
	memset(r, 0, sizeof(*r));
	r->wl = wl;
	r->cfg = cfg;
	r->nthreads = wl_threads_for(wl, o->threads);
	r->qd = o->qd ? o->qd : WL_DEFAULT_QD;
	r->ops_limit = o->ops;
	r->unpinned = o->unpinned;
	rc = wl_run_setup(r);
	if (rc)
		goto out;
	if (o->ops)
		snapshot(r, &a);
	for (unsigned int i = 0; i < r->nthreads; i++) {
		args[2 * i] = (struct thr_arg){.run = r, .id = i};
		args[2 * i + 1] = (struct thr_arg){.run = r, .id = i};
		if (pthread_create(&dev[ndev], NULL, device_main, &args[2 * i + 1]))
			break;
		ndev++;
		if (pthread_create(&drv[ndrv], NULL, driver_main, &args[2 * i]))
			break;
		ndrv++;
	}
	if (ndrv != r->nthreads) {
		rc = -EAGAIN;
		fprintf(stderr, "bench workloads: cannot start threads\n");
		wl_run_phase_set(r, WL_DRAIN);
	} else if (!o->ops) {
		while (atomic_load(&r->started) < 2 * r->nthreads)
			sched_yield();
		sleep_s(o->warmup_s);
		snapshot(r, &a);
		sleep_s(o->duration_s);
		/* A descheduled thread can stall a short run: measure until some I/Os were done. */
		for (;;) {
			snapshot(r, &b);
			if ((b.ios - a.ios >= WL_MIN_IOS && b.units - a.units >= WL_MIN_IOS / 4) ||
			    (double)(b.t - a.t) / 1e9 > 5 * o->duration_s + WL_MIN_IOS_WAIT_S)
				break;
			sleep_s(0.001);
		}
		wl_run_phase_set(r, WL_DRAIN);
	}
	/* The watchdog: every thread's CPU clock, read at each sign of progress. */
	uint64_t stuck_ns = o->stuck_ns ? o->stuck_ns : WL_STUCK_NS;
	unsigned int nw = 0;
	clockid_t clk[2 * WL_MAX_THREADS];
	int64_t cpu0[2 * WL_MAX_THREADS], ran[2 * WL_MAX_THREADS];
	enum wl_watch verdict = WL_WATCH_WAIT;
	uint64_t seen = ~0ull, since = bench_now_ns();
	bool dumped = false;

	for (unsigned int i = 0; i < ndev; i++) {
		if (i < ndrv && !pthread_getcpuclockid(drv[i], &clk[nw]))
			nw++;
		if (!pthread_getcpuclockid(dev[i], &clk[nw]))
			nw++;
	}
	/* Acquire pairs with the release increment at the end of driver_main(). */
	while (atomic_load_explicit(&r->drained, memory_order_acquire) < ndrv) {
		uint64_t now = bench_now_ns(), moved = progress(r);

		if (moved != seen) {
			seen = moved;
			since = now;
			for (unsigned int i = 0; i < nw; i++)
				cpu0[i] = thread_cpu_ns(clk[i]);
		} else if (now - since > stuck_ns / 2) {
			for (unsigned int i = 0; i < nw; i++) {
				int64_t c = thread_cpu_ns(clk[i]);

				ran[i] = c < 0 || cpu0[i] < 0 ? -1 : c - cpu0[i];
			}
			verdict = wl_watch_verdict(now - since, stuck_ns, ran, nw);
			if (verdict != WL_WATCH_WAIT)
				break;
			if (!dumped) {
				dumped = true;
				stuck_stacks(r, args, 2 * ndrv);
			}
		}
		sleep_s(0.0002);
	}
	if (verdict != WL_WATCH_WAIT) {
		fprintf(stderr,
			"bench workloads: %s/%s: no progress for %.1f s (%s); CPU ms of each thread "
			"since (driver, device, ...):",
			wl->name, wl_cfg_name[cfg], (double)(bench_now_ns() - since) / 1e9,
			verdict == WL_WATCH_STUCK ? "every thread ran" :
						    "a thread did not run: starved or blocked");
		for (unsigned int i = 0; i < nw; i++)
			fprintf(stderr, " %.1f", ran[i] < 0 ? -1.0 : (double)ran[i] / 1e6);
		fprintf(stderr, "; state:\n");
		stuck_report(r, stderr);
		rc = -ETIMEDOUT;
	}
	bool stuck = verdict != WL_WATCH_WAIT;

	if (o->ops && !rc)
		snapshot(r, &b);
	wl_run_phase_set(r, WL_STOP);
	for (unsigned int i = 0; i < ndrv; i++)
		pthread_join(drv[i], NULL);
	for (unsigned int i = 0; i < ndev; i++)
		pthread_join(dev[i], NULL);
	if (!rc) {
		snapshot(r, &z);
		add_interval(tot, &a, &b);
		add_run(tot, &z);
		double sec = (double)(b.t - a.t) / 1e9;

		if (sec > 0)
			*throughput = wl->unit_bits ? (double)(b.bytes - a.bytes) * 8 / sec / 1e9 :
						      (double)(b.ios - a.ios) / sec / wl->unit_div;
		if (z.errors || z.faults || z.maps != z.unmaps) {
			fprintf(stderr,
				"bench workloads: %s/%s: %llu errors, %llu faults, %llu maps but "
				"%llu unmaps\n",
				wl->name, wl_cfg_name[cfg], (unsigned long long)z.errors,
				(unsigned long long)z.faults, (unsigned long long)z.maps,
				(unsigned long long)z.unmaps);
			rc = -EUCLEAN;
		}
	}
	if (stuck) /* mappings and buffers are still out: leave the run as it is */
		return rc;
out:;
	int e = wl_run_teardown(r);

	free(r);
	return rc ? rc : e;
}
