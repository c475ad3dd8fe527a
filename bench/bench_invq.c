/* SPDX-License-Identifier: MIT */
/*
 * bench/bench_invq.c - dmaguard bench invq: what the CPU side pays to invalidate.
 *
 * Every timed case with a wait runs with one device thread doing DMA in a loop through the
 * same IOMMU (dg_dev_read of 8 bytes from a hot page: each call is a quiescent point), so a
 * wait really waits for a device acknowledgement; the submit-only cases measure the queue
 * alone (the device stays offline). Each case runs on the lock-free queue (one atomic add
 * per batch, one owner publishes) and on the single-lock reference queue (the library's
 * `reference` configuration: one mutex around reserve, write and publish), in the same run:
 *
 *   submit_wait_{1p,2p}[_lock]   submit one 4 KiB PAGE command and wait for it; 1 or 2
 *                                producer threads (ns per op = wall time / all ops)
 *   submit_{1p,2p}[_lock]        submit only (throughput of the queue itself)
 *   unmap64_batched[_lock]       map 64 pages, unmap them, one RANGE command + one wait
 *   unmap64_perpage[_lock]       the same with one PAGE command + one wait per page
 *                                (Linux's old strict mode)
 *
 * Fixed-count mode (--case NAME --ops N): exactly N operations by one producer with the
 * device offline (no device thread), so callgrind counts the CPU path alone.
 */
#include "bench.h"

#include <dmaguard/dev.h>
#include <dmaguard/iommu.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define K4	  4096ull
#define HOT_IOVA  0x10000ull
#define UNMAP_VA  0x100000000ull /* producer t uses UNMAP_VA + t * 1 GiB */
#define PHYS_BASE 0x200000000ull

struct qenv {
	struct dg_iommu *mmu;
	struct dg_domain *dom;
	struct dg_device *dev;
	uint8_t *hot; /* the device's page */
	pthread_t dev_thread;
	bool dev_running;
	_Atomic int stop_dev;
	_Atomic uint64_t dev_ops;
	bool pin; /* one CPU per thread is available: pin producers and the device */
};

struct invq_case {
	const char *name;
	const char *what;
	uint64_t (*run)(struct qenv *q, unsigned int tid, uint64_t n); /* n operations */
	unsigned int producers;
	bool reference;
	unsigned int pages; /* per operation, for the unmap cases */
	bool device;	    /* a device thread does DMA meanwhile (waits wait for it) */
};

/* n one-page invalidations, each waited for (@wait) or only submitted. */
static uint64_t submit_pages(struct qenv *q, unsigned int tid, uint64_t n, bool wait)
{
	struct dg_inval_cmd c = {.type = DG_INVAL_PAGE,
				 .flags = DG_INVAL_LEAF,
				 .domain = dg_domain_id(q->dom),
				 .size = K4};
	uint64_t seq = 0;

	for (uint64_t i = 0; i < n; i++) {
		c.iova = UNMAP_VA + (uint64_t)tid * (1ull << 30) + (i % 512) * K4;
		if (dg_inval_submit(q->mmu, &c, 1, &seq) || (wait && dg_inval_wait(q->mmu, seq)))
			abort();
	}
	return seq;
}

static uint64_t op_submit_wait(struct qenv *q, unsigned int tid, uint64_t n)
{
	return submit_pages(q, tid, n, true);
}

static uint64_t op_submit(struct qenv *q, unsigned int tid, uint64_t n)
{
	return submit_pages(q, tid, n, false);
}

/* Map and unmap 64 pages; flush with one range + one wait, or one wait per page. */
static uint64_t unmap64(struct qenv *q, unsigned int tid, uint64_t n, bool per_page)
{
	uint64_t va = UNMAP_VA + (uint64_t)tid * (1ull << 30), unmapped = 0;

	for (uint64_t i = 0; i < n; i++) {
		struct dg_pt_gather g;
		uint64_t seq;

		dg_pt_gather_init(&g);
		if (dg_domain_map(q->dom, va, PHYS_BASE, 64 * K4, DG_PROT_READ | DG_PROT_WRITE,
				  &g) ||
		    dg_domain_unmap(q->dom, va, 64 * K4, &g, &unmapped))
			abort();
		if (!per_page) {
			struct dg_inval_cmd c = {.type = DG_INVAL_RANGE,
						 .domain = dg_domain_id(q->dom),
						 .iova = g.start,
						 .size = g.end - g.start,
						 .flags = g.leaf_only ? DG_INVAL_LEAF : 0};

			if (dg_inval_submit(q->mmu, &c, 1, &seq) || dg_inval_wait(q->mmu, seq))
				abort();
		} else {
			for (uint64_t a = g.start; a < g.end; a += K4) {
				struct dg_inval_cmd c = {.type = DG_INVAL_PAGE,
							 .domain = dg_domain_id(q->dom),
							 .iova = a,
							 .size = K4,
							 .flags = g.leaf_only ? DG_INVAL_LEAF : 0};

				if (dg_inval_submit(q->mmu, &c, 1, &seq) ||
				    dg_inval_wait(q->mmu, seq))
					abort();
			}
		}
		/* Released only now: the wait covered every device. */
		dg_pt_gather_release(dg_domain_pt(q->dom), &g);
	}
	return unmapped;
}

static uint64_t op_unmap_batched(struct qenv *q, unsigned int tid, uint64_t n)
{
	return unmap64(q, tid, n, false);
}

static uint64_t op_unmap_perpage(struct qenv *q, unsigned int tid, uint64_t n)
{
	return unmap64(q, tid, n, true);
}

static const struct invq_case cases[] = {
	{"submit_wait_1p", "submit 1 PAGE + wait, 1 producer", op_submit_wait, 1, false, 0, true},
	{"submit_wait_1p_lock", "same, single-lock queue", op_submit_wait, 1, true, 0, true},
	{"submit_wait_2p", "submit 1 PAGE + wait, 2 producers", op_submit_wait, 2, false, 0, true},
	{"submit_wait_2p_lock", "same, single-lock queue", op_submit_wait, 2, true, 0, true},
	{"submit_1p", "submit 1 PAGE, 1 producer", op_submit, 1, false, 0, false},
	{"submit_1p_lock", "same, single-lock queue", op_submit, 1, true, 0, false},
	{"submit_2p", "submit 1 PAGE, 2 producers", op_submit, 2, false, 0, false},
	{"submit_2p_lock", "same, single-lock queue", op_submit, 2, true, 0, false},
	{"unmap64_batched", "map+unmap 64 pages, 1 range + 1 wait", op_unmap_batched, 1, false, 64,
	 true},
	{"unmap64_batched_lock", "same, single-lock queue", op_unmap_batched, 1, true, 64, true},
	{"unmap64_perpage", "map+unmap 64 pages, 64 x (page + wait)", op_unmap_perpage, 1, false,
	 64, true},
	{"unmap64_perpage_lock", "same, single-lock queue", op_unmap_perpage, 1, true, 64, true},
};
#define NCASES (sizeof(cases) / sizeof(cases[0]))

static void *device_main(void *arg)
{
	struct qenv *q = arg;
	uint64_t x, n = 0;

	if (q->pin)
		bench_pin_cpu(bench_ncpus() - 1);
	while (!atomic_load_explicit(&q->stop_dev, memory_order_acquire)) {
		dg_dev_read(q->dev, HOT_IOVA, &x, sizeof(x));
		if (++n % 256 == 0)
			atomic_store_explicit(&q->dev_ops, n, memory_order_relaxed);
	}
	dg_dev_offline(q->dev);
	return NULL;
}

static int mk_qenv(struct qenv *q, const struct invq_case *c, bool with_device)
{
	struct dg_iommu_config cfg;
	struct dg_pt_geometry g = {.format = DG_PT_FMT_VTD_SS, .ias = 48, .oas = 48};
	uint64_t x;

	memset(q, 0, sizeof(*q));
	dg_iommu_config_init(&cfg);
	cfg.reference = c->reference;
	cfg.wait_timeout_ns = 10ull * 1000 * 1000 * 1000;
	q->mmu = dg_iommu_create(&cfg);
	if (!q->mmu)
		return -errno;
	q->dom = dg_domain_create(q->mmu, &g, NULL, NULL);
	q->dev = dg_device_create(q->mmu, 1);
	q->hot = aligned_alloc(K4, K4);
	if (!q->dom || !q->dev || !q->hot)
		return -ENOMEM;
	memset(q->hot, 7, K4);
	if (dg_domain_map(q->dom, HOT_IOVA, (uint64_t)(uintptr_t)q->hot, K4, DG_PROT_READ, NULL) ||
	    dg_device_attach(q->dev, q->dom))
		return -EINVAL;
	if (dg_dev_read(q->dev, HOT_IOVA, &x, sizeof(x)))
		return -EFAULT;
	dg_dev_offline(q->dev);
	/* Pinning threads that outnumber the CPUs would only make them wait for each other. */
	q->pin = c->producers + (with_device ? 1 : 0) <= bench_ncpus();
	if (with_device) {
		if (pthread_create(&q->dev_thread, NULL, device_main, q))
			return -EAGAIN;
		q->dev_running = true;
	}
	return 0;
}

static void free_qenv(struct qenv *q)
{
	if (q->dev_running) {
		atomic_store_explicit(&q->stop_dev, 1, memory_order_release);
		pthread_join(q->dev_thread, NULL);
	}
	if (q->dev) {
		dg_device_block(q->dev);
		dg_device_destroy(q->dev);
	}
	if (q->dom)
		dg_domain_destroy(q->dom);
	if (q->mmu)
		dg_iommu_destroy(q->mmu);
	free(q->hot);
}

/* Producers run batches until the round's deadline; the first one times the round. */
struct prod {
	pthread_t thread;
	struct qenv *q;
	const struct invq_case *c;
	unsigned int tid;
	uint64_t batch, ops;
	uint64_t deadline;
	_Atomic int *go;
};

static void *producer_main(void *arg)
{
	struct prod *p = arg;

	if (p->q->pin)
		bench_pin_cpu(p->tid);
	while (!atomic_load_explicit(p->go, memory_order_acquire))
		sched_yield();
	p->ops = 0;
	do {
		p->c->run(p->q, p->tid, p->batch);
		p->ops += p->batch;
	} while (bench_now_ns() < p->deadline);
	return NULL;
}

struct result {
	struct bench_summary ns; /* wall ns per operation (all producers together) */
	uint64_t ops;
	struct dg_iommu_stats st;
};

static int measure(const struct invq_case *c, struct qenv *q, const struct bench_opts *o,
		   struct result *res)
{
	double samples[1000];
	uint64_t batch = 16, t0;

	/* Batch: about 1 ms of work in one thread. */
	for (;;) {
		t0 = bench_now_ns();
		c->run(q, 0, batch);
		if (bench_now_ns() - t0 >= 1000000 || batch >= (1u << 20))
			break;
		batch *= 2;
	}
	for (unsigned int r = 0; r < o->rounds; r++) {
		struct prod p[2];
		_Atomic int go = 0;
		uint64_t start, end, ops = 0;

		start = bench_now_ns();
		for (unsigned int t = 0; t < c->producers; t++) {
			p[t] = (struct prod){.q = q,
					     .c = c,
					     .tid = t,
					     .batch = batch,
					     .go = &go,
					     .deadline = start + (uint64_t)(o->duration_s * 1e9)};
			if (pthread_create(&p[t].thread, NULL, producer_main, &p[t]))
				return -EAGAIN;
		}
		start = bench_now_ns();
		for (unsigned int t = 0; t < c->producers; t++)
			p[t].deadline = start + (uint64_t)(o->duration_s * 1e9);
		atomic_store_explicit(&go, 1, memory_order_release);
		for (unsigned int t = 0; t < c->producers; t++) {
			pthread_join(p[t].thread, NULL);
			ops += p[t].ops;
		}
		end = bench_now_ns();
		samples[r] = (double)(end - start) / (double)ops;
		res->ops = ops;
	}
	bench_summarize(samples, o->rounds, &res->ns);
	dg_iommu_stats(q->mmu, &res->st);
	return 0;
}

static json_t *result_json(const struct invq_case *c, const struct result *r)
{
	json_t *j = json_pack("{s:s, s:s, s:f, s:f, s:f, s:f, s:f, s:I, s:i, s:i, s:b}", "case",
			      c->name, "what", c->what, "ns_per_op", r->ns.median, "ns_min",
			      r->ns.min, "ns_max", r->ns.max, "spread", r->ns.spread, "ops_per_s",
			      r->ns.median > 0 ? 1e9 / r->ns.median : 0.0, "ops",
			      (json_int_t)r->ops, "rounds", (int)r->ns.n, "producers",
			      (int)c->producers, "reference_queue", c->reference);

	json_object_set_new(j, "device_thread", json_boolean(c->device));
	json_object_set_new(j, "waits", json_integer((json_int_t)r->st.waits));
	json_object_set_new(j, "waits_coalesced", json_integer((json_int_t)r->st.waits_coalesced));
	json_object_set_new(j, "publications", json_integer((json_int_t)r->st.batches));
	json_object_set_new(j, "batch_cmds_max", json_integer((json_int_t)r->st.batch_cmds_max));
	json_object_set_new(j, "submits", json_integer((json_int_t)r->st.submits));
	json_object_set_new(j, "wait_timeouts", json_integer((json_int_t)r->st.wait_timeouts));
	if (c->pages)
		json_object_set_new(j, "pages_per_op", json_integer(c->pages));
	return j;
}

static void usage(FILE *out)
{
	fprintf(out, "usage: dmaguard bench invq [options]\n");
	bench_usage_common(out);
}

static int invq_main(int argc, char **argv)
{
	struct bench_opts o;
	struct bench_report rep;
	bool any = false;
	int rc = 0;

	if (bench_parse_common(&argc, argv, &o))
		return 2;
	if (argc > 1)
		return bench_help_or_unknown("invq", argv[1], usage);
	if (o.list) {
		for (size_t i = 0; i < NCASES; i++)
			printf("%-22s %s\n", cases[i].name, cases[i].what);
		return 0;
	}
	if (bench_report_init(&rep, "invq"))
		return 1;
	if (!o.ops)
		printf("%-22s %10s %10s %8s %12s  %s\n", "case", "ns/op", "min", "spread", "ops/s",
		       "what");
	for (size_t i = 0; i < NCASES; i++) {
		const struct invq_case *c = &cases[i];
		struct qenv q;
		struct result res;

		if (!bench_case_selected(&o, c->name))
			continue;
		any = true;
		if (mk_qenv(&q, c, c->device && !o.ops)) {
			fprintf(stderr, "bench invq: %s: set-up failed\n", c->name);
			free_qenv(&q);
			rc = 1;
			continue;
		}
		if (o.ops) {
			uint64_t sum = c->run(&q, 0, o.ops);

			bench_do_not_optimize(&sum);
			printf("RESULT suite=invq case=%s ops=%" PRIu64 " fixed_count=1\n", c->name,
			       o.ops);
			free_qenv(&q);
			continue;
		}
		if (measure(c, &q, &o, &res)) {
			fprintf(stderr, "bench invq: %s: cannot start threads\n", c->name);
			free_qenv(&q);
			rc = 1;
			continue;
		}
		printf("%-22s %10.1f %10.1f %7.0f%% %12.0f  %s\n", c->name, res.ns.median,
		       res.ns.min, res.ns.spread * 100, 1e9 / res.ns.median, c->what);
		printf("RESULT suite=invq case=%s ns_per_op=%.3f spread=%.3f\n", c->name,
		       res.ns.median, res.ns.spread);
		bench_report_add(&rep, result_json(c, &res));
		free_qenv(&q);
	}
	if (!any) {
		fprintf(stderr, "bench invq: no case named '%s' (see --list)\n", o.case_name);
		rc = 2;
	}
	if (!o.ops && bench_report_write(&rep, o.json_path))
		rc = 1;
	bench_report_fini(&rep);
	return rc;
}

DG_BENCH_SUITE(invq, "invq", "invalidation queue: submit+wait latency, throughput, batching",
	       invq_main)
