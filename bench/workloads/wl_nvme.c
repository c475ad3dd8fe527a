/* SPDX-License-Identifier: MIT */
/*
 * bench/workloads/wl_nvme.c - nvme4k: 4 KiB random reads, 8 jobs, queue depth --qd (32): the
 * ARM SMMUv3 NVMe-oF case (1080K IOPS without the IOMMU, 520K with it, unstable with
 * lock-free page tables, "TLB sync timed out").
 *
 * An emulated NVMe controller per port, one submission/completion queue pair per job, both
 * rings in coherent memory:
 *
 *   driver (one job)                              controller
 *   map a 4 KiB page (from-device)
 *   SQE {opcode READ, cid, slba, prp1}
 *   sq_db = tail (release: the doorbell) -------> acquire load of sq_db
 *                                                 translate SQ, CQ; per command prp1
 *                                                 (one page), copy the block from the
 *                                                 media; acknowledge a pending
 *                                                 invalidation between commands
 *   acquire load of cqe.status (phase bit) <----- CQE {cid, sq_head}, status = phase
 *   sync + unmap in one batch per poll,           (release)
 *   its invalidation started (batch_submit);
 *   new reads mapped and submitted meanwhile
 *   (spare buffers: three times the queue
 *   depth); the PREVIOUS poll's batch ended
 *   (its wait), then that poll's blocks
 *   checked (header: magic, LBA); this poll's
 *   batch stays in flight until the next poll
 *
 * The completion queue has as many entries as the submission queue (the next power of two
 * at or above the queue depth), and at most qd commands are out, so the controller never
 * overruns it and needs no head doorbell: the driver consumed completion j before it
 * submitted command j + size, and the controller acquired that submission's doorbell before
 * it writes completion j + size into the same slot. The phase bit flips on every lap, as in
 * NVMe. Commands complete in order (one controller thread per queue). The media is 64 MiB of
 * 4 KiB blocks, each starting with a header that names its LBA.
 */
#include "wl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NVME_JOBS  8
#define NVME_BURST 16 /* commands per queue and burst: WL_BURST_BYTES */
#define NVME_READ  0x02

struct nvme_sqe { /* 64 bytes, NVMe layout of the fields used */
	uint8_t opc;
	uint8_t flags;
	uint16_t cid;
	uint32_t nsid;
	uint64_t rsvd;
	uint64_t mptr;
	uint64_t prp1;
	uint64_t prp2;
	uint64_t slba;
	uint32_t nlb; /* 0-based block count */
	uint32_t cdw13_15[3];
};
_Static_assert(sizeof(struct nvme_sqe) == 64, "SQEs are 64 bytes");

struct nvme_cqe { /* 16 bytes */
	uint32_t result;
	uint32_t rsvd;
	uint16_t sq_head;
	uint16_t sq_id;
	uint16_t cid;
	_Atomic uint16_t status; /* bit 0: phase (release by the controller, acquire by the
				    driver); bits 1..15: status code, 0 = success */
};
_Static_assert(sizeof(struct nvme_cqe) == 16, "CQEs are 16 bytes");

struct nvme_cmd {
	void *buf;
	uint64_t dma;
	uint32_t lba;
	uint32_t slot; /* two-step: its IOVA slot */
};

struct nvme_job {
	unsigned int id;
	uint32_t size, mask; /* SQ and CQ entries */
	struct nvme_sqe *sq; /* CPU addresses of the coherent rings */
	struct nvme_cqe *cq;
	uint64_t sq_dma, cq_dma;
	uint32_t sq_tail; /* driver: next SQ slot (free running) */
	uint32_t cq_head; /* driver: next CQ slot (free running) */
	uint32_t nreaped, nnew, npreaped;
	struct nvme_cmd *cmd;	  /* by cid (= SQ slot) */
	struct nvme_cmd *reaped;  /* the commands reaped this poll (their slots are reused
				     by the refill before the driver checks them) */
	struct nvme_cmd *preaped; /* the previous poll's, whose batch is in flight: checked
				     by this poll once that batch ended */
	struct wl_slots slots;	  /* two-step drivers: the queue's IOVA range, a slot per
				    command (commands complete in order) */
	/* The SQ tail doorbell: release store by the driver, acquire load by the controller. */
	_Alignas(64) _Atomic uint32_t sq_db;
	_Alignas(64) uint32_t dev_sq_head;	/* controller: next SQE */
	uint32_t dev_cq_tail;			/* controller: next CQE slot (free running) */
	struct wl_ring_xlat dev_sq_x, dev_cq_x; /* controller: the rings' translations */
};

struct nvme_port {
	unsigned int njobs;
	struct nvme_job *job[NVME_JOBS];
	const uint8_t *media;
	struct wl_batches batches; /* the driver's unmap batches: one in flight */
};

static unsigned int port_jobs(unsigned int port, unsigned int nports)
{
	return NVME_JOBS / nports + (port < NVME_JOBS % nports ? 1 : 0);
}

static uint32_t ring_entries(unsigned int qd)
{
	uint32_t n = 2;

	while (n < qd)
		n <<= 1;
	return n;
}

static void nvme_classes(const struct wl_run *r, unsigned int port, struct wl_class *cls,
			 unsigned int *ncls)
{
	/* three times the queue depth: a poll submits new reads before the buffers it reaped
	   come back, which is a poll later (their batch ends in the next poll) */
	cls[0] = (struct wl_class){.size = 4096, .count = port_jobs(port, r->nports) * r->qd * 3};
	*ncls = 1;
}

static int nvme_port_init(struct wl_port *p)
{
	struct nvme_port *np = calloc(1, sizeof(*np));
	unsigned int first = 0;

	if (!np)
		return -ENOMEM;
	p->priv = np;
	np->media = wl_media();
	if (!np->media)
		return -ENOMEM;
	np->njobs = port_jobs(p->idx, p->run->nports);
	for (unsigned int i = 0; i < p->idx; i++)
		first += port_jobs(i, p->run->nports);
	for (unsigned int i = 0; i < np->njobs; i++) {
		struct nvme_job *j = aligned_alloc(64, sizeof(*j));

		if (!j)
			return -ENOMEM;
		memset(j, 0, sizeof(*j));
		np->job[i] = j;
		j->id = first + i;
		j->size = ring_entries(p->run->qd);
		j->mask = j->size - 1;
		j->cmd = calloc(j->size, sizeof(*j->cmd));
		j->reaped = calloc(j->size, sizeof(*j->reaped));
		j->preaped = calloc(j->size, sizeof(*j->preaped));
		j->sq = dg_dma_alloc_coherent(p->dd, (size_t)j->size * sizeof(*j->sq), &j->sq_dma);
		j->cq = dg_dma_alloc_coherent(p->dd, (size_t)j->size * sizeof(*j->cq), &j->cq_dma);
		if (!j->cmd || !j->reaped || !j->preaped || !j->sq || !j->cq) {
			fprintf(stderr, "bench workloads: nvme queues: %s\n", strerror(ENOMEM));
			return -ENOMEM;
		}
		/* qd out, and two polls' reaped whose unlinks' batches are in flight at the
		   refill */
		if (p->two_step) {
			int e = wl_slots_init(&j->slots, p->dd, 3 * p->run->qd, 4096);

			if (e) {
				fprintf(stderr, "bench workloads: nvme slots: %s\n", strerror(-e));
				return e;
			}
		}
	}
	return 0;
}

static void nvme_port_fini(struct wl_port *p)
{
	struct nvme_port *np = p->priv;

	for (unsigned int i = 0; i < np->njobs; i++) {
		struct nvme_job *j = np->job[i];

		if (!j)
			continue;
		if (wl_slots_fini(&j->slots)) /* the teardown's checks fail the run */
			fprintf(stderr, "bench workloads: nvme job %u: slots still linked\n",
				j->id);
		if (j->sq)
			dg_dma_free_coherent(p->dd, j->sq, (size_t)j->size * sizeof(*j->sq),
					     j->sq_dma);
		if (j->cq)
			dg_dma_free_coherent(p->dd, j->cq, (size_t)j->size * sizeof(*j->cq),
					     j->cq_dma);
		free(j->cmd);
		free(j->reaped);
		free(j->preaped);
		free(j);
	}
	free(np);
	p->priv = NULL;
}

static bool nvme_drv_idle(const struct wl_port *p)
{
	const struct nvme_port *np = p->priv;

	for (unsigned int i = 0; i < np->njobs; i++)
		if (np->job[i]->sq_tail != np->job[i]->cq_head)
			return false;
	return !np->batches.pend;
}

/* Phase the controller writes on lap (slot / size) of the completion queue. */
static uint16_t phase_of(uint32_t slot, uint32_t size)
{
	return (uint16_t)(((slot / size) & 1) ^ 1);
}

static uint64_t rng_next(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

/* Map new reads up to the queue depth, write their SQEs, ring the doorbells; true if any. */
/* Map the buffers of new reads up to the queue depth in one bulk call (two-step: the next
 * slots, one sync); all or nothing: on a failure they go back to the stack. */
static void nvme_map_bulk(struct wl_drv *d, struct wl_port *p, struct nvme_job *j)
{
	void *bufs[DG_DMA_BULK_MAX];
	uint64_t dma[DG_DMA_BULK_MAX];
	uint32_t n = 0, first = 0;
	int e;

	while (j->sq_tail + n - j->cq_head < d->run->qd && n < DG_DMA_BULK_MAX &&
	       (bufs[n] = wl_stack_pop(&p->stack[0])))
		n++;
	if (!n)
		return;
	e = p->two_step ?
		    wl_slots_link_bulk(&j->slots, bufs, n, 4096, DG_DMA_FROM_DEVICE, dma, &first) :
		    dg_dma_map_bulk(p->dd, bufs, n, 4096, DG_DMA_FROM_DEVICE,
				    DG_DMA_ATTR_SKIP_CPU_SYNC, dma);
	if (e) {
		while (n--)
			wl_stack_push(&p->stack[0], bufs[n]);
		wl_drv_fail(d, e);
		return;
	}
	for (uint32_t k = 0; k < n; k++) {
		struct nvme_cmd *c = &j->cmd[(j->sq_tail + k) & j->mask];

		c->buf = bufs[k];
		c->dma = dma[k];
		c->slot = p->two_step ? (first + k) % j->slots.nslots : 0;
	}
	j->nnew = n;
}

static bool nvme_submit(struct wl_drv *d, struct wl_port *p)
{
	struct nvme_port *np = p->priv;
	struct dg_dma_dev *dd = p->dd;
	bool any = false, maps = false;
	int e;

	for (unsigned int i = 0; i < np->njobs; i++)
		maps |= np->job[i]->sq_tail - np->job[i]->cq_head < d->run->qd;
	if (maps) {
		wl_drv_dma_begin(d);
		for (unsigned int i = 0; i < np->njobs; i++) {
			struct nvme_job *j = np->job[i];

			j->nnew = 0;
			if (p->two_step || p->bulk) { /* the new reads' buffers in one bulk call */
				nvme_map_bulk(d, p, j);
				continue;
			}
			while (j->sq_tail + j->nnew - j->cq_head < d->run->qd) {
				struct nvme_cmd *c = &j->cmd[(j->sq_tail + j->nnew) & j->mask];
				void *buf = wl_stack_pop(&p->stack[0]);

				if (!buf)
					break;
				if (p->two_step)
					e = wl_slots_link(&j->slots, buf, 4096, DG_DMA_FROM_DEVICE,
							  &c->dma, &c->slot);
				else
					e = dg_dma_map_single(dd, buf, 4096, DG_DMA_FROM_DEVICE,
							      DG_DMA_ATTR_SKIP_CPU_SYNC, &c->dma);
				if (e) {
					wl_stack_push(&p->stack[0], buf);
					wl_drv_fail(d, e);
					break;
				}
				c->buf = buf;
				j->nnew++;
			}
		}
		wl_drv_dma_end(d);
		/* submission queue entries and doorbells */
		for (unsigned int i = 0; i < np->njobs; i++) {
			struct nvme_job *j = np->job[i];

			for (uint32_t k = 0; k < j->nnew; k++) {
				uint32_t slot = j->sq_tail & j->mask;
				struct nvme_cmd *c = &j->cmd[slot];
				struct nvme_sqe *s = &j->sq[slot];

				c->lba = (uint32_t)(rng_next(&d->rng) % WL_MEDIA_BLOCKS);
				memset(s, 0, sizeof(*s));
				s->opc = NVME_READ;
				s->cid = (uint16_t)slot;
				s->nsid = 1;
				s->prp1 = c->dma;
				s->slba = c->lba;
				j->sq_tail++;
			}
			if (j->nnew) {
				any = true;
				/* Release pairs with the controller's acquire load of sq_db. */
				atomic_store_explicit(&j->sq_db, j->sq_tail, memory_order_release);
			}
		}
	}
	return any;
}

/* The reaped reads' unmaps in one bulk call: the streaming addresses, or the slots when the
 * reads completed in the order they were linked. False (nothing done) when the slots are not
 * consecutive. */
static bool nvme_unmap_bulk(struct wl_drv *d, struct wl_port *p, struct nvme_job *j,
			    struct dg_dma_batch *b)
{
	uint32_t slots[DG_DMA_BULK_MAX];
	uint64_t dma[DG_DMA_BULK_MAX];
	int e = 0;

	if (j->nreaped > DG_DMA_BULK_MAX)
		return false;
	for (uint32_t k = 0; k < j->nreaped; k++) {
		slots[k] = j->reaped[k].slot;
		dma[k] = j->reaped[k].dma;
		if (!p->two_step)
			e = dg_dma_sync_for_cpu(p->dd, dma[k], 4096, DG_DMA_FROM_DEVICE);
		if (e)
			wl_drv_fail(d, e);
	}
	if (p->two_step && !wl_slots_consecutive(&j->slots, slots, j->nreaped))
		return false;
	e = p->two_step ? wl_slots_unlink_bulk(&j->slots, slots[0], j->nreaped, 4096,
					       DG_DMA_FROM_DEVICE, b) :
			  dg_dma_unmap_bulk(p->dd, dma, j->nreaped, 4096, DG_DMA_FROM_DEVICE,
					    DG_DMA_ATTR_SKIP_CPU_SYNC, b);
	if (e)
		wl_drv_fail(d, e);
	return true;
}

static bool nvme_drv_poll(struct wl_drv *d, struct wl_port *p)
{
	struct nvme_port *np = p->priv;
	struct dg_dma_dev *dd = p->dd;
	struct dg_dma_batch *b = wl_batch_cur(&np->batches);
	uint64_t ios = 0;
	bool reaped = false, any;
	int e;

	wl_drv_poll_start(d);
	/* 1. reap completions */
	for (unsigned int i = 0; i < np->njobs; i++) {
		struct nvme_job *j = np->job[i];

		j->nreaped = 0;
		while (j->cq_head != j->sq_tail) {
			struct nvme_cqe *c = &j->cq[j->cq_head & j->mask];
			/* Acquire pairs with the controller's release store in nvme_dev_poll(). */
			uint16_t st = atomic_load_explicit(&c->status, memory_order_acquire);

			if ((st & 1) != phase_of(j->cq_head, j->size))
				break;
			if (st >> 1 || c->cid > j->mask)
				wl_ctr_add(&d->ctr->errors, 1);
			j->reaped[j->nreaped++] = j->cmd[c->cid & j->mask];
			j->cq_head++;
		}
		reaped |= j->nreaped != 0;
	}
	any = reaped || np->batches.pend;
	/* 2. sync + unmap in one batch, its invalidation started (no wait yet) */
	if (reaped) {
		wl_drv_dma_begin(d);
		dg_dma_batch_begin(dd, b);
		for (unsigned int i = 0; i < np->njobs; i++) {
			struct nvme_job *j = np->job[i];

			if (j->nreaped && (p->two_step || p->bulk) && nvme_unmap_bulk(d, p, j, b))
				continue;
			for (uint32_t k = 0; k < j->nreaped; k++) {
				const struct nvme_cmd *c = &j->reaped[k];

				if (p->two_step) {
					e = wl_slots_unlink(&j->slots, c->slot, 4096,
							    DG_DMA_FROM_DEVICE, b);
					if (e)
						wl_drv_fail(d, e);
					continue;
				}
				e = dg_dma_sync_for_cpu(dd, c->dma, 4096, DG_DMA_FROM_DEVICE);
				if (!e)
					e = dg_dma_unmap_single(dd, c->dma, 4096,
								DG_DMA_FROM_DEVICE,
								DG_DMA_ATTR_SKIP_CPU_SYNC, b);
				if (e)
					wl_drv_fail(d, e);
			}
		}
		e = dg_dma_batch_submit(b);
		wl_drv_dma_end(d);
		if (e)
			wl_drv_fail(d, e);
	}
	/* 3. meanwhile, map new reads up to the queue depth (spare buffers) and ring */
	if (d->posting)
		any |= nvme_submit(d, p);
	/* 4. the previous poll's batch: its wait (the controller has had a poll's time to
	   acknowledge it); then the block's header says which LBA it is */
	if (wl_batch_end_pending(d, &np->batches, reaped)) { /* no new batch: no wait */
		for (unsigned int i = 0; i < np->njobs; i++) {
			struct nvme_job *j = np->job[i];

			for (uint32_t k = 0; k < j->npreaped; k++) {
				const struct nvme_cmd *c = &j->preaped[k];
				const struct wl_hdr *h = c->buf;

				if (h->magic != WL_MAGIC || h->seq != c->lba ||
				    h->csum != wl_hdr_csum(h)) {
					if (!atomic_load_explicit(&d->ctr->errors,
								  memory_order_relaxed))
						fprintf(stderr,
							"bench workloads: nvme4k/%s: job %u: "
							"block %u has the wrong data\n",
							wl_cfg_name[d->run->cfg], j->id, c->lba);
					wl_ctr_add(&d->ctr->errors, 1);
				}
				wl_stack_push(&p->stack[0], c->buf);
				ios++;
			}
			j->npreaped = 0;
		}
	}
	/* 5. this poll's batch stays in flight until the next poll */
	if (reaped) {
		for (unsigned int i = 0; i < np->njobs; i++) {
			struct nvme_job *j = np->job[i];
			struct nvme_cmd *t = j->preaped;

			j->preaped = j->reaped;
			j->reaped = t;
			j->npreaped = j->nreaped;
			j->nreaped = 0;
		}
		wl_batch_keep(&np->batches);
	}
	wl_drv_poll_end(d, ios, ios * 4096);
	return any;
}

/*
 * The controller's burst on a queue pair: up to NVME_BURST commands, all their buffers'
 * translations started once the queues are translated (wl_dev_prefetch(): each page-table
 * line once; 16 pages: two lines or more, written by the driver's core), each translated just
 * before its copy, a pending invalidation acknowledged between commands (the queues
 * translated again if one was: what the thread translated before is released), and the
 * burst's completions posted together at its end (completion coalescing: posted one by one,
 * each store met the driver's poll of the same CQ line).
 */
static bool nvme_dev_poll(struct wl_dev *d, struct wl_port *p)
{
	struct nvme_port *np = p->priv;
	uint64_t units = 0;

	wl_dev_burst_start(d);
	for (unsigned int i = 0; i < np->njobs; i++) {
		struct nvme_job *j = np->job[i];
		/* Acquire pairs with the driver's release store of sq_db in nvme_drv_poll(). */
		uint32_t db = atomic_load_explicit(&j->sq_db, memory_order_acquire);
		uint32_t n = db - j->dev_sq_head;
		uint16_t sc[NVME_BURST];
		struct nvme_sqe *sq = NULL;
		struct nvme_cqe *cq = NULL;
		uint64_t last = UINT64_MAX; /* wl_dev_prefetch() */

		if (!n)
			continue;
		n = n < NVME_BURST ? n : NVME_BURST;
		for (uint32_t k = 0; k < n; k++) {
			if (!sq || wl_dev_ack_pending(d)) {
				wl_dev_xlat_begin(d);
				sq = wl_dev_ring(d, p, j->sq_dma, (size_t)j->size * sizeof(*sq),
						 &j->dev_sq_x);
				cq = wl_dev_ring(d, p, j->cq_dma, (size_t)j->size * sizeof(*cq),
						 &j->dev_cq_x);
				wl_dev_xlat_end(d);
				if (!sq || !cq) { /* never while the rings stay mapped */
					wl_dev_ring_lost(d, n);
					return false;
				}
			}
			for (uint32_t c = 0; !k && c < n; c++) /* the burst's reads, started */
				wl_dev_prefetch(p, sq[(j->dev_sq_head + c) & j->mask].prp1, 4096,
						&last);
			const struct nvme_sqe *s = &sq[(j->dev_sq_head + k) & j->mask];
			unsigned int nr;

			wl_dev_xlat_begin(d);
			nr = wl_dev_translate(d, p, s->prp1, 4096, DG_ACCESS_WRITE, d->sg, 2);
			wl_dev_xlat_end(d);
			sc[k] = 0;
			if (s->opc != NVME_READ || s->slba >= WL_MEDIA_BLOCKS || !nr)
				sc[k] = 0x0002; /* invalid field */
			else
				wl_sg_copy_to(d->sg, nr, 0, np->media + (size_t)s->slba * 4096,
					      4096);
		}
		for (uint32_t k = 0; k < n; k++) {
			const struct nvme_sqe *s = &sq[(j->dev_sq_head + k) & j->mask];
			struct nvme_cqe *c = &cq[j->dev_cq_tail & j->mask];

			c->result = 0;
			c->cid = s->cid;
			c->sq_id = (uint16_t)(j->id + 1);
			c->sq_head = (uint16_t)((j->dev_sq_head + k + 1) & j->mask);
			/* Release pairs with the driver's acquire load of status (reap). */
			atomic_store_explicit(&c->status,
					      (uint16_t)(sc[k] << 1 |
							 phase_of(j->dev_cq_tail, j->size)),
					      memory_order_release);
			j->dev_cq_tail++;
		}
		j->dev_sq_head += n;
		units += n;
		wl_dev_quiesce(d); /* end of the burst */
	}
	wl_dev_burst_end(d, units, units * 4096);
	return units != 0;
}

/* A best-effort snapshot for the stuck-run report (not instrumented by ThreadSanitizer: see
   nic_dump). */
__attribute__((no_sanitize("thread"))) static void nvme_dump(const struct wl_port *p, FILE *out)
{
	const struct nvme_port *np = p->priv;

	for (unsigned int i = 0; np && i < np->njobs; i++) {
		const struct nvme_job *j = np->job[i];

		fprintf(out,
			"  port %u job %u: sq_tail %u cq_head %u sq_db %u dev_sq_head %u dev_cq_tail "
			"%u status[cq_head] %#x (phase wanted %u)\n",
			p->idx, j->id, j->sq_tail, j->cq_head, atomic_load(&j->sq_db),
			j->dev_sq_head, j->dev_cq_tail,
			atomic_load(&j->cq[j->cq_head & j->mask].status),
			phase_of(j->cq_head, j->size));
	}
}

const struct wl_workload wl_nvme4k = {
	.name = "nvme4k",
	.summary = "NVMe 4 KiB random reads, 8 jobs, --qd deep",
	.unit = "IOPS",
	.io = "4 KiB read",
	.unit_div = 1,
	.max_threads = NVME_JOBS,
	.classes = nvme_classes,
	.port_init = nvme_port_init,
	.port_fini = nvme_port_fini,
	.drv_poll = nvme_drv_poll,
	.drv_idle = nvme_drv_idle,
	.dev_poll = nvme_dev_poll,
	.dump = nvme_dump,
};
