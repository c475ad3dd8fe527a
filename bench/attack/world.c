/* SPDX-License-Identifier: MIT */
/*
 * bench/attack/world.c - the machine of an attack and the judged primitives (world.h).
 *
 * Judging an access (dev_access, dev_held):
 *  1. refused with a fault errno: exactly one fault record must match it (device, access,
 *     length, reason, an IOVA inside the access) - or the fault queue's overflow counter must
 *     have grown; anything else in the queue is unexpected. Nothing may be dropped silently.
 *  2. allowed: the oracle says which bytes the device was not given (read) or which memory
 *     it changed without a writable mapping (write). Each breached cell is then placed inside
 *     the policy's documented exposure (doc_reason) or not.
 *  3. lazy: a breach documented as "inside the lazy window" keeps its elapsed time since the
 *     unmap returned; world_finish() compares every such time with the window the library
 *     reports once everything is flushed. The library measures from the unmap's enqueue
 *     (before the unmap returns) to the observed completion of the flush (after the device
 *     could last translate through the stale entry), so a correct library always reports at
 *     least what the attacker observed; a breach beyond it is undocumented.
 */
#include "world.h"

#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

uint64_t w_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t virtual_clock(void *cookie)
{
	struct atk_world *w = cookie;

	return atomic_load_explicit(&w->vclock, memory_order_relaxed);
}

uint64_t world_now(struct atk_world *w)
{
	return w->cfg->virtual_clock ? virtual_clock(w) : w_now_ns();
}

void world_sleep(struct atk_world *w, uint64_t ns)
{
	if (!w->cfg->virtual_clock) {
		w_sleep_ns(ns);
		return;
	}
	atomic_fetch_add_explicit(&w->vclock, ns, memory_order_relaxed);
	dg_dma_housekeep(w->dma); /* what the housekeeping thread would have done */
}

void w_sleep_ns(uint64_t ns)
{
	struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000ull),
			      .tv_nsec = (long)(ns % 1000000000ull)};

	nanosleep(&ts, NULL);
}

static void w_log(struct atk_world *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void w_log(struct atk_world *w, const char *fmt, ...)
{
	va_list ap;

	if (!w->cfg->log)
		return;
	fprintf(w->cfg->log, "%s/%s: ", atk_policy_name(w->pol), atk_attack_name(w->res->attack));
	va_start(ap, fmt);
	vfprintf(w->cfg->log, fmt, ap);
	va_end(ap);
	fputc('\n', w->cfg->log);
}

void w_legit_failure(struct atk_world *w, const char *what, int err)
{
	w->res->legit_failures++;
	w_log(w, "legitimate operation failed: %s: %s", what, strerror(err < 0 ? -err : err));
}

bool w_passthrough(const struct atk_world *w, unsigned int dev)
{
	return dg_device_mode(w->dev[dev]) == DG_CTX_PASSTHROUGH;
}

static uintptr_t page_floor(const void *p)
{
	return (uintptr_t)p & ~(uintptr_t)(W_PAGE - 1);
}

static uintptr_t page_ceil(const void *p, size_t len)
{
	return ((uintptr_t)p + len + W_PAGE - 1) & ~(uintptr_t)(W_PAGE - 1);
}

/* ---- the machine ------------------------------------------------------------------------------ */

static void dev_config(const struct atk_world *w, struct dg_dma_dev_config *c)
{
	dg_dma_dev_config_init(c);
	switch (w->pol) {
	case ATK_POL_IDENTITY:
		c->policy = DG_DMA_IDENTITY;
		break;
	case ATK_POL_STRICT:
		c->policy = DG_DMA_STRICT;
		break;
	case ATK_POL_LAZY:
		c->policy = DG_DMA_LAZY;
		c->lazy.timeout_ns = w->cfg->lazy_timeout_ns;
		break;
	case ATK_POL_WINDOW:
		/* DDW: the first half of the arena is the direct region (the "RAM" the window
		   covers), the rest is mapped on demand with 4K pages. */
		c->policy = DG_DMA_WINDOW;
		c->window.base = W_WINDOW_BASE;
		c->window.size = W_WINDOW_SIZE;
		c->window.page_size = W_PAGE;
		c->window.direct = w->arena;
		c->window.direct_size = (uint64_t)W_ZONE_PAGES * W_PAGE;
		break;
	case ATK_POL_BOUNCE:
		c->policy = DG_DMA_BOUNCE;
		c->bounce.area_size = 256 * 1024;
		break;
	case ATK_POL_POOL:
		c->policy = DG_DMA_POOL;
		break;
	case ATK_POL_LINUX_REF:
		c->policy = DG_DMA_STRICT;
		c->flags = DG_DMA_DEV_LINUX_REFERENCE;
		break;
	case ATK_NR_POLICIES:
		break;
	}
}

static int pools_create(struct atk_world *w)
{
	for (unsigned int dir = 0; dir < 3; dir++) {
		void *b[W_POOL_NBUFS];
		uint8_t *lo = NULL, *hi = NULL;
		uint64_t dma;
		int r = 0;

		w->pool[dir] = dg_dma_pool_create(w->dd[0], W_POOL_BUF, W_POOL_NBUFS,
						  (enum dg_dma_dir)dir, 0);
		if (!w->pool[dir])
			return -errno;
		for (unsigned int i = 0; i < W_POOL_NBUFS; i++) {
			r = dg_dma_pool_get(w->pool[dir], &b[i], &dma);
			if (r)
				return r;
			if (!lo || (uint8_t *)b[i] < lo)
				lo = b[i];
			if (!hi || (uint8_t *)b[i] + W_POOL_BUF > hi)
				hi = (uint8_t *)b[i] + W_POOL_BUF;
		}
		/* A pool is one allocation cut into buffers: register it as one area. */
		if ((size_t)(hi - lo) != (size_t)W_POOL_NBUFS * W_POOL_BUF)
			r = -EINVAL;
		if (!r)
			r = orc_add_area(&w->orc, lo, (size_t)(hi - lo));
		for (unsigned int i = 0; i < W_POOL_NBUFS; i++)
			dg_dma_pool_put(w->pool[dir], b[i]);
		if (r)
			return r;
		w->pool_lo[dir] = lo;
		w->pool_len[dir] = (size_t)(hi - lo);
	}
	return 0;
}

static void pools_destroy(struct atk_world *w)
{
	for (unsigned int dir = 0; dir < 3; dir++) {
		if (!w->pool[dir])
			continue;
		if (w->pool_lo[dir])
			orc_remove_area(&w->orc, w->pool_lo[dir]);
		if (dg_dma_pool_destroy(w->pool[dir]))
			w_legit_failure(w, "pool destroy", -EBUSY);
		w->pool[dir] = NULL;
		w->pool_lo[dir] = NULL;
	}
}

int world_init(struct atk_world *w, enum atk_policy pol, const struct atk_config *cfg,
	       struct atk_result *res, unsigned int ndev, unsigned int attach)
{
	struct dg_iommu_config ic;
	int r;

	memset(w, 0, sizeof(*w));
	w->pol = pol;
	w->cfg = cfg;
	w->res = res;
	w->ndev = ndev;
	orc_init(&w->orc);
	dg_iommu_config_init(&ic);
	ic.log = NULL;
	ic.wait_timeout_ns = cfg->wait_timeout_ns ? cfg->wait_timeout_ns : 20000000ull;
	ic.reference = pol == ATK_POL_LINUX_REF;
	ic.iotlb_leaf_direct = cfg->iotlb_leaf_direct;
	w->mmu = dg_iommu_create(&ic);
	if (!w->mmu)
		return -errno;
	if (cfg->virtual_clock) {
		struct dg_dma_config dc = {
			.no_housekeeping = true, .clock = virtual_clock, .clock_cookie = w};

		atomic_init(&w->vclock, 1000000000ull);
		w->dma = dg_dma_create(w->mmu, &dc);
	} else {
		w->dma = dg_dma_create(w->mmu, NULL); /* housekeeping thread, CLOCK_MONOTONIC */
	}
	if (!w->dma)
		return -errno;
	w->arena = aligned_alloc(W_PAGE, (size_t)W_ARENA_PAGES * W_PAGE);
	w->scratch = aligned_alloc(W_PAGE, W_SCRATCH);
	w->wbuf = aligned_alloc(W_PAGE, W_SCRATCH);
	w->traffic = aligned_alloc(W_PAGE, W_PAGE);
	if (!w->arena || !w->scratch || !w->wbuf || !w->traffic)
		return -ENOMEM;
	r = orc_add_area(&w->orc, w->arena, (size_t)W_ARENA_PAGES * W_PAGE);
	if (r)
		return r;
	for (unsigned int i = 0; i < ndev; i++) {
		struct dg_dma_dev_config c;
		struct dg_dma_stats st;

		w->dev[i] = dg_device_create(w->mmu, 0x10 + i);
		if (!w->dev[i])
			return -errno;
		dg_dev_set_auto_offline(w->dev[i], true);
		w->auto_offline[i] = true;
		if (!(attach & (1u << i)))
			continue; /* never attached: blocked */
		dev_config(w, &c);
		w->dd[i] = dg_dma_dev_create(w->dma, w->dev[i], &c);
		if (!w->dd[i])
			return -errno;
		dg_dma_dev_stats(w->dd[i], &st);
		w->all_memory[i] = st.exposes_all_memory;
	}
	if (pol == ATK_POL_POOL && w->dd[0])
		return pools_create(w);
	return 0;
}

void world_fini(struct atk_world *w)
{
	for (unsigned int i = 0; i < W_MAX_MAPS; i++)
		if (w->map[i].state == MAP_LIVE)
			drv_unmap(w, &w->map[i]);
	pools_destroy(w);
	for (unsigned int i = 0; i < ORC_MAX_DEVS; i++) {
		if (w->dev[i])
			dg_dev_offline(w->dev[i]);
		if (w->dd[i]) {
			int r;

			for (unsigned int k = 0;
			     (r = dg_dma_dev_destroy(w->dd[i])) == -ETIMEDOUT && k < 50; k++)
				;
			if (r)
				w_legit_failure(w, "dma device destroy", r);
			else
				w->dd[i] = NULL;
		}
		if (w->dev[i] && !w->dd[i])
			dg_device_destroy(w->dev[i]);
	}
	if ((!w->dma || !dg_dma_destroy(w->dma)) && w->mmu)
		dg_iommu_destroy(w->mmu);
	orc_fini(&w->orc);
	free(w->arena);
	free(w->scratch);
	free(w->wbuf);
	free(w->traffic);
	free(w->lazy_el);
}

/* ---- what the policy documents as exposed ------------------------------------------------------ */

/* Is host address @h inside the policy's documented exposure for device @dev at time @t? */
static int doc_reason(struct atk_world *w, unsigned int dev, uintptr_t h, uint64_t t,
		      uint64_t *lazy_elapsed)
{
	if (w->pol == ATK_POL_IDENTITY)
		return w->all_memory[dev] ? ATK_DOC_ALL_MEMORY : -1;
	if (w->pol == ATK_POL_WINDOW && w->dd[dev] && h >= (uintptr_t)w->arena &&
	    h - (uintptr_t)w->arena < (uintptr_t)W_ZONE_PAGES * W_PAGE)
		return ATK_DOC_DIRECT_REGION;
	if (w->pol == ATK_POL_POOL && dev == 0)
		for (unsigned int d = 0; d < 3; d++)
			if (w->pool_lo[d] && h >= (uintptr_t)w->pool_lo[d] &&
			    h - (uintptr_t)w->pool_lo[d] < w->pool_len[d])
				return ATK_DOC_POOL_MEMORY;
	if (w->pol == ATK_POL_BOUNCE)
		return -1;
	for (unsigned int i = 0; i < W_MAX_MAPS; i++) {
		const struct atk_map *m = &w->map[i];

		if (m->dev != dev || h < page_floor(m->buf) || h >= page_ceil(m->buf, m->len))
			continue;
		switch (m->state) {
		case MAP_LIVE:
			/* the rest of its pages; its own bytes are the device's only as its
			 * direction grants (a breach there is an access it forbids) */
			if (h >= (uintptr_t)m->buf && h - (uintptr_t)m->buf < m->len)
				break;
			return ATK_DOC_SUBPAGE;
		case MAP_UNCONFIRMED:
			return ATK_DOC_UNCONFIRMED;
		case MAP_LAZY:
			if (w->pol != ATK_POL_LAZY)
				break;
			*lazy_elapsed = t - m->t_unmap;
			return ATK_DOC_LAZY_WINDOW;
		default:
			break;
		}
	}
	return -1;
}

static void on_breach(void *arg, uintptr_t host, size_t bytes)
{
	struct atk_world *w = arg;
	uint64_t el = 0;
	int reason = doc_reason(w, w->j.dev, host, w->j.t, &el);

	if (reason < 0) {
		if (w->j.reason >= 0 || !w->j.any)
			w->j.undoc_host = host;
		w->j.undoc_bytes += bytes;
		w->j.reason = -1;
	} else if (!w->j.any || w->j.reason >= 0) {
		if (!w->j.any)
			w->j.reason = reason;
		if (reason == ATK_DOC_LAZY_WINDOW && el > w->j.lazy_elapsed)
			w->j.lazy_elapsed = el;
	}
	w->j.any = true;
}

/* ---- the driver ----------------------------------------------------------------------------- */

static bool pages_busy(const struct atk_world *w, uintptr_t lo, uintptr_t hi)
{
	for (unsigned int i = 0; i < W_MAX_MAPS; i++) {
		const struct atk_map *m = &w->map[i];

		if (m->state == MAP_FREE || m->state == MAP_GONE)
			continue;
		if (page_floor(m->buf) < hi && page_ceil(m->buf, m->len) > lo)
			return true;
	}
	return false;
}

/* Pages for a new arena buffer: round robin over the zone, skipping pages still in use. */
static uint8_t *arena_buffer(struct atk_world *w, unsigned int zone, size_t npages)
{
	for (unsigned int tries = 0; tries < W_ZONE_PAGES; tries++) {
		unsigned int p = w->next_page[zone];
		uint8_t *b;

		if (p + npages > W_ZONE_PAGES)
			p = 0;
		w->next_page[zone] = (unsigned int)(p + npages) % W_ZONE_PAGES;
		b = w->arena + ((size_t)zone * W_ZONE_PAGES + p) * W_PAGE;
		if (!pages_busy(w, (uintptr_t)b, (uintptr_t)b + npages * W_PAGE))
			return b;
	}
	return NULL;
}

static struct atk_map *map_slot(struct atk_world *w)
{
	for (unsigned int i = 0; i < W_MAX_MAPS; i++)
		if (w->map[i].state == MAP_FREE || w->map[i].state == MAP_GONE) {
			memset(&w->map[i], 0, sizeof(w->map[i]));
			return &w->map[i];
		}
	return NULL;
}

static bool dir_reads(enum dg_dma_dir dir)
{
	return dir != DG_DMA_FROM_DEVICE;
}

static bool dir_writes(enum dg_dma_dir dir)
{
	return dir != DG_DMA_TO_DEVICE;
}

/* An IOVA page was handed out (a map returned @dma). */
static void issued(struct atk_world *w, uint64_t dma)
{
	uint64_t page = dma / W_PAGE;

	w->issued[page % W_ISSUED_SLOTS].page = page;
	w->issued[page % W_ISSUED_SLOTS].at = w->unmaps + 1;
}

bool world_iova_reissued(const struct atk_world *w, const struct atk_map *m)
{
	uint64_t page = m->dma / W_PAGE;

	return w->issued[page % W_ISSUED_SLOTS].page == page &&
	       w->issued[page % W_ISSUED_SLOTS].at > m->unmaps_at;
}

struct atk_map *drv_map(struct atk_world *w, unsigned int dev, size_t len, size_t off,
			enum dg_dma_dir dir, bool direct)
{
	struct atk_map *m = map_slot(w);
	struct dg_device *d = w->dev[dev];
	uint8_t *base;
	int r;

	if (!m || !w->dd[dev] || !len || (len | off) % ORC_CELL || len > W_SCRATCH / 2) {
		w_legit_failure(w, "attack set-up (buffer)", -EINVAL);
		return NULL;
	}
	if (w->pol == ATK_POL_POOL && dev == 0 && off + len <= W_POOL_BUF) {
		void *b;
		uint64_t pdma;

		r = dg_dma_pool_get(w->pool[dir], &b, &pdma);
		if (r) {
			w_legit_failure(w, "pool get", r);
			return NULL;
		}
		m->pool = w->pool[dir];
		m->pool_buf = b;
		base = b;
		orc_kernel_write(&w->orc, base, W_POOL_BUF);
	} else {
		size_t npages = (off + len + W_PAGE - 1) / W_PAGE;

		unsigned int zone = w->pol == ATK_POL_WINDOW && direct ? 0 : 1;

		base = arena_buffer(w, zone, npages);
		if (!base) { /* pages held by unconfirmed unmaps: let the library confirm */
			drv_wait_confirmed(w, 1000000000ull);
			base = arena_buffer(w, zone, npages);
		}
		if (!base) { /* a limit of the harness, not of the library: skip the buffer */
			w->arena_full++;
			return NULL;
		}
		/* Fresh kernel data in the whole page(s): the buffer and whatever shares them. */
		orc_kernel_write(&w->orc, base, npages * W_PAGE);
	}
	m->buf = base + off;
	m->len = len;
	m->dir = dir;
	m->dev = dev;
	r = dg_dma_map_single(w->dd[dev], m->buf, len, dir, 0, &m->dma);
	if (r) {
		if (m->pool)
			dg_dma_pool_put(m->pool, base);
		w_legit_failure(w, "map", r);
		return NULL;
	}
	m->state = MAP_LIVE;
	issued(w, m->dma);
	orc_grant(&w->orc, dev, m->buf, len, dir_reads(dir), dir_writes(dir));
	/* The device's legitimate DMA: it must see exactly the buffer (and caches the
	   translation, which the stale attacks rely on). */
	if (dir_reads(dir)) {
		r = dg_dev_read(d, m->dma, w->scratch, len);
		if (r)
			w_legit_failure(w, "device read of its buffer", r);
		else if (memcmp(w->scratch, m->buf, len))
			w_legit_failure(w, "device read other bytes than its buffer's", -EIO);
	}
	if (dir_writes(dir)) {
		bool landed = w->pol != ATK_POL_BOUNCE; /* bounce: at unmap */

		orc_device_content(&w->orc, m->buf, len, w->wbuf);
		r = dg_dev_write(d, m->dma, w->wbuf, len);
		if (r)
			w_legit_failure(w, "device write of its buffer", r);
		else if (landed && memcmp(w->wbuf, m->buf, len))
			w_legit_failure(w, "device write landed elsewhere", -EIO);
		if (!r)
			orc_device_wrote(&w->orc, dev, m->buf, len, landed);
	}
	dev_idle(w, dev);
	return m;
}

int drv_unmap(struct atk_world *w, struct atk_map *m)
{
	int r = dg_dma_unmap_single(w->dd[m->dev], m->dma, m->len, m->dir, 0, NULL);

	m->t_unmap = world_now(w);
	m->unmaps_at = ++w->unmaps;
	if (r == -ETIMEDOUT && w->cfg->reuse_after_timeout) {
		w->res->unmap_timeouts++;
		r = 0; /* the negligent driver carries on as if it were confirmed */
	} else if (r == -ETIMEDOUT) {
		/* Not confirmed: the device may still reach it, so the memory stays aside (and
		   stays the device's) until the library confirms. */
		w->res->unmap_timeouts++;
		m->state = MAP_UNCONFIRMED;
		return r;
	}
	if (r) {
		w_legit_failure(w, "unmap", r);
		return r;
	}
	orc_revoke(&w->orc, m->dev, m->buf, m->len, dir_reads(m->dir), dir_writes(m->dir));
	m->state = w->pol == ATK_POL_LAZY ? MAP_LAZY : MAP_GONE;
	if (m->pool)
		dg_dma_pool_put(m->pool, m->pool_buf);
	/* The kernel reuses the memory at once: what a stale access must not see. */
	orc_kernel_write(&w->orc, m->buf, m->len);
	return 0;
}

void drv_kernel_write(struct atk_world *w, struct atk_map *m)
{
	orc_kernel_write(&w->orc, m->buf, m->len);
}

void drv_traffic(struct atk_world *w, unsigned int dev)
{
	const size_t len = 2048;
	uint64_t dma, tag = 0x7AFFull << 48 | ++w->pattern;
	int r;

	for (size_t i = 0; i < len; i += 8)
		memcpy(w->traffic + i, &tag, 8);
	r = dg_dma_map_single(w->dd[dev], w->traffic, len, DG_DMA_BIDIRECTIONAL, 0, &dma);
	if (r) {
		w_legit_failure(w, "traffic map", r);
		return;
	}
	issued(w, dma);
	/* The device must reach exactly this buffer through its fresh IOVA (a stale IOTLB
	   entry for a reused IOVA would send it elsewhere). */
	r = dg_dev_read(w->dev[dev], dma, w->scratch, len);
	if (r || memcmp(w->scratch, w->traffic, len))
		w_legit_failure(w, "traffic: device read of its buffer", r ? r : -EIO);
	tag ^= 0xffff;
	for (size_t i = 0; i < len; i += 8)
		memcpy(w->wbuf + i, &tag, 8);
	r = dg_dev_write(w->dev[dev], dma, w->wbuf, len);
	if (r)
		w_legit_failure(w, "traffic: device write of its buffer", r);
	dev_idle(w, dev);
	r = dg_dma_unmap_single(w->dd[dev], dma, len, DG_DMA_BIDIRECTIONAL, 0, NULL);
	w->unmaps++;
	if (r && r != -ETIMEDOUT)
		w_legit_failure(w, "traffic unmap", r);
	else if (!r && memcmp(w->wbuf, w->traffic, len))
		w_legit_failure(w, "traffic: device write landed elsewhere", -EIO);
}

void drv_settle(struct atk_world *w)
{
	for (unsigned int dev = 0; dev < w->ndev; dev++) {
		struct dg_dma_stats st;
		bool unconf = false, lazy = false;

		for (unsigned int i = 0; i < W_MAX_MAPS; i++) {
			unconf |= w->map[i].dev == dev && w->map[i].state == MAP_UNCONFIRMED;
			lazy |= w->map[i].dev == dev && w->map[i].state == MAP_LAZY;
		}
		if ((!unconf && !lazy) || !w->dd[dev] || dg_dma_dev_stats(w->dd[dev], &st))
			continue;
		for (unsigned int i = 0; i < W_MAX_MAPS; i++) {
			struct atk_map *m = &w->map[i];

			if (m->dev != dev)
				continue;
			if (m->state == MAP_UNCONFIRMED && !st.quarantined) {
				orc_revoke(&w->orc, dev, m->buf, m->len, dir_reads(m->dir),
					   dir_writes(m->dir));
				m->state = MAP_GONE;
				orc_kernel_write(&w->orc, m->buf, m->len);
			}
			if (m->state == MAP_LAZY && !st.lazy_pending)
				m->state = MAP_GONE; /* every flush queued before now completed */
		}
	}
}

void drv_wait_confirmed(struct atk_world *w, uint64_t max_ns)
{
	uint64_t t0 = world_now(w);

	for (;;) {
		bool waiting = false;

		dg_dma_housekeep(w->dma);
		drv_settle(w);
		for (unsigned int i = 0; i < W_MAX_MAPS; i++)
			waiting |= w->map[i].state == MAP_UNCONFIRMED ||
				   w->map[i].state == MAP_LAZY;
		if (!waiting || world_now(w) - t0 > max_ns)
			return;
		world_sleep(w, 200000);
	}
}

/* ---- the device ------------------------------------------------------------------------------ */

void dev_idle(struct atk_world *w, unsigned int dev)
{
	if (!w->auto_offline[dev])
		dg_dev_offline(w->dev[dev]);
}

static bool fault_errno(int r)
{
	return r == -EFAULT || r == -EACCES || r == -ERANGE || r == -EPERM || r == -EOVERFLOW;
}

/* The errno include/dmaguard/dev.h documents for each fault reason. Written from the header
 * on purpose, not shared with src/dev's copy: the oracle checks the library, it does not
 * agree with it by construction. */
static int reason_errno(enum dg_fault_reason reason)
{
	switch (reason) {
	case DG_FAULT_UNMAPPED:
		return -EFAULT;
	case DG_FAULT_PERM:
		return -EACCES;
	case DG_FAULT_RANGE:
		return -ERANGE;
	case DG_FAULT_BLOCKED:
		return -EPERM;
	case DG_FAULT_WRAP:
		return -EOVERFLOW;
	}
	return 0;
}

/* Pop every fault record and match them with the access just made (result @r). */
static void match_faults(struct atk_world *w, unsigned int dev, bool write, uint64_t iova,
			 size_t len, int r, uint64_t overflow_before)
{
	uint32_t rid = dg_device_rid(w->dev[dev]);
	struct dg_iommu_stats st;
	struct dg_fault f;
	bool matched = false;

	while (dg_iommu_fault_pop(w->mmu, &f) == 0) {
		bool in = f.reason == DG_FAULT_WRAP ? f.iova == iova :
						      f.iova >= iova && f.iova - iova < len;

		if (r < 0 && !matched && f.rid == rid && reason_errno(f.reason) == r &&
		    f.len == len && f.access == (write ? DG_ACCESS_WRITE : DG_ACCESS_READ) && in) {
			matched = true;
			w->res->faults_recorded++;
			continue;
		}
		w->res->faults_unexpected++;
		w_log(w, "unexpected fault record: rid %#x iova %#" PRIx64 " len %" PRIu64 " %s",
		      f.rid, f.iova, f.len, dg_fault_reason_name(f.reason));
	}
	if (r >= 0 || matched || !fault_errno(r))
		return;
	dg_iommu_stats(w->mmu, &st);
	if (st.fault_overflow > overflow_before) {
		w->res->fault_overflow += st.fault_overflow - overflow_before;
		return;
	}
	w->res->faults_missing++;
	w_log(w, "refused access without a fault record: iova %#" PRIx64 " len %zu: %s", iova, len,
	      strerror(-r));
}

/* Judge what an allowed access did (the bytes read are in w->scratch). */
static void judge(struct atk_world *w, unsigned int dev, bool write, size_t len,
		  const struct atk_map *stale)
{
	struct atk_result *res = w->res;
	struct orc_verdict v;

	if (write)
		orc_judge_writes(&w->orc, dev, on_breach, w, &v);
	else
		orc_judge_read(&w->orc, dev, w->scratch, len, on_breach, w, &v);
	if (!v.breach) {
		res->allowed++;
		return;
	}
	res->breaches++;
	if (write)
		res->breach_writes++;
	else
		res->breach_reads++;
	res->bytes_exposed += v.breach;
	if (w->j.reason < 0) {
		res->undocumented++;
		w_log(w,
		      "UNDOCUMENTED breach: device %u %s %zu bytes %s %#" PRIx64 ": %zu bytes of "
		      "memory it was not given, first at host %#" PRIxPTR,
		      dev, write ? "wrote" : "read", len,
		      w->j.held ? "through its held translation, host" :
		      stale	? "at stale IOVA" :
				  "at IOVA",
		      w->j.iova, w->j.undoc_bytes, w->j.undoc_host);
	} else {
		res->documented[w->j.reason]++;
		if (w->j.reason == ATK_DOC_LAZY_WINDOW) {
			if (w->n_lazy_el == w->cap_lazy_el) {
				size_t cap = w->cap_lazy_el ? 2 * w->cap_lazy_el : 64;
				uint64_t *p = realloc(w->lazy_el, cap * sizeof(*p));

				if (!p) {
					w_legit_failure(w, "harness memory", -ENOMEM);
					return;
				}
				w->lazy_el = p;
				w->cap_lazy_el = cap;
			}
			w->lazy_el[w->n_lazy_el++] = w->j.lazy_elapsed;
		}
	}
	if (stale && !world_iova_reissued(w, stale)) {
		uint64_t el = w->j.t - stale->t_unmap, un = w->unmaps - stale->unmaps_at;

		if (el > res->window_ns)
			res->window_ns = el;
		if (un > res->window_unmaps)
			res->window_unmaps = un;
	}
}

static void judge_begin(struct atk_world *w, unsigned int dev, uint64_t iova)
{
	drv_settle(w);
	w->j.dev = dev;
	w->j.reason = 0;
	w->j.any = false;
	w->j.lazy_elapsed = 0;
	w->j.iova = iova;
	w->j.held = false;
	w->j.undoc_bytes = 0;
	w->j.t = world_now(w);
}

static void fill_pattern(struct atk_world *w, size_t len)
{
	uint64_t p = 0xBADDull << 48 | (++w->pattern & 0xffffffffffffull);

	for (size_t i = 0; i + 8 <= len; i += 8)
		memcpy(w->wbuf + i, &p, 8);
	memset(w->wbuf + (len & ~(size_t)7), 0x5a, len & 7);
}

int dev_access(struct atk_world *w, unsigned int dev, bool write, uint64_t iova, size_t len,
	       const struct atk_map *stale)
{
	bool wraps = iova + (len - 1) < iova;
	struct dg_iommu_stats st;
	int r;

	if (w_passthrough(w, dev) && !wraps && !orc_covers(&w->orc, iova, len)) {
		w->res->skipped++; /* pass-through would touch host memory outside the machine */
		return 1;
	}
	if (!wraps && len > W_SCRATCH) {
		w_legit_failure(w, "attack set-up (access too long)", -EINVAL);
		return 1;
	}
	dg_iommu_stats(w->mmu, &st);
	judge_begin(w, dev, iova);
	if (write) {
		fill_pattern(w, wraps ? W_SCRATCH : len);
		r = dg_dev_write(w->dev[dev], iova, w->wbuf, len);
	} else {
		r = dg_dev_read(w->dev[dev], iova, w->scratch, len);
	}
	w->res->attempts++;
	match_faults(w, dev, write, iova, len, r, st.fault_overflow);
	if (r < 0) {
		if (fault_errno(r))
			w->res->refused++;
		else
			w_legit_failure(w, "device access (not a fault errno)", r);
		return r;
	}
	judge(w, dev, write, len, stale);
	return 0;
}

void dev_held(struct atk_world *w, unsigned int dev, bool write, const struct dg_sg *sg,
	      unsigned int nr, const struct atk_map *stale)
{
	size_t pos = 0;

	judge_begin(w, dev, nr ? (uintptr_t)sg[0].addr : 0);
	w->j.held = true;
	if (write)
		fill_pattern(w, W_SCRATCH);
	for (unsigned int i = 0; i < nr && pos + sg[i].len <= W_SCRATCH; i++) {
		if (write)
			memcpy(sg[i].addr, w->wbuf + pos, sg[i].len);
		else
			memcpy(w->scratch + pos, sg[i].addr, sg[i].len);
		pos += sg[i].len;
	}
	w->res->attempts++;
	judge(w, dev, write, pos, stale);
}

/* ---- the end of a run --------------------------------------------------------------------------- */

void world_finish(struct atk_world *w)
{
	struct atk_result *res = w->res;

	for (unsigned int i = 0; i < w->ndev; i++)
		dg_dev_offline(w->dev[i]);
	drv_wait_confirmed(w, 3000000000ull);
	for (unsigned int i = 0; i < W_MAX_MAPS; i++)
		if (w->map[i].state == MAP_UNCONFIRMED || w->map[i].state == MAP_LAZY)
			w_legit_failure(w, "confirmation of an unmap (3 s)", -ETIMEDOUT);
	if (w->pol == ATK_POL_LAZY && w->dd[0]) {
		struct dg_dma_stats st;

		dg_dma_dev_stats(w->dd[0], &st);
		res->lib_window_ns = st.lazy_window_max_ns;
		res->lib_window_unmaps = st.lazy_window_max_unmaps;
	}
	/* Lazy: only inside the window the library reports. */
	for (size_t i = 0; i < w->n_lazy_el; i++) {
		if (w->lazy_el[i] <= res->lib_window_ns)
			continue;
		res->documented[ATK_DOC_LAZY_WINDOW]--;
		res->undocumented++;
		w_log(w,
		      "UNDOCUMENTED: stale access %" PRIu64
		      " ns after the unmap, reported window %" PRIu64 " ns",
		      w->lazy_el[i], res->lib_window_ns);
	}
	if (res->legit_failures || res->faults_missing || res->faults_unexpected)
		res->verdict = ATK_BROKEN;
	else if (res->undocumented)
		res->verdict = ATK_VULNERABLE;
	else if (res->breaches)
		res->verdict = ATK_DOCUMENTED;
	else
		res->verdict = ATK_PROTECTED;
}
