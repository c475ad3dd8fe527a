/* SPDX-License-Identifier: MIT */
/*
 * bench/attack/world.h - the machine an attack runs on: IOMMU, DMA layer, devices, the
 * driver's tagged arena, and the two sides' primitives every attack is written with.
 *
 * Driver side (the "kernel"): drv_map() takes a buffer (arena or pool), writes fresh kernel
 * data into its whole page(s), maps it and lets the device touch it legitimately once (so its
 * IOTLB holds the translation); drv_unmap() unmaps and, unless the library answered
 * -ETIMEDOUT, reuses the memory at once (new kernel data: the secret a stale access must not
 * see). drv_settle() follows the library's confirmations (quarantine, lazy flushes).
 *
 * Device side (the attacker): dev_access() is one judged DMA through the IOMMU; dev_held()
 * is one judged access through an sg list the device translated earlier and still holds.
 *
 * Everything runs in the calling thread except the DMA layer's housekeeping thread (lazy
 * timeouts, quarantine retries), so a run is reproducible up to those timings and the CPU the
 * thread runs on (the library's per-CPU structures); on the virtual clock and one CPU,
 * exactly. Devices use auto-offline (dev.h) so the driver's waits in the same thread never
 * wait for them, except where an attack turns it off to withhold acknowledgements.
 */
#ifndef DG_BENCH_ATTACK_WORLD_H
#define DG_BENCH_ATTACK_WORLD_H

#include "attack.h"
#include "oracle.h"

#include <dmaguard/dma.h>

#include <stdatomic.h>

#define W_PAGE	      4096u
#define W_ARENA_PAGES 32u /* driver arena: zone A = first half (window's direct region) */
#define W_ZONE_PAGES  (W_ARENA_PAGES / 2)
#define W_POOL_BUF    2048u /* pool policy: buffer size of each pool */
#define W_POOL_NBUFS  8u    /* buffers per pool */
#define W_MAX_MAPS    64u
#define W_SCRATCH     (8 * W_PAGE) /* longest access an attack makes */
#define W_WINDOW_BASE (1ull << 31) /* window policy: 1 GiB window at 2 GiB */
#define W_WINDOW_SIZE (1ull << 30)

enum map_state {
	MAP_FREE,
	MAP_LIVE,	 /* mapped */
	MAP_LAZY,	 /* unmapped under lazy, its flush not seen complete yet */
	MAP_UNCONFIRMED, /* unmap returned -ETIMEDOUT, not confirmed yet: memory kept aside */
	MAP_GONE,	 /* unmapped and confirmed; the memory was reused */
};

struct atk_map {
	enum map_state state;
	unsigned int dev;	  /* device index */
	uint8_t *buf;		  /* host buffer */
	size_t len;		  /* bytes mapped */
	enum dg_dma_dir dir;	  /* direction */
	uint64_t dma;		  /* DMA address the device was given */
	struct dg_dma_pool *pool; /* pool the buffer came from, or NULL (arena) */
	void *pool_buf;		  /* ... and the pool buffer holding it */
	uint64_t t_unmap;	  /* CLOCK_MONOTONIC when the unmap returned */
	uint64_t unmaps_at;	  /* driver unmaps counted at that moment */
};

#define W_ISSUED_SLOTS 4096

struct atk_world {
	enum atk_policy pol;
	const struct atk_config *cfg;
	struct atk_result *res;
	struct dg_iommu *mmu;
	struct dg_dma *dma;
	unsigned int ndev;
	struct dg_device *dev[ORC_MAX_DEVS];
	struct dg_dma_dev *dd[ORC_MAX_DEVS]; /* NULL: never attached, or detached */
	bool auto_offline[ORC_MAX_DEVS];
	bool all_memory[ORC_MAX_DEVS]; /* dg_dma_stats.exposes_all_memory at creation */
	struct dg_dma_pool *pool[3];   /* pool policy, device 0: one pool per direction */
	uint8_t *pool_lo[3];	       /* pool memory as registered with the oracle */
	size_t pool_len[3];
	_Atomic uint64_t vclock; /* virtual clock (atk_config.virtual_clock) */
	uint8_t *arena;
	unsigned int next_page[2]; /* round robin over each zone's pages */
	struct orc orc;
	struct atk_map map[W_MAX_MAPS];
	uint64_t unmaps;     /* driver unmaps so far */
	uint64_t arena_full; /* buffers drv_map() skipped: no free pages in the arena */
	uint64_t pattern;    /* attack writes: a counter in their pattern */
	uint8_t *scratch;    /* what an attack read lands in */
	uint8_t *wbuf;	     /* what an attack write sends */
	uint8_t *traffic;    /* drv_traffic()'s buffer (not tagged: only the device uses it) */
	/*
	 * When each IOVA page was last handed out (w->unmaps + 1 at that map; direct-mapped by
	 * page, a collision forgets the older page): a stale access through an IOVA given out
	 * again after its unmap belongs to the newer mapping, so it says nothing about the
	 * window of the older one (world_iova_reissued()).
	 */
	struct {
		uint64_t page, at;
	} issued[W_ISSUED_SLOTS];
	uint64_t *lazy_el; /* elapsed ns of every breach documented as inside the lazy window */
	size_t n_lazy_el, cap_lazy_el;
	/* The access being judged (oracle callbacks). */
	struct {
		unsigned int dev;
		uint64_t t;
		int reason; /* enum atk_doc of the first cell, -1 once a cell is undocumented */
		bool any;
		uint64_t lazy_elapsed;
		uint64_t iova;	      /* where the access went (held: the host address) */
		bool held;	      /* through a held sg list */
		uintptr_t undoc_host; /* first undocumented cell */
		size_t undoc_bytes;   /* undocumented bytes */
	} j;
};

/* Has the IOVA of @m been handed out to a new mapping since @m was unmapped? */
bool world_iova_reissued(const struct atk_world *w, const struct atk_map *m);

uint64_t w_now_ns(void); /* CLOCK_MONOTONIC */
void w_sleep_ns(uint64_t ns);
/* The machine's time: CLOCK_MONOTONIC, or the virtual clock (atk_config.virtual_clock), which
 * only world_sleep() moves (and then runs one housekeeping pass, as the thread would). */
uint64_t world_now(struct atk_world *w);
void world_sleep(struct atk_world *w, uint64_t ns);

/* Build the machine: @ndev devices (rid 0x10 + i); device i gets a DMA device under the
 * policy when bit i of @attach is set. Returns 0 or a negative errno. */
int world_init(struct atk_world *w, enum atk_policy pol, const struct atk_config *cfg,
	       struct atk_result *res, unsigned int ndev, unsigned int attach);
/* Bring every device offline, let the library confirm everything, fix the verdict. */
void world_finish(struct atk_world *w);
void world_fini(struct atk_world *w);

/* Is @dev's context pass-through (identity)? */
bool w_passthrough(const struct atk_world *w, unsigned int dev);

/*
 * Driver: map a new buffer of @len bytes at byte @off of a page for device @dev; @direct asks
 * for the window policy's direct region (ignored by the other policies). NULL after counting
 * a legitimate failure, or when the arena has no free pages (counted in arena_full).
 */
struct atk_map *drv_map(struct atk_world *w, unsigned int dev, size_t len, size_t off,
			enum dg_dma_dir dir, bool direct);
/* Driver: unmap; returns what the library returned. */
int drv_unmap(struct atk_world *w, struct atk_map *m);
/* Driver: the kernel writes new data into a live buffer (a receive buffer re-armed while
 * mapped): the new content is given only to devices the buffer's mapping lets read it. */
void drv_kernel_write(struct atk_world *w, struct atk_map *m);
/* Driver: other I/O of the device (map, legitimate read and write checked, unmap), on a
 * buffer outside the tagged memory: it moves the flush queues along. */
void drv_traffic(struct atk_world *w, unsigned int dev);
/* Driver: follow the library's confirmations (quarantine released, lazy queues empty). */
void drv_settle(struct atk_world *w);
/* Driver: poll housekeeping until nothing waits for confirmation (at most @max_ns). */
void drv_wait_confirmed(struct atk_world *w, uint64_t max_ns);

/* Device: one judged access through the IOMMU. @stale: the unmapped buffer it aims at (window
 * accounting), or NULL. Returns the errno of the access, or 1 when it was skipped. */
int dev_access(struct atk_world *w, unsigned int dev, bool write, uint64_t iova, size_t len,
	       const struct atk_map *stale);
/* Device: one judged access through a held sg list (never refused: no IOMMU on the way). */
void dev_held(struct atk_world *w, unsigned int dev, bool write, const struct dg_sg *sg,
	      unsigned int nr, const struct atk_map *stale);
/* Device: end of a burst (quiescent point; offline unless auto-offline). */
void dev_idle(struct atk_world *w, unsigned int dev);

/* Count a legitimate operation that failed (and log it). */
void w_legit_failure(struct atk_world *w, const char *what, int err);

#endif /* DG_BENCH_ATTACK_WORLD_H */
