/* SPDX-License-Identifier: MIT */
/*
 * dmaguard/dma.h - the driver's DMA API and its six protection policies.
 *
 * A driver hands buffers to a device through this API; the device reaches them only through
 * the addresses it returns ("DMA addresses"). How well the rest of memory is protected, and
 * what that costs, is the device's policy (docs/dma-api.md):
 *
 *  identity  DMA address = host address, the device context is pass-through: no isolation,
 *            no per-I/O work. The baseline every other policy is divided by.
 *  strict    every mapping gets its own contiguous IOVA range; when an unmap (or the end of
 *            the batch holding it) returns, the invalidation covering it has been confirmed
 *            by every device: the device can no longer reach the buffer. One range
 *            invalidation per request or batch, leaf-only while no table page was freed.
 *  lazy      unmap clears the page table and queues the IOVA on a per-CPU flush queue; one
 *            invalidation covers a whole queue generation. Until it completes the device may
 *            still use a stale translation: that window is measured and reported.
 *  window    PowerPC DDW: a flat table over a device window. Memory inside the configured
 *            direct region is reached at a fixed offset with no per-I/O work; other memory
 *            is mapped on demand inside the window with the window's (large) pages.
 *  bounce    per-CPU shadow areas mapped once: map copies into a shadow slot, unmap copies
 *            back; the device never sees a byte of the buffer's page outside the buffer and
 *            never sees the buffer itself. No window.
 *  pool      page_pool style: buffer pools mapped once for their life; buffers inside a pool
 *            cost nothing per I/O, and everything a pool holds stays exposed (reported).
 *
 * Objects: a struct dg_dma binds the DMA layer to one IOMMU (global settings such as forced
 * translation, a housekeeping thread for lazy timeouts); a struct dg_dma_dev is one device's
 * DMA state (its policy, its own domain and IOVA space). The device side (the emulated device
 * doing DMA through dg_dev_read/write/translate) is in dmaguard/dev.h.
 *
 * Concurrency contract:
 *  - map, unmap, sync, link/unlink, coherent alloc/free, pool get/put on one device may be
 *    called from any number of threads at once, for distinct mappings. Two calls on the same
 *    mapping at once (two unmaps of one buffer) are a caller bug; one of them fails.
 *  - A struct dg_dma_batch and a struct dg_dma_iova_state are used by one thread at a time.
 *  - dg_dma_dev_set_policy(), dg_dma_dev_configure() and dg_dma_dev_destroy() need the
 *    device idle: no DMA API call on it running, no live mapping, pool or two-step range
 *    (-EBUSY otherwise). Coherent allocations count as live mappings.
 *  - Device threads may do DMA at any time; a mapping is usable by the device from the
 *    moment the map call returns until the unmap call starts.
 *
 * Errors: actions return 0 or a negative errno and change nothing when they fail (the
 * exception, -ETIMEDOUT of an invalidation wait, is documented where it can happen);
 * constructors return NULL with errno set. Every failure is counted in dg_dma_stats.
 */
#ifndef DMAGUARD_DMA_H
#define DMAGUARD_DMA_H

#include <dmaguard/common.h>
#include <dmaguard/dev.h>
#include <dmaguard/iommu.h>
#include <dmaguard/pt.h>

#ifdef __cplusplus
extern "C" {
#endif

struct dg_dma;
struct dg_dma_dev;
struct dg_dma_pool;

/* Direction of a transfer (Linux's enum dma_data_direction values). */
enum dg_dma_dir {
	DG_DMA_BIDIRECTIONAL = 0, /* the device reads and writes the buffer */
	DG_DMA_TO_DEVICE = 1,	  /* the device only reads it (mapped read-only) */
	DG_DMA_FROM_DEVICE = 2,	  /* the device only writes it (mapped write-only) */
};

enum dg_dma_policy {
	DG_DMA_IDENTITY = 0,
	DG_DMA_STRICT = 1,
	DG_DMA_LAZY = 2,
	DG_DMA_WINDOW = 3,
	DG_DMA_BOUNCE = 4,
	DG_DMA_POOL = 5,
};
#define DG_DMA_NR_POLICIES 6

/* "identity", "strict", "lazy", "window", "bounce", "pool"; NULL for an unknown value. */
DG_EXPORT const char *dg_dma_policy_name(enum dg_dma_policy policy);

/* Parse a policy name. Errors: -EINVAL unknown name or NULL argument. */
DG_EXPORT int dg_dma_policy_parse(const char *name, enum dg_dma_policy *policy);

/* ---- the DMA layer of one IOMMU ---------------------------------------------------------- */

/* Points where dg_dma_fail_hook may inject a failure. */
enum dg_dma_fail_point {
	DG_DMA_FAIL_IOVA = 1, /* IOVA allocation: inject -ENOSPC (exhausted) or -ENOMEM */
	DG_DMA_FAIL_SHADOW,   /* bounce shadow slot allocation: inject -ENOSPC */
	DG_DMA_FAIL_PT_MAP,   /* page-table map: inject -ENOMEM (table allocation failed) */
	DG_DMA_FAIL_POOL,     /* pool buffer get: inject -ENOSPC */
	DG_DMA_FAIL_ALLOC,    /* memory for coherent buffers, pools and shadow areas: -ENOMEM */
};

/*
 * Failure injection (tests, dmaguard attack). @fail is called at each point with the device's
 * requester ID and returns 0 to proceed or the negative errno to fail with; it may be called
 * from any thread concurrently and must not call back into the DMA API.
 */
struct dg_dma_fail_hook {
	int (*fail)(void *cookie, enum dg_dma_fail_point point, uint32_t rid);
	void *cookie;
};

struct dg_dma_config {
	bool force_translation; /* tboot: identity only for devices with
				   DG_DMA_DEV_TRANSLATION_OPT_OUT (dg_dma_set_force_translation) */
	bool no_housekeeping;	/* no background thread: lazy timeouts, IOVA cache trimming and
				   retries happen only in dg_dma_housekeep() (tests) */
	uint64_t housekeeping_period_ns; /* 0 = 1 ms */
	/* Time source of lazy timeouts and windows; NULL = CLOCK_MONOTONIC. Tests install a
	   virtual clock. Called from any thread. */
	uint64_t (*clock)(void *cookie);
	void *clock_cookie;
};

/*
 * Create the DMA layer over @mmu (which must outlive it). @cfg may be NULL (defaults).
 * Returns NULL with errno EINVAL (NULL @mmu) or ENOMEM / EAGAIN (the housekeeping thread).
 */
DG_EXPORT struct dg_dma *dg_dma_create(struct dg_iommu *mmu, const struct dg_dma_config *cfg);

/* Destroy it. Errors: -EBUSY a device still exists (nothing changed). NULL: no-op, 0. */
DG_EXPORT int dg_dma_destroy(struct dg_dma *dma);

DG_EXPORT struct dg_iommu *dg_dma_iommu(const struct dg_dma *dma);

/*
 * Turn forced translation on or off. Turning it on moves every idle identity device that has
 * no DG_DMA_DEV_TRANSLATION_OPT_OUT to strict. Errors: -EBUSY such a device has live mappings
 * (nothing changed); errors of dg_dma_dev_set_policy().
 */
DG_EXPORT int dg_dma_set_force_translation(struct dg_dma *dma, bool on);
DG_EXPORT bool dg_dma_force_translation(const struct dg_dma *dma);

/*
 * Install (or, with NULL, remove) a failure hook. The hook struct must stay valid until it is
 * replaced and no DMA call that may have read it is still running.
 */
DG_EXPORT void dg_dma_set_fail_hook(struct dg_dma *dma, const struct dg_dma_fail_hook *hook);

/*
 * One housekeeping pass (what the background thread does every period): flush lazy queues
 * whose oldest entry reached the timeout and reclaim completed flushes, retry invalidations
 * that timed out, and trim the IOVA caches (every 100 ms). Any thread; returns 0.
 */
DG_EXPORT int dg_dma_housekeep(struct dg_dma *dma);

/* ---- devices ------------------------------------------------------------------------------ */

/* dg_dma_dev_config.flags */
#define DG_DMA_DEV_UNTRUSTED (1u << 0) /* only strict or bounce (external, hot-plugged) */
#define DG_DMA_DEV_TRANSLATION_OPT_OUT \
	(1u << 1) /* may stay identity when translation is forced (the administrator's  \
		     exemption) */
#define DG_DMA_DEV_LINUX_REFERENCE \
	(1u << 2) /* strict as stock Linux did it: Linux's IOVA allocator without caches, no \
		     batching, one synchronous invalidation per unmapped page. Create the  \
		     IOMMU with dg_iommu_config.reference for the single-lock queue too. */

struct dg_dma_lazy_config {
	uint32_t queue_size; /* entries per CPU flush queue, power of two 2..65536; 0 = 256 */
	uint64_t timeout_ns; /* oldest entry flushed after this; 0 = 10 ms */
};

struct dg_dma_window_config {
	uint64_t base;	      /* first IOVA of the window, page_size aligned; 0 with size 0 =
			       the small default window: 1 GiB at 2 GiB */
	uint64_t size;	      /* bytes, multiple of page_size, at most 2^24 pages; 0 = default */
	uint64_t page_size;   /* 4K, 64K or 2M; 0 = 4K */
	void *direct;	      /* host memory reached at a fixed offset: [direct, direct +
			       direct_size) appears at IOVA base + (addr - direct); NULL = none */
	uint64_t direct_size; /* multiple of page_size, < size (the rest is mapped on demand) */
};

struct dg_dma_bounce_config {
	uint64_t area_size; /* shadow bytes per CPU and direction, a power of two from
			       256 KiB to 1 GiB; 0 = 1 MiB */
};

struct dg_dma_dev_config {
	enum dg_dma_policy policy; /* DG_DMA_* */
	unsigned int flags;	   /* DG_DMA_DEV_* */
	uint64_t dma_mask;	   /* highest DMA address the device can generate, 2^n - 1 with
				      n >= 24; 0 = all 64 bits */
	uint64_t max_seg_size;	   /* longest DMA segment of a scatter-gather mapping; 0 = 64K */
	uint64_t seg_boundary;	   /* segments never cross a multiple of seg_boundary + 1
				      (2^n - 1, n >= 12); 0 = 0xffffffff */
	struct dg_pt_geometry geo; /* page table of strict, lazy, bounce and pool (window makes
				      a flat one): format 0 = VT-d second stage, 48-bit, 4K */
	struct dg_dma_lazy_config lazy;
	struct dg_dma_window_config window;
	struct dg_dma_bounce_config bounce;
};

/* Defaults: identity, 64-bit mask, 64K segments, 4G boundary, VT-d 48-bit. */
DG_EXPORT void dg_dma_dev_config_init(struct dg_dma_dev_config *cfg);

/*
 * Make @dev a DMA device of @dma with configuration @cfg (NULL = defaults). The DMA layer
 * takes over the device's context (pass-through for identity, its own domain otherwise) until
 * dg_dma_dev_destroy(); the caller keeps the struct dg_device and runs its device thread.
 * Returns NULL with errno EINVAL (bad configuration, @dev of another IOMMU), EPERM (the policy
 * is not allowed: untrusted device not strict/bounce, identity under forced translation
 * without the opt-out, opt-out on an untrusted device), EBUSY (@dev already has a DMA
 * device), ENOSPC (no domain id left), ENOMEM, ETIMEDOUT (the context change was not
 * confirmed by the device).
 */
DG_EXPORT struct dg_dma_dev *dg_dma_dev_create(struct dg_dma *dma, struct dg_device *dev,
					       const struct dg_dma_dev_config *cfg);

/*
 * Tear down the device's DMA state and block its DMA (context blocked). Errors (nothing
 * changed): -EBUSY live mappings, pools or two-step ranges remain; -ETIMEDOUT the device did
 * not confirm (state kept; retry).
 */
DG_EXPORT int dg_dma_dev_destroy(struct dg_dma_dev *dd);

/*
 * Switch policy (idle device only), keeping the rest of the configuration. The new policy's
 * state (domain, IOVA space, shadow areas, window) is built in full before the device is moved
 * to it. Errors (nothing changed): -EBUSY not idle; -EPERM not allowed (see create); -EINVAL
 * unknown policy; -ENOMEM, -ENOSPC, -ETIMEDOUT as create.
 */
DG_EXPORT int dg_dma_dev_set_policy(struct dg_dma_dev *dd, enum dg_dma_policy policy);

/* Replace the whole configuration (idle device only). Errors as create and set_policy. */
DG_EXPORT int dg_dma_dev_configure(struct dg_dma_dev *dd, const struct dg_dma_dev_config *cfg);

DG_EXPORT void dg_dma_dev_get_config(const struct dg_dma_dev *dd, struct dg_dma_dev_config *cfg);
DG_EXPORT enum dg_dma_policy dg_dma_dev_policy(const struct dg_dma_dev *dd);
DG_EXPORT struct dg_device *dg_dma_dev_device(const struct dg_dma_dev *dd);
/* The device's domain, NULL under identity (read it only while the policy does not change). */
DG_EXPORT struct dg_domain *dg_dma_dev_domain(const struct dg_dma_dev *dd);

/* ---- batches ------------------------------------------------------------------------------ */

/* Deferred unmaps a batch holds before it flushes by itself: a NAPI poll's rx budget and tx
 * completions (64 + 64) and more, so a poll never waits twice. */
#define DG_DMA_BATCH_MAX 256
/* Ascending pieces of a batch (a poll's reaps) its end puts in order without a sort. */
#define DG_DMA_BATCH_PIECES 8

/*
 * A batch of unmaps sharing one invalidation wait (a NAPI poll, an NVMe completion pass).
 * Embedded by the caller (on its stack); the fields are the library's, valid between
 * dg_dma_batch_begin() and dg_dma_batch_end(), and used by one thread.
 */
struct dg_dma_batch {
	struct dg_dma_dev *dev;	    /* device of every unmap in the batch */
	uint32_t n;		    /* deferred entries in ent[] */
	uint32_t flushes;	    /* invalidation waits this batch has done so far */
	int status;		    /* first error of an early flush, returned by end */
	uint32_t nsub;		    /* ent[0..nsub) are invalidated already (private) */
	uint64_t seq;		    /* the invalidation to wait for, 0: none (private) */
	struct dg_pt_gather gather; /* hull and table pages of the unmaps */
	/* ent[0..nsub) is streaming unmaps only, in npieces ascending pieces starting at
	 * piece[] (0: not so, or not known) (private) */
	uint32_t npieces;
	uint32_t piece[DG_DMA_BATCH_PIECES];
	/* ent[run_first[j], + run_len[j]) for j < nruns: streaming unmaps of adjacent ascending
	 * IOVAs (a bulk unmap of a ring's reap), in entry order, so the batch end takes each as
	 * one range without reading its entries (private) */
	uint32_t nruns;
	uint32_t run_first[DG_DMA_BATCH_PIECES];
	uint32_t run_len[DG_DMA_BATCH_PIECES];
	uint32_t run_clear; /* bit j: run j is a stream's, cleared through its kept table when
			     * the batch is submitted; only its first and last entries are
			     * written (the others follow from them: adjacent granules of one
			     * chunk), the library writes them when it needs them (private) */
	struct {
		uint64_t addr;	/* IOVA (or shadow address) to give back after the wait */
		uint64_t size;	/* its size; low bits: DMA_BATCH_* kind (library private) */
		uint64_t token; /* the IOVA allocator's token of the range (library private) */
	} ent[DG_DMA_BATCH_MAX];
};

/* Start a batch of unmaps on @dd. Until its end the device is not idle (policy switches and
 * destroy say -EBUSY): every begin needs its end. */
DG_EXPORT void dg_dma_batch_begin(struct dg_dma_dev *dd, struct dg_dma_batch *b);

/*
 * Start the invalidation of every unmap the batch holds so far, without waiting for it: the
 * wait (and the return of IOVAs and table pages) stays with dg_dma_batch_end(). A driver
 * submits right after its unmaps, does work that does not need them complete (maps its rx
 * refills from other buffers, rings the doorbell) and by the end the devices have usually
 * acknowledged: the wait costs nothing. The buffers are protected only once the end returns;
 * touch them after that, as without this call. Unmaps may follow (they wait at the end too).
 * Errors: -EINVAL not begun; the invalidation errors of the end (then the end reports them
 * too and handles the buffers as it does on a timeout).
 */
DG_EXPORT int dg_dma_batch_submit(struct dg_dma_batch *b);

/*
 * True when dg_dma_batch_end() of @b would not wait: every unmap it holds was submitted
 * (dg_dma_batch_submit) and every device has acknowledged the invalidation covering them, or
 * it holds none. False when it has unsubmitted unmaps, while a device has not acknowledged,
 * and for a batch not begun (or NULL). Checks the acknowledgements without waiting (a driver
 * with nothing else to do polls its rings again instead of blocking in the end). Called by
 * the thread using the batch; the buffers stay the device's until the end returns.
 */
DG_EXPORT bool dg_dma_batch_done(struct dg_dma_batch *b);

/*
 * Finish the batch: one invalidation (one command, or one per cluster of IOVAs far apart)
 * and one wait cover every strict unmap in it; then IOVAs and shadow slots are given back.
 * When this returns, the device can reach none of the batch's buffers. Unmaps in a batch of a
 * full ent[] flush it early (counted in flushes). Errors: -ETIMEDOUT the wait timed out: the
 * buffers' translations are gone from the table but not confirmed; their IOVAs stay
 * quarantined until a later housekeeping pass confirms (the batch is empty again).
 * Either way the batch is over (begin it again to reuse it). -EINVAL: not begun.
 */
DG_EXPORT int dg_dma_batch_end(struct dg_dma_batch *b);

/* ---- streaming mappings ------------------------------------------------------------------- */

/* attrs */
#define DG_DMA_ATTR_SKIP_CPU_SYNC \
	(1u << 0) /* bounce: no copy at map or unmap (the driver syncs the part it uses, \
		     Linux's DMA_ATTR_SKIP_CPU_SYNC) */

/*
 * Map @len bytes at @buf for a transfer in direction @dir; *dma gets the address the device
 * uses. Errors (nothing mapped): -EINVAL NULL argument, len 0, unknown dir or attrs, bounce
 * buffer larger than 256 KiB; -ERANGE the buffer is beyond the device's DMA mask and the
 * policy cannot translate it (identity), or buf + len wraps; -ENOSPC no IOVA space below the
 * mask or no shadow slot (counted); -ENOMEM page-table memory.
 */
DG_EXPORT int dg_dma_map_single(struct dg_dma_dev *dd, void *buf, size_t len, enum dg_dma_dir dir,
				unsigned int attrs, uint64_t *dma);

/*
 * Unmap a mapping made by dg_dma_map_single(): the same @dma, @len and @dir. With @b (begun
 * on @dd), a strict unmap's page removal, invalidation and wait are left to
 * dg_dma_batch_end() (one page-table call per run of adjacent IOVAs, one wait for all); with
 * NULL they are done before returning. Under bounce, from-device data is copied back first.
 * Errors (nothing changed): -EINVAL @len or @dir differ from the mapping's, @b belongs to
 * another device, the mapping was made by another kind of call (page, sg, coherent);
 * -ENOENT @dma is not the address of a live mapping (never mapped, already unmapped).
 * -ETIMEDOUT: unmapped but the invalidation was not confirmed (see dg_dma_batch_end()).
 * Identity and the direct part of a window keep no per-mapping state: only arguments that
 * are invalid on their face (len 0, beyond the mask, bad dir) are refused there.
 */
DG_EXPORT int dg_dma_unmap_single(struct dg_dma_dev *dd, uint64_t dma, size_t len,
				  enum dg_dma_dir dir, unsigned int attrs, struct dg_dma_batch *b);

/*
 * Map @len bytes at @offset into the host page @page (4 KiB aligned; @offset + @len may run
 * into following pages). Errors as dg_dma_map_single(), plus -EINVAL @page not 4K aligned.
 */
DG_EXPORT int dg_dma_map_page(struct dg_dma_dev *dd, void *page, size_t offset, size_t len,
			      enum dg_dma_dir dir, unsigned int attrs, uint64_t *dma);
DG_EXPORT int dg_dma_unmap_page(struct dg_dma_dev *dd, uint64_t dma, size_t len,
				enum dg_dma_dir dir, unsigned int attrs, struct dg_dma_batch *b);

/* One entry of a scatter-gather list. */
struct dg_dma_sg {
	void *addr;	   /* in: host address of the segment */
	size_t len;	   /* in: bytes (> 0) */
	uint64_t dma_addr; /* out: DMA address of DMA segment i, for i < *nr_dma */
	size_t dma_len;	   /* out: its length; 0 for entries past *nr_dma */
};

#define DG_DMA_SG_MAX 65535 /* entries of one list */

/*
 * Map a scatter-gather list. Translated policies place the whole list in one contiguous IOVA
 * range (each segment keeps its offset in its page, segments are padded so none crosses the
 * segment boundary) and merge segments that meet on a page boundary into DMA segments of at
 * most max_seg_size; bounce copies the list into one shadow slot (at most 256 KiB in all);
 * identity gives every segment its host address. *nr_dma gets the number of DMA segments,
 * described in sg[0 .. *nr_dma - 1].dma_addr/dma_len.
 * Errors (nothing mapped): those of dg_dma_map_single(), plus -EINVAL nents 0 or above
 * DG_DMA_SG_MAX, a segment longer than max_seg_size or than the boundary allows.
 */
DG_EXPORT int dg_dma_map_sg(struct dg_dma_dev *dd, struct dg_dma_sg *sg, unsigned int nents,
			    enum dg_dma_dir dir, unsigned int attrs, unsigned int *nr_dma);

/*
 * Unmap a list mapped by dg_dma_map_sg() (the same @sg array and @nents). Errors as
 * dg_dma_unmap_single() (-EINVAL also for another nents).
 */
DG_EXPORT int dg_dma_unmap_sg(struct dg_dma_dev *dd, struct dg_dma_sg *sg, unsigned int nents,
			      enum dg_dma_dir dir, unsigned int attrs, struct dg_dma_batch *b);

/*
 * Ownership transfers inside a streaming mapping: [dma, dma + len) must lie within one live
 * mapping. for_cpu: the CPU may now read what the device wrote (bounce copies it back for
 * FROM_DEVICE and BIDIRECTIONAL mappings); for_device: the device may now read what the CPU
 * wrote (bounce copies it in for TO_DEVICE and BIDIRECTIONAL). Under the other policies memory
 * is coherent and these calls only check their arguments on their face (len 0, bad dir).
 * Errors: -EINVAL len 0, bad dir, the range leaves the mapping or @dir differs from the
 * mapping's (bounce); -ENOENT no live mapping there (bounce).
 */
DG_EXPORT int dg_dma_sync_for_cpu(struct dg_dma_dev *dd, uint64_t dma, size_t len,
				  enum dg_dma_dir dir);
DG_EXPORT int dg_dma_sync_for_device(struct dg_dma_dev *dd, uint64_t dma, size_t len,
				     enum dg_dma_dir dir);
/*
 * Whether the sync calls do anything on @dd under its current policy (Linux's dma_need_sync):
 * true under bounce, false under the coherent policies (identity, strict, lazy, window, pool)
 * and for NULL. A driver that syncs every received buffer asks once per poll and skips the
 * calls when it is false (they would only check their arguments). The answer holds while the
 * device has live mappings (a policy changes only on an idle device): ask again after an idle
 * spell.
 */
DG_EXPORT bool dg_dma_need_sync(const struct dg_dma_dev *dd);
DG_EXPORT int dg_dma_sync_sg_for_cpu(struct dg_dma_dev *dd, struct dg_dma_sg *sg,
				     unsigned int nents, enum dg_dma_dir dir);
DG_EXPORT int dg_dma_sync_sg_for_device(struct dg_dma_dev *dd, struct dg_dma_sg *sg,
					unsigned int nents, enum dg_dma_dir dir);

/* ---- bulk streaming mappings: a ring's refill and a poll's reap in one call ------------------- */

/*
 * The bulk calls (DPDK's rte_*_bulk, page_pool's bulk allocation) map or unmap @n buffers of
 * the same length and direction in one call: the arguments are checked once, the counters
 * written once, the IOVAs taken from this thread's magazine in one go, the page-table entries
 * of neighbouring IOVAs written through one lookup of their last-level table, and the unmaps
 * appended to a batch together. All or nothing: on success all @n are done; on failure the
 * error says why and no buffer of the call is mapped or unmapped (a failure found after some
 * work was done undoes that work, with an invalidation when page-table entries were written;
 * the statistics may count the undone work). Supported by identity, strict, lazy (the
 * Linux-like reference included), bounce (the slots from this thread's stack in one go, the
 * claims of one area under one lock, a batch's unmaps as one entry), window and pool (a
 * buffer of the direct region or of a pool takes its fixed address and its unmap does
 * nothing, as in the single calls; the others are mapped one by one as strict and unmapped
 * by strict's bulk claim pass, all claimed before any is unmapped).
 */
#define DG_DMA_BULK_MAX DG_DMA_BATCH_MAX /* buffers of one bulk call at most */

/*
 * dg_dma_map_single() of bufs[0..n) (@len bytes each, @dir, @attrs); dma[i] gets the address
 * of bufs[i]. Errors (nothing mapped): -EINVAL NULL argument or buffer, n 0 or above
 * DG_DMA_BULK_MAX, len 0, unknown dir or attrs, len above 256 KiB (bounce); -ERANGE a buffer
 * wraps or is beyond the mask (identity); -ENOSPC no IOVA space (no shadow slots, bounce) for
 * all of them; -ENOMEM.
 */
DG_EXPORT int dg_dma_map_bulk(struct dg_dma_dev *dd, void *const *bufs, unsigned int n, size_t len,
			      enum dg_dma_dir dir, unsigned int attrs, uint64_t *dma);

/*
 * dg_dma_unmap_single() of dma[0..n), mapped by dg_dma_map_single() or dg_dma_map_bulk() with
 * this @len and @dir. Every entry is checked before any is unmapped: one that is not the
 * address of a live mapping (-ENOENT, also an address twice in @dma) or was mapped with
 * another length, direction or call (-EINVAL) refuses the whole call with nothing changed.
 * With @b (begun on @dd) the unmaps join it (it is flushed first if it lacks room for all
 * @n, counted in its flushes); with NULL one invalidation and one wait cover all @n before
 * this returns. Errors (nothing changed): -EINVAL as above, NULL argument, n 0 or above
 * DG_DMA_BULK_MAX, @b of another device; -ENOENT. -ETIMEDOUT: all unmapped, the
 * invalidation not confirmed (see dg_dma_batch_end()).
 */
DG_EXPORT int dg_dma_unmap_bulk(struct dg_dma_dev *dd, const uint64_t *dma, unsigned int n,
				size_t len, enum dg_dma_dir dir, unsigned int attrs,
				struct dg_dma_batch *b);

/* ---- coherent allocations ----------------------------------------------------------------- */

/*
 * Allocate @size bytes of zeroed memory that stays mapped (device read and write) until
 * dg_dma_free_coherent(); page aligned, and the pages hold nothing else. *dma gets its DMA
 * address. Returns NULL with errno EINVAL (NULL @dd or @dma, size 0 or over 2^40), ENOSPC (no
 * IOVA space), ERANGE (identity: the memory lies beyond the device's DMA mask), ENOMEM.
 */
DG_EXPORT void *dg_dma_alloc_coherent(struct dg_dma_dev *dd, size_t size, uint64_t *dma);

/*
 * Free a coherent allocation; the device cannot reach it when this returns. Errors (nothing
 * changed): -ENOENT @dma is not a live coherent allocation; -EINVAL NULL @dd or @cpu, @size 0
 * or over 2^40, @cpu or @size differ from the allocation's.
 * -ETIMEDOUT as dg_dma_unmap_single() (the memory is then kept until confirmed).
 */
DG_EXPORT int dg_dma_free_coherent(struct dg_dma_dev *dd, void *cpu, size_t size, uint64_t dma);

/* ---- the two-step API: reserve an IOVA range, link pages into it -------------------------- */

/*
 * A reserved IOVA range (Linux's dma_iova_state). Embedded by the caller; addr and size are
 * for the caller to read. Links into the range and unlinks from it on disjoint offsets may
 * run in parallel.
 */
struct dg_dma_iova_state {
	struct dg_dma_dev *dev; /* owner */
	uint64_t addr;		/* first IOVA of the range */
	uint64_t size;		/* bytes reserved (a multiple of the granule) */
	uint64_t granule;	/* link offsets are multiples of this */
	void *links;		/* library private: one record per granule */
};

/*
 * Reserve @size bytes of contiguous IOVA space for links. Supported by strict, lazy, window
 * (on-demand part) and pool; identity reserves nothing and its links return host addresses.
 * Errors: -EINVAL size 0 or NULL state; -EOPNOTSUPP bounce (use streaming maps);
 * -ENOSPC no IOVA space; -ENOMEM.
 */
DG_EXPORT int dg_dma_iova_alloc(struct dg_dma_dev *dd, uint64_t size, struct dg_dma_iova_state *st);

/*
 * Map the pages holding [buf, buf + len) at IOVA st->addr + @offset (a multiple of the
 * granule) for @dir; *dma gets the DMA address of @buf (st->addr + offset + buf's offset in
 * its page). Usable by the device once dg_dma_iova_sync() covering it returned.
 * Errors (nothing linked): -EINVAL len 0, unaligned offset, bad dir, NULL argument;
 * -ERANGE the pages do not fit in the range; -EEXIST part of it is linked, or was unlinked
 * in a batch that has not ended yet (its pages go at the batch's end); -ENOMEM.
 */
DG_EXPORT int dg_dma_iova_link(struct dg_dma_iova_state *st, uint64_t offset, const void *buf,
			       size_t len, enum dg_dma_dir dir, uint64_t *dma);

/*
 * Make links in [offset, offset + size) usable. Links never map over a present entry and
 * invalidate any table page they replace themselves, so this only checks its arguments (kept
 * for the protocol of Linux's dma_iova_sync()). Errors: -EINVAL size 0 or no range;
 * -ERANGE outside the range.
 */
DG_EXPORT int dg_dma_iova_sync(struct dg_dma_iova_state *st, uint64_t offset, uint64_t size);

/*
 * Remove the link made at @offset with the same @len and @dir. With @b the pages are removed
 * and invalidated at dg_dma_batch_end() (the offset can be linked again only after it:
 * -EEXIST before); otherwise before returning. Ranges are reused by design, so every translated policy (lazy included)
 * invalidates here. Errors (nothing changed): -EINVAL bad offset, len or dir differs from the
 * link's, @b of another device; -ENOENT nothing linked at @offset; -ETIMEDOUT as unmap.
 */
DG_EXPORT int dg_dma_iova_unlink(struct dg_dma_iova_state *st, uint64_t offset, size_t len,
				 enum dg_dma_dir dir, struct dg_dma_batch *b);

/*
 * Bulk two-step calls (a ring's refill and reap): dg_dma_iova_link() of bufs[i] at offset
 * @offset + i * @stride for i < @n (@stride a multiple of the granule, at least the span of a
 * buffer), and dg_dma_iova_unlink() of the same offsets; @len and @dir are common. The
 * arguments and every offset's state are checked before anything changes: all or nothing, as
 * the streaming bulk calls (the slots of a ring that wraps take two calls). As for a link,
 * the device may use them once a dg_dma_iova_sync() covering them returned (one per refill).
 * Errors of link_bulk (nothing linked): those of dg_dma_iova_link(), plus -EINVAL n 0 or above
 * DG_DMA_BULK_MAX, bad stride, NULL @bufs; -ERANGE the last offset leaves the range.
 * Errors of unlink_bulk (nothing unlinked): those of dg_dma_iova_unlink() for any offset, plus
 * -EINVAL n or stride as above. With @b the unlinks join it (flushed first if it lacks room for
 * all @n); with NULL one invalidation and one wait cover them all.
 */
DG_EXPORT int dg_dma_iova_link_bulk(struct dg_dma_iova_state *st, uint64_t offset, uint64_t stride,
				    void *const *bufs, unsigned int n, size_t len,
				    enum dg_dma_dir dir, uint64_t *dma);
DG_EXPORT int dg_dma_iova_unlink_bulk(struct dg_dma_iova_state *st, uint64_t offset,
				      uint64_t stride, unsigned int n, size_t len,
				      enum dg_dma_dir dir, struct dg_dma_batch *b);

/* Give the range back. Errors: -EBUSY links remain (nothing changed); -EINVAL not allocated. */
DG_EXPORT int dg_dma_iova_free(struct dg_dma_iova_state *st);

/* ---- pools (policy pool) ------------------------------------------------------------------ */

#define DG_DMA_POOL_HUGE (1u << 0) /* 2 MiB aligned memory and IOVA: 2M IOTLB entries */

/*
 * A pool of @nbufs buffers of @buf_size bytes (rounded up to 64), mapped once for @dir for the
 * pool's whole life. Streaming maps of memory inside a pool return its fixed address and do
 * nothing else. Only under the pool policy (and identity, where a pool is plain memory).
 * Returns NULL with errno EINVAL (NULL @dd, zero sizes, buffers over 2^40 bytes, more than 2^24
 * buffers, unknown @dir or flags), EPERM (another policy), ENOSPC (no IOVA space, or 32 pools
 * already on the device), ERANGE (identity: the memory lies beyond the device's DMA mask),
 * ENOMEM.
 */
DG_EXPORT struct dg_dma_pool *dg_dma_pool_create(struct dg_dma_dev *dd, size_t buf_size,
						 uint32_t nbufs, enum dg_dma_dir dir,
						 unsigned int flags);

/* Unmap and free the pool. Errors: -EINVAL NULL @pool; -EBUSY buffers are still out (nothing
 * changed); -ETIMEDOUT the invalidation was not confirmed in time: the pool is gone, its
 * memory is freed once the device confirms (quarantine). */
DG_EXPORT int dg_dma_pool_destroy(struct dg_dma_pool *pool);

/* Take a free buffer: *buf gets its host address, *dma its DMA address. Lock-free.
 * Errors: -EINVAL a NULL argument; -ENOSPC the pool is empty. */
DG_EXPORT int dg_dma_pool_get(struct dg_dma_pool *pool, void **buf, uint64_t *dma);

/* Give a buffer back. Errors: -EINVAL NULL @pool, @buf is not a buffer of the pool or is not
 * out (a double put). */
DG_EXPORT int dg_dma_pool_put(struct dg_dma_pool *pool, void *buf);

/* ---- statistics ----------------------------------------------------------------------------- */

struct dg_dma_stats {
	enum dg_dma_policy policy; /* current policy */
	uint64_t maps;		   /* successful streaming maps (single, page, sg) */
	uint64_t unmaps;	   /* successful streaming unmaps */
	uint64_t map_bytes;	   /* bytes mapped by them */
	uint64_t sg_maps;	   /* of which scatter-gather lists */
	uint64_t live;		   /* maps - unmaps, plus coherent allocations and links live */
	uint64_t links;		   /* two-step links */
	uint64_t unlinks;
	uint64_t coherent_allocs;
	uint64_t coherent_frees;
	uint64_t batches;	/* dg_dma_batch_end() calls */
	uint64_t inval_submits; /* invalidation submissions by this device's unmaps */
	uint64_t inval_waits;	/* invalidation waits by them */
	/* Bad input and failures (each also returned as an error). */
	uint64_t err_invalid;	   /* -EINVAL: arguments wrong on their face or not matching */
	uint64_t err_range;	   /* -ERANGE */
	uint64_t err_not_mapped;   /* -ENOENT: unmap/sync/unlink of nothing mapped, double */
	uint64_t err_iova_space;   /* -ENOSPC from the IOVA allocator (exhausted or injected) */
	uint64_t err_shadow_space; /* -ENOSPC: no bounce shadow slot */
	uint64_t err_nomem;	   /* -ENOMEM */
	uint64_t err_timeout;	   /* calls that returned -ETIMEDOUT (an invalidation left
					unconfirmed): once per call however many of its waits
					timed out - a batch's early flushes are reported and
					counted by its end; housekeeping's retries count nothing.
					The waits are dg_iommu_stats.wait_timeouts */
	uint64_t err_other;	   /* -EPERM, -EBUSY, -EEXIST, -EOPNOTSUPP, ... */
	uint64_t quarantined;	   /* IOVA ranges held back after a timed-out wait, now */
	/* Exposure: what the device can reach beyond the buffers it was given. */
	bool exposes_all_memory;   /* identity: everything */
	uint64_t subpage_bytes;	   /* sum over maps of bytes in mapped pages outside the buffer */
	uint64_t subpage_max;	   /* most such bytes for one buffer */
	uint64_t persistent_bytes; /* mapped for good now: pools, window direct region, bounce
					shadow areas, coherent memory */
	/* lazy */
	uint64_t lazy_flushes;		 /* queue generations flushed */
	uint64_t lazy_timeout_flushes;	 /* ... started by the timeout */
	uint64_t lazy_full_waits;	 /* unmaps that had to wait for a flush (queue full) */
	uint64_t lazy_pending;		 /* IOVAs waiting in flush queues now */
	uint64_t lazy_window_max_ns;	 /* longest observed time from an unmap to the completion of
					the invalidation covering it (an upper bound of the time
					its stale translation stayed usable) */
	uint64_t lazy_window_max_unmaps; /* most unmaps queued (same queue) during one window */
	/* bounce */
	uint64_t bounce_copy_in;  /* bytes copied into shadow slots */
	uint64_t bounce_copy_out; /* bytes copied back */
	uint64_t bounce_zeroed;	  /* padding bytes zeroed */
	uint64_t bounce_in_use;	  /* shadow bytes held by live mappings now */
	/* window */
	uint64_t window_direct_maps;  /* maps served by the direct region */
	uint64_t window_dynamic_maps; /* maps mapped on demand in the window */
	/* pool */
	uint64_t pool_hits;	 /* streaming maps of pool memory (no work) */
	uint64_t pool_fallbacks; /* streaming maps of other memory (mapped as strict) */
};

/* A snapshot (exact when no DMA call on the device runs). Errors: -EINVAL NULL argument. */
DG_EXPORT int dg_dma_dev_stats(const struct dg_dma_dev *dd, struct dg_dma_stats *st);

/* Print the device's configuration, state and statistics. */
DG_EXPORT void dg_dma_dev_dump(const struct dg_dma_dev *dd, FILE *out);

/*
 * Check the device's invariants (idle device): every live record maps exactly what it says
 * in the page table, IOVA space and shadow areas are consistent, counters agree. Returns 0,
 * or -EUCLEAN after describing the first violation on @why (may be NULL).
 */
DG_EXPORT int dg_dma_dev_check(const struct dg_dma_dev *dd, FILE *why);

#ifdef __cplusplus
}
#endif

#endif /* DMAGUARD_DMA_H */
