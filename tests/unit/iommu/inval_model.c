/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/iommu/inval_model.c - randomized map/unmap/invalidate/translate sequences on
 * several devices, checked against a model of what each device may still have cached.
 *
 * The model: 2 domains of NPAGES (24: three lines of 8 leaf entries, so consecutive walks
 * are in adjacent lines or not) 4 KiB pages (4K leaves only), 3 devices. For every device,
 * domain and page it keeps at most one "may be cached" translation (the real IOTLB holds at
 * most one entry per domain and page: a refill overwrites it in the same slot), stamped with
 * the device's `seen` sequence number at the time it was walked. An invalidation command
 * with sequence number end E drops the entries it covers from a device once the device's
 * seen reaches E. Every translation is then checked:
 *  - a walk (the device's miss counter moved) must give exactly the current page table;
 *    one that succeeds, when the last successful walk of one of the device's 2 streams was
 *    in the same 8-page aligned group or an adjacent one (the stream detector of
 *    dev/translate.c, which the model runs too: per device whatever the domain, a walk next
 *    to none taking the streams' slots in turn), also caches the other mapped pages of
 *    its group (the leaf entries of its cache line: the neighbour fill) and, when that
 *    stream's walk was in the group just below (an ascending stream), those of the next
 *    group too (the fill ahead; the stream then counts as in that next group), which the
 *    model marks as held too, and the device's prefetch_fills counter must move by their
 *    number (0 for a walk that does not look sequential);
 *  - an IOTLB hit must give the device's still-possible cached entry: a translation that was
 *    invalidated and whose command the device has applied must never be used again;
 *  - dg_inval_done(seq) may say true only if every online device has applied seq;
 *  - bad commands are refused with their errno and leave the queue unchanged.
 * The IOTLB is tiny (16 entries) and the queue short (16 slots), so evictions, hash
 * collisions and laps (a device a whole queue behind flushes everything) all happen.
 */
#include "inval_model.h"

#include "iommu/iommu_internal.h"

#include <dmaguard/dev.h>
#include <dmaguard/iommu.h>

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NPAGES	 24
#define NDOMS	 2
#define NDEVS	 3
#define K4	 0x1000ull
#define BASE	 0x100000ull
#define MAX_LOG	 4096
#define NO_FRAME 0xffff

struct cached {
	uint16_t frame; /* NO_FRAME: nothing cached */
	uint8_t prot;
	bool fill; /* made by the neighbour fill, not by a walk of its own page */
};

struct logent {
	uint64_t end;	      /* sequence number a device must reach to have applied it */
	uint8_t kind;	      /* DG_INVAL_* (RANGE/PAGE as a page range) */
	uint32_t id;	      /* domain id or rid */
	uint32_t first, last; /* pages, for RANGE/PAGE */
};

struct model {
	struct dg_iommu *mmu;
	struct dg_domain *dom[NDOMS];
	struct dg_device *dev[NDEVS];
	uint8_t *frames;	     /* NPAGES host frames */
	uint16_t map[NDOMS][NPAGES]; /* frame or NO_FRAME */
	uint8_t prot[NDOMS][NPAGES];
	unsigned int dev_dom[NDEVS];		 /* domain index each device translates in */
	struct cached may[NDEVS][NDOMS][NPAGES]; /* what a device may hold */
	uint64_t applied[NDEVS];		 /* log applied up to this seen */
	uint64_t miss_line[NDEVS][2];		 /* lines of its 2 streams' last successful walks */
	unsigned int miss_next[NDEVS];		 /* the slot a walk next to neither takes */
	struct logent log[MAX_LOG];
	unsigned int nlog;
	uint64_t seqs[8]; /* recent sequence numbers to wait for */
	const uint8_t *p, *end;
	struct inval_model_counts n;
};

static void fail(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fprintf(stderr, "inval_model: ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	abort();
}

#define CHECK(c, ...)                      \
	do {                               \
		if (!(c))                  \
			fail(__VA_ARGS__); \
	} while (0)

static const uint8_t *min_ptr(const uint8_t *a, const uint8_t *b)
{
	return a < b ? a : b;
}

static unsigned int byte(struct model *m)
{
	return m->p < m->end ? *m->p++ : 0;
}

static void add_log(struct model *m, uint64_t end, uint8_t kind, uint32_t id, uint32_t first,
		    uint32_t last)
{
	if (m->nlog == MAX_LOG) {
		/* Drop the oldest half: every device has applied it or laps anyway. */
		memmove(m->log, m->log + MAX_LOG / 2, sizeof(m->log[0]) * (MAX_LOG / 2));
		m->nlog = MAX_LOG / 2;
	}
	m->log[m->nlog++] = (struct logent){end, kind, id, first, last};
}

/* Drop the cached entries of device @d covered by commands it has applied since last time. */
static void sync_device(struct model *m, unsigned int d)
{
	uint64_t seen = m->dev[d]->seen;

	for (unsigned int i = 0; i < m->nlog; i++) {
		const struct logent *e = &m->log[i];

		if (e->end <= m->applied[d] || e->end > seen)
			continue;
		for (unsigned int k = 0; k < NDOMS; k++) {
			bool dom_match = dg_domain_id(m->dom[k]) == e->id;

			for (unsigned int p = 0; p < NPAGES; p++) {
				bool drop = false;

				switch (e->kind) {
				case DG_INVAL_RANGE:
				case DG_INVAL_PAGE:
					drop = dom_match && p >= e->first && p <= e->last;
					break;
				case DG_INVAL_DOMAIN:
					drop = dom_match;
					break;
				case DG_INVAL_GLOBAL:
					drop = true;
					break;
				case DG_INVAL_DEVICE:
				case DG_INVAL_CONTEXT:
					drop = e->id == dg_device_rid(m->dev[d]);
					break;
				}
				if (drop)
					m->may[d][k][p].frame = NO_FRAME;
			}
		}
	}
	m->applied[d] = seen;
}

static void sync_all(struct model *m)
{
	for (unsigned int d = 0; d < NDEVS; d++)
		sync_device(m, d);
}

static void remember_seq(struct model *m, uint64_t seq)
{
	memmove(m->seqs + 1, m->seqs, sizeof(m->seqs) - sizeof(m->seqs[0]));
	m->seqs[0] = seq;
}

static void op_map(struct model *m)
{
	unsigned int k = byte(m) % NDOMS, p = byte(m) % NPAGES, n = 1 + byte(m) % 4;
	unsigned int prot = 1 + byte(m) % 3;
	unsigned int f = byte(m) % NPAGES;

	if (p + n > NPAGES)
		n = NPAGES - p;
	for (unsigned int i = 0; i < n; i++)
		if (m->map[k][p + i] != NO_FRAME)
			return;
	for (unsigned int i = 0; i < n; i++) {
		unsigned int fr = (f + i * 7) % NPAGES;
		int r = dg_domain_map(m->dom[k], BASE + (p + i) * K4,
				      (uint64_t)(uintptr_t)(m->frames + fr * K4), K4, prot, NULL);

		CHECK(r == 0, "map failed: %d", r);
		m->map[k][p + i] = (uint16_t)fr;
		m->prot[k][p + i] = (uint8_t)prot;
	}
}

static void op_unmap(struct model *m)
{
	unsigned int k = byte(m) % NDOMS, p = byte(m) % NPAGES, n = 1 + byte(m) % 8;
	struct dg_pt_gather g;
	uint64_t unmapped = 0;
	bool any = false;
	int r;

	if (p + n > NPAGES)
		n = NPAGES - p;
	for (unsigned int i = 0; i < n; i++)
		any |= m->map[k][p + i] != NO_FRAME;
	dg_pt_gather_init(&g);
	r = dg_domain_unmap(m->dom[k], BASE + p * K4, n * K4, &g, &unmapped);
	CHECK(any ? r == 0 : r == -ENOENT, "unmap: %d (mapped: %d)", r, any);
	CHECK(g.nr_tables == 0, "4K pages in one leaf table never free a table");
	for (unsigned int i = 0; i < n; i++)
		m->map[k][p + i] = NO_FRAME;
	/* No invalidation: devices may keep using what they cached until one is applied. */
}

static void op_inval(struct model *m)
{
	/* RANGE and PAGE most of the time; the wide commands now and then. */
	static const uint8_t kinds[] = {0, 0, 0, 1, 1, 2, 3, 4, 5};
	unsigned int kind = kinds[byte(m) % sizeof(kinds)], k = byte(m) % NDOMS;
	unsigned int d = byte(m) % NDEVS;
	unsigned int p = byte(m) % NPAGES, n = 1 + byte(m) % NPAGES;
	struct dg_inval_cmd c = {.flags = byte(m) & 1 ? DG_INVAL_LEAF : 0};
	uint32_t first = 0, last = 0;
	uint64_t seq;
	int r;

	if (p + n > NPAGES)
		n = NPAGES - p;
	switch (kind) {
	case 0: /* RANGE */
		c.type = DG_INVAL_RANGE;
		c.domain = dg_domain_id(m->dom[k]);
		c.iova = BASE + p * K4;
		c.size = n * K4;
		first = p;
		last = p + n - 1;
		break;
	case 1: { /* PAGE: a naturally aligned block around p */
		unsigned int order = byte(m) % 5;

		p &= ~((1u << order) - 1);
		c.type = DG_INVAL_PAGE;
		c.domain = dg_domain_id(m->dom[k]);
		c.iova = BASE + p * K4;
		c.size = K4 << order;
		first = p;
		last = p + (1u << order) - 1;
		break;
	}
	case 2:
		c.type = DG_INVAL_DOMAIN;
		c.domain = dg_domain_id(m->dom[k]);
		c.flags = 0;
		break;
	case 3:
		c.type = DG_INVAL_GLOBAL;
		c.flags = 0;
		break;
	case 4:
		c.type = DG_INVAL_DEVICE;
		c.rid = dg_device_rid(m->dev[d]);
		c.flags = 0;
		break;
	default:
		c.type = DG_INVAL_CONTEXT;
		c.rid = dg_device_rid(m->dev[d]);
		c.flags = 0;
		break;
	}
	r = dg_inval_submit(m->mmu, &c, 1, &seq);
	CHECK(r == 0, "submit type %d: %d", c.type, r);
	m->n.invals++;
	add_log(m, seq, (uint8_t)c.type, c.type >= DG_INVAL_DEVICE ? c.rid : c.domain, first, last);
	remember_seq(m, seq);
}

static void op_bad(struct model *m)
{
	static const struct {
		struct dg_inval_cmd c;
		int err;
	} bad[] = {
		{{.type = DG_INVAL_RANGE, .domain = 1, .iova = BASE + 1, .size = K4}, -EINVAL},
		{{.type = DG_INVAL_RANGE, .domain = 1, .iova = UINT64_MAX - K4 + 1, .size = 2 * K4},
		 -EOVERFLOW},
		{{.type = DG_INVAL_RANGE, .domain = 1, .iova = 1ull << 48, .size = K4}, -ERANGE},
		{{.type = DG_INVAL_PAGE, .domain = 1, .iova = BASE + K4, .size = 2 * K4}, -EINVAL},
		{{.type = DG_INVAL_DOMAIN, .domain = 999}, -ENOENT},
		{{.type = DG_INVAL_DEVICE, .rid = 0xdead}, -ENODEV},
		{{.type = DG_INVAL_CONTEXT, .rid = 0xdead}, -ENODEV},
		{{.type = (enum dg_inval_type)77}, -EINVAL},
	};
	unsigned int i = byte(m) % (sizeof(bad) / sizeof(bad[0]));
	uint64_t tail = inv_queue_tail(&m->mmu->inv), seq = 0;
	int r = dg_inval_submit(m->mmu, &bad[i].c, 1, &seq);

	CHECK(r == bad[i].err, "bad command %u: %d, want %d", i, r, bad[i].err);
	CHECK(inv_queue_tail(&m->mmu->inv) == tail, "bad command %u changed the queue", i);
}

static void op_done(struct model *m)
{
	uint64_t seq = m->seqs[byte(m) % 8];

	if (!dg_inval_done(m->mmu, seq))
		return;
	m->n.done++;
	for (unsigned int d = 0; d < NDEVS; d++)
		CHECK(!dg_dev_is_online(m->dev[d]) || m->dev[d]->seen >= seq,
		      "seq %llu done but device %u online at %llu", (unsigned long long)seq, d,
		      (unsigned long long)m->dev[d]->seen);
}

static void op_translate(struct model *m)
{
	unsigned int d = byte(m) % NDEVS, p = byte(m) % NPAGES, access = 1 + byte(m) % 3;
	unsigned int k = m->dev_dom[d];
	struct dg_device *dev = m->dev[d];
	struct dg_dev_stats before, after;
	struct dg_sg sg[1];
	unsigned int nr = 0;
	struct cached *c;
	int r;

	dg_dev_stats(dev, &before);
	r = dg_dev_translate(dev, BASE + p * K4 + 8, 8, access, sg, 1, &nr);
	dg_dev_stats(dev, &after);
	sync_device(m, d); /* the call caught up first: apply the model likewise */
	c = &m->may[d][k][p];
	m->n.laps += after.laps - before.laps;
	m->n.refused += r != 0;
	/* Only a successful walk fills neighbours (checked there): nothing else may. */
	CHECK(after.prefetch_fills == before.prefetch_fills ||
		      (r == 0 && after.iotlb_misses != before.iotlb_misses),
	      "page %u: neighbours filled without a successful walk (r %d)", p, r);
	if (after.iotlb_misses != before.iotlb_misses) {
		/* A walk: exactly the page table, and now cached. */
		uint16_t fr = m->map[k][p];
		unsigned int fills = 0;
		uint64_t line;
		bool seq, ahead;

		m->n.walks++;
		if (fr == NO_FRAME) {
			CHECK(r == -EFAULT, "walk of unmapped page %u: %d", p, r);
			return;
		}
		c->frame = fr;
		c->prot = m->prot[k][p];
		c->fill = false;
		if (access & ~m->prot[k][p]) {
			CHECK(r == -EACCES, "walk, prot %u access %u: %d", m->prot[k][p], access,
			      r);
			return;
		}
		CHECK(r == 0 && sg[0].addr == m->frames + fr * K4 + 8,
		      "walk of page %u: %d %p, want frame %u", p, r, sg[0].addr, fr);
		/* The neighbour fill, when the walk is next to the previous one: every other mapped
		   page of the line, as the table is. */
		line = (BASE / K4 + p) >> 3;
		seq = ahead = false;
		for (unsigned int i = 0; i < 2 && !seq; i++)
			if (line + 1 >= m->miss_line[d][i] && line <= m->miss_line[d][i] + 1) {
				/* one line up: the next line too, and the stream moves to it */
				ahead = line == m->miss_line[d][i] + 1;
				m->miss_line[d][i] = ahead ? line + 1 : line;
				seq = true;
			}
		if (!seq) {
			m->miss_line[d][m->miss_next[d]] = line;
			m->miss_next[d] ^= 1;
		}
		m->n.walks_seq += seq;
		m->n.walks_far += !seq;
		/* (the next line of the same leaf table: BASE's pages are its entries 256..279,
		   so every line's next is in it; beyond NPAGES nothing is mapped) */
		for (unsigned int q = p & ~7u; seq && q <= (p | 7u) + (ahead ? 8 : 0); q++) {
			if (q >= NPAGES)
				break;
			if (q == p || m->map[k][q] == NO_FRAME)
				continue;
			m->may[d][k][q].frame = m->map[k][q];
			m->may[d][k][q].prot = m->prot[k][q];
			m->may[d][k][q].fill = true;
			fills++;
		}
		CHECK(after.prefetch_fills - before.prefetch_fills == fills,
		      "walk of page %u filled %llu neighbours, want %u", p,
		      (unsigned long long)(after.prefetch_fills - before.prefetch_fills), fills);
		m->n.prefetched += fills;
		return;
	}
	/* A hit: only a translation the device may still hold. */
	m->n.hits++;
	if (c->frame != NO_FRAME && (c->frame != m->map[k][p] || c->prot != m->prot[k][p])) {
		m->n.stale_hits++;
		m->n.prefetch_stale_hits += c->fill;
	}
	m->n.prefetch_hits += c->frame != NO_FRAME && c->fill;
	CHECK(after.iotlb_hits != before.iotlb_hits || r == -EACCES, "neither hit nor walk: %d", r);
	CHECK(c->frame != NO_FRAME,
	      "device %u used a translation of page %u it cannot hold any more (r %d)", d, p, r);
	if (r == -EACCES) {
		CHECK(access & ~c->prot, "cached perm refused allowed access");
		return;
	}
	CHECK(r == 0 && sg[0].addr == m->frames + c->frame * K4 + 8 && !(access & ~c->prot),
	      "hit on page %u gave %p, want frame %u", p, r ? NULL : sg[0].addr, c->frame);
}

static void op_state(struct model *m)
{
	unsigned int d = byte(m) % NDEVS;

	struct dg_dev_stats before, after;

	dg_dev_stats(m->dev[d], &before);
	switch (byte(m) % 4) {
	case 0:
		dg_dev_quiesce(m->dev[d]);
		break;
	case 1:
	case 2:
		dg_dev_offline(m->dev[d]);
		break;
	default:
		dg_dev_online(m->dev[d]);
		break;
	}
	dg_dev_stats(m->dev[d], &after);
	m->n.laps += after.laps - before.laps;
	sync_device(m, d);
}

/* Switch a device to the other domain (every device offline so the wait completes). */
static void op_switch(struct model *m)
{
	unsigned int d = byte(m) % NDEVS, k = byte(m) % NDOMS;
	uint64_t tail;
	int r;

	for (unsigned int i = 0; i < NDEVS; i++)
		dg_dev_offline(m->dev[i]);
	sync_all(m);
	r = dg_device_attach(m->dev[d], m->dom[k]);
	CHECK(r == 0, "attach: %d", r);
	tail = inv_queue_tail(&m->mmu->inv);
	if (m->dev_dom[d] != k)
		add_log(m, tail, DG_INVAL_CONTEXT, dg_device_rid(m->dev[d]), 0, 0);
	m->dev_dom[d] = k;
}

void inval_model_run(const uint8_t *data, size_t size, struct inval_model_counts *counts)
{
	static struct model m;
	struct dg_iommu_config cfg;
	struct dg_pt_geometry g = {
		.format = DG_PT_FMT_VTD_SS, .ias = 48, .oas = 48, .pgsize_bitmap = K4};

	memset(&m, 0, sizeof(m));
	m.p = data;
	m.end = data + size;
	m.frames = aligned_alloc(K4, NPAGES * K4);
	CHECK(m.frames, "no memory");
	dg_iommu_config_init(&cfg);
	cfg.iotlb_entries = 16;
	cfg.iotlb_large_entries = 2;
	cfg.walk_cache_entries = 2;
	cfg.inval_queue_len = 16;
	cfg.wait_timeout_ns = 1000 * 1000;
	cfg.log = NULL;
	m.mmu = dg_iommu_create(&cfg);
	CHECK(m.mmu, "iommu");
	for (unsigned int k = 0; k < NDOMS; k++) {
		m.dom[k] = dg_domain_create(m.mmu, &g, NULL, NULL);
		CHECK(m.dom[k], "domain");
		for (unsigned int p = 0; p < NPAGES; p++)
			m.map[k][p] = NO_FRAME;
	}
	for (unsigned int d = 0; d < NDEVS; d++) {
		m.dev[d] = dg_device_create(m.mmu, 0x100 + d);
		CHECK(m.dev[d], "device");
		m.dev_dom[d] = d % NDOMS;
		CHECK(dg_device_attach(m.dev[d], m.dom[d % NDOMS]) == 0, "attach");
		for (unsigned int k = 0; k < NDOMS; k++)
			for (unsigned int p = 0; p < NPAGES; p++)
				m.may[d][k][p].frame = NO_FRAME;
		m.applied[d] = m.dev[d]->seen;
		m.miss_line[d][0] = m.miss_line[d][1] = 1ull << 40; /* no walk yet: next to none */
	}
	while (m.p < m.end) {
		/* Records of 8 bytes: the first picks the operation (weights out of 32), the
		   others are its parameters (missing bytes read as 0). */
		const uint8_t *next = min_ptr(m.p + 8, m.end);
		unsigned int op = byte(&m) % 32;

		if (op < 5)
			op_map(&m);
		else if (op < 8)
			op_unmap(&m);
		else if (op < 12)
			op_inval(&m);
		else if (op < 13)
			op_bad(&m);
		else if (op < 15)
			op_done(&m);
		else if (op < 18)
			op_state(&m);
		else if (op < 19)
			op_switch(&m);
		else
			op_translate(&m);
		m.p = next;
	}
	for (unsigned int d = 0; d < NDEVS; d++) {
		CHECK(iotlb_check(&m.dev[d]->iotlb, stderr) == 0, "iotlb_check");
		dg_dev_offline(m.dev[d]);
	}
	for (unsigned int d = 0; d < NDEVS; d++) {
		CHECK(dg_device_block(m.dev[d]) == 0, "block");
		dg_device_destroy(m.dev[d]);
	}
	CHECK(inv_queue_check(&m.mmu->inv, stderr) == 0, "inv_queue_check");
	for (unsigned int k = 0; k < NDOMS; k++)
		CHECK(dg_domain_destroy(m.dom[k]) == 0, "domain destroy");
	dg_iommu_destroy(m.mmu);
	free(m.frames);
	if (counts) {
		counts->walks += m.n.walks;
		counts->walks_seq += m.n.walks_seq;
		counts->walks_far += m.n.walks_far;
		counts->prefetched += m.n.prefetched;
		counts->prefetch_hits += m.n.prefetch_hits;
		counts->prefetch_stale_hits += m.n.prefetch_stale_hits;
		counts->hits += m.n.hits;
		counts->stale_hits += m.n.stale_hits;
		counts->refused += m.n.refused;
		counts->laps += m.n.laps;
		counts->invals += m.n.invals;
		counts->done += m.n.done;
	}
}
