/* SPDX-License-Identifier: MIT */
/*
 * iommu/inval.c - the CPU side of invalidation: command validation and splitting, submission
 * to the ring (inval_queue.c), waits, and the strict flush of a page-table gather.
 *
 * A RANGE becomes naturally aligned power-of-two blocks, one ring slot each, which every
 * device applies one by one: its exact split, except that a leaf-only range needing more
 * than two blocks is covered by two (leaf_cover(): at most twice the range, as VT-d's
 * page-selective invalidation widens its address mask). A DMA batch's run of unmapped
 * buffers (tcp: 5-20 pages, 2-6 exact blocks) is then two commands at most.
 *
 * A submit of RANGE commands only (up to eight: a DMA batch's one, or one per run) takes the
 * ranges' way: each command's split decided once, its slot count without a walk; the same
 * slots, marks and errors as validate() + emit() (the general way).
 *
 * Every submit is submit_plan() (checks, split, slot count), a reservation, submit_write()
 * (the slots) and a commit; what differs is the reservation. dg_inval_submit() takes a joined
 * one in one step (the public submit: concurrent producers gather into one owner's batch).
 * The DMA layer takes a closed one in two steps (inval.h: iommu_inval_reserve(),
 * iommu_inval_post()) for every submit it makes - a strict batch's stream runs with their
 * page-table clears between the two, the rest with nothing between -: one locked RMW per
 * submit instead of two, and for the batch's runs, not behind the clears' lines.
 *
 * A wait for seq S completes when the batch holding S has been published and every online
 * device has acknowledged S (agent.c). Completion is then recorded by one memory write,
 * `completed` (the VT-d wait descriptor's status write), which every later wait for S' <= S
 * reads first: back-to-back and concurrent waits coalesce. Waiters spin with a pause for
 * WAIT_SPIN_NS, then yield now and then; a device never has to be woken (it acknowledges at
 * its own quiescent points).
 *
 * Offline devices are skipped, but only through an RMW on their slot (see agent.c for why
 * that, and not a load, keeps the skip safe against the device coming back online).
 *
 * A wait that does not complete within wait_timeout_ns returns -ETIMEDOUT and names the
 * devices that did not acknowledge, like Linux's "TLB sync timed out -- SMMU may be
 * deadlocked". Nothing is lost: commands stay in the ring, the devices apply them when they
 * next reach a quiescent point (or flush everything if they fell a ring behind), and a later
 * wait for the same seq can succeed.
 */
#include "iommu/iommu_internal.h"
#include "iommu/inval.h"

#include "base/clock.h"

#include <assert.h>
#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <string.h>

/*
 * A waiter spins (with a pause) for WAIT_SPIN_NS before it starts yielding the CPU between
 * scans: a device acknowledges at its next quiescent point, normally well under a
 * microsecond away, and a sched_yield() costs about as much as a whole wait (it is a system
 * call, and in a paravirtualized guest a costly one). The clock is read once every
 * WAIT_CLOCK_EVERY scans.
 */
#define WAIT_SPIN_NS	 20000
#define WAIT_CLOCK_EVERY 64

static struct dg_domain *find_domain(struct dg_iommu *mmu, uint32_t id)
{
	if (!id || id > DG_DOMAIN_ID_MAX)
		return NULL;
	/* Acquire pairs with the release store in dg_domain_create(). */
	return atomic_load_explicit(&mmu->domains[id], memory_order_acquire);
}

/* Naturally aligned power-of-two blocks covering [a, last] exactly, in order. */
static unsigned int next_block(uint64_t a, uint64_t last)
{
	unsigned int align = a ? (unsigned int)__builtin_ctzll(a) : 63;
	uint64_t rem = last - a; /* bytes - 1 */
	unsigned int fit = rem == UINT64_MAX ? 63 : dg_ilog2(rem + 1);

	return align < fit ? align : fit;
}

static uint32_t count_blocks(uint64_t a, uint64_t last)
{
	uint32_t n = 0;

	for (;;) {
		unsigned int o = next_block(a, last);

		n++;
		if (last - a <= (1ull << o) - 1)
			return n;
		a += 1ull << o;
	}
}

/* count_blocks(a, last) > 2, looking at two blocks at most (a leaf-only range's question:
 * a ring's run of dozens of pages is many blocks, all of which count_blocks() would walk). */
static bool over_two_blocks(uint64_t a, uint64_t last)
{
	for (unsigned int k = 0; k < 2; k++) {
		unsigned int o = next_block(a, last);

		if (last - a <= (1ull << o) - 1)
			return false;
		a += 1ull << o;
	}
	return true;
}

/*
 * A leaf-only range that needs more than two exact blocks is covered by two: split at the
 * highest bit in which its first and last byte differ (a boundary M aligned to that bit),
 * the smallest naturally aligned block ending at M that holds [a, M) and the smallest one
 * starting at M that holds [M, last] - each less than twice its part, as Linux's VT-d
 * page-selective invalidation widens its address mask to the aligned block holding the
 * range. Only leaf entries are dropped (the walk caches stay), so the cost of the extra
 * coverage is a few IOTLB refills, against commands the devices apply one by one.
 * Returns the blocks (2), with their first bytes in @at and orders in @order.
 */
static unsigned int leaf_cover(uint64_t a, uint64_t last, uint64_t at[2], uint8_t order[2])
{
	unsigned int h = 63 - (unsigned int)__builtin_clzll(a ^ last);
	uint64_t m = last & ~((1ull << h) - 1);
	unsigned int ol = dg_ilog2(m - a), orr = dg_ilog2(last - m);

	/* ceil(log2(x)) for x >= 1: orders of the smallest blocks holding m - a, last - m + 1 */
	ol += (m - a) & ((m - a) - 1) ? 1 : 0;
	orr = last == m ? 0 : orr + 1;
	at[0] = m - (1ull << ol);
	order[0] = (uint8_t)ol;
	at[1] = m;
	order[1] = (uint8_t)orr;
	return 2;
}

/* Check one command; *slots gets the ring slots it needs. 0 or a negative errno. */
static int validate(struct dg_iommu *mmu, const struct dg_inval_cmd *c, uint32_t *slots)
{
	struct dg_domain *dom;
	uint64_t last;

	*slots = 1;
	switch (c->type) {
	case DG_INVAL_RANGE:
	case DG_INVAL_PAGE:
		if (c->flags & ~DG_INVAL_LEAF)
			return -EINVAL;
		dom = find_domain(mmu, c->domain);
		if (!dom)
			return -ENOENT;
		if (!c->size || !dg_is_aligned(c->iova, dom->granule) ||
		    !dg_is_aligned(c->size, dom->granule))
			return -EINVAL;
		if (c->type == DG_INVAL_PAGE &&
		    (!dg_is_pow2(c->size) || !dg_is_aligned(c->iova, c->size)))
			return -EINVAL;
		last = c->iova + (c->size - 1);
		if (last < c->iova)
			return -EOVERFLOW;
		if (c->iova < dom->in_first || last > dom->in_last)
			return -ERANGE;
		if (c->type == DG_INVAL_RANGE && c->size <= mmu->cfg.inval_domain_threshold) {
			if (c->flags & DG_INVAL_LEAF) /* more than two: leaf_cover() makes two */
				*slots = over_two_blocks(c->iova, last) ?
						 2 :
						 count_blocks(c->iova, last);
			else
				*slots = count_blocks(c->iova, last);
		}
		return 0;
	case DG_INVAL_DOMAIN:
		if (c->flags & ~DG_INVAL_LEAF)
			return -EINVAL;
		return find_domain(mmu, c->domain) ? 0 : -ENOENT;
	case DG_INVAL_GLOBAL:
		return c->flags ? -EINVAL : 0;
	case DG_INVAL_DEVICE:
	case DG_INVAL_CONTEXT:
		if (c->flags)
			return -EINVAL;
		return iommu_rid_exists(mmu, c->rid) ? 0 : -ENODEV;
	}
	return -EINVAL;
}

/* Write the slots of one (validated) command from *seq on; @mark goes on the first slot. */
static void emit(struct dg_iommu *mmu, const struct dg_inval_cmd *c, uint64_t *seq,
		 unsigned int mark)
{
	struct inv_cmd ic = {.leaf = (uint8_t)(c->flags & DG_INVAL_LEAF), .mark = (uint8_t)mark};
	uint64_t a, last;

	switch (c->type) {
	case DG_INVAL_RANGE:
		ic.mark |= INV_MARK_RANGE;
		if (c->size > mmu->cfg.inval_domain_threshold) {
			ic.op = INV_OP_DOMAIN;
			ic.id = c->domain;
			inv_queue_write(&mmu->inv, (*seq)++, &ic);
			return;
		}
		a = c->iova;
		last = c->iova + (c->size - 1);
		ic.op = INV_OP_BLOCK;
		ic.id = c->domain;
		if (ic.leaf && over_two_blocks(a, last)) {
			uint64_t at[2];
			uint8_t order[2];

			for (unsigned int i = 0, n = leaf_cover(a, last, at, order); i < n; i++) {
				ic.iova = at[i];
				ic.order = order[i];
				inv_queue_write(&mmu->inv, (*seq)++, &ic);
				ic.mark = 0;
			}
			return;
		}
		for (;;) {
			ic.order = (uint8_t)next_block(a, last);
			ic.iova = a;
			inv_queue_write(&mmu->inv, (*seq)++, &ic);
			ic.mark = 0;
			if (last - a <= (1ull << ic.order) - 1)
				return;
			a += 1ull << ic.order;
		}
	case DG_INVAL_PAGE:
		ic.op = INV_OP_BLOCK;
		ic.id = c->domain;
		ic.order = (uint8_t)dg_ilog2(c->size);
		ic.iova = c->iova;
		break;
	case DG_INVAL_DOMAIN:
		ic.op = INV_OP_DOMAIN;
		ic.id = c->domain;
		break;
	case DG_INVAL_GLOBAL:
		ic.op = INV_OP_GLOBAL;
		break;
	case DG_INVAL_DEVICE:
		ic.op = INV_OP_DEVICE;
		ic.id = c->rid;
		break;
	case DG_INVAL_CONTEXT:
		ic.op = INV_OP_CONTEXT;
		ic.id = c->rid;
		break;
	}
	inv_queue_write(&mmu->inv, (*seq)++, &ic);
}

/* Set bits of @x, inline (the build targets no POPCNT instruction: no libgcc call). */
static inline uint32_t popcount64(uint64_t x)
{
	x -= (x >> 1) & 0x5555555555555555ull;
	x = (x & 0x3333333333333333ull) + ((x >> 2) & 0x3333333333333333ull);
	x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0full;
	return (uint32_t)((x * 0x0101010101010101ull) >> 56);
}

/*
 * The blocks of the exact split of [a, last] (count_blocks()) without walking them: with h
 * the highest bit in which a and e = last + 1 differ and m = e with the bits below h cleared,
 * the split takes the set bits of m - a ascending (each aligned where it starts, none larger
 * fits below m) and then those of e - m descending. Needs last + 1 != 0.
 */
static inline uint32_t count_blocks_fast(uint64_t a, uint64_t last)
{
	const uint64_t e = last + 1;
	const unsigned int h = 63 - (unsigned int)__builtin_clzll(a ^ e);
	const uint64_t m = e & ~((1ull << h) - 1);

	return popcount64(m - a) + popcount64(e - m);
}

/* A command of the ranges' way (submit_plan): how its slots are written. */
enum { RW_DOMAIN, RW_COVER, RW_EXACT };

#define SUBMIT_RANGES INVAL_TICKET_RANGES /* the ranges' way's commands at most */

/* The ranges' way's checks and split: way[i] for each command, *total its slots. */
static dg_always_inline int ranges_plan(struct dg_iommu *mmu, const struct dg_inval_cmd *cmds,
					size_t n, uint8_t *way, uint64_t *total)
{
	for (size_t i = 0; i < n; i++) {
		const struct dg_inval_cmd *c = &cmds[i];
		const struct dg_domain *dom;
		const uint64_t a = c->iova;
		uint64_t last;
		uint32_t slots;

		if (c->flags & ~DG_INVAL_LEAF)
			return -EINVAL;
		dom = find_domain(mmu, c->domain);
		if (!dom)
			return -ENOENT;
		if (!c->size || !dg_is_aligned(a | c->size, dom->granule))
			return -EINVAL;
		last = a + (c->size - 1);
		if (last < a)
			return -EOVERFLOW;
		if (a < dom->in_first || last > dom->in_last)
			return -ERANGE;
		if (c->size > mmu->cfg.inval_domain_threshold) {
			way[i] = RW_DOMAIN;
			slots = 1;
		} else if (c->flags & DG_INVAL_LEAF) { /* two blocks at most, looked at */
			const bool cover = over_two_blocks(a, last);

			way[i] = cover ? RW_COVER : RW_EXACT;
			slots = cover ? 2 : count_blocks(a, last); /* leaf_cover()'s, or 1 or 2 */
		} else {
			way[i] = RW_EXACT;
			slots = dg_likely(last != UINT64_MAX) ? count_blocks_fast(a, last) :
								count_blocks(a, last);
		}
		*total += slots;
		if (*total > mmu->inv.len)
			return -E2BIG;
	}
	return 0;
}

/* The ranges' way's slot writes, from @start on (reserved). */
static dg_always_inline void ranges_write(struct dg_iommu *mmu, const struct dg_inval_cmd *cmds,
					  size_t n, const uint8_t *way, uint64_t start,
					  uint64_t total)
{
	uint64_t s = start;

	for (size_t i = 0; i < n; i++) {
		const struct dg_inval_cmd *c = &cmds[i];
		struct inv_cmd ic = {.op = INV_OP_BLOCK,
				     .leaf = (uint8_t)(c->flags & DG_INVAL_LEAF),
				     .mark = (uint8_t)(i ? INV_MARK_RANGE :
							   INV_MARK_SUBMIT | INV_MARK_RANGE),
				     .id = c->domain};
		uint64_t a = c->iova, at[2];
		const uint64_t last = a + (c->size - 1);
		uint8_t order[2];

		if (way[i] == RW_DOMAIN) {
			ic.op = INV_OP_DOMAIN;
			inv_queue_write(&mmu->inv, s++, &ic);
			continue;
		}
		if (way[i] == RW_COVER) {
			leaf_cover(a, last, at, order);
			for (unsigned int k = 0; k < 2; k++) {
				ic.iova = at[k];
				ic.order = order[k];
				inv_queue_write(&mmu->inv, s++, &ic);
				ic.mark = 0;
			}
			continue;
		}
		for (;;) {
			ic.order = (uint8_t)next_block(a, last);
			ic.iova = a;
			inv_queue_write(&mmu->inv, s++, &ic);
			ic.mark = 0;
			if (last - a <= (1ull << ic.order) - 1)
				break;
			a += 1ull << ic.order;
		}
	}
	assert(s == start + total);
	(void)total;
}

/* The general way's checks: *total gets the slots. */
static int general_plan(struct dg_iommu *mmu, const struct dg_inval_cmd *cmds, size_t n,
			uint64_t *total)
{
	for (size_t i = 0; i < n; i++) {
		uint32_t slots;
		int r = validate(mmu, &cmds[i], &slots);

		if (r)
			return r;
		*total += slots;
		if (*total > mmu->inv.len)
			return -E2BIG;
	}
	return 0;
}

/* @n commands up to SUBMIT_RANGES, all RANGE: the ranges' way. */
static inline bool ranges_only(const struct dg_inval_cmd *cmds, size_t n)
{
	size_t k = 0;

	if (n > SUBMIT_RANGES)
		return false;
	while (k < n && cmds[k].type == DG_INVAL_RANGE)
		k++;
	return k == n;
}

/*
 * A submit's checks and slot count, into @t (ranges, way[], total): every submit's, one way
 * (dg_inval_submit() and iommu_inval_reserve()). Up to SUBMIT_RANGES RANGE commands (a DMA
 * batch's: one, or one per run) take the ranges' way: each command's split decided once (a
 * leaf-only range looks at two blocks at most, the exact count is popcounts, not a walk) -
 * the same slots, marks and errors as validate() + emit(), the general way
 * (inval_cover_test.c compares them). One RANGE command has a copy of its own (no loops).
 */
static dg_always_inline int submit_plan(struct dg_iommu *mmu, const struct dg_inval_cmd *cmds,
					size_t n, struct inval_ticket *t)
{
	uint64_t total = 0;
	int r;

	if (n == 1 && cmds[0].type == DG_INVAL_RANGE) { /* a copy for one (no loops) */
		t->ranges = true;
		r = ranges_plan(mmu, cmds, 1, t->way, &total);
	} else {
		t->ranges = ranges_only(cmds, n);
		r = t->ranges ? ranges_plan(mmu, cmds, n, t->way, &total) :
				general_plan(mmu, cmds, n, &total);
	}
	t->total = (uint32_t)total;
	return r;
}

/* Write the slots submit_plan() counted into @t, from t->start on (reserved). */
static dg_always_inline void submit_write(struct dg_iommu *mmu, const struct dg_inval_cmd *cmds,
					  size_t n, const struct inval_ticket *t)
{
	if (t->ranges && n == 1) {
		ranges_write(mmu, cmds, 1, t->way, t->start, t->total); /* no loops */
	} else if (t->ranges) {
		ranges_write(mmu, cmds, n, t->way, t->start, t->total);
	} else {
		uint64_t s = t->start;

		for (size_t i = 0; i < n; i++)
			emit(mmu, &cmds[i], &s, i ? 0 : INV_MARK_SUBMIT);
		assert(s == t->start + t->total);
	}
}

/*
 * One step: submit_plan(), a joined reservation (inval_queue.h: producers that reserve
 * before this one's commit join its batch, or this one joins theirs), submit_write(), the
 * commit. The public submit, for every caller outside the DMA layer (iommu.c's context
 * invalidations, dg_iommu_flush_gather(), users of the library); the DMA layer submits in
 * two steps (below), also when nothing comes between them (see inval.h).
 */
int dg_inval_submit(struct dg_iommu *mmu, const struct dg_inval_cmd *cmds, size_t n, uint64_t *seq)
{
	struct inval_ticket t;
	int r;

	if (!mmu || !cmds || !n || !seq)
		return -EINVAL;
	r = submit_plan(mmu, cmds, n, &t);
	if (r)
		return r;
	t.start = inv_queue_reserve(&mmu->inv, t.total, &t.owner);
	submit_write(mmu, cmds, n, &t);
	inv_queue_commit(&mmu->inv, t.start, t.total, t.owner);
	*seq = t.start + t.total;
	return 0;
}

/*
 * Two steps (inval.h): submit_plan() and a closed reservation, then, after the caller's
 * page-table clears (if any), submit_write() and the commit - the same slots, marks and
 * errors as dg_inval_submit(). The point is where the store buffer drains (a locked
 * instruction waits for every earlier store to own its line; a page-table clear's line is
 * held shared by the device that walked it, ~80 ns away on the test VM): submitting after the
 * clears, the reservation's add waited for the clears, then the close waited for the slot
 * line; reserved before them, the add finds only the caller's own lines in the buffer, a lone
 * producer needs no close (inval_queue.h), and the clears, the slot stores and `published`
 * drain together behind the caller's next locked instruction. The stamp's release store
 * still follows the clears in program order, so a device that applies the command as soon
 * as its stamp is written sees them (inval_queue.h).
 */
int iommu_inval_reserve(struct dg_iommu *mmu, const struct dg_inval_cmd *cmds, size_t n,
			struct inval_ticket *t)
{
	int r;

	assert(mmu && cmds && n);
	r = submit_plan(mmu, cmds, n, t);
	if (r)
		return r;
	/* The reference queue's reserve takes its lock: left to the post (inval.h). */
	t->reserved = !mmu->inv.reference;
	t->owner = false;
	t->start = 0;
	if (t->reserved)
		t->start = inv_queue_reserve_closed(&mmu->inv, t->total, &t->owner);
	return 0;
}

void iommu_inval_post(struct dg_iommu *mmu, const struct dg_inval_cmd *cmds, size_t n,
		      struct inval_ticket *t, uint64_t *seq)
{
	if (!t->reserved)
		t->start = inv_queue_reserve(&mmu->inv, t->total, &t->owner);
	submit_write(mmu, cmds, n, t);
	inv_queue_commit_closed(&mmu->inv, t->start, t->total, t->owner);
	*seq = t->start + t->total;
}

/*
 * Is @seq complete? On true, *upto gets a seq known complete (>= @seq). On false, *laggard
 * gets the index of a device that has not acknowledged (or -1: not yet published).
 */
static bool scan(struct dg_iommu *mmu, uint64_t seq, uint64_t *upto, int *laggard)
{
	/* Acquire pairs with the owner's release store of published (inval_queue.c). */
	uint64_t pub = atomic_load_explicit(&mmu->inv.published, memory_order_acquire);
	/* Acquire pairs with the release store in dg_device_create(). */
	uint32_t n = atomic_load_explicit(&mmu->nr_agents, memory_order_acquire);
	uint64_t low = pub;
	bool offline = false;

	*laggard = -1;
	if (pub < seq)
		return false;
	/* Pass 1, loads only: online devices must have acknowledged. */
	for (uint32_t i = 0; i < n; i++) {
		/* Acquire pairs with the device's release store of its ack (agent.c). */
		uint64_t a = atomic_load_explicit(&mmu->agents[i].ack, memory_order_acquire);

		if (a & AGENT_OFFLINE) {
			offline = true;
			continue;
		}
		if (a < seq) {
			*laggard = (int)i;
			return false;
		}
		if (a < low)
			low = a;
	}
	/*
	 * Pass 2: an RMW on each offline slot. Release orders everything before this wait
	 * (the page-table change, via the acquire of published above) before the device's
	 * acquire RMW when it comes online; acquire makes its last accesses ours. If the RMW
	 * finds the device online after all, it must have acknowledged.
	 */
	for (uint32_t i = 0; offline && i < n; i++) {
		uint64_t a = atomic_load_explicit(&mmu->agents[i].ack, memory_order_relaxed);

		if (!(a & AGENT_OFFLINE))
			continue;
		a = atomic_fetch_or_explicit(&mmu->agents[i].ack, 0, memory_order_acq_rel);
		if (a & AGENT_OFFLINE)
			continue;
		if (a < seq) {
			*laggard = (int)i;
			return false;
		}
		if (a < low)
			low = a;
	}
	*upto = low;
	return true;
}

/*
 * Record that every seq <= @upto is complete (a scan found it so). A plain store, not a
 * compare-and-swap: the CAS (until session 13) only kept `completed` from going down when two
 * scans race (both load c < upto, the lower stores last), and it cost a locked instruction
 * on half of a strict poll's waits, which waits for the poll's ring and page-table stores to
 * leave the store buffer. Going down is harmless: every value ever stored is a true bound
 * (completion is permanent: published and online devices' acks only grow, and its storer's
 * own scan saw it complete), so the invariant "every seq <= completed is complete" holds
 * whatever store lands last; a lower value only sends a later wait to scan, as for a seq
 * never recorded. Each storer's scan acquired what it depends on (published, the acks, the
 * offline RMWs) itself, so a reader needs no release sequence through earlier stores.
 */
static void advance_completed(struct dg_iommu *mmu, uint64_t upto)
{
	/*
	 * Release pairs with the acquire loads of completed in dg_inval_wait() and
	 * dg_inval_done(): a waiter that returns on it inherits what this scan saw.
	 */
	if (atomic_load_explicit(&mmu->completed, memory_order_relaxed) < upto)
		atomic_store_explicit(&mmu->completed, upto, memory_order_release);
}

static bool completed_at_least(struct dg_iommu *mmu, uint64_t seq)
{
	/* Acquire pairs with the release CAS in advance_completed(). */
	return atomic_load_explicit(&mmu->completed, memory_order_acquire) >= seq;
}

static void diag_printf(struct dg_iommu *mmu, size_t *len, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (*len >= sizeof(mmu->diag) - 1) {
		va_start(ap, fmt);
		n = vsnprintf(NULL, 0, fmt, ap);
		va_end(ap);
	} else {
		va_start(ap, fmt);
		n = vsnprintf(mmu->diag + *len, sizeof(mmu->diag) - *len, fmt, ap);
		va_end(ap);
	}
	if (n > 0)
		*len += (size_t)n;
}

static void report_timeout(struct dg_iommu *mmu, uint64_t seq, uint64_t waited_ns)
{
	uint64_t pub = atomic_load_explicit(&mmu->inv.published, memory_order_acquire);
	uint32_t n = atomic_load_explicit(&mmu->nr_agents, memory_order_acquire);
	unsigned int stuck = 0;
	size_t len = 0;

	pthread_mutex_lock(&mmu->diag_lock);
	mmu->diag[0] = '\0';
	diag_printf(mmu, &len,
		    "dmaguard: invalidation wait timed out after %llu ms -- device may be stuck "
		    "outside a quiescent point: seq %llu (published %llu, completed %llu)",
		    (unsigned long long)(waited_ns / 1000000), (unsigned long long)seq,
		    (unsigned long long)pub,
		    (unsigned long long)atomic_load_explicit(&mmu->completed,
							     memory_order_relaxed));
	if (pub < seq)
		diag_printf(mmu, &len, "; not yet published");
	for (uint32_t i = 0; i < n; i++) {
		uint64_t a = atomic_load_explicit(&mmu->agents[i].ack, memory_order_acquire);

		if ((a & AGENT_OFFLINE) || a >= seq)
			continue;
		diag_printf(mmu, &len, "%s rid %#x acked %llu",
			    stuck++ ? "," : "; not acknowledged by:",
			    atomic_load_explicit(&mmu->agents[i].rid, memory_order_relaxed),
			    (unsigned long long)a);
	}
	mmu->diag_len = len;
	if (mmu->cfg.log)
		fprintf(mmu->cfg.log, "%s\n", mmu->diag);
	pthread_mutex_unlock(&mmu->diag_lock);
}

/*
 * This thread's slot of the wait counters. Threads are numbered on first use by a global
 * counter, never reused (64 bits), and thread k < WAIT_STAT_THREADS owns slot k in every
 * IOMMU: it is the slot's one writer, so a count is a relaxed load and store (stat_inc), not
 * a locked add - a wait is on every strict poll, and a locked instruction there would wait
 * for the poll's page-table and ring stores to leave the store buffer. Later threads share
 * the last slot and count with atomic adds (wait_count()).
 */
static struct wait_stats *wait_slot(struct dg_iommu *mmu)
{
	static _Atomic uint64_t next;
	static _Thread_local uint64_t me = UINT64_MAX;

	if (me == UINT64_MAX)
		me = atomic_fetch_add_explicit(&next, 1, memory_order_relaxed);
	return &mmu->wst[me < WAIT_STAT_THREADS ? me : WAIT_STAT_THREADS];
}

/* Count one in @c of this thread's slot @ws (wait_slot()). */
static inline void wait_count(struct dg_iommu *mmu, struct wait_stats *ws, _Atomic uint64_t *c)
{
	if (dg_likely(ws != &mmu->wst[WAIT_STAT_THREADS]))
		stat_inc(c, 1); /* the slot's one writer */
	else
		atomic_fetch_add_explicit(c, 1, memory_order_relaxed); /* shared slot */
}

int dg_inval_wait(struct dg_iommu *mmu, uint64_t seq)
{
	struct wait_stats *ws;
	uint64_t upto, start = 0, now;
	unsigned int spins = 0;
	int laggard;

	if (!mmu)
		return -EINVAL;
	ws = wait_slot(mmu);
	wait_count(mmu, ws, &ws->waits);
	if (completed_at_least(mmu, seq)) {
		wait_count(mmu, ws, &ws->coalesced);
		return 0;
	}
	for (bool known = false;;) {
		if (scan(mmu, seq, &upto, &laggard)) {
			advance_completed(mmu, upto);
			return 0;
		}
		if (completed_at_least(mmu, seq))
			return 0; /* another waiter saw it complete */
		/* a seq never handed out: after the first scan, which cannot find it complete
		 * (published <= tail < seq), so a batch end's usual wait - complete at its first
		 * scan - makes no call for the tail */
		if (!known) {
			if (seq > inv_queue_tail(&mmu->inv))
				return -EINVAL;
			known = true;
		}
		/*
		 * Scan again after a pause. (Spinning on the one word the scan stopped at, the
		 * laggard's acknowledgement, was tried in session 9: fewer instructions, but
		 * tcp-x1 strict, where the device is the limit and the driver waits often, ran
		 * 0.93-0.98 against 0.97-1.01 with the rescan in alternated runs - the tight
		 * reads of the line the device writes its acknowledgement to slow the device.)
		 */
		dg_cpu_relax();
		if (++spins % WAIT_CLOCK_EVERY)
			continue;
		now = dg_now_ns();
		if (!start)
			start = now;
		if (now - start < WAIT_SPIN_NS)
			continue;
		sched_yield();
		if (now - start >= mmu->cfg.wait_timeout_ns) {
			wait_count(mmu, ws, &ws->timeouts);
			report_timeout(mmu, seq, now - start);
			return -ETIMEDOUT;
		}
	}
}

bool dg_inval_done(struct dg_iommu *mmu, uint64_t seq)
{
	uint64_t upto;
	int laggard;

	if (completed_at_least(mmu, seq))
		return true;
	if (seq > inv_queue_tail(&mmu->inv) || !scan(mmu, seq, &upto, &laggard))
		return false;
	advance_completed(mmu, upto);
	return true;
}

size_t dg_iommu_last_diag(struct dg_iommu *mmu, char *buf, size_t len)
{
	size_t n;

	pthread_mutex_lock(&mmu->diag_lock);
	n = mmu->diag_len;
	if (buf && len)
		snprintf(buf, len, "%s", mmu->diag);
	pthread_mutex_unlock(&mmu->diag_lock);
	return n;
}

/* ---- strict flush of a gather --------------------------------------------------------- */

static bool gather_empty(const struct dg_pt_gather *g)
{
	return g->start == g->end && !g->nr_tables;
}

static void hull_add(struct dg_pt_gather *h, const struct dg_pt_gather *g)
{
	if (g->start == g->end) {
		h->leaf_only = h->leaf_only && g->leaf_only;
		return;
	}
	if (h->start == h->end) {
		h->start = g->start;
		h->end = g->end;
	} else {
		if (g->start < h->start)
			h->start = g->start;
		if (g->end - 1 > h->end - 1) /* end 0 stands for 2^64 */
			h->end = g->end;
	}
	if (g->pgsize > h->pgsize)
		h->pgsize = g->pgsize;
	h->leaf_only = h->leaf_only && g->leaf_only;
}

/* Invalidate the hull and wait: one RANGE and one wait, or per page in the reference mode. */
static int flush_range(struct dg_iommu *mmu, struct dg_domain *dom, const struct dg_pt_gather *h)
{
	struct dg_inval_cmd c = {.domain = dom->id, .flags = h->leaf_only ? DG_INVAL_LEAF : 0};
	uint64_t seq, step;
	int r;

	if (h->start == h->end) {
		/* Tables without a range: cannot happen with dg_pt, but stay safe. */
		c.type = DG_INVAL_DOMAIN;
		c.flags = 0;
		r = dg_inval_submit(mmu, &c, 1, &seq);
		return r ? r : dg_inval_wait(mmu, seq);
	}
	if (!mmu->cfg.reference) {
		c.type = DG_INVAL_RANGE;
		c.iova = h->start;
		c.size = h->end - h->start;
		r = dg_inval_submit(mmu, &c, 1, &seq);
		return r ? r : dg_inval_wait(mmu, seq);
	}
	/* Reference: one synchronous invalidation per page, as Linux's strict mode did. */
	step = h->pgsize >= dom->granule && dg_is_pow2(h->pgsize) ? h->pgsize : dom->granule;
	c.type = DG_INVAL_PAGE;
	c.size = step;
	for (uint64_t a = dg_align_down(h->start, step);; a += step) {
		c.iova = a;
		r = dg_inval_submit(mmu, &c, 1, &seq);
		if (!r)
			r = dg_inval_wait(mmu, seq);
		if (r)
			return r;
		if (a + (step - 1) >= h->end - 1)
			return 0;
	}
}

int dg_iommu_flush_gather(struct dg_iommu *mmu, struct dg_domain *dom, struct dg_pt_gather *gather)
{
	struct dg_pt_gather hull;
	bool extra;
	int r;

	if (!mmu || !dom || !gather || dom->mmu != mmu)
		return -EINVAL;
	extra = atomic_load_explicit(&dom->has_pending, memory_order_relaxed);
	if (!extra && gather_empty(gather))
		return 0;
	dg_pt_gather_init(&hull);
	hull_add(&hull, gather);
	if (extra) {
		pthread_mutex_lock(&dom->pending_lock);
		for (unsigned int i = 0; i < dom->nr_pending; i++)
			hull_add(&hull, &dom->pending[i]);
	}
	r = gather_empty(&hull) && !(extra && dom->nr_pending) ? 0 : flush_range(mmu, dom, &hull);
	if (!r) {
		/* The wait covered every device: no walker or walk cache can hold these tables. */
		dg_pt_gather_release(dom->pt, gather);
		if (extra) {
			for (unsigned int i = 0; i < dom->nr_pending; i++)
				dg_pt_gather_release(dom->pt, &dom->pending[i]);
			dom->nr_pending = 0;
			atomic_store_explicit(&dom->has_pending, 0, memory_order_relaxed);
		}
	}
	if (extra)
		pthread_mutex_unlock(&dom->pending_lock);
	return r;
}
