/* SPDX-License-Identifier: MIT */
/*
 * dmaguard/dev.h - the device side: what a device (a translation agent) does for a DMA.
 *
 * A device reaches memory only through these calls. Each one translates IOVAs through the
 * device's context: its private IOTLB (a direct-mapped hash per page size, tagged by domain
 * and page size) and, on a miss, a page-table walk that starts from the page-walk cache. An
 * access the context does not allow touches nothing, returns a negative errno that names the
 * reason, and is recorded in the IOMMU's fault queue:
 *
 *   -EFAULT     no translation                       DG_FAULT_UNMAPPED
 *   -EACCES     the mapping lacks the permission     DG_FAULT_PERM
 *   -ERANGE     IOVA outside the domain              DG_FAULT_RANGE
 *   -EPERM      the device is blocked                DG_FAULT_BLOCKED
 *   -EOVERFLOW  iova + len wraps past 2^64           DG_FAULT_WRAP
 *
 * Threads: a device is one agent: calls on the same device must not overlap (one thread at a
 * time, like one DMA engine). Different devices run in parallel without sharing a written
 * cache line. A hit takes no lock and no atomic read-modify-write: the only shared read is
 * one acquire load of the stamp of the invalidation-queue slot the device reads next.
 *
 * Quiescent points (where the device applies queued invalidations and acknowledges them):
 *  - the start of every dg_dev_translate(), dg_dev_read() and dg_dev_write();
 *  - the end of every dg_dev_read() and dg_dev_write();
 *  - dg_dev_quiesce(), dg_dev_online() and dg_dev_offline();
 *  - dg_dev_quiesce_if_pending() when something is pending.
 * Translated sg lists are held: from a successful dg_dev_translate() until the device's next
 * dg_dev_quiesce(), dg_dev_offline() or dg_dev_quiesce_if_pending() that returns true, its
 * quiescent points still apply invalidations (later translations see them) but do not
 * acknowledge, so no wait completes while an sg list may be in use. A device that translates
 * (a vhost-style back end holding descriptor chains) calls dg_dev_quiesce() at the end of
 * every burst, or dg_dev_quiesce_if_pending() after every DMA of it (then a wait lasts one
 * DMA, not one burst); one that only reads and writes needs nothing.
 * A device that stops doing DMA for a while calls dg_dev_offline(): an offline device never
 * holds up a wait, and its next DMA call (or dg_dev_online()) brings it back online after it
 * has applied everything queued meanwhile (or flushed all it caches if it fell a whole queue
 * behind). A device that is online but never reaches a quiescent point (or holds sg lists
 * forever) makes waits time out.
 */
#ifndef DMAGUARD_DEV_H
#define DMAGUARD_DEV_H

#include <dmaguard/common.h>
#include <dmaguard/iommu.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Access types: what the device does to memory (the mapping needs the matching DG_PROT_*). */
#define DG_ACCESS_READ	DG_PROT_READ  /* the device reads memory (DMA_TO_DEVICE) */
#define DG_ACCESS_WRITE DG_PROT_WRITE /* the device writes memory (DMA_FROM_DEVICE) */

/* One host segment of a translated range. Segments are never merged across a gap. */
struct dg_sg {
	void *addr; /* host address */
	size_t len; /* bytes */
};

/*
 * Translate [iova, iova + len) for @access (DG_ACCESS_READ and/or DG_ACCESS_WRITE) into at
 * most @max host segments in @sg; *nr gets the number used. Pages that are contiguous in host
 * memory share a segment; nothing is assumed across pages. Pass-through: one segment, the
 * IOVA itself. The list is valid until the device's next DMA call or quiescent point.
 * Errors (nothing recorded in @sg): the fault errnos above (a fault is recorded); -EINVAL
 * len == 0 or @access empty or with unknown bits, @sg or @nr NULL; -ENOSPC more than @max
 * segments are needed (*nr gets how many). A successful translation is held (see above).
 */
DG_EXPORT int dg_dev_translate(struct dg_device *dev, uint64_t iova, size_t len,
			       unsigned int access, struct dg_sg *sg, unsigned int max,
			       unsigned int *nr);

#ifndef __cplusplus
#include <stdatomic.h>

/*
 * The device's hot line: the first bytes of every struct dg_device, which is all a hit
 * reads and writes (one cache line; leaf-direct's second table in the next). It is public only so that dg_dev_translate_fast() below can be inlined
 * into the caller; nothing else may read or write it.
 *
 * ABI: this layout is part of the ABI of this version of dmaguard (DG_DEV_HOT_ABI). A program
 * that uses dg_dev_translate_fast() must be built with the headers of the library it links
 * (the static library, or a shared library of the same version); the library checks at build
 * time that struct dg_device starts with exactly this struct.
 *
 * Entries: key = page base | tag << 2 | perm (0: empty), delta = host base - page base; the
 * slot of @iova is at byte offset (iova >> off_shift) & off_mask of @ent; a hit is
 *   ((key ^ (iova & base_mask) ^ tag) & (~3 | access)) == 0
 * which checks page, domain tag and permission at once (docs/iommu.md, "Fast path").
 *
 * Leaf-direct mode (leaf_shift != 0, dg_iommu_config.iotlb_leaf_direct): @ent is a cached
 * last-level page table (a copy of a walk-cache entry) covering the 2^leaf_shift bytes from
 * @tag (aligned to them), and entry (iova ^ tag) >> off_shift of it (off_shift is then the
 * page shift: the xor is the offset in the span once the span test passed) is the page's
 * live table entry (VT-d layout: read = bit 0, write = bit 1, output address = its bits in
 * off_mask, which is then the page-aligned output-address mask); a hit is a present entry
 * granting @access (docs/iommu.md, "Leaf-direct"). A second table (@ent2 covering the span
 * from @tag2, in the second cache line, read only when @tag's span does not cover @iova: a
 * ring whose receive and send buffers live in two tables hits both inline) is the table the
 * hot line held before @ent; @ent2 == @ent when there is none.
 *
 * Pending invalidations: @watchword is the stamp of the invalidation-queue slot of the next
 * command the device will apply; @check is its value while that command is not written yet
 * (UINT64_MAX, which no stamp takes, while the device is offline or blocked). A producer
 * writing the command changes the stamp, so the device's next load misses once and finds the
 * command in the same cache line (src/iommu/inval_queue.h). ABI 5; in ABI 4 the word was the
 * queue's published sequence number and @check the device's last one seen.
 */
#define DG_DEV_HOT_ABI 5

struct dg_dev_hot_ent {
	uint64_t key;
	uint64_t delta;
};

struct dg_dev_hot {
	const _Atomic uint64_t *watchword; /* the stamp of the next queue slot to apply */
	uint64_t check;			   /* == *watchword when the hot level may be used */
	const struct dg_dev_hot_ent *ent;  /* the IOTLB level probed first (leaf: the table) */
	uint64_t base_mask;		   /* ~(its page size - 1) */
	uint64_t off_mask;		   /* slot byte offset mask (leaf: output-address mask) */
	uint64_t tag;			   /* cache tag << 2 | 3 (leaf: the table's first IOVA) */
	_Atomic uint64_t hits;		   /* IOTLB hits (the device writes, anyone reads) */
	uint32_t off_shift;		   /* slot byte offset shift (leaf: the page shift) */
	bool held;			   /* a translated sg list may be in use */
	uint8_t leaf_shift;		   /* 0: IOTLB level; else log2 of the table's span */
	bool unacked; /* applied commands not yet acknowledged (meaningful while check is) */
	uint8_t spare;
	/* second cache line: leaf-direct's second table, read only when the first misses */
	const struct dg_dev_hot_ent *ent2; /* leaf: the table held before @ent (or @ent) */
	uint64_t tag2;			   /* leaf: its first IOVA */
};

/* Leaf-direct's part of dg_dev_hot_xlat(): @iova's entry of the hot line's table. */
static inline bool dg_dev_hot_leaf(const struct dg_dev_hot *h, uint64_t iova, unsigned int access,
				   uint64_t *host)
{
	uint64_t x = iova ^ h->tag; /* the offset in the span when the table covers iova */
	const struct dg_dev_hot_ent *t = h->ent;
	uint64_t pte;

	if (x >> h->leaf_shift) {
		x = iova ^ h->tag2;
		if (x >> h->leaf_shift)
			return false;
		t = h->ent2;
	}
	/* Acquire pairs with the release store of a leaf in the page-table layer (src/pt). */
	pte = atomic_load_explicit((const _Atomic uint64_t *)(const void *)t + (x >> h->off_shift),
				   memory_order_acquire);
	if (access & ~pte)
		return false;
	*host = (pte & h->off_mask) + (iova & ~h->base_mask);
	return true;
}

/*
 * The hit test shared by the inline fast path and the library: true with the host address
 * of @iova in *@host when [iova, iova + len) (inside one page of the hot level) may be
 * accessed for @access (1..3) as the hot level says, false otherwise. @len 0 and ranges that
 * wrap or leave the page return false. Leaf-direct: one acquire load of the table entry
 * (dg_dev_hot_leaf()), behind one test of leaf_shift.
 */
static inline bool dg_dev_hot_xlat(const struct dg_dev_hot *h, uint64_t iova, size_t len,
				   unsigned int access, uint64_t *host)
{
	const struct dg_dev_hot_ent *e;

	if ((uint64_t)len - 1 > ~(iova | h->base_mask))
		return false;
	if (__builtin_expect(h->leaf_shift != 0, 0))
		return dg_dev_hot_leaf(h, iova, access, host);
	e = (const struct dg_dev_hot_ent *)(const void *)((const char *)h->ent +
							  ((iova >> h->off_shift) & h->off_mask));
	if ((e->key ^ (iova & h->base_mask) ^ h->tag) & (~3ull | access))
		return false;
	*host = iova + e->delta;
	return true;
}

/*
 * The hit of dg_dev_translate() for a valid @access and @max >= 1: true when nothing is
 * pending for the device and [iova, iova + len) is in one page of the hot level with
 * @access, and then the one segment is in sg[0], *nr is 1, the translation is held and the
 * hit counted. False changes nothing.
 */
static inline bool dg_dev_hot_hit(struct dg_dev_hot *h, uint64_t iova, size_t len,
				  unsigned int access, struct dg_sg *sg, unsigned int *nr)
{
	uint64_t host;

	/* Acquire pairs with the producer's release store of the stamp (src/iommu). */
	if (atomic_load_explicit(h->watchword, memory_order_acquire) != h->check)
		return false;
	if (!dg_dev_hot_xlat(h, iova, len, access, &host))
		return false;
	sg->addr = (void *)(uintptr_t)host;
	sg->len = len;
	*nr = 1;
	h->held = true;
	/* Relaxed: a statistic only this device writes (no read-modify-write). */
	atomic_store_explicit(&h->hits, atomic_load_explicit(&h->hits, memory_order_relaxed) + 1,
			      memory_order_relaxed);
	return true;
}

/*
 * dg_dev_translate() with its hit inlined into the caller: same contract, same results,
 * same errors. When nothing is pending for the device and [iova, iova + len) is in one page
 * of the IOTLB level the device used last, with the permission: one segment, the hit counted,
 * the translation held, with no call. Anything else (a miss, a range over pages, a pending
 * invalidation, a bad argument) calls dg_dev_translate().
 */
static inline int dg_dev_translate_fast(struct dg_device *dev, uint64_t iova, size_t len,
					unsigned int access, struct dg_sg *sg, unsigned int max,
					unsigned int *nr)
{
	if (__builtin_expect(max && access - 1u < 3u &&
				     dg_dev_hot_hit((struct dg_dev_hot *)(void *)dev, iova, len,
						    access, sg, nr),
			     1))
		return 0;
	return dg_dev_translate(dev, iova, len, access, sg, max, nr);
}

/*
 * Start the translation of @iova early: a device that knows its next addresses (a burst's
 * descriptors, read before its first DMA) calls this for each of them, so that the table
 * lines it will read - written by the driver's core a moment before, a cross-core miss each -
 * are fetched together, overlapping, instead of one by one as its translations reach them.
 * When the hot level is leaf-direct and @iova is in one of its two tables: a prefetch of the
 * cache line of @iova's entry. Nothing else, ever: no translation, no permission, no fault,
 * no counter, no state read or written but the device's own hot line (its thread's), and no
 * wait for the line - any @iova is safe (unmapped, forbidden, outside the domain: nothing
 * happens; a table the hot line no longer may use is only prefetched, never read). It grants
 * nothing: only a translation does, which checks the entry again. Any other hot level (an
 * IOTLB level, pass-through) does nothing: one load and one test. Device thread, like
 * dg_dev_translate_fast(); @dev must be a device (not NULL). One distinct line per 8 pages
 * of 4 KiB: a caller asks once per line (docs/iommu.md, "Fast path").
 */
static inline void dg_dev_prefetch_fast(const struct dg_device *dev, uint64_t iova)
{
	const struct dg_dev_hot *h = (const struct dg_dev_hot *)(const void *)dev;
	const struct dg_dev_hot_ent *t = h->ent;
	uint64_t x = iova ^ h->tag;

	if (!h->leaf_shift)
		return;
	if (x >> h->leaf_shift) {
		x = iova ^ h->tag2;
		if (x >> h->leaf_shift)
			return;
		t = h->ent2;
	}
	const uint64_t *a = (const uint64_t *)(const void *)t + (x >> h->off_shift);

	/* Read, keep in all levels: the translation loads it soon. */
	__builtin_prefetch(a, 0, 3);
	/*
	 * An empty asm the compiler must keep: without it GCC finds a function of the caller
	 * that only reads and prefetches (a loop over descriptors) free of side effects and
	 * deletes its calls, prefetches and all (seen with GCC -O3 in bench/workloads).
	 */
	__asm__ __volatile__("" : : "r"(a));
}

#endif /* !__cplusplus */

/*
 * dg_dev_prefetch_fast() as a call, for C++ and for callers that do not inline the hot line:
 * the same hint with the same guarantees (nothing but a prefetch, never a grant, a fault or
 * a count); a NULL @dev is ignored. Under an IOTLB level or pass-through it does nothing: a
 * walk started early would have to change the device's caches, and a hint must not.
 */
DG_EXPORT void dg_dev_prefetch(const struct dg_device *dev, uint64_t iova);

/*
 * Copy @len bytes from memory at @iova to @dst (a device read, DG_ACCESS_READ), or from @src
 * to memory at @iova (a device write, DG_ACCESS_WRITE). The whole range is checked before a
 * byte is copied: a refused access copies nothing. Errors: the fault errnos above; -EINVAL
 * len == 0 or a NULL buffer. A range whose mapping is removed while the call runs (an unmap
 * racing with the DMA, whose wait has not returned) may be copied in part and then fault.
 */
DG_EXPORT int dg_dev_read(struct dg_device *dev, uint64_t iova, void *dst, size_t len);
DG_EXPORT int dg_dev_write(struct dg_device *dev, uint64_t iova, const void *src, size_t len);

/*
 * A quiescent point: the caller is done with every translated sg list; apply queued
 * invalidations and acknowledge them (a no-op while offline).
 */
DG_EXPORT void dg_dev_quiesce(struct dg_device *dev);

/*
 * A quiescent point for a device that keeps translations across DMAs (a descriptor ring
 * translated once per burst): when nothing is queued for it, returns false and changes
 * nothing - every sg list it holds stays valid and held. Otherwise it is dg_dev_quiesce()
 * and returns true: every earlier translation is released and may be stale; translate again
 * what is still needed. One load and two compares when false, so a device may call it after
 * every DMA and acknowledge an invalidation within one DMA's time instead of one burst's.
 */
DG_EXPORT bool dg_dev_quiesce_if_pending(struct dg_device *dev);

#ifndef __cplusplus
/*
 * dg_dev_quiesce() and dg_dev_quiesce_if_pending() with their "nothing to do" case inlined
 * into the caller (same contract, same results): when the device is online and not blocked,
 * nothing was written to the queue since its last catch-up and that one was acknowledged,
 * they change nothing but held (quiesce: released) with no call - one acquire load of the
 * watched stamp (a line the device reads at every translation anyway) and two compares on its
 * hot line. Anything else calls the library. A device polling its rings calls these after every
 * burst and every few DMAs; the call was most of what a quiescent point cost it.
 */
static inline bool dg_dev_hot_idle(const struct dg_dev_hot *h)
{
	/* Acquire pairs with the producer's release store of the stamp (src/iommu). */
	return atomic_load_explicit(h->watchword, memory_order_acquire) == h->check && !h->unacked;
}

static inline void dg_dev_quiesce_fast(struct dg_device *dev)
{
	struct dg_dev_hot *h = (struct dg_dev_hot *)(void *)dev;

	if (__builtin_expect(dg_dev_hot_idle(h), 1)) {
		h->held = false;
		return;
	}
	dg_dev_quiesce(dev);
}

static inline bool dg_dev_quiesce_if_pending_fast(struct dg_device *dev)
{
	if (__builtin_expect(dg_dev_hot_idle((const struct dg_dev_hot *)(const void *)dev), 1))
		return false;
	return dg_dev_quiesce_if_pending(dev);
}
#endif /* !__cplusplus */

/*
 * Keeping a translation across quiescent points (a descriptor ring translated once, used for
 * many bursts). dg_dev_stamp() names what the device's translations are made from: it
 * changes whenever the device applies an invalidation command (a context change or a lap
 * included). Take it right after a successful dg_dev_translate(). dg_dev_rehold(@stamp)
 * returns true when the device is online and not blocked, nothing is pending for it and
 * nothing was applied since @stamp: every translation made at @stamp is still what a new
 * dg_dev_translate() would return, and it is held again exactly as by one (until the next
 * dg_dev_quiesce(), dg_dev_offline() or dg_dev_quiesce_if_pending() that returns true).
 * False changes nothing: translate again. One acquire load and two compares. Device thread.
 */
DG_EXPORT uint64_t dg_dev_stamp(const struct dg_device *dev);
DG_EXPORT bool dg_dev_rehold(struct dg_device *dev, uint64_t stamp);

/*
 * Watched ranges: dg_dev_rehold() for a translation the caller keeps for a long time (a
 * descriptor ring), made exact. dg_dev_rehold() fails once the device has applied any
 * command, although most (an unmap of a packet buffer) cannot have changed the ring's
 * translation; then the ring is translated again after every acknowledgement. A watched
 * range remembers the last applied command that may have changed a translation inside it:
 * a page or range command of the device's domain overlapping it, or any domain, global,
 * device or context command for the device, or a lap. dg_dev_watch() starts watching
 * [iova, iova + len) and returns its id (>= 0); commands applied before it count as
 * changes (a stamp taken before it never re-holds). dg_dev_rehold_watched(@id, @stamp) is
 * dg_dev_rehold() except that only those commands count, and that it is a quiescent point
 * like the start of a DMA call (it applies what is pending, and acknowledges it unless a
 * translation is held; an auto-offline device never re-holds): true when the device is
 * online and not blocked and no command applied since @stamp (dg_dev_stamp() right after
 * the translation) may have changed a translation inside the range; then every
 * translation inside it made at @stamp is what a new dg_dev_translate() would return, and
 * it is held again exactly as by one. Strict stays strict: a command that covers the range
 * is applied (the device's next DMA call, or the quiescent point) before the device can
 * acknowledge it, and from then on the re-hold fails. dg_dev_unwatch() ends watching @id.
 * Errors: -EINVAL len 0 or the range wraps past 2^64; -ENOSPC all DG_DEV_WATCH_MAX ranges
 * are watched. rehold_watched returns false for an id not watched; unwatch ignores it.
 * Device thread; a watch costs the device a compare per watched range and range command.
 */
#define DG_DEV_WATCH_MAX 32
DG_EXPORT int dg_dev_watch(struct dg_device *dev, uint64_t iova, size_t len);
DG_EXPORT void dg_dev_unwatch(struct dg_device *dev, int id);
DG_EXPORT bool dg_dev_rehold_watched(struct dg_device *dev, int id, uint64_t stamp);

/* Become online (catching up first); DMA calls do this implicitly. */
DG_EXPORT void dg_dev_online(struct dg_device *dev);

/* Quiesce and go offline: waits stop waiting for this device until it is online again. */
DG_EXPORT void dg_dev_offline(struct dg_device *dev);

DG_EXPORT bool dg_dev_is_online(const struct dg_device *dev);

/*
 * For a device emulated in the same thread as its driver (nothing else would ever bring it to
 * a quiescent point while the driver waits): when on, every DMA call ends with
 * dg_dev_offline(), so a wait in that thread never waits for it (a translated sg list is then
 * valid until the thread's next IOMMU call). Costs two atomic read-modify-writes per call (off
 * by default). Call from the device's thread.
 */
DG_EXPORT void dg_dev_set_auto_offline(struct dg_device *dev, bool on);

/* Per-device counters (any thread; relaxed reads). */
struct dg_dev_stats {
	uint64_t iotlb_hits;	  /* pages translated from the IOTLB */
	uint64_t iotlb_misses;	  /* pages that needed a walk */
	uint64_t walks;		  /* table walks */
	uint64_t walk_cache_hits; /* walks started from a walk-cache entry */
	uint64_t faults;	  /* accesses refused */
	uint64_t cmds_processed;  /* queue commands applied */
	uint64_t flushes;	  /* whole-cache flushes (global, device, context, lap) */
	uint64_t laps;		  /* times the device fell a whole queue behind */
	uint64_t acked;		  /* last sequence number acknowledged */
	uint64_t prefetch_fills;  /* IOTLB entries filled from the cache line of a miss's
				     leaf entry (neighbour fill), not counted as misses */
};
DG_EXPORT void dg_dev_stats(const struct dg_device *dev, struct dg_dev_stats *out);

#ifdef __cplusplus
}
#endif

#endif /* DMAGUARD_DEV_H */
