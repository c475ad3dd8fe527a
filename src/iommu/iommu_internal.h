/* SPDX-License-Identifier: MIT */
/*
 * iommu/iommu_internal.h - the engine's objects, shared by src/iommu and src/dev (private).
 *
 * Who writes what (the rule every field comment refers to):
 *  - "device": only the thread doing the device's DMA calls (the agent) reads and writes it;
 *  - "mmu->lock": CPU threads, under the IOMMU mutex (devices, domains, references);
 *  - "ctx_lock": CPU threads changing this device's context;
 *  - atomics carry their own comment where they are accessed.
 *
 * The agent slot array is the "context table" side that waiters scan: one cache line per
 * device slot, allocated with the IOMMU and never freed before it, so a waiter can read a
 * slot while its device is destroyed.
 *
 *   slot stamp (release) --acquire-->  device catch-up: applies written commands from seen on
 *                                      (the device watches the stamp of slot seen % len)
 *   mmu->inv.published  --acquire-->  device catch-up after a lap; waiters; producers
 *   device ack (release) --acquire--> waiter scan: ack >= seq, or OFFLINE (then an RMW)
 *   waiter RMW on an offline slot --> the device's RMW going online (see agent.c)
 */
#ifndef DG_IOMMU_INTERNAL_H
#define DG_IOMMU_INTERNAL_H

#include "base/compiler.h"
#include "iommu/fault_queue.h"
#include "iommu/inval_queue.h"
#include "iommu/iotlb.h"

#include <dmaguard/dev.h>
#include <dmaguard/iommu.h>

#include <pthread.h>
#include <stdatomic.h>

#define AGENT_OFFLINE	  (1ull << 63) /* in agent_slot.ack: the device does not hold up waits */
#define WAIT_STAT_THREADS 32	       /* wait counters: threads with a slot each (inval.c) */
#define WAIT_STAT_SHARDS  (WAIT_STAT_THREADS + 1) /* + one all later threads share */

struct agent_slot {
	dg_cacheline _Atomic uint64_t ack; /* last acknowledged seq | AGENT_OFFLINE */
	_Atomic uint32_t rid;		   /* valid while used */
	_Atomic uint32_t used;		   /* written under mmu->lock */
	_Atomic(struct dg_device *) dev;   /* written under mmu->lock; for statistics */
};

struct dg_domain {
	struct dg_iommu *mmu;
	struct dg_pt *pt;
	uint32_t id;
	uint64_t granule;
	uint64_t pgsize_bitmap; /* effective page sizes */
	uint64_t in_first;	/* input space [in_first, in_last] */
	uint64_t in_last;
	unsigned int wc_depths;			/* table depths a walk cache may keep: 1.. */
	unsigned int wc_shift[DG_PT_MAX_DEPTH]; /* log2 of the span of a table at depth d */
	unsigned int refs; /* context entries naming it, confirmed or not; mmu->lock */
	/* Gathers whose flush timed out inside dg_domain_map(): released by the next
	   successful dg_iommu_flush_gather() of the domain, or at destroy. */
	pthread_mutex_t pending_lock;
	struct dg_pt_gather *pending; /* pending_lock */
	unsigned int nr_pending;      /* pending_lock */
	_Atomic uint32_t has_pending; /* written under pending_lock; a relaxed hint */
};

struct dg_device {
	/*
	 * Hot: everything a hit reads and writes, one cache line, public so that
	 * dg_dev_translate_fast() inlines (dmaguard/dev.h). watch: device, the stamp of the
	 * next slot it reads, slot seen % len of mmu->inv (agent.c update_check()); check:
	 * device, == quiet (that stamp's value while command seen is not written) when online
	 * and not blocked, UINT64_MAX otherwise (forces the slow path); ent..off_shift: device, a copy of the IOTLB level probed first (hot_set());
	 * tag: device, == tag below; hits: the device writes (load + store), anyone reads;
	 * held: device, sg lists from dg_dev_translate() may be in use: apply commands but do
	 * not acknowledge until quiesce/offline; unacked: device, acked != seen (update_check()),
	 * so dg_dev_quiesce_fast() knows from the hot line that there is nothing to announce.
	 */
	struct dg_dev_hot hot;
	struct iotlb iotlb; /* device */
	uint64_t tag;	    /* device: ctag << 2 | 3 (iotlb_probe; src/vhost reads it) */
	/* The cheap miss (dev/translate.c): a page whose leaf table is known. */
	struct iotlb_level *leaf_lvl; /* device: IOTLB level of the leaf size; NULL: no cheap
					 miss (not translating, auto-offline, or a table the walk
					 cache cannot keep the leaf tables of) */
	struct iotlb_level *leaf_ctx; /* device: the same whatever auto_offline says */
	const struct dg_pt *leaf_pt;  /* device: dom->pt while leaf_lvl is set */
	const void *leaf_root;	      /* device: the root of a one-level table, or NULL (the
					 walk cache's deepest row holds last-level tables) */
	bool prefetch; /* fixed at creation: a miss reading a last-level entry also fills its
			  cache line's other valid entries (dev/translate.c fill_line()) */
	/* Leaf-direct (dg_iommu_config.iotlb_leaf_direct, agent.c set_leaf()): the hot level
	   may be a cached last-level table (hot_set_leaf()); pages of the leaf size are never
	   put in the IOTLB (iotlb.no_small), so range invalidations skip that level. */
	bool direct;		    /* device: on for the current context */
	bool direct_cfg;	    /* fixed at creation: the configuration asks for it */
	uint64_t direct_page_mask;  /* device: ~(leaf page size - 1) */
	uint64_t direct_off_mask;   /* device: (entries per table - 1) << 3 */
	uint32_t direct_off_shift;  /* device: leaf shift - 3 */
	uint32_t direct_span_shift; /* device: log2 of a last-level table's span */
	uint32_t direct_oa_shift;   /* device: 64 - top of the output-address field */
	/* Pass-through as an IOTLB level: two 2^63-byte identity "pages" (agent.c). */
	struct iotlb_level ident;      /* fixed at creation */
	struct iotlb_ent ident_ent[2]; /* fixed at creation */
	/* Agent state. */
	uint64_t seen;	       /* device: commands < seen are applied */
	uint64_t quiet;	       /* device: inv_queue_quiet(seen), see update_check() */
	bool online;	       /* device: mirrors !(slot->ack & AGENT_OFFLINE) */
	bool auto_offline;     /* device: every DMA call ends offline */
	uint64_t acked;	       /* device: last value stored into slot->ack (without the flag) */
	uint32_t mode;	       /* device: cached context mode */
	uint32_t did;	       /* device: cached domain id (0 unless translated) */
	uint32_t ctag;	       /* device: tag of the IOTLB entries made now (1..IOTLB_DID_MASK,
				  see agent.c "generations"); 0 unless translated */
	uint32_t wtag;	       /* device: the same for walk-cache entries */
	struct dg_domain *dom; /* device: cached domain; not dereferenced once stale */
	struct walk_cache wc;  /* device */
	/*
	 * Watched ranges (dg_dev_watch(), dev/translate.c): for each, the sequence number after
	 * the last applied command that may have changed a translation inside it (changed);
	 * changed_all the same for the commands that may change any translation (domain,
	 * global, device and context commands of this device, laps). agent.c apply() keeps them.
	 */
	struct {
		uint64_t first, last, changed;
	} watch[DG_DEV_WATCH_MAX];   /* device */
	uint64_t watch_used;	     /* device: bit i: watch[i] in use */
	uint64_t watch_lo, watch_hi; /* device: the hull of the watched ranges (lo > hi once all
					were unwatched; 0, 0 before the first: no bit of
					watch_used is set then),
					so a command outside it costs two compares whatever
					the number of ranges (agent.c watch_mark()) */
	uint64_t changed_all;	     /* device */
	/* Counters: the device writes them (relaxed load + store), anyone reads. */
	_Atomic uint64_t st_misses;
	_Atomic uint64_t st_walks;
	_Atomic uint64_t st_wc_hits;
	_Atomic uint64_t st_faults;
	_Atomic uint64_t st_cmds;
	_Atomic uint64_t st_flushes;
	_Atomic uint64_t st_laps;
	_Atomic uint64_t st_leaf_walks; /* misses read from the cached leaf table: each is also a
					   miss, a walk and a walk-cache hit (folded on read) */
	_Atomic uint64_t st_root_walks; /* misses read from a one-level table: a miss and a walk */
	_Atomic uint64_t st_prefetch;	/* IOTLB entries filled by fill_line() */
	/* Fixed at creation. */
	struct dg_iommu *mmu;
	struct agent_slot *slot;
	uint32_t rid;
	/* Context entry. */
	_Atomic uint64_t ctx;	     /* (uintptr_t)domain | mode; written under ctx_lock with
					 release, read by the device with acquire */
	pthread_mutex_t ctx_lock;    /* serializes context changes of this device */
	struct dg_domain *ctx_dom;   /* ctx_lock: the domain the entry names (a reference) */
	struct dg_domain *stale_dom; /* ctx_lock: previous domain, change not confirmed */
	uint64_t ctx_seq;	     /* ctx_lock: seq confirming the last change, 0 when done */
};

/* dg_dev_translate_fast() reads the hot line at the start of the device (dmaguard/dev.h). */
static_assert(offsetof(struct dg_device, hot) == 0, "the hot line starts struct dg_device");
static_assert(offsetof(struct dg_dev_hot, ent2) == DG_CACHELINE,
	      "the hot line is one cache line, leaf-direct's second table in the next");

struct dg_iommu {
	struct inv_queue inv;
	dg_cacheline _Atomic uint64_t completed; /* every seq <= completed is complete */
	struct fault_queue fq;
	struct dg_iommu_config cfg;
	pthread_mutex_t lock;	    /* devices, domains, references, retired */
	struct agent_slot *agents;  /* cfg.max_devices slots */
	_Atomic uint32_t nr_agents; /* slots ever used (high-water mark); waiters scan these */
	uint32_t nr_devices;	    /* lock */
	uint32_t nr_domains;	    /* lock */
	_Atomic(struct dg_domain *) domains[DG_DOMAIN_ID_MAX + 1]; /* by id; written under lock */
	struct dg_dev_stats retired; /* lock: counters of destroyed devices */
	/* Wait counters, one slot per thread (its own line), so a wait bumps them with a relaxed
	 * load and store, not a locked add; slot WAIT_STAT_THREADS: every later thread's, with
	 * atomic adds. */
	struct wait_stats {
		dg_cacheline _Atomic uint64_t waits;
		_Atomic uint64_t coalesced;
		_Atomic uint64_t timeouts;
	} wst[WAIT_STAT_SHARDS];
	pthread_mutex_t diag_lock;
	char diag[1024]; /* diag_lock: last timeout diagnostic */
	size_t diag_len; /* diag_lock: its full length */
};

/* Relaxed increment of a counter only one thread writes: no read-modify-write instruction. */
static inline void stat_inc(_Atomic uint64_t *c, uint64_t n)
{
	atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n,
			      memory_order_relaxed);
}

/* Make @l the level the fast path probes first (a copy in the hot line). */
static inline void hot_set(struct dg_device *dev, const struct iotlb_level *l)
{
	dev->hot.ent = l->ent;
	dev->hot.base_mask = l->base_mask;
	dev->hot.off_mask = l->off_mask;
	dev->hot.off_shift = l->off_shift;
	dev->hot.tag = dev->tag;
	dev->hot.leaf_shift = 0;
}

/*
 * Leaf-direct (dev->direct): make the last-level table @table, which covers @iova (a
 * walk-cache entry of the deepest row), the hot level: a hit reads @iova's entry of it
 * (dmaguard/dev.h dg_dev_hot_xlat()). It is a copy of that walk-cache entry and is dropped
 * (hot_set() of an IOTLB level) by every command that drops walk-cache entries (agent.c
 * drop_leaf()), before the device acknowledges it, so it never outlives the table.
 */
static inline void hot_set_leaf(struct dg_device *dev, const void *table, uint64_t iova)
{
	/* The table held until now becomes the second one (none held: the new one twice). */
	if (dev->hot.leaf_shift) {
		dev->hot.ent2 = dev->hot.ent;
		dev->hot.tag2 = dev->hot.tag;
	} else {
		dev->hot.ent2 = (const struct dg_dev_hot_ent *)table;
		dev->hot.tag2 = iova >> dev->direct_span_shift << dev->direct_span_shift;
	}
	dev->hot.ent = (const struct dg_dev_hot_ent *)table;
	dev->hot.base_mask = dev->direct_page_mask;
	dev->hot.off_mask = dev->direct_page_mask & (~0ull >> dev->direct_oa_shift);
	dev->hot.off_shift = dev->direct_off_shift + 3; /* the page shift */
	dev->hot.tag = iova >> dev->direct_span_shift << dev->direct_span_shift;
	dev->hot.leaf_shift = (uint8_t)dev->direct_span_shift;
}

static inline uint64_t stat_get(const _Atomic uint64_t *c)
{
	return atomic_load_explicit(c, memory_order_relaxed);
}

/* ---- agent.c: the device as a translation agent ------------------------------------- */

/* Set up the agent of a new device (IOTLB, walk cache, offline, blocked). 0 or -ENOMEM. */
int agent_init(struct dg_device *dev, const struct dg_iommu_config *cfg);
void agent_fini(struct dg_device *dev);

/* Slow path of a DMA call's start: come online and/or apply pending commands. */
void agent_enter_slow(struct dg_device *dev);

/* A quiescent point: apply commands written since the last one, acknowledge (online only). */
void agent_catch_up(struct dg_device *dev);

/* Turn the cheap miss of dev/translate.c off for auto-offline, or back on (no dereference:
 * the device's cached domain may be stale while it is offline). */
void agent_leaf_auto_offline(struct dg_device *dev, bool on);

void agent_online(struct dg_device *dev);
void agent_offline(struct dg_device *dev);

/* The start of every DMA call: one acquire load and a compare when nothing is pending. */
static dg_always_inline void agent_enter(struct dg_device *dev)
{
	/* Acquire pairs with the producer's release stamp store (inval_queue.h). */
	if (dg_unlikely(atomic_load_explicit(dev->hot.watchword, memory_order_acquire) !=
			dev->hot.check))
		agent_enter_slow(dev);
}

/* The end of dg_dev_read()/dg_dev_write(). */
static dg_always_inline void agent_leave(struct dg_device *dev)
{
	/* Acquire pairs with the producer's release stamp store (inval_queue.h). */
	if (dg_unlikely(atomic_load_explicit(dev->hot.watchword, memory_order_acquire) !=
			dev->quiet))
		agent_catch_up(dev);
}

/* ---- iommu.c ------------------------------------------------------------------------ */

/* Does a device with this requester ID exist? (Validation of DEVICE/CONTEXT commands.) */
bool iommu_rid_exists(struct dg_iommu *mmu, uint32_t rid);

/* Record a refused access in the fault queue and the device's counter. */
void iommu_record_fault(struct dg_device *dev, uint64_t iova, uint64_t len, unsigned int access,
			enum dg_fault_reason reason);

#endif /* DG_IOMMU_INTERNAL_H */
