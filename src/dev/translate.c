/* SPDX-License-Identifier: MIT */
/*
 * dev/translate.c - the device side of a DMA: translate, read, write (dmaguard/dev.h).
 *
 * Fast path (a translation that fits in one page, hits the level probed first, and finds no
 * invalidation pending): dg_dev_hot_hit() of dmaguard/dev.h, on the device's hot line (the
 * first cache line of struct dg_device), also inlined into callers of dg_dev_translate_fast():
 *
 *   one acquire load of the watched stamp == hot.check  (nothing pending, online, not blocked)
 *   fits in the page: len - 1 <= ~(iova | base_mask)     (also refuses len 0 and wrapping)
 *   one probe: key ^ page ^ tag, masked by the access    (tag, permission, emptiness at once)
 *   host = iova + delta
 *
 * Pass-through takes the same path through an identity level (agent.c), so it costs the same
 * as a hit. No lock, no atomic read-modify-write, no shared cache line written.
 *
 * Cheap miss (translate_miss): one page whose last-level table the walk cache knows (its last
 * entry or deepest row), or a one-level table: only the IOTLB level of the granule, one table
 * entry read with the walker's own decoders (pt/pt_leaf.h), the slot filled; every call in it
 * is a tail call so its frame stays small. A range over several pages takes range_entered():
 * a run of IOTLB hits (hit_run(): one probe per page, host-contiguous pages merged into one
 * segment kept in registers), or translate_range() page by page when a page is not a hit.
 * Everything else (other page sizes, misses whose leaf table is not cached, pass-through,
 * blocked devices, faults, auto-offline devices) takes the slow path, which is the same code
 * for every case so a refused access is refused the same way whatever made it slow; a fault
 * on the cheap miss goes through the same refuse().
 *
 * Early start (dg_dev_prefetch_fast(), dmaguard/dev.h): a device that knows its next IOVAs
 * prefetches their leaf-direct entries' lines, so the cross-core misses of a burst overlap;
 * it reads only the hot line and never changes anything (a translation checks the entry).
 *
 * Neighbour fill: a miss that looks sequential (fill_wanted(): next to the last miss of one of
 * two streams, or not the last page of its range) also caches the other valid entries of the
 * table's cache line it read (fill_line()), and a one-page miss one line above its stream's
 * (an ascending ring) those of the next line too (FILL_AHEAD): one miss per 16 pages.
 *
 * A range is checked completely before a byte is copied (dg_dev_read/dg_dev_write): a refused
 * access touches nothing. Host memory is never assumed contiguous across pages; contiguous
 * neighbours merge into one segment.
 */
#include "iommu/iommu_internal.h"
#include "pt/pt_leaf.h"

#include <errno.h>
#include <string.h>

#define COPY_SEGS  16				    /* segments translated per step of a copy */
#define FILL_LINE  1				    /* fill_wanted(): fill the line's neighbours */
#define FILL_AHEAD 2				    /* fill_wanted(): and the next line's entries */
#define WATCH_ALL  ((1ull << DG_DEV_WATCH_MAX) - 1) /* every watched-range id */

static_assert(DG_DEV_WATCH_MAX < 64, "watch_used has a bit per watched range");

static int fault_errno(enum dg_fault_reason r)
{
	switch (r) {
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
	return -EFAULT;
}

/* Record a refused access; returns its errno. Not inlined: callers reach it by a tail call. */
static dg_noinline __attribute__((cold)) int refuse(struct dg_device *dev, uint64_t iova,
						    uint64_t len, unsigned int access,
						    enum dg_fault_reason r)
{
	iommu_record_fault(dev, iova, len, access, r);
	return fault_errno(r);
}

/*
 * Neighbour fill: a miss (that looks sequential: fill_wanted()) that has just read the last-level entry of @a in @table has read
 * its whole cache line, which holds the entries of the neighbouring pages (8 entries of 8
 * bytes: pt_leaf_line_mask()). Fill the IOTLB level @l (of the leaf size) with the other
 * valid ones, each with its own permissions, decoded by the walker's decoders
 * (pt_leaf_read_at()), tagged with the current ctag like the demand entry. An entry not
 * present, or granting nothing, is not filled: an access to it misses and faults as before.
 * The group is cut to the level's sets so no neighbour takes the demand entry's slot.
 *
 * Why strict stays strict: the device may cache any present translation at any time (so may
 * VT-d, SMMU and AMD-Vi IOTLBs); what matters is that an invalidation drops it, and these
 * entries sit in their own page's slot with the current tag, exactly as a demand fill would
 * put them, so every command that drops a demand entry drops them (agent.c apply()). The
 * device applies commands itself, on this thread: a command published after the line was
 * read is applied at a later catch-up, after this fill in program order, and the device
 * acknowledges it only then, so no wait for it can return while a neighbour it covers is
 * still cached. A command the catch-up before the read found written is applied there, and
 * that catch-up's acquire of its stamp (pairing with the producer's release) makes the
 * page-table change visible, so the line shows its unmap.
 * Returns 0 so the cheap miss can end on a tail call to it.
 */
/*
 * Fill the slots from @e on with the entries [first, first + nr) of @table but first + at
 * (the demand entry; @at >= @nr: none), of the pages from @page on. Always inlined with the
 * decoder in a local (its address never escapes), so neither the acquire loads nor the
 * stores make the compiler reload the decoder's fields.
 */
static dg_always_inline uint64_t fill_run(struct pt_leaf_dec d, const void *table, uint64_t first,
					  unsigned int nr, unsigned int at, struct iotlb_ent *e,
					  uint64_t page, uint64_t size, uint64_t ctag)
{
	uint64_t filled = 0;

	for (unsigned int k = 0; k < nr; k++, e++, page += size) {
		unsigned int rw;
		uint64_t phys;

		if (!pt_leaf_decode(&d, pt_leaf_load(table, first + k), &phys, &rw) || !rw ||
		    k == at)
			continue;
		e->key = page | ctag | rw;
		e->delta = phys - page;
		filled++;
	}
	return filled;
}

/* The line's neighbours of the demand entry @at, then, with @e2, the next line's entries. */
static dg_always_inline uint64_t fill_lines(struct pt_leaf_dec d, const void *table, uint64_t first,
					    unsigned int nr, unsigned int at, struct iotlb_ent *e,
					    uint64_t page, uint64_t size, uint64_t ctag,
					    struct iotlb_ent *e2)
{
	uint64_t n = fill_run(d, table, first, nr, at, e, page, size, ctag);

	if (e2)
		n += fill_run(d, table, first + nr, nr, nr, e2, page + nr * size, size, ctag);
	return n;
}

static dg_noinline int fill_line(struct dg_device *dev, const struct iotlb_level *l,
				 const struct dg_pt *pt, const void *table, uint64_t a, bool ahead)
{
	uint64_t idx = pt_leaf_index(pt, a), gm = pt_leaf_line_mask(pt) & l->set_mask;
	uint64_t first = idx & ~gm, size = 1ull << l->shift, n;
	uint64_t page = (a & l->base_mask) - ((idx - first) << l->shift); /* entry first's */
	uint64_t ctag = (uint64_t)dev->ctag << IOTLB_DID_SHIFT;
	unsigned int at = (unsigned int)(idx - first), nr = (unsigned int)gm + 1;
	/* The group's pages are consecutive and it is aligned to at most the number of sets,
	   so their slots are consecutive too: no wrap inside it. */
	struct iotlb_ent *e = iotlb_slot(l, page >> l->shift), *e2 = NULL;
	struct pt_leaf_dec d;

	/*
	 * Ahead: the next line too, when it is a whole line of the same table and the level has
	 * room for both lines' 16 slots (so none takes another's, nor the demand entry's): an
	 * ascending stream then misses once per two lines (fill_wanted()). Its slots are
	 * consecutive (an aligned group of 8) but may wrap from the end of the table to the start.
	 */
	if (ahead && gm == IOTLB_LINE_MASK && l->set_mask >= 2 * IOTLB_LINE_MASK + 1 &&
	    first + 2 * IOTLB_LINE_MASK + 1 <= pt->leaf_index_mask)
		e2 = iotlb_slot(l, (page >> l->shift) + IOTLB_LINE_MASK + 1);
	pt_leaf_dec_init(pt, &d);
	if (d.valid == 3 && !d.rw_xor && !d.rw_shift && d.rw_mask == 3 && !d.rw_or && !d.oa_hi) {
		/* The permission bits are bits 0 and 1, they are also what makes an entry
		   present, and the address is one field (VT-d, the flat table): the same decoder
		   with those fields as constants (present and granting something: one test). */
		struct pt_leaf_dec c = {.valid = 3, .oa_lo = d.oa_lo, .rw_mask = 3};

		n = fill_lines(c, table, first, nr, at, e, page, size, ctag, e2);
	} else {
		n = fill_lines(d, table, first, nr, at, e, page, size, ctag, e2);
	}
	if (n)
		stat_inc(&dev->st_prefetch, n);
	return 0;
}

/*
 * The fill's stream detector, asked by an allowed demand miss of a last-level page @a of
 * level @l. Returns 0 (no fill), FILL_LINE or FILL_AHEAD: when the miss is one line above
 * the stream's and the access ends in this page (an ascending one-page stream: a receive
 * ring in IOVA order), the next line is filled too (fill_line(), where the table and the
 * level have room for it) and the stream's line becomes that next line, so that the stream's
 * next miss, two lines up, is one line above it again. Descending streams, ranges and misses
 * in the stream's own line fill their line only. The rule for a fill:
 * fill its line's neighbours only when the miss looks sequential, that is when the
 * last such miss of one of the device's IOTLB_STREAMS (2) streams was in the same 8-page line
 * or an adjacent one (in IOVA order, either direction; the stream then moves to this line),
 * or when it is known to be: @more, the access goes on past this page (a range's pages are
 * translated in order, so the next one comes next). A miss next to no stream starts one in
 * the slot whose turn it is, and fills only if @more. Like a hardware stream prefetcher: a
 * ring or a DMA stream misses about once per line, each time next to its previous miss, and
 * keeps its fills; two streams (a receive and a transmit ring, or a ring refilled from two
 * IOVA regions in turn, as xdp64's misses show) interleave without losing them; a random working set
 * larger than the IOTLB almost never misses next to one of its last two misses, so it pays
 * ~15 instructions per miss (the line, two compares, a store) instead of a fill whose
 * entries evict ones that would have hit (docs/iommu.md: ws_x2 252 -> 136 instructions per
 * translation, 121 without any fill). A one-page stream's first miss only starts it. The
 * state (iotlb.miss_line, miss_next) is the device thread's; it decides whether to fill,
 * never what an entry holds, so nothing in it matters to an invalidation.
 */
static dg_always_inline unsigned int fill_wanted(struct dg_device *dev, const struct iotlb_level *l,
						 uint64_t a, bool more)
{
	uint64_t line = a >> (l->shift + IOTLB_LINE_SHIFT);
	struct iotlb *t = &dev->iotlb;

	for (unsigned int i = 0; i < IOTLB_STREAMS; i++) {
		uint64_t d = line - t->miss_line[i] + 1; /* 0, 1, 2: prev - 1, prev, prev + 1 */

		if (d <= 2) {
			/* Ascending one page at a time: the next line too (FILL_AHEAD), and the
			   stream's line is that one, so the miss after it is next to it. */
			if (d == 2 && !more) {
				t->miss_line[i] = line + 1;
				return FILL_AHEAD;
			}
			t->miss_line[i] = line;
			return FILL_LINE;
		}
	}
	t->miss_line[t->miss_next] = line;
	t->miss_next = (t->miss_next + 1) & (IOTLB_STREAMS - 1);
	return more ? FILL_LINE : 0;
}

/* Walk @a from the deepest walk-cache entry, refilling the walk cache on the way. */
static int walk(struct dg_device *dev, uint64_t a, struct dg_pt_walk *w)
{
	const void *table = NULL;
	unsigned int d = wc_lookup_last(&dev->wc, dev->wtag, a, &table);
	int r;

	if (!d)
		d = wc_lookup(&dev->wc, dev->wtag, a, &table);
	stat_inc(&dev->st_walks, 1);
	if (d) {
		stat_inc(&dev->st_wc_hits, 1);
		r = dg_pt_walk_from(dev->dom->pt, a, table, d, w);
	} else {
		r = dg_pt_walk(dev->dom->pt, a, w);
	}
	/* On success and on -ENOENT, table[d..depth] are the tables passed: keep them. */
	if (r == 0 || r == -ENOENT)
		for (unsigned int k = d + 1; k <= w->depth && k < DG_PT_MAX_DEPTH; k++)
			wc_insert(&dev->wc, dev->wtag, a, k, w->table[k]);
	return r;
}

/*
 * Translate the page holding @a for @access. Returns 0 with the host address of @a and the
 * last IOVA of its page, or the fault reason.
 */
static dg_always_inline int translate_page(struct dg_device *dev, uint64_t a, uint64_t last,
					   unsigned int access, uint64_t *host, uint64_t *page_last)
{
	const struct iotlb_ent *e;
	struct dg_pt_walk w;
	unsigned int perm;
	int lvl, r;

	lvl = iotlb_find(&dev->iotlb, dev->ctag, a, &e);
	if (lvl >= 0) {
		const struct iotlb_level *l = &dev->iotlb.lvl[lvl];

		if (access & ~(unsigned int)e->key & IOTLB_PERM_MASK)
			return DG_FAULT_PERM;
		stat_inc(&dev->hot.hits, 1);
		if (dev->hot.ent != l->ent) /* copy only when the hot level changes */
			hot_set(dev, l);
		*host = a + e->delta;
		*page_last = (a & l->base_mask) + ~l->base_mask;
		return 0;
	}
	stat_inc(&dev->st_misses, 1);
	if (a < dev->dom->in_first || a > dev->dom->in_last)
		return DG_FAULT_RANGE;
	r = walk(dev, a, &w);
	if (r == -ERANGE)
		return DG_FAULT_RANGE;
	if (r)
		return DG_FAULT_UNMAPPED;
	perm = w.prot & (DG_PROT_READ | DG_PROT_WRITE);
	/* A leaf granting nothing is not cached (as in translate_leaf()): every access faults,
	   and an entry without permission is not a valid IOTLB entry (iotlb_check()). */
	/* Leaf-direct: the leaf table just walked (now in the walk cache) is read next time. */
	if (dev->direct && w.depth + 1 == pt_depth(dev->dom->pt))
		hot_set_leaf(dev, w.table[w.depth], a);
	lvl = perm ? iotlb_insert(&dev->iotlb, dev->ctag, a, w.pgsize, w.phys, perm) : -1;
	if (lvl >= 0 && dev->hot.ent != dev->iotlb.lvl[lvl].ent)
		hot_set(dev, &dev->iotlb.lvl[lvl]);
	if (access & ~perm)
		return DG_FAULT_PERM;
	/* Allowed, and a last-level leaf: its neighbours in the line just read (fill_line()). */
	if (lvl >= 0 && dev->prefetch && w.depth + 1 == pt_depth(dev->dom->pt)) {
		unsigned int f = fill_wanted(dev, &dev->iotlb.lvl[lvl], a,
					     last > (a | ~dev->iotlb.lvl[lvl].base_mask));

		if (f)
			fill_line(dev, &dev->iotlb.lvl[lvl], dev->dom->pt, w.table[w.depth], a,
				  f == FILL_AHEAD);
	}
	*host = w.phys;
	*page_last = (a & ~(w.pgsize - 1)) + (w.pgsize - 1);
	return 0;
}

/*
 * The last-level table that holds the page of @a when the device knows it without a walk
 * (only while dev->leaf_lvl is set):
 * the walk cache's last entry when it is a last-level table covering @a, or the root of a
 * one-level table. NULL otherwise.
 */
static dg_always_inline const void *leaf_table(struct dg_device *dev, uint64_t a)
{
	if (dev->leaf_root)
		return dev->leaf_root;
	/* The deepest cached depth is the last level (agent.c set_leaf()). */
	return wc_lookup_deepest(&dev->wc, dev->wtag, a);
}

/*
 * The cheap miss: the page of @a lives in the last-level table @t (leaf_table()), so only
 * the IOTLB level of its size can cache it (the other levels are not probed: an entry of a
 * larger page there would be one a pending invalidation is about to drop, and the table is
 * as valid a source until then) and the walk is one entry of @t (pt_leaf_read(): the
 * walker's load and decoders). Same results, counters and cache fills as translate_page()
 * followed by a walk from the walk cache; the range check is implied for a walk-cache table
 * (it covers a region a walk found inside the domain) and made for a one-level root.
 */
static dg_always_inline int translate_leaf(struct dg_device *dev, const void *t, uint64_t a,
					   unsigned int access, uint64_t *host, uint64_t *page_last,
					   bool probed, bool *filled)
{
	struct iotlb_level *l = dev->leaf_lvl;
	struct iotlb_ent *e = iotlb_slot(l, a >> l->shift);
	uint64_t base = a & l->base_mask, ctag = (uint64_t)dev->ctag << IOTLB_DID_SHIFT, phys;
	unsigned int rw;

	*page_last = base + ~l->base_mask;
	if (dev->hot.ent != l->ent) {
		hot_set(dev, l);
		probed = false;
	}
	/*
	 * @probed: the hot line's probe of this very slot failed with nothing applied since, so
	 * the entry is absent or lacks @access; the table entry gives the same answer (or a
	 * newer one), so the slot is not looked at twice.
	 */
	if (!probed && (e->key & ~IOTLB_PERM_MASK) == (base | ctag)) { /* ctag >= 1: never 0 */
		if (access & ~(unsigned int)e->key)
			return DG_FAULT_PERM;
		stat_inc(&dev->hot.hits, 1);
		*host = a + e->delta;
		return 0;
	}
	if (dev->leaf_root) {
		if (a < dev->dom->in_first || a > dev->dom->in_last) {
			stat_inc(&dev->st_misses, 1);
			return DG_FAULT_RANGE;
		}
		stat_inc(&dev->st_root_walks, 1);
	} else {
		stat_inc(&dev->st_leaf_walks, 1);
	}
	if (!pt_leaf_read(dev->leaf_pt, t, a, &phys, &rw))
		return DG_FAULT_UNMAPPED;
	if (rw) { /* a leaf granting nothing is not worth a slot: every access faults */
		e->key = base | ctag | rw;
		e->delta = phys - base;
	}
	if (access & ~rw)
		return DG_FAULT_PERM;
	*host = phys + (a - base);
	*filled = true; /* the line of t holding a's entry was read: fill_line() may follow */
	return 0;
}

/*
 * Leaf-direct: make the hot line read the last-level table covering @a if the walk cache
 * knows it (its deepest row, which holds last-level tables: agent.c set_leaf()). False when
 * it does not (a walk will find and cache it).
 */
static dg_always_inline bool direct_load(struct dg_device *dev, uint64_t a)
{
	const void *t = wc_lookup_deepest(&dev->wc, dev->wtag, a);

	if (!t)
		return false;
	/* A miss read from the cached leaf table (as the cheap miss counts it: a miss, a walk
	   and a walk-cache hit), whose reads follow in the hot line's test. */
	stat_inc(&dev->st_leaf_walks, 1);
	/* Already the hot line's first table (an entry it refused): pushing it into the second
	   slot too would drop the second table, and its next access would miss. */
	if (!dev->hot.leaf_shift || dev->hot.ent != (const struct dg_dev_hot_ent *)t ||
	    ((a ^ dev->hot.tag) >> dev->hot.leaf_shift))
		hot_set_leaf(dev, t, a);
	return true;
}

/*
 * Leaf-direct: the page holding @a (the access up to @last in it) from the hot line's table,
 * or from the walk cache's table of @a made the hot line's. False when neither can serve it
 * (not present, not allowed, table not cached): translate_page() answers then.
 */
static dg_always_inline bool direct_one(struct dg_device *dev, uint64_t a, uint64_t last,
					unsigned int access, uint64_t *host, uint64_t *page_last)
{
	uint64_t pl = a | ~dev->direct_page_mask, end = pl < last ? pl : last;

	if (dg_dev_hot_xlat(&dev->hot, a, end - a + 1, access, host)) {
		stat_inc(&dev->hot.hits, 1);
	} else if ((dev->hot.leaf_shift && !((a ^ dev->hot.tag) >> dev->hot.leaf_shift)) ||
		   !direct_load(dev, a) ||
		   !dg_dev_hot_xlat(&dev->hot, a, end - a + 1, access, host)) {
		return false;
	}
	*page_last = pl;
	return true;
}

/* Translate the page holding @a, of an access whose last byte is @last: the cheap miss when
 * the leaf table is known (leaf-direct: its entry), else the IOTLB levels and a walk. */
static dg_always_inline int translate_one(struct dg_device *dev, uint64_t a, uint64_t last,
					  unsigned int access, uint64_t *host, uint64_t *page_last)
{
	const void *t = dev->leaf_lvl ? leaf_table(dev, a) : NULL;
	bool filled = false;
	int r;

	if (dev->direct && direct_one(dev, a, last, access, host, page_last))
		return 0;
	if (!t)
		return translate_page(dev, a, last, access, host, page_last);
	r = translate_leaf(dev, t, a, access, host, page_last, false, &filled);
	if (filled && dev->prefetch) {
		unsigned int f = fill_wanted(dev, dev->leaf_lvl, a, last > *page_last);

		if (f)
			fill_line(dev, dev->leaf_lvl, dev->leaf_pt, t, a, f == FILL_AHEAD);
	}
	return r;
}

/*
 * The segments of a range being built (translate_range()). The open segment is [cur,
 * cur_end); cur_end starts at UINT64_MAX, which no host address reaches (they are below
 * 2^52: the formats' output address sizes), so the first piece always opens a segment.
 */
struct seg_build {
	struct dg_sg *sg;
	unsigned int max; /* entries of sg[] */
	unsigned int n;	  /* segments so far, the open one included (may exceed max: counted) */
	uint64_t cur;	  /* host start of the open segment */
	uint64_t cur_end; /* its end (exclusive); UINT64_MAX before the first */
	uint64_t hits;	  /* pages served by hit_run() */
};

/* Close the open segment, which ends at @cur_end (into sg[] if it fits), and open [host,
 * host + len); returns its end (the caller keeps it: b->cur_end may be behind). */
static dg_always_inline uint64_t seg_open(struct seg_build *b, uint64_t cur_end, uint64_t host,
					  uint64_t len)
{
	if (b->n && b->n <= b->max)
		b->sg[b->n - 1] = (struct dg_sg){(void *)(uintptr_t)b->cur, cur_end - b->cur};
	b->n++;
	b->cur = host;
	return host + len;
}

/*
 * A run of IOTLB hits in level @l from *@a on, up to @last: one probe per page (the test of
 * iotlb_probe(), as in the inline hit: tag, permission and emptiness at once), its host
 * address extending the open segment of @b while it follows. Returns true when the run
 * reached @last; false with *@a the first page it could not serve (a miss, a larger page, a
 * missing permission: the probe cannot tell which; translate_one() will). A partial first
 * page, then the whole pages by count (the loop: probe, host address, compare, add), then a
 * partial last page. Not inlined: in its own frame the level's fields, the page and the
 * open segment stay in registers (inside translate_range()'s frame they were reloaded from
 * the stack for every page).
 */
static dg_noinline bool hit_run(const struct iotlb_level *l, uint64_t *a, uint64_t last,
				uint64_t tag, uint64_t amask, struct seg_build *b)
{
	const unsigned int sh = l->off_shift, shift = l->shift;
	const uint64_t off_mask = l->off_mask, pmask = ~l->base_mask;
	const char *ent = (const char *)l->ent;
	uint64_t p = *a, cur_end = b->cur_end, hits = 0, rem, whole, k;
	const struct iotlb_ent *e;
	bool done = false;

#define HIT_PROBE(base, p) /* base: the page base of p */                              \
	(e = (const struct iotlb_ent *)(const void *)(ent + (((p) >> sh) & off_mask)), \
	 !((e->key ^ (base) ^ tag) & amask))
#define HIT_ADD(host, len)                                             \
	do {                                                           \
		if ((host) == cur_end)                                 \
			cur_end += (len);                              \
		else                                                   \
			cur_end = seg_open(b, cur_end, (host), (len)); \
	} while (0)

	/* last - p + 1 cannot wrap: the range is at most SIZE_MAX bytes. */
	if (p & pmask) { /* a first page the range starts inside */
		uint64_t len = (p | pmask) - p + 1;

		if (!HIT_PROBE(p & ~pmask, p))
			goto out;
		if (last - p < len) {
			len = last - p + 1;
			done = true;
		}
		HIT_ADD(p + e->delta, len);
		hits++;
		p += len;
		if (done)
			goto out;
	}
	rem = last - p + 1; /* p is page aligned from here; 0 only if it wrapped past 2^64 - 1 */
	whole = rem >> shift;
	for (k = whole; k; k--, p += pmask + 1) {
		if (!HIT_PROBE(p, p))
			break;
		HIT_ADD(p + e->delta, pmask + 1);
	}
	hits += whole - k;
	if (k)
		goto out;
	rem &= pmask;
	if (rem) { /* a last page the range ends inside */
		if (!HIT_PROBE(p, p))
			goto out;
		HIT_ADD(p + e->delta, rem);
		hits++;
	}
	done = true;
out:
#undef HIT_PROBE
#undef HIT_ADD
	b->cur_end = cur_end;
	b->hits += hits;
	*a = p;
	return done;
}

/*
 * Leaf-direct's hit_run(): the pages from *@a on, up to @last, read from the hot line's table
 * (the inline hit's tests: present and granting @access, the address decoded the same way),
 * consecutive entries by pointer while the pages stay in that table, the next table loaded
 * from the walk cache (direct_load(), which counts its first page as a miss); host-contiguous
 * pages merged into the open segment of @b. True when it reached @last; false with *@a the
 * first page it could not serve (not present, not allowed, table not cached:
 * translate_one() will answer it).
 * After the first page of a table the pages are whole up to the one holding the end, so the
 * loop over them steps the entry pointer and per page is a load, the permission test, the
 * address and the segment (12 instructions; 17 when the loop stepped the page's IOVA and
 * chose each page's length, 40 when every page recomputed its end and counted its hit); the
 * page holding the end follows the loop, and a refused page's IOVA is computed from its
 * entry's position.
 */
static dg_noinline bool direct_run(struct dg_device *dev, uint64_t *a, uint64_t last,
				   unsigned int access, struct seg_build *b)
{
	const uint64_t pmask = ~dev->direct_page_mask;
	const unsigned int psh = dev->direct_off_shift + 3;
	const uint64_t oa_mask = dev->direct_page_mask & (~0ull >> dev->direct_oa_shift);
	const uint64_t imask = dev->direct_off_mask >> 3;
	uint64_t p = *a, cur_end = b->cur_end, hits = 0;
	bool done = false;

	for (;;) {
		const unsigned int ls = dev->hot.leaf_shift;
		bool loaded = false;

		if (!ls || ((p ^ dev->hot.tag) >> ls)) {
			if (!direct_load(dev, p))
				break;
			loaded = true;
		}
		const uint64_t rlast = dev->hot.tag | ((1ull << dev->hot.leaf_shift) - 1);
		const uint64_t stop = last < rlast ? last : rlast;
		const _Atomic uint64_t *pte =
			(const _Atomic uint64_t *)(const void *)dev->hot.ent + ((p >> psh) & imask);
		/* The first page, from p (anywhere in it) to its end or stop. */
		uint64_t end = (p | pmask) < stop ? (p | pmask) : stop, host;
		/* Acquire pairs with the release store of a leaf (src/pt), as in the hit. */
		uint64_t e = atomic_load_explicit(pte, memory_order_acquire);

		if (access & ~e)
			goto out;
		host = (e & oa_mask) + (p & pmask);
		cur_end = host == cur_end ? cur_end + (end - p + 1) :
					    seg_open(b, cur_end, host, end - p + 1);
		hits += !loaded;
		/* The next pages of this table: whole ones up to the page holding stop (each one
		   load, the permission test and the address), then that page up to stop. */
		if (end != stop) {
			const uint64_t first = end + 1, stop_page = stop & ~pmask, size = pmask + 1;
			/* the entry of stop's page: the whole pages are those before it */
			const _Atomic uint64_t *const stop_pte =
				pte + ((stop_page - first) >> psh) + 1;

			/* Per whole page: the pointer step, the load, the permission test, the
			   address and the segment; a page's IOVA is computed only at a refusal. */
			while (++pte != stop_pte) {
				e = atomic_load_explicit(pte, memory_order_acquire); /* as above */
				if (access & ~e)
					break;
				host = e & oa_mask;
				cur_end = host == cur_end ? cur_end + size :
							    seg_open(b, cur_end, host, size);
			}
			if (pte == stop_pte) /* stop's page, up to stop */
				e = atomic_load_explicit(pte, memory_order_acquire); /* as above */
			if (pte != stop_pte || (access & ~e)) {
				/* refused: the page of pte, the first one not served */
				p = stop_page - (uint64_t)(stop_pte - pte) * size;
				hits += (p - first) >> psh;
				goto out;
			}
			host = e & oa_mask;
			cur_end = host == cur_end ?
					  cur_end + (stop - stop_page + 1) :
					  seg_open(b, cur_end, host, stop - stop_page + 1);
			hits += ((stop_page - first) >> psh) + 1;
			end = stop;
		}
		if (end == last) {
			p = end; /* inside the last page (done: the caller does not read it) */
			done = true;
			goto out;
		}
		p = end + 1; /* the next table */
	}
out:
	b->cur_end = cur_end;
	b->hits += hits;
	*a = p;
	return done;
}

/*
 * translate_range()'s page-by-page part, from @a on (the pages before it are in @b): a run
 * of IOTLB hits of the smallest page size (a warm TSO send: all 16 pages) in hit_run() (or
 * of the hot line's table: direct_run()), the segment kept open while the next page's host
 * address follows and the hit counter moved once per range; any other page by
 * translate_one(), which answers it exactly as before (the miss, its fill, the fault). A
 * hit in the smallest level is what translate_one() would return for it: every cached entry
 * of the current tag is a translation the device may use, and a page size has one level.
 * Without @run, a run has just stopped at @a (direct_entered()): translate_one() answers
 * it first.
 */
static dg_always_inline int range_loop(struct dg_device *dev, uint64_t iova, size_t len,
				       unsigned int access, struct dg_sg *sg, unsigned int max,
				       unsigned int *nr, struct seg_build *b, uint64_t a, bool run)
{
	const uint64_t last = iova + (len - 1);

	for (;;) {
		uint64_t host, page_last, end;
		int r;

		if (run && (dev->direct ? direct_run(dev, &a, last, access, b) :
					  dev->iotlb.nr_levels &&
						  hit_run(&dev->iotlb.lvl[0], &a, last, dev->tag,
							  ~IOTLB_PERM_MASK | access, b)))
			break;
		run = true;
		r = translate_one(dev, a, last, access, &host, &page_last);
		if (r) {
			if (b->hits)
				stat_inc(&dev->hot.hits, b->hits);
			return refuse(dev, a, len, access, (enum dg_fault_reason)r);
		}
		end = page_last < last ? page_last : last;
		if (host == b->cur_end)
			b->cur_end += end - a + 1;
		else
			b->cur_end = seg_open(b, b->cur_end, host, end - a + 1);
		if (end == last)
			break;
		a = end + 1;
	}
	if (b->n <= max)
		sg[b->n - 1] = (struct dg_sg){(void *)(uintptr_t)b->cur, b->cur_end - b->cur};
	if (b->hits)
		stat_inc(&dev->hot.hits, b->hits);
	*nr = b->n;
	return b->n > max ? -ENOSPC : 0;
}

/*
 * Translate a range into at most @max segments (the device is entered). *nr gets the number
 * of segments the range needs; -ENOSPC when that exceeds @max (the range was fully checked).
 */
static int translate_range(struct dg_device *dev, uint64_t iova, size_t len, unsigned int access,
			   struct dg_sg *sg, unsigned int max, unsigned int *nr)
{
	uint64_t last = iova + (len - 1), a = iova;
	struct seg_build b = {.sg = sg, .max = max, .cur_end = UINT64_MAX};

	if (!len || !access || (access & ~(unsigned int)IOTLB_PERM_MASK))
		return -EINVAL;
	if (dev->mode == DG_CTX_BLOCKED)
		return refuse(dev, iova, len, access, DG_FAULT_BLOCKED);
	if (last < iova)
		return refuse(dev, iova, len, access, DG_FAULT_WRAP);
	if (dev->mode == DG_CTX_PASSTHROUGH) {
		*nr = 1;
		if (!max)
			return -ENOSPC;
		sg[0].addr = (void *)(uintptr_t)iova;
		sg[0].len = len;
		return 0;
	}
	if (dg_likely(max && dev->iotlb.nr_levels &&
		      (uint64_t)len - 1 <= ~(iova | dev->iotlb.lvl[0].base_mask))) {
		/* Within one smallest page (a packet buffer): one translation, one segment. */
		uint64_t host, page_last;
		int r = translate_one(dev, iova, last, access, &host, &page_last);

		if (r)
			return refuse(dev, iova, len, access, (enum dg_fault_reason)r);
		sg[0].addr = (void *)(uintptr_t)host;
		sg[0].len = len;
		*nr = 1;
		return 0;
	}
	/* Page by page (range_loop()). */
	return range_loop(dev, iova, len, access, sg, max, nr, &b, a, true);
}

static dg_noinline __attribute__((cold)) int translate_slow(struct dg_device *dev, uint64_t iova,
							    size_t len, unsigned int access,
							    struct dg_sg *sg, unsigned int max,
							    unsigned int *nr)
{
	int r;

	agent_enter(dev);
	if (dg_likely(dev->mode == DG_CTX_TRANSLATE && max && access - 1u < 3u &&
		      dev->iotlb.nr_levels &&
		      (uint64_t)len - 1 <= ~(iova | dev->iotlb.lvl[0].base_mask))) {
		/* The common miss: within one smallest page (what translate_range() does for
		 * it, without its loop). */
		uint64_t host, page_last;

		r = translate_one(dev, iova, iova, access, &host, &page_last);
		if (r) {
			r = refuse(dev, iova, len, access, (enum dg_fault_reason)r);
		} else {
			sg[0].addr = (void *)(uintptr_t)host;
			sg[0].len = len;
			*nr = 1;
		}
	} else {
		r = translate_range(dev, iova, len, access, sg, max, nr);
	}
	if (r == 0)
		dev->hot.held = true;
	if (dev->auto_offline)
		agent_offline(dev);
	return r;
}

/*
 * A range over several pages once the device has caught up, while it translates with the
 * cheap miss on (leaf_lvl set: translating, online, not blocked, not auto-offline; @access
 * valid and @max >= 1: dg_dev_translate() checked). A warm range is one hit_run() and its
 * last segment, without translate_slow()'s and translate_range()'s frames and checks, which
 * would all pass. Anything else (a page the run cannot serve, len 0, wrapping) starts over in
 * translate_range(): hit_run() changed nothing but the local @b, so nothing is counted twice.
 * Held as on every successful path.
 */
static dg_noinline int range_entered(struct dg_device *dev, uint64_t iova, size_t len,
				     unsigned int access, struct dg_sg *sg, unsigned int max,
				     unsigned int *nr)
{
	uint64_t last = iova + (len - 1), a = iova;
	struct seg_build b = {.sg = sg, .max = max, .cur_end = UINT64_MAX};
	int r;

	if (dg_likely(len && last >= iova &&
		      hit_run(&dev->iotlb.lvl[0], &a, last, dev->tag, ~IOTLB_PERM_MASK | access,
			      &b))) {
		if (b.n <= max)
			sg[b.n - 1] = (struct dg_sg){(void *)(uintptr_t)b.cur, b.cur_end - b.cur};
		stat_inc(&dev->hot.hits, b.hits);
		*nr = b.n;
		dev->hot.held = true;
		return b.n > max ? -ENOSPC : 0;
	}
	r = translate_range(dev, iova, len, access, sg, max, nr);
	if (r == 0)
		dev->hot.held = true;
	return r;
}

/*
 * Leaf-direct: direct_entered()'s range once direct_run() has stopped at @a, the pages
 * before it in @b: range_loop() goes on from @a, translate_one() answering it first, which
 * is what translate_range() would do on reaching @a (its own run over the same entries
 * stops there too), without running the pages before @a again.
 */
static dg_noinline int direct_rest(struct dg_device *dev, uint64_t iova, size_t len,
				   unsigned int access, struct dg_sg *sg, unsigned int max,
				   unsigned int *nr, struct seg_build *b, uint64_t a)
{
	int r = range_loop(dev, iova, len, access, sg, max, nr, b, a, false);

	if (r == 0)
		dev->hot.held = true;
	return r;
}

/*
 * Leaf-direct: a translation the hot line did not serve, once the device has caught up.
 * One page: unless @probed (the hot line's test failed with nothing applied since), the hot
 * line's two tables first (the hit after a catch-up); else the page's last-level table
 * from the walk cache becomes the hot line's (direct_load()) and the page is its entry (the
 * inline hit's test); a page it cannot serve that way (table not cached, entry not present
 * or not allowed) goes to translate_range(), which walks or faults. A range: direct_run()
 * over it, loading the tables the walk cache knows (a receive buffer or a send in a table
 * the hot line does not hold: one run, not a failed one and then translate_range()'s), and
 * a page it cannot serve goes to direct_rest().
 */
static dg_noinline int direct_entered(struct dg_device *dev, uint64_t iova, size_t len,
				      unsigned int access, struct dg_sg *sg, unsigned int max,
				      unsigned int *nr, bool probed)
{
	uint64_t host;
	int r;

	if ((uint64_t)len - 1 > ~(iova | dev->direct_page_mask)) {
		/* Several pages (or len 0): a run over the hot line's table and the tables the
		   walk cache knows, as range_entered() runs hit_run(); a page it cannot serve is
		   where direct_rest() goes on (len 0 and a wrap: translate_range() refuses). */
		uint64_t last = iova + (len - 1), a = iova;
		struct seg_build b = {.sg = sg, .max = max, .cur_end = UINT64_MAX};

		if (dg_unlikely(!len || last < iova))
			return translate_range(dev, iova, len, access, sg, max, nr);
		if (dg_unlikely(!direct_run(dev, &a, last, access, &b)))
			return direct_rest(dev, iova, len, access, sg, max, nr, &b, a);
		if (b.n <= max)
			sg[b.n - 1] = (struct dg_sg){(void *)(uintptr_t)b.cur, b.cur_end - b.cur};
		stat_inc(&dev->hot.hits, b.hits);
		*nr = b.n;
		dev->hot.held = true;
		return b.n > max ? -ENOSPC : 0;
	} else {
		/* Not @probed (a catch-up came first, so the hot line's test never ran with
		   what it holds now): its two tables first, so a catch-up in the middle of a
		   burst costs no table load and keeps the second table (a hit). */
		bool hit = !probed && dg_dev_hot_xlat(&dev->hot, iova, len, access, &host);

		if (hit)
			stat_inc(&dev->hot.hits, 1);
		if (dg_likely(hit || (direct_load(dev, iova) &&
				      dg_dev_hot_xlat(&dev->hot, iova, len, access, &host)))) {
			sg[0].addr = (void *)(uintptr_t)host;
			sg[0].len = len;
			*nr = 1;
			dev->hot.held = true;
			return 0;
		}
	}
	r = translate_range(dev, iova, len, access, sg, max, nr);
	if (r == 0)
		dev->hot.held = true;
	return r;
}

/*
 * A translation the hot line did not serve, once the device has caught up. The miss of a
 * packet buffer under a strict policy (a fresh mapping in a leaf table the walk cache knows)
 * is served here, without the slow path's frame: one IOTLB slot and one table entry
 * (translate_leaf()). Everything else goes to translate_slow(), which starts over (its own
 * agent_enter() is then one load and a compare). Every call here is a tail call, so the
 * callers' frames stay small.
 */
static dg_always_inline int miss_entered(struct dg_device *dev, uint64_t iova, size_t len,
					 unsigned int access, struct dg_sg *sg, unsigned int max,
					 unsigned int *nr, bool probed)
{
	const struct iotlb_level *l = dev->leaf_lvl;
	const void *t;
	uint64_t host, page_last;
	bool filled = false;
	int r;

	/* direct: translating with leaf-direct on (agent.c set_leaf()); auto-offline calls
	   end offline, which translate_slow() does. */
	if (dev->direct)
		return dg_likely(!dev->auto_offline) ?
			       direct_entered(dev, iova, len, access, sg, max, nr, probed) :
			       translate_slow(dev, iova, len, access, sg, max, nr);
	/* leaf_lvl: translating, the cheap miss applies, not auto-offline (agent.c). */
	if (dg_unlikely(!l))
		return translate_slow(dev, iova, len, access, sg, max, nr);
	if ((uint64_t)len - 1 > ~(iova | l->base_mask)) /* several pages (or len 0) */
		return range_entered(dev, iova, len, access, sg, max, nr);
	t = leaf_table(dev, iova);
	if (dg_unlikely(!t))
		return translate_slow(dev, iova, len, access, sg, max, nr);
	r = translate_leaf(dev, t, iova, access, &host, &page_last, probed, &filled);
	if (dg_unlikely(r))
		return refuse(dev, iova, len, access, (enum dg_fault_reason)r);
	sg[0].addr = (void *)(uintptr_t)host;
	sg[0].len = len;
	*nr = 1;
	dev->hot.held = true;
	/* The neighbours of the line just read, as a tail call (it returns 0). */
	if (filled && dev->prefetch) {
		unsigned int f = fill_wanted(dev, l, iova, false);

		if (f)
			return fill_line(dev, l, dev->leaf_pt, t, iova, f == FILL_AHEAD);
	}
	return 0;
}

/* The miss with commands pending (or offline, or blocked): catch up first. @max >= 1 and
 * @access is valid (dg_dev_translate() checked), as for translate_miss(). */
static dg_noinline __attribute__((cold)) int
translate_catch_up(struct dg_device *dev, uint64_t iova, size_t len, unsigned int access,
		   struct dg_sg *sg, unsigned int max, unsigned int *nr)
{
	agent_enter(dev);
	return miss_entered(dev, iova, len, access, sg, max, nr, false);
}

static dg_noinline int translate_miss(struct dg_device *dev, uint64_t iova, size_t len,
				      unsigned int access, struct dg_sg *sg, unsigned int max,
				      unsigned int *nr)
{
	/* agent_enter() without a call on the way: acquire as there. */
	if (dg_unlikely(atomic_load_explicit(dev->hot.watchword, memory_order_acquire) !=
			dev->hot.check))
		return translate_catch_up(dev, iova, len, access, sg, max, nr);
	/* Nothing pending: dg_dev_translate() probed the hot level for this access. */
	return miss_entered(dev, iova, len, access, sg, max, nr, true);
}

int dg_dev_translate(struct dg_device *dev, uint64_t iova, size_t len, unsigned int access,
		     struct dg_sg *sg, unsigned int max, unsigned int *nr)
{
	if (dg_unlikely(!max || access - 1u >= 3u))
		return translate_slow(dev, iova, len, access, sg, max, nr);
	if (dg_likely(dg_dev_hot_hit(&dev->hot, iova, len, access, sg, nr)))
		return 0;
	return translate_miss(dev, iova, len, access, sg, max, nr);
}

/* Copy between @buf and the range, checked as a whole first. */
static dg_noinline int copy_slow(struct dg_device *dev, uint64_t iova, void *buf, size_t len,
				 unsigned int access)
{
	struct dg_sg sg[COPY_SEGS];
	unsigned int n = 0;
	uint64_t a, last, chunk;
	size_t off = 0;
	int r;

	agent_enter(dev);
	if (!buf) {
		r = -EINVAL;
		goto out;
	}
	r = translate_range(dev, iova, len, access, sg, COPY_SEGS, &n);
	if (r && r != -ENOSPC)
		goto out;
	a = iova;
	last = iova + (len - 1);
	/* At most COPY_SEGS smallest pages per step, so each step fits in sg[]. */
	chunk = (uint64_t)COPY_SEGS << (dev->iotlb.nr_levels ? dev->iotlb.lvl[0].shift : 12);
	for (;;) {
		uint64_t end = last;

		if (r == -ENOSPC) {
			/* Whole range checked; translate it step by step (IOTLB hits). */
			uint64_t step_last = dg_align_down(a, chunk) + (chunk - 1);

			if (step_last < end)
				end = step_last;
			r = translate_range(dev, a, end - a + 1, access, sg, COPY_SEGS, &n);
			if (r)
				goto out; /* the mapping changed under a racing unmap */
			r = -ENOSPC;
		}
		for (unsigned int i = 0; i < n; i++) {
			if (access == DG_ACCESS_READ)
				memcpy((char *)buf + off, sg[i].addr, sg[i].len);
			else
				memcpy(sg[i].addr, (const char *)buf + off, sg[i].len);
			off += sg[i].len;
		}
		if (end == last)
			break;
		a = end + 1;
	}
	r = 0;
out:
	if (dev->auto_offline)
		agent_offline(dev);
	else
		agent_leave(dev);
	return r;
}

int dg_dev_read(struct dg_device *dev, uint64_t iova, void *dst, size_t len)
{
	/* Acquire pairs with the producer's release stamp store (inval_queue.h). */
	if (dg_likely(atomic_load_explicit(dev->hot.watchword, memory_order_acquire) ==
			      dev->hot.check &&
		      dst)) {
		uint64_t host;

		if (dg_likely(dg_dev_hot_xlat(&dev->hot, iova, len, DG_ACCESS_READ, &host))) {
			stat_inc(&dev->hot.hits, 1);
			memcpy(dst, (const void *)(uintptr_t)host, len);
			agent_leave(dev);
			return 0;
		}
	}
	return copy_slow(dev, iova, dst, len, DG_ACCESS_READ);
}

int dg_dev_write(struct dg_device *dev, uint64_t iova, const void *src, size_t len)
{
	/* Acquire pairs with the producer's release stamp store (inval_queue.h). */
	if (dg_likely(atomic_load_explicit(dev->hot.watchword, memory_order_acquire) ==
			      dev->hot.check &&
		      src)) {
		uint64_t host;

		if (dg_likely(dg_dev_hot_xlat(&dev->hot, iova, len, DG_ACCESS_WRITE, &host))) {
			stat_inc(&dev->hot.hits, 1);
			memcpy((void *)(uintptr_t)host, src, len);
			agent_leave(dev);
			return 0;
		}
	}
	return copy_slow(dev, iova, (void *)(uintptr_t)src, len, DG_ACCESS_WRITE);
}

/* Nothing written since the last catch-up, and that one was acknowledged. */
static dg_always_inline bool nothing_pending(const struct dg_device *dev)
{
	/* Acquire pairs with the producer's release stamp store (inval_queue.h). */
	return atomic_load_explicit(dev->hot.watchword, memory_order_acquire) == dev->quiet &&
	       dev->acked == dev->seen;
}

void dg_dev_quiesce(struct dg_device *dev)
{
	dev->hot.held = false; /* the caller is done with every translated sg list */
	/*
	 * Nothing written since the last catch-up, and that one was acknowledged: the slot
	 * already shows seen, so this quiescent point has nothing to apply or announce. An idle
	 * device polls here between bursts; this keeps each poll to one load and two compares
	 * (agent_catch_up() costs ~36 instructions even with nothing to do).
	 */
	if (nothing_pending(dev))
		return;
	agent_catch_up(dev);
}

bool dg_dev_quiesce_if_pending(struct dg_device *dev)
{
	/*
	 * Held stays as it is when nothing is pending: the translations the caller keeps must
	 * go on holding later waits (a command applied at the start of a later DMA call is
	 * then only acknowledged here, once the caller knows to translate again).
	 */
	if (nothing_pending(dev))
		return false;
	dg_dev_quiesce(dev);
	return true;
}

/* The hint of dmaguard/dev.h, as a call: nothing but a prefetch of a leaf-direct entry. */
void dg_dev_prefetch(const struct dg_device *dev, uint64_t iova)
{
	if (dev)
		dg_dev_prefetch_fast(dev, iova);
}

uint64_t dg_dev_stamp(const struct dg_device *dev)
{
	return dev->seen;
}

bool dg_dev_rehold(struct dg_device *dev, uint64_t stamp)
{
	/*
	 * The watched stamp == check: online, not blocked, and nothing written since the last
	 * catch-up (check is UINT64_MAX otherwise, which no stamp equals; agent.c
	 * update_check()); seen == stamp: nothing applied since (seen moves at every catch-up
	 * that applies a command, and only then). Acquire pairs with the producer's release
	 * stamp store (inval_queue.h), as in the hit.
	 */
	if (atomic_load_explicit(dev->hot.watchword, memory_order_acquire) != dev->hot.check ||
	    dev->seen != stamp)
		return false;
	dev->hot.held = true;
	return true;
}

/* The hull of the watched ranges (agent.c watch_mark()'s quick reject); lo > hi: none. */
static void watch_hull(struct dg_device *dev)
{
	dev->watch_lo = UINT64_MAX;
	dev->watch_hi = 0;
	for (uint64_t m = dev->watch_used; m; m &= m - 1) {
		unsigned int i = (unsigned int)__builtin_ctzll(m);

		if (dev->watch[i].first < dev->watch_lo)
			dev->watch_lo = dev->watch[i].first;
		if (dev->watch[i].last > dev->watch_hi)
			dev->watch_hi = dev->watch[i].last;
	}
}

int dg_dev_watch(struct dg_device *dev, uint64_t iova, size_t len)
{
	uint64_t free = ~dev->watch_used & WATCH_ALL;
	unsigned int i;

	if (!len || iova + (len - 1) < iova)
		return -EINVAL;
	if (!free)
		return -ENOSPC;
	i = (unsigned int)__builtin_ctzll(free);
	dev->watch[i].first = iova;
	dev->watch[i].last = iova + (len - 1);
	/* Every command applied so far may have changed it: only stamps from now on count. */
	dev->watch[i].changed = dev->seen;
	dev->watch_used |= 1ull << i;
	watch_hull(dev);
	return (int)i;
}

void dg_dev_unwatch(struct dg_device *dev, int id)
{
	if (id >= 0 && id < DG_DEV_WATCH_MAX && (dev->watch_used >> id & 1)) {
		dev->watch_used &= ~(1ull << id);
		watch_hull(dev);
	}
}

bool dg_dev_rehold_watched(struct dg_device *dev, int id, uint64_t stamp)
{
	/*
	 * As dg_dev_rehold(), with the watched range's last change (agent.c watch_mark()) and
	 * the device-wide one in place of "nothing applied since": commands < seen are
	 * applied, so a change at changed <= stamp was applied before the translation was made
	 * (stamp <= seen: a stamp is a value seen had). Acquire pairs with the producer's
	 * release stamp store (inval_queue.h), as in the hit.
	 */
	if (id < 0 || id >= DG_DEV_WATCH_MAX || !(dev->watch_used >> id & 1))
		return false;
	/* Something pending (or offline): apply it first, as the start of a DMA call does
	   (acknowledged unless held); what it changed decides below. */
	if (atomic_load_explicit(dev->hot.watchword, memory_order_acquire) != dev->hot.check) {
		if (dev->auto_offline)
			return false;
		agent_enter(dev);
		if (atomic_load_explicit(dev->hot.watchword, memory_order_acquire) !=
		    dev->hot.check)
			return false;
	}
	if (stamp > dev->seen || dev->watch[id].changed > stamp || dev->changed_all > stamp)
		return false;
	dev->hot.held = true;
	return true;
}

void dg_dev_online(struct dg_device *dev)
{
	agent_online(dev);
}

void dg_dev_offline(struct dg_device *dev)
{
	agent_offline(dev);
}

void dg_dev_set_auto_offline(struct dg_device *dev, bool on)
{
	dev->auto_offline = on;
	agent_leaf_auto_offline(dev, on);
	if (on)
		agent_offline(dev);
}

bool dg_dev_is_online(const struct dg_device *dev)
{
	return !(atomic_load_explicit(&dev->slot->ack, memory_order_relaxed) & AGENT_OFFLINE);
}
