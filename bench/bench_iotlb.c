/* SPDX-License-Identifier: MIT */
/*
 * bench/bench_iotlb.c - dmaguard bench iotlb: what a device pays per translation.
 *
 * Cases (one device, VT-d 4-level domain, 4 KiB pages unless said):
 *   hit            dg_dev_translate of 64 bytes in one hot page (the fast path)
 *   hit_read64     dg_dev_read of 64 bytes from a hot page (translation + copy)
 *   hit_ws16/256/1024   random pages of a working set that fits the IOTLB (1024 entries)
 *   hit_stale2047  the hot page after 2047 other entries were inserted before it (4096-entry
 *                  IOTLB): DPDK's worst case, which costs it 20,548 instructions
 *   passthrough    the same call on a pass-through device (identity)
 *   miss_walk      every translation misses: one page per leaf-table cache line (a stride of
 *                  8 pages over 64Ki, descending), so the IOTLB miss, the walk from the walk
 *                  cache (the leaf table's entry), the refill and the neighbour fill of the 7
 *                  other pages of the line (dev/translate.c fill_line()) are all in each
 *                  operation (ascending, a miss would also fill the next line, which the next
 *                  operation would then hit)
 *   miss_nofill    the same with the neighbour fill off (no_iotlb_prefetch): the demand miss
 *   seq_walk       consecutive pages in order over 64Ki (a DMA stream, a receive ring): one
 *                  miss per 16 pages, which fills the rest of its line and the next line,
 *                  hits for the 15 others
 *   seq_nofill     the same with the fill off: every page misses
 *   ws_x2/x4/x16   random pages of working sets 2, 4, 16 times the IOTLB: hit rate and cost
 *   range64k       dg_dev_translate of a mapped 64 KiB range (16 pages, a TSO send), warm
 *                  IOTLB, host pages contiguous: one sg segment; per range
 *   range64k_sg    the same with the 16 host pages scattered: 16 segments
 *   range64k_cold  64 KiB ranges one after the other over 64Ki pages (each range's entries
 *                  long evicted): 2 misses and their neighbour fills, 14 hits, per range
 *   range_frame    a 1500-byte frame across two pages (3072..4571 of a page: a receive
 *                  aggregation buffer's third frame), warm, host-contiguous
 *   ring_inval     the device side of a strict two-step receive ring: 64 B in consecutive
 *                  pages of a 512-page ring and, after every 64 of them, one page-selective
 *                  leaf invalidation of those 64 pages applied at the next quiescent point
 *                  (dg_dev_quiesce): one miss and its neighbour fill per 8 pages, 7 hits,
 *                  and 1/64 of the submission, the catch-up and the 64-page invalidation
 *   hit_direct, range_frame_direct, range64k_direct, ring_direct
 *                  hit_inline, range_frame, range64k and ring_inval on a leaf-direct device
 *                  (cfg.iotlb_leaf_direct, docs/iommu.md "Leaf-direct"): the table entry read
 *                  in place of the IOTLB entry; the ring neither misses nor fills, and its
 *                  invalidations have no IOTLB level to clear
 *   list_first     reference: a DPDK-style sorted list IOTLB, entry first in the list
 *   list_stale2047 reference: the same list, entry behind 2047 stale ones
 * The list reference is built here and measured in the same run, so the ratio is meaningful
 * on any machine.
 *
 * Fixed-count mode (--case NAME --ops N) runs exactly N translations after the set-up, so
 * callgrind instruction counts of N and 2N runs differ by N translations.
 */
#include "bench.h"

#include <dmaguard/dev.h>
#include <dmaguard/iommu.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define K4	    4096ull
#define IOVA_BASE   0x100000000ull
#define PHYS_BASE   0x200000000ull
#define MISS_PAGES  65536u
#define RANGE_PAGES 16u			       /* a 64 KiB range */
#define IOVA_SG	    (IOVA_BASE + (1ull << 30)) /* the scattered range */
#define RING_PAGES  512u		       /* ring_inval: pages of the ring */
#define RING_BATCH  64u			       /* ring_inval: pages per invalidation */

struct env {
	struct dg_iommu *mmu;
	struct dg_domain *dom;
	struct dg_device *dev;
	uint64_t *iovas; /* access pattern */
	uint64_t mask;	 /* pattern length - 1 */
	uint8_t *mem;	 /* real memory for dg_dev_read */
	size_t len;	 /* bytes per range (run_range) */
	uint64_t next;	 /* ring_inval: the next page of the ring */
	uint64_t pos;	 /* where the next run call goes on in the pattern */
};

/* One case: set up, run n operations, report extra fields. */
struct iotlb_case {
	const char *name;
	const char *what;
	int (*setup)(struct env *e, const struct iotlb_case *c);
	uint64_t (*run)(struct env *e, uint64_t n);
	uint32_t iotlb_entries; /* 0: default */
	uint32_t wc_entries;	/* 0: default */
	uint64_t param;		/* working-set pages, stale entries... */
	uint32_t stride;	/* miss cases: pages between consecutive translations */
	bool no_fill;		/* cfg.no_iotlb_prefetch */
	bool direct;		/* cfg.iotlb_leaf_direct */
};

static int mk_env(struct env *e, const struct iotlb_case *c, uint64_t map_pages, bool real_mem)
{
	struct dg_iommu_config cfg;
	struct dg_pt_geometry g = {
		.format = DG_PT_FMT_VTD_SS, .ias = 48, .oas = 48, .pgsize_bitmap = K4};

	memset(e, 0, sizeof(*e));
	dg_iommu_config_init(&cfg);
	if (c->iotlb_entries)
		cfg.iotlb_entries = c->iotlb_entries;
	if (c->wc_entries)
		cfg.walk_cache_entries = c->wc_entries;
	cfg.no_iotlb_prefetch = c->no_fill;
	cfg.iotlb_leaf_direct = c->direct;
	e->mmu = dg_iommu_create(&cfg);
	if (!e->mmu)
		return -errno;
	e->dom = dg_domain_create(e->mmu, &g, NULL, NULL);
	e->dev = dg_device_create(e->mmu, 1);
	if (!e->dom || !e->dev)
		return -ENOMEM;
	if (real_mem) {
		e->mem = aligned_alloc(K4, map_pages * K4);
		if (!e->mem)
			return -ENOMEM;
		memset(e->mem, 1, map_pages * K4);
	}
	/* Translation only needs the addresses; reads need real memory behind them. */
	if (dg_domain_map(e->dom, IOVA_BASE, real_mem ? (uint64_t)(uintptr_t)e->mem : PHYS_BASE,
			  map_pages * K4, DG_PROT_READ | DG_PROT_WRITE, NULL))
		return -EINVAL;
	return dg_device_attach(e->dev, e->dom);
}

static void free_env(struct env *e)
{
	if (e->dev) {
		dg_dev_offline(e->dev);
		dg_device_block(e->dev);
		dg_device_destroy(e->dev);
	}
	if (e->dom)
		dg_domain_destroy(e->dom);
	if (e->mmu)
		dg_iommu_destroy(e->mmu);
	free(e->iovas);
	free(e->mem);
}

/* @len translations over @pages pages, random or in order @stride pages apart. */
static int pattern(struct env *e, uint64_t len, uint64_t pages, bool random, uint64_t stride)
{
	uint64_t s = 0x9e3779b97f4a7c15ull;

	e->iovas = malloc(len * sizeof(*e->iovas));
	if (!e->iovas)
		return -ENOMEM;
	e->mask = len - 1;
	for (uint64_t i = 0; i < len; i++) {
		s ^= s << 13;
		s ^= s >> 7;
		s ^= s << 17;
		e->iovas[i] = IOVA_BASE + (random ? s % pages : i * stride % pages) * K4 + 64;
	}
	return 0;
}

/* ---- the operations ------------------------------------------------------------------ */

static uint64_t run_hit(struct env *e, uint64_t n)
{
	struct dg_sg sg;
	unsigned int nr;
	uint64_t sum = 0;

	for (uint64_t i = 0; i < n; i++) {
		dg_dev_translate(e->dev, IOVA_BASE + 64, 64, DG_ACCESS_READ, &sg, 1, &nr);
		sum += (uintptr_t)sg.addr;
	}
	return sum;
}

/* The same hit through the inline fast path of dmaguard/dev.h (no call). */
static uint64_t run_hit_inline(struct env *e, uint64_t n)
{
	struct dg_device *dev = e->dev;
	struct dg_sg sg;
	unsigned int nr;
	uint64_t sum = 0;

	for (uint64_t i = 0; i < n; i++) {
		dg_dev_translate_fast(dev, IOVA_BASE + 64, 64, DG_ACCESS_READ, &sg, 1, &nr);
		sum += (uintptr_t)sg.addr;
	}
	return sum;
}

static uint64_t run_read64(struct env *e, uint64_t n)
{
	uint64_t buf[8], sum = 0;

	for (uint64_t i = 0; i < n; i++) {
		dg_dev_read(e->dev, IOVA_BASE + 64, buf, sizeof(buf));
		sum += buf[0];
	}
	return sum;
}

static uint64_t run_pattern(struct env *e, uint64_t n)
{
	struct dg_sg sg;
	unsigned int nr;
	uint64_t sum = 0;

	/* The pattern goes on from call to call: a short call (a small calibrated batch, on a
	   machine that stalled while calibrating) must not replay the pattern's first pages,
	   which would fit the IOTLB and turn ws_x16 into a hit case. */
	for (uint64_t i = e->pos; i < e->pos + n; i++) {
		dg_dev_translate(e->dev, e->iovas[i & e->mask], 64, DG_ACCESS_READ, &sg, 1, &nr);
		sum += (uintptr_t)sg.addr;
	}
	e->pos = (e->pos + n) & e->mask;
	return sum;
}

static uint64_t run_passthrough(struct env *e, uint64_t n)
{
	return run_hit(e, n);
}

static uint64_t run_range(struct env *e, uint64_t n)
{
	struct dg_sg sg[RANGE_PAGES];
	unsigned int nr = 0;
	uint64_t sum = 0;

	for (uint64_t i = e->pos; i < e->pos + n; i++) { /* goes on, as in run_pattern() */
		dg_dev_translate(e->dev, e->iovas[i & e->mask], e->len, DG_ACCESS_READ, sg,
				 RANGE_PAGES, &nr);
		sum += (uintptr_t)sg[0].addr + nr;
	}
	e->pos = (e->pos + n) & e->mask;
	return sum;
}

/* ring_inval: the next page of the ring; after every RING_BATCH pages their invalidation. */
static uint64_t run_ring(struct env *e, uint64_t n)
{
	struct dg_inval_cmd cmd = {.type = DG_INVAL_PAGE,
				   .flags = DG_INVAL_LEAF,
				   .domain = dg_domain_id(e->dom),
				   .size = RING_BATCH * K4};
	struct dg_sg sg;
	unsigned int nr;
	uint64_t sum = 0, seq;

	for (uint64_t i = 0; i < n; i++) {
		uint64_t page = e->next++ & (RING_PAGES - 1);

		dg_dev_translate(e->dev, IOVA_BASE + page * K4 + 64, 64, DG_ACCESS_WRITE, &sg, 1,
				 &nr);
		sum += (uintptr_t)sg.addr;
		if ((page & (RING_BATCH - 1)) == RING_BATCH - 1) {
			cmd.iova = IOVA_BASE + (page - (RING_BATCH - 1)) * K4;
			if (dg_inval_submit(e->mmu, &cmd, 1, &seq) == 0)
				dg_dev_quiesce(e->dev);
		}
	}
	return sum;
}

/* ---- set-ups ----------------------------------------------------------------------------- */

static int setup_hit(struct env *e, const struct iotlb_case *c)
{
	int r = mk_env(e, c, 1, false);

	if (!r)
		run_hit(e, 1);
	return r;
}

static int setup_read(struct env *e, const struct iotlb_case *c)
{
	int r = mk_env(e, c, 1, true);

	if (!r)
		run_read64(e, 1);
	return r;
}

static int setup_ws(struct env *e, const struct iotlb_case *c)
{
	int r = mk_env(e, c, c->param, false);

	if (!r)
		r = pattern(e, 1u << 16, c->param, true, 1);
	if (!r)
		run_pattern(e, 1u << 16); /* warm */
	return r;
}

static int setup_stale(struct env *e, const struct iotlb_case *c)
{
	int r = mk_env(e, c, c->param + 1, false);
	struct dg_sg sg;
	unsigned int nr;

	if (r)
		return r;
	/* Insert the stale entries first, the hot one last (a list would put it behind). */
	for (uint64_t p = 1; p <= c->param; p++)
		dg_dev_translate(e->dev, IOVA_BASE + p * K4, 64, DG_ACCESS_READ, &sg, 1, &nr);
	run_hit(e, 1);
	return 0;
}

static int setup_passthrough(struct env *e, const struct iotlb_case *c)
{
	int r = mk_env(e, c, 1, false);

	if (!r)
		r = dg_device_passthrough(e->dev);
	if (!r)
		run_hit(e, 1);
	return r;
}

static int setup_miss(struct env *e, const struct iotlb_case *c)
{
	int r = mk_env(e, c, MISS_PAGES, false);

	if (!r)
		r = pattern(e, MISS_PAGES / c->stride, MISS_PAGES, false, c->stride);
	/* A stride over lines descends: the miss next to the previous one's line fills its own
	   line only (ascending, it would fill the next line too, and the next one would hit). */
	for (uint64_t i = 0, n = MISS_PAGES / c->stride; !r && c->stride > 1 && i < n / 2; i++) {
		uint64_t t = e->iovas[i];

		e->iovas[i] = e->iovas[n - 1 - i];
		e->iovas[n - 1 - i] = t;
	}
	if (!r)
		run_pattern(e, MISS_PAGES / c->stride);
	return r;
}

/*
 * 64 KiB ranges: param 0 one range at IOVA_BASE (host-contiguous), 1 one range at IOVA_SG
 * whose 16 pages are scattered in host memory (page i at frame 7i mod 16: no two
 * neighbours contiguous), 2 ranges one after the other over MISS_PAGES (host-contiguous),
 * 3 one 1500-byte frame at IOVA_BASE + 3072.
 */
static int setup_range(struct env *e, const struct iotlb_case *c)
{
	uint64_t len = c->param == 2 ? MISS_PAGES / RANGE_PAGES : 1;
	int r = mk_env(e, c, c->param == 2 ? MISS_PAGES : RANGE_PAGES, false);

	for (unsigned int i = 0; !r && c->param == 1 && i < RANGE_PAGES; i++)
		r = dg_domain_map(e->dom, IOVA_SG + i * K4, PHYS_BASE + (i * 7 % RANGE_PAGES) * K4,
				  K4, DG_PROT_READ | DG_PROT_WRITE, NULL);
	if (r)
		return r;
	e->iovas = malloc(len * sizeof(*e->iovas));
	if (!e->iovas)
		return -ENOMEM;
	e->mask = len - 1;
	for (uint64_t i = 0; i < len; i++)
		e->iovas[i] = (c->param == 1 ? IOVA_SG : IOVA_BASE) + i * RANGE_PAGES * K4 +
			      (c->param == 3 ? 3072 : 0);
	e->len = c->param == 3 ? 1500 : RANGE_PAGES * K4;
	run_range(e, len); /* warm (range64k_cold: its ranges are evicted again by the next) */
	return 0;
}

static int setup_ring(struct env *e, const struct iotlb_case *c)
{
	int r = mk_env(e, c, RING_PAGES, false);

	if (!r)
		run_ring(e, 2 * RING_PAGES); /* warm: walk cache, one lap of the ring */
	return r;
}

/* ---- the reference: a DPDK-style sorted list IOTLB --------------------------------------- */

struct list_ent {
	struct list_ent *next;
	uint64_t iova, size, uaddr;
	uint8_t perm;
};

static struct list_ent *list_head;
static uint64_t list_target;

static int setup_list(struct env *e, const struct iotlb_case *c)
{
	static struct list_ent ents[2048];
	uint64_t n = c->param + 1;

	memset(e, 0, sizeof(*e));
	/* Sorted by iova like rte_vhost's iotlb_list; the target is the last one. */
	for (uint64_t i = 0; i < n; i++) {
		ents[i].iova = IOVA_BASE + i * K4;
		ents[i].size = K4;
		ents[i].uaddr = PHYS_BASE + i * K4;
		ents[i].perm = 3;
		ents[i].next = i + 1 < n ? &ents[i + 1] : NULL;
	}
	list_head = &ents[0];
	list_target = IOVA_BASE + c->param * K4 + 64;
	return 0;
}

/* vhost_user_iotlb_cache_find() without its lock: walk until the entry that covers iova. */
static __attribute__((noinline)) uint64_t list_find(uint64_t iova, uint64_t *size, uint8_t perm)
{
	for (struct list_ent *n = list_head; n; n = n->next) {
		if (iova < n->iova)
			break;
		if (iova >= n->iova + n->size)
			continue;
		if ((n->perm & perm) != perm)
			break;
		*size = n->size - (iova - n->iova);
		return n->uaddr + iova - n->iova;
	}
	return 0;
}

static uint64_t run_list(struct env *e, uint64_t n)
{
	uint64_t sum = 0, size;

	(void)e;
	for (uint64_t i = 0; i < n; i++) {
		bench_do_not_optimize(&list_head);
		sum += list_find(list_target, &size, 1);
	}
	return sum;
}

static const struct iotlb_case cases[] = {
	{"hit", "translate 64 B, hot page", setup_hit, run_hit, 0, 0, 0, 0, false, false},
	{"hit_inline", "translate 64 B, hot page, dg_dev_translate_fast()", setup_hit,
	 run_hit_inline, 0, 0, 0, 0, false, false},
	{"hit_read64", "dg_dev_read 64 B, hot page", setup_read, run_read64, 0, 0, 0, 0, false,
	 false},
	{"hit_ws16", "random pages, 16-page working set", setup_ws, run_pattern, 0, 0, 16, 0, false,
	 false},
	{"hit_ws256", "random pages, 256-page working set", setup_ws, run_pattern, 0, 0, 256, 0,
	 false, false},
	{"hit_ws1024", "random pages, 1024-page working set", setup_ws, run_pattern, 0, 0, 1024, 0,
	 false, false},
	{"hit_stale2047", "hot page behind 2047 entries", setup_stale, run_hit, 4096, 0, 2047, 0,
	 false, false},
	{"passthrough", "translate 64 B, identity", setup_passthrough, run_passthrough, 0, 0, 0, 0,
	 false, false},
	{"miss_walk", "IOTLB miss, walk from walk cache, fill", setup_miss, run_pattern, 0, 0, 0, 8,
	 false, false},
	{"miss_nofill", "IOTLB miss, walk from walk cache", setup_miss, run_pattern, 0, 0, 0, 8,
	 true, false},
	{"seq_walk", "consecutive pages, neighbour fill", setup_miss, run_pattern, 0, 0, 0, 1,
	 false, false},
	{"seq_nofill", "consecutive pages, no neighbour fill", setup_miss, run_pattern, 0, 0, 0, 1,
	 true, false},
	{"ws_x2", "random pages, 2x IOTLB", setup_ws, run_pattern, 0, 0, 2048, 0, false, false},
	{"ws_x4", "random pages, 4x IOTLB", setup_ws, run_pattern, 0, 0, 4096, 0, false, false},
	{"ws_x16", "random pages, 16x IOTLB", setup_ws, run_pattern, 0, 0, 16384, 0, false, false},
	{"range64k", "translate a 64 KiB range, warm, 1 segment", setup_range, run_range, 0, 0, 0,
	 0, false, false},
	{"range64k_sg", "translate a 64 KiB range, warm, 16 segments", setup_range, run_range, 0, 0,
	 1, 0, false, false},
	{"range64k_cold", "64 KiB ranges in turn over 64Ki pages", setup_range, run_range, 0, 0, 2,
	 0, false, false},
	{"range_frame", "translate a 1500 B frame across 2 pages, warm", setup_range, run_range, 0,
	 0, 3, 0, false, false},
	{"ring_inval", "strict ring: consecutive pages, 64-page invalidations", setup_ring,
	 run_ring, 0, 0, 0, 0, false, false},
	{"hit_direct", "hit_inline, leaf-direct device", setup_hit, run_hit_inline, 0, 0, 0, 0,
	 false, true},
	{"range_frame_direct", "range_frame, leaf-direct device", setup_range, run_range, 0, 0, 3,
	 0, false, true},
	{"range64k_direct", "range64k, leaf-direct device", setup_range, run_range, 0, 0, 0, 0,
	 false, true},
	{"ring_direct", "ring_inval, leaf-direct device", setup_ring, run_ring, 0, 0, 0, 0, false,
	 true},
	{"list_first", "reference sorted list, first entry", setup_list, run_list, 0, 0, 0, 0,
	 false, false},
	{"list_stale2047", "reference sorted list, behind 2047", setup_list, run_list, 0, 0, 2047,
	 0, false, false},
};

#define NCASES (sizeof(cases) / sizeof(cases[0]))

struct result {
	struct bench_summary ns; /* ns per operation over the rounds */
	uint64_t ops;		 /* operations in the last round */
	double hit_rate;	 /* device IOTLB hit rate over the measured rounds (-1: n/a) */
	double wc_hit_rate;	 /* walks that started from the walk cache (-1: n/a) */
	double fills_per_op;	 /* neighbour-fill entries per operation (-1: n/a) */
};

/* Time batches for duration_s per round; grow the batch until one takes >= 1 ms. */
static void measure(const struct iotlb_case *c, struct env *e, const struct bench_opts *o,
		    struct result *res)
{
	double samples[1000];
	uint64_t batch = 1024, t0, t1;
	struct dg_dev_stats a, b;
	volatile uint64_t sink = 0;

	for (;;) {
		t0 = bench_now_ns();
		sink += c->run(e, batch);
		t1 = bench_now_ns();
		if (t1 - t0 >= 1000000 || batch >= (1ull << 30))
			break;
		batch *= 2;
	}
	if (e->dev)
		dg_dev_stats(e->dev, &a);
	for (unsigned int r = 0; r < o->rounds; r++) {
		uint64_t ops = 0, start = bench_now_ns(), now = start;
		uint64_t limit = (uint64_t)(o->duration_s * 1e9);

		while (now - start < limit) {
			sink += c->run(e, batch);
			ops += batch;
			now = bench_now_ns();
		}
		samples[r] = (double)(now - start) / (double)ops;
		res->ops = ops;
	}
	(void)sink;
	bench_summarize(samples, o->rounds, &res->ns);
	res->hit_rate = res->wc_hit_rate = res->fills_per_op = -1;
	if (e->dev) {
		dg_dev_stats(e->dev, &b);
		res->fills_per_op =
			(double)(b.prefetch_fills - a.prefetch_fills) /
			(double)(b.iotlb_hits - a.iotlb_hits + b.iotlb_misses - a.iotlb_misses);
		uint64_t h = b.iotlb_hits - a.iotlb_hits, m = b.iotlb_misses - a.iotlb_misses;
		uint64_t w = b.walks - a.walks, wh = b.walk_cache_hits - a.walk_cache_hits;

		if (h + m)
			res->hit_rate = (double)h / (double)(h + m);
		if (w)
			res->wc_hit_rate = (double)wh / (double)w;
	}
}

static json_t *result_json(const struct iotlb_case *c, const struct result *r, double ref_ns)
{
	json_t *j = json_pack("{s:s, s:s, s:f, s:f, s:f, s:f, s:f, s:I, s:i}", "case", c->name,
			      "what", c->what, "ns_per_op", r->ns.median, "ns_min", r->ns.min,
			      "ns_max", r->ns.max, "spread", r->ns.spread, "ns_p90", r->ns.p90,
			      "ops", (json_int_t)r->ops, "rounds", (int)r->ns.n);

	if (r->hit_rate >= 0)
		json_object_set_new(j, "hit_rate", json_real(r->hit_rate));
	if (r->wc_hit_rate >= 0)
		json_object_set_new(j, "walk_cache_hit_rate", json_real(r->wc_hit_rate));
	if (r->fills_per_op >= 0)
		json_object_set_new(j, "prefetch_fills_per_op", json_real(r->fills_per_op));
	if (c->param)
		json_object_set_new(j, "pages", json_integer((json_int_t)c->param));
	if (ref_ns > 0)
		json_object_set_new(j, "ratio_to_hit", json_real(r->ns.median / ref_ns));
	return j;
}

static void usage(FILE *out)
{
	fprintf(out, "usage: dmaguard bench iotlb [options]\n");
	bench_usage_common(out);
}

static int iotlb_main(int argc, char **argv)
{
	struct bench_opts o;
	struct bench_report rep;
	double hit_ns = 0;
	bool any = false;
	int rc = 0;

	if (bench_parse_common(&argc, argv, &o))
		return 2;
	if (argc > 1)
		return bench_help_or_unknown("iotlb", argv[1], usage);
	if (o.list) {
		for (size_t i = 0; i < NCASES; i++)
			printf("%-16s %s\n", cases[i].name, cases[i].what);
		return 0;
	}
	if (bench_report_init(&rep, "iotlb"))
		return 1;
	if (!o.ops)
		printf("%-16s %10s %10s %8s %9s  %s\n", "case", "ns/op", "min", "spread",
		       "hit-rate", "what");
	for (size_t i = 0; i < NCASES; i++) {
		const struct iotlb_case *c = &cases[i];
		struct env e;
		struct result res;

		if (!bench_case_selected(&o, c->name))
			continue;
		any = true;
		if (c->setup(&e, c)) {
			fprintf(stderr, "bench iotlb: %s: set-up failed\n", c->name);
			free_env(&e);
			rc = 1;
			continue;
		}
		if (o.ops) {
			/* Fixed count: exactly o.ops operations, nothing else. */
			uint64_t sum = c->run(&e, o.ops);

			bench_do_not_optimize(&sum);
			printf("RESULT suite=iotlb case=%s ops=%" PRIu64 " fixed_count=1\n",
			       c->name, o.ops);
			free_env(&e);
			continue;
		}
		measure(c, &e, &o, &res);
		if (!strcmp(c->name, "hit"))
			hit_ns = res.ns.median;
		printf("%-16s %10.2f %10.2f %7.0f%% ", c->name, res.ns.median, res.ns.min,
		       res.ns.spread * 100);
		if (res.hit_rate >= 0)
			printf("%8.1f%%  ", res.hit_rate * 100);
		else
			printf("%9s  ", "-");
		printf("%s\n", c->what);
		printf("RESULT suite=iotlb case=%s ns_per_op=%.3f spread=%.3f\n", c->name,
		       res.ns.median, res.ns.spread);
		bench_report_add(&rep, result_json(c, &res, strcmp(c->name, "hit") ? hit_ns : 0));
		free_env(&e);
	}
	if (!any) {
		fprintf(stderr, "bench iotlb: no case named '%s' (see --list)\n", o.case_name);
		rc = 2;
	}
	if (!o.ops && bench_report_write(&rep, o.json_path))
		rc = 1;
	bench_report_fini(&rep);
	return rc;
}

DG_BENCH_SUITE(iotlb, "iotlb", "device translation cost: IOTLB hits, misses, working sets",
	       iotlb_main)
