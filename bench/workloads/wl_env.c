/* SPDX-License-Identifier: MIT */
/*
 * bench/workloads/wl_env.c - the environment of one workload run: its IOMMU, DMA layer and
 * ports (a device, its DMA state under the run's configuration, its buffers), and the small
 * helpers the driver and device models share (sampled timing, translation, sg copies).
 *
 * Configurations (wl.h): each port gets the same dg_dma_dev_config except for the policy and
 * what that policy needs to be sized for the workload:
 *  - window: a 64 GiB window of 64K pages at 1 TiB whose direct region is the port's arena
 *    (PowerPC DDW large enough for the buffers: no per-I/O work, the arena exposed for good);
 *  - bounce: shadow areas of the next power of two above all the port's buffer bytes, so a
 *    shadow slot is never what limits the workload;
 *  - pool: one DG_DMA_POOL_HUGE pool per buffer class, bidirectional, whose buffers the driver
 *    takes once at set-up (page_pool recycling);
 *  - linux-ref: strict with DG_DMA_DEV_LINUX_REFERENCE on an IOMMU created with .reference.
 *
 * Buffers of the other configurations come from one arena per port, 2 MiB aligned (the
 * window's direct region must be page aligned), carved class by class.
 *
 * Every buffer of every configuration is written once at set-up (WL_FILL in each byte), as
 * a real driver's buffers hold data: a page of the arena that nobody wrote would be backed
 * by the kernel's shared zero page when read, one physical page that stays in the caches,
 * while a pool's memory is written by dg_dma_pool_create() (zeroed) and has pages of its
 * own. A TSO send's driver writes only the header, in its first page: before this fill the
 * device read the other 15 pages of every tcp send from the zero page under every
 * configuration but pool, which alone paid for reading 60 KiB of real memory per send
 * (tcp-x4 pool at 0.73-0.84 of identity; docs/bench.md, "Reading the table").
 */
#include "wl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const wl_cfg_name[WL_NCFG] = {"identity",  "strict",	 "lazy",
					  "window",    "bounce",	 "pool",
					  "linux-ref", "identity-2step", "strict-2step"};

#define ARENA_ALIGN (2ull << 20)
#define WINDOW_BASE (1ull << 40)
#define WINDOW_SIZE (64ull << 30)
#define WINDOW_PAGE 65536ull

static size_t class_align(size_t size)
{
	size_t a = 64;

	while (a < size && a < 4096)
		a <<= 1;
	return a;
}

static size_t round_up(size_t v, size_t a)
{
	return (v + a - 1) / a * a;
}

static uint64_t next_pow2(uint64_t v)
{
	uint64_t p = 1;

	while (p < v)
		p <<= 1;
	return p;
}

/* ---- the nvme4k media --------------------------------------------------------------------------- */

static uint8_t *media;

const uint8_t *wl_media(void)
{
	if (media)
		return media;
	media = aligned_alloc(4096, (size_t)WL_MEDIA_BLOCKS * 4096);
	if (!media)
		return NULL;
	for (uint32_t b = 0; b < WL_MEDIA_BLOCKS; b++) {
		uint8_t *blk = media + (size_t)b * 4096;
		struct wl_hdr h = {.ethertype = 0, .magic = WL_MAGIC, .seq = b, .len = 4096};

		memset(blk, (int)(b * 131 % 251), 4096);
		h.csum = wl_hdr_csum(&h);
		memcpy(blk, &h, sizeof(h));
	}
	return media;
}

/* ---- set-up and teardown ----------------------------------------------------------------------- */

static int fail(const char *what, int err)
{
	fprintf(stderr, "bench workloads: %s: %s\n", what, strerror(err));
	return -err;
}

static void shuffle(struct wl_stack *s, uint64_t seed)
{
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;

	for (uint32_t i = s->n; i > 1; i--) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		uint32_t j = (uint32_t)(x % i);
		void *t = s->v[i - 1];

		s->v[i - 1] = s->v[j];
		s->v[j] = t;
	}
}

static void port_config(const struct wl_run *r, struct wl_port *p, struct dg_dma_dev_config *dc)
{
	uint64_t bytes = 0;

	dg_dma_dev_config_init(dc);
	for (unsigned int c = 0; c < p->ncls; c++)
		bytes += (uint64_t)p->cls[c].count * round_up(p->cls[c].size, 64);
	switch (r->cfg) {
	case WL_IDENTITY:
	case WL_IDENTITY_2STEP:
		dc->policy = DG_DMA_IDENTITY;
		break;
	case WL_STRICT:
	case WL_STRICT_2STEP:
		dc->policy = DG_DMA_STRICT;
		break;
	case WL_LAZY:
		dc->policy = DG_DMA_LAZY;
		break;
	case WL_WINDOW:
		dc->policy = DG_DMA_WINDOW;
		dc->window.base = WINDOW_BASE;
		dc->window.size = WINDOW_SIZE;
		dc->window.page_size = WINDOW_PAGE;
		dc->window.direct = p->arena;
		dc->window.direct_size = p->arena_size;
		break;
	case WL_BOUNCE:
		dc->policy = DG_DMA_BOUNCE;
		bytes = next_pow2(bytes);
		dc->bounce.area_size = bytes < (256u << 10) ? (256u << 10) : bytes;
		break;
	case WL_POOL:
		dc->policy = DG_DMA_POOL;
		break;
	case WL_LINUX:
		dc->policy = DG_DMA_STRICT;
		dc->flags = DG_DMA_DEV_LINUX_REFERENCE;
		break;
	default:
		break;
	}
}

static int port_buffers(const struct wl_run *r, struct wl_port *p)
{
	size_t off = 0;

	for (unsigned int c = 0; c < p->ncls; c++) {
		struct wl_stack *s = &p->stack[c];

		s->cap = p->cls[c].count;
		s->v = calloc(s->cap ? s->cap : 1, sizeof(*s->v));
		if (!s->v)
			return fail("buffer stack", ENOMEM);
		if (r->cfg == WL_POOL) {
			p->pool[c] = dg_dma_pool_create(p->dd, p->cls[c].size, p->cls[c].count,
							DG_DMA_BIDIRECTIONAL, DG_DMA_POOL_HUGE);
			if (!p->pool[c])
				return fail("dg_dma_pool_create", errno);
			for (uint32_t i = 0; i < p->cls[c].count; i++) {
				void *b;
				uint64_t d;
				int e = dg_dma_pool_get(p->pool[c], &b, &d);

				if (e)
					return fail("dg_dma_pool_get", -e);
				wl_stack_push(s, b);
			}
		} else {
			size_t a = class_align(p->cls[c].size);

			off = round_up(off, a);
			for (uint32_t i = 0; i < p->cls[c].count; i++) {
				wl_stack_push(s, p->arena + off);
				off += round_up(p->cls[c].size, a);
			}
		}
		/* Real pages for every buffer, whatever backs it (see the preamble). */
		for (uint32_t i = 0; i < s->n; i++)
			memset(s->v[i], WL_FILL, p->cls[c].size);
		/* LIFO: the first buffers handed out are the first carved. */
		for (uint32_t i = 0; i < s->n / 2; i++) {
			void *t = s->v[i];

			s->v[i] = s->v[s->n - 1 - i];
			s->v[s->n - 1 - i] = t;
		}
		if (p->cls[c].shuffle)
			shuffle(s, p->idx * 7 + c + 1);
	}
	return 0;
}

static int port_setup(struct wl_run *r, struct wl_port *p)
{
	struct dg_dma_dev_config dc;
	size_t bytes = 0;

	r->wl->classes(r, p->idx, p->cls, &p->ncls);
	if (p->ncls > WL_MAX_CLASSES)
		return fail("classes", EINVAL);
	for (unsigned int c = 0; c < p->ncls; c++)
		bytes = round_up(bytes, class_align(p->cls[c].size)) +
			(size_t)p->cls[c].count *
				round_up(p->cls[c].size, class_align(p->cls[c].size));
	if (r->cfg != WL_POOL && bytes) {
		p->arena_size = round_up(bytes, ARENA_ALIGN);
		p->arena = aligned_alloc(ARENA_ALIGN, p->arena_size);
		if (!p->arena)
			return fail("arena", ENOMEM);
	}
	p->two_step = wl_cfg_two_step(r->cfg);
	p->dev = dg_device_create(r->mmu, 0x100 + p->idx);
	if (!p->dev)
		return fail("dg_device_create", errno);
	port_config(r, p, &dc);
	p->dd = dg_dma_dev_create(r->dma, p->dev, &dc);
	if (!p->dd)
		return fail("dg_dma_dev_create", errno);
	p->bulk = !p->two_step && r->cfg != WL_LINUX &&
		  (dc.policy == DG_DMA_IDENTITY || dc.policy == DG_DMA_STRICT ||
		   dc.policy == DG_DMA_LAZY || dc.policy == DG_DMA_BOUNCE ||
		   dc.policy == DG_DMA_WINDOW || dc.policy == DG_DMA_POOL);
	if (port_buffers(r, p))
		return -ENOMEM;
	return r->wl->port_init(p);
}

int wl_run_setup(struct wl_run *r)
{
	struct dg_iommu_config ic;
	int e;

	atomic_store(&r->phase, WL_RUN);
	atomic_store(&r->drained, 0);
	atomic_store(&r->started, 0);
	r->nports = r->wl->fixed_ports ? r->wl->fixed_ports : r->nthreads;
	if (r->nports > WL_MAX_PORTS || r->nthreads > WL_MAX_THREADS || !r->nthreads)
		return fail("threads", EINVAL);
	dg_iommu_config_init(&ic);
	ic.reference = r->cfg == WL_LINUX;
	/* The devices read last-level entries where the walk cache knows the table
	   (docs/iommu.md, "Leaf-direct"); the Linux-like reference keeps an IOTLB of pages. */
	ic.iotlb_leaf_direct = r->cfg != WL_LINUX;
	/*
	 * A wait here completes when the device thread reaches its next quiescent point; on an
	 * overloaded machine (sanitizer builds side by side) that thread can be off its CPU for
	 * over the default second, which says nothing about the library. Timeouts are the
	 * reliability tests' subject; a benchmark run that truly stops moving is caught by the
	 * stuck-run watchdog (WL_STUCK_NS).
	 */
	ic.wait_timeout_ns = 10000000000ull;
	r->mmu = dg_iommu_create(&ic);
	if (!r->mmu)
		return fail("dg_iommu_create", errno);
	r->dma = dg_dma_create(r->mmu, NULL);
	if (!r->dma)
		return fail("dg_dma_create", errno);
	for (unsigned int i = 0; i < r->nports; i++) {
		struct wl_port *p = &r->port[i];

		memset(p, 0, sizeof(*p));
		p->run = r;
		p->idx = i;
		p->drv_thr = i % r->nthreads;
		p->dev_thr = i % r->nthreads;
		e = port_setup(r, p);
		if (e)
			return e;
	}
	return 0;
}

static int port_teardown(struct wl_run *r, struct wl_port *p)
{
	struct dg_dma_stats st;
	struct dg_dev_stats ds;
	int rc = 0, e;

	if (p->priv)
		r->wl->port_fini(p);
	for (unsigned int c = 0; c < p->ncls; c++) {
		struct wl_stack *s = &p->stack[c];

		if (s->v && s->n != p->cls[c].count && !rc) {
			fprintf(stderr, "bench workloads: %s/%s port %u: %u of %u buffers back\n",
				r->wl->name, wl_cfg_name[r->cfg], p->idx, s->n, p->cls[c].count);
			rc = -EUCLEAN;
		}
		if (p->pool[c]) {
			while (s->n)
				dg_dma_pool_put(p->pool[c], wl_stack_pop(s));
			e = dg_dma_pool_destroy(p->pool[c]);
			if (e && !rc)
				rc = fail("dg_dma_pool_destroy", -e);
		}
		free(s->v);
	}
	if (p->dd) {
		dg_dma_dev_stats(p->dd, &st);
		if (st.live && !rc) {
			fprintf(stderr, "bench workloads: %s/%s port %u: %llu mappings left\n",
				r->wl->name, wl_cfg_name[r->cfg], p->idx,
				(unsigned long long)st.live);
			rc = -EUCLEAN;
		}
		if (dg_dma_dev_check(p->dd, stderr) && !rc)
			rc = -EUCLEAN;
		e = dg_dma_dev_destroy(p->dd);
		if (e && !rc)
			rc = fail("dg_dma_dev_destroy", -e);
	}
	if (p->dev) {
		dg_dev_stats(p->dev, &ds);
		if (ds.faults && !rc) {
			fprintf(stderr, "bench workloads: %s/%s port %u: %llu device faults\n",
				r->wl->name, wl_cfg_name[r->cfg], p->idx,
				(unsigned long long)ds.faults);
			rc = -EUCLEAN;
		}
		dg_device_destroy(p->dev);
	}
	free(p->arena);
	memset(p, 0, sizeof(*p));
	return rc;
}

int wl_run_teardown(struct wl_run *r)
{
	int rc = 0, e;

	for (unsigned int i = 0; i < r->nports; i++) {
		e = port_teardown(r, &r->port[i]);
		if (e && !rc)
			rc = e;
	}
	if (r->dma) {
		e = dg_dma_destroy(r->dma);
		if (e && !rc)
			rc = fail("dg_dma_destroy", -e);
	}
	if (r->mmu)
		dg_iommu_destroy(r->mmu);
	r->dma = NULL;
	r->mmu = NULL;
	return rc;
}

void wl_run_phase_set(struct wl_run *r, int phase)
{
	/* Release pairs with the acquire in wl_phase(). */
	atomic_store_explicit(&r->phase, phase, memory_order_release);
}

/* ---- sampled timing ------------------------------------------------------------------------------ */

void wl_drv_dma_begin(struct wl_drv *d)
{
	if (d->timed)
		d->t_mark = bench_now_ns();
}

void wl_drv_dma_end(struct wl_drv *d)
{
	if (d->timed)
		d->phase_ns += bench_now_ns() - d->t_mark;
}

void wl_drv_fail(struct wl_drv *d, int err)
{
	if (err == -ETIMEDOUT) {
		wl_ctr_add(&d->ctr->timeouts, 1);
		return;
	}
	if (!atomic_load_explicit(&d->ctr->errors, memory_order_relaxed))
		fprintf(stderr, "bench workloads: %s/%s: DMA API call failed: %s\n",
			d->run->wl->name, wl_cfg_name[d->run->cfg], strerror(-err));
	wl_ctr_add(&d->ctr->errors, 1);
}

bool wl_batch_end_pending(struct wl_drv *d, struct wl_batches *w, bool wait)
{
	int e;

	if (!w->pend)
		return false;
	wl_drv_dma_begin(d);
	if (!wait && !dg_dma_batch_done(w->pend)) {
		wl_drv_dma_end(d);
		return false;
	}
	e = dg_dma_batch_end(w->pend);
	wl_drv_dma_end(d);
	if (e)
		wl_drv_fail(d, e);
	w->pend = NULL;
	return true;
}

/* ---- the device's translations -------------------------------------------------------------------- */

unsigned int wl_dev_xlat_fail(struct wl_dev *d, uint64_t iova, size_t len, int e)
{
	if (!atomic_load_explicit(&d->ctr->errors, memory_order_relaxed))
		fprintf(stderr, "bench workloads: %s/%s: device translation of %#llx+%zu: %s\n",
			d->run->wl->name, wl_cfg_name[d->run->cfg], (unsigned long long)iova, len,
			strerror(-e));
	wl_ctr_add(&d->ctr->errors, 1);
	return 0;
}

void *wl_dev_ring(struct wl_dev *d, struct wl_port *p, uint64_t ring_dma, size_t bytes,
		  struct wl_ring_xlat *x)
{
	struct dg_sg sg[2];
	unsigned int nr;

	if (x->host && (x->watch > 0 ? dg_dev_rehold_watched(p->dev, x->watch - 1, x->stamp) :
				       dg_dev_rehold(p->dev, x->stamp)))
		return x->host;
	x->host = NULL;
	if (!x->watch) { /* once per ring: later re-translations only when it may have changed */
		int w = dg_dev_watch(p->dev, ring_dma, bytes);

		x->watch = w >= 0 ? w + 1 : -1;
	}
	nr = wl_dev_translate(d, p, ring_dma, bytes, DG_ACCESS_READ | DG_ACCESS_WRITE, sg, 2);

	if (nr != 1) {
		/* Coherent memory is one host allocation: a split would be a library bug. */
		if (nr) {
			fprintf(stderr, "bench workloads: %s/%s: ring %#llx in %u host segments\n",
				d->run->wl->name, wl_cfg_name[d->run->cfg],
				(unsigned long long)ring_dma, nr);
			wl_ctr_add(&d->ctr->errors, 1);
		}
		return NULL;
	}
	x->host = sg[0].addr;
	x->stamp = dg_dev_stamp(p->dev);
	return sg[0].addr;
}

void wl_dev_ring_lost(struct wl_dev *d, uint32_t undone)
{
	if (!atomic_load_explicit(&d->ctr->errors, memory_order_relaxed))
		fprintf(stderr,
			"bench workloads: %s/%s: a ring could not be translated again: burst cut, "
			"%u descriptors not written back\n",
			d->run->wl->name, wl_cfg_name[d->run->cfg], undone);
	wl_ctr_add(&d->ctr->errors, 1);
}

void wl_sg_copy_to(const struct dg_sg *sg, unsigned int nr, size_t off, const void *src, size_t len)
{
	const uint8_t *s = src;

	for (unsigned int i = 0; i < nr && len; i++) {
		if (off >= sg[i].len) {
			off -= sg[i].len;
			continue;
		}
		size_t n = sg[i].len - off < len ? sg[i].len - off : len;

		memcpy((uint8_t *)sg[i].addr + off, s, n);
		s += n;
		len -= n;
		off = 0;
	}
}

void wl_sg_copy_from(const struct dg_sg *sg, unsigned int nr, size_t off, void *dst, size_t len)
{
	uint8_t *t = dst;

	for (unsigned int i = 0; i < nr && len; i++) {
		if (off >= sg[i].len) {
			off -= sg[i].len;
			continue;
		}
		size_t n = sg[i].len - off < len ? sg[i].len - off : len;

		memcpy(t, (const uint8_t *)sg[i].addr + off, n);
		t += n;
		len -= n;
		off = 0;
	}
}

/* ---- polls and bursts ------------------------------------------------------------------------------ */

void wl_drv_poll_start(struct wl_drv *d)
{
	d->timed = d->poll_no++ % WL_SAMPLE_EVERY == 0;
	d->phase_ns = 0;
}

void wl_drv_poll_end(struct wl_drv *d, uint64_t ios, uint64_t bytes)
{
	if (!ios)
		return;
	wl_ctr_add(&d->ctr->ios, ios);
	wl_ctr_add(&d->ctr->bytes, bytes);
	wl_ctr_add(&d->ctr->polls, 1);
	if (d->timed) {
		wl_ctr_add(&d->ctr->dma_ns, d->phase_ns);
		wl_ctr_add(&d->ctr->dma_ios, ios);
	}
}

void wl_dev_burst_add(struct wl_dev *d, uint64_t units, uint64_t bytes)
{
	wl_ctr_add(&d->ctr->units, units);
	wl_ctr_add(&d->ctr->dev_bytes, bytes);
	wl_ctr_add(&d->ctr->polls, 1);
	if (d->timed) {
		wl_ctr_add(&d->ctr->xlat_ns, d->xlat_ns);
		wl_ctr_add(&d->ctr->xlat_units, units);
	}
}
