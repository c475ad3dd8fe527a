/* SPDX-License-Identifier: MIT */
/*
 * dmaguard/iommu.h - the IOMMU engine, CPU side: devices, domains, contexts, the invalidation
 * queue, the fault queue and statistics. The device side (what a device thread calls for a
 * DMA) is in dmaguard/dev.h. docs/iommu.md explains the design in full.
 *
 *  device (requester ID) --context entry--> blocked | pass-through | domain (one dg_pt)
 *
 * Every device is one translation agent with a private IOTLB and page-walk cache that only
 * its own thread touches. The CPU side never writes those caches: it queues invalidation
 * commands, and each agent applies them to its own caches at its quiescent points and then
 * acknowledges the sequence number (quiescent-state-based reclamation applied to IOTLBs).
 * dg_inval_wait(seq) returns when every online agent has acknowledged @seq; an offline agent
 * never blocks a wait and catches up before its next translation. After dg_inval_wait()
 * returns for an unmap, no device access can reach the unmapped memory.
 *
 * Concurrency contract (CPU side): every function here may be called from any thread
 * concurrently, except the *_destroy() functions, which need the object to be unused.
 * dg_domain_map()/dg_domain_unmap() follow dg_pt_map()/dg_pt_unmap(): disjoint ranges only.
 */
#ifndef DMAGUARD_IOMMU_H
#define DMAGUARD_IOMMU_H

#include <dmaguard/common.h>
#include <dmaguard/pt.h>

#ifdef __cplusplus
extern "C" {
#endif

struct dg_iommu;
struct dg_domain;
struct dg_device;

/*
 * Configuration. Zero in a numeric field selects its default; dg_iommu_config_init() fills
 * every default explicitly (and log = stderr).
 */
struct dg_iommu_config {
	uint32_t iotlb_entries;		 /* per device, smallest page size; power of two; 1024 */
	uint32_t iotlb_large_entries;	 /* per device and larger page size; power of two; 64 */
	uint32_t walk_cache_entries;	 /* per device and table depth; power of two; 64 */
	uint32_t inval_queue_len;	 /* command slots; power of two, 16..2^20; 1024 */
	uint32_t fault_queue_len;	 /* fault records; power of two, 2..2^20; 256 */
	uint32_t max_devices;		 /* devices alive at once, 1..65536; 256 */
	uint64_t wait_timeout_ns;	 /* dg_inval_wait() gives up after this; 1 s */
	uint64_t inval_domain_threshold; /* a range invalidation larger than this many bytes
					    becomes one whole-domain command; 64 MiB */
	bool reference; /* Linux-like reference configuration: one mutex serializes the queue
			   and dg_iommu_flush_gather() waits once per page */
	bool no_iotlb_prefetch; /* false (default): a miss that reads a last-level entry also
				   fills the IOTLB with the other valid entries of its 64-byte
				   cache line (docs/iommu.md, "Neighbour fill"); true: demand
				   fills only */
	bool iotlb_leaf_direct; /* false (default); true: a device whose walk cache knows the
				   last-level table of an access reads the access's table entry
				   there (one load) instead of caching pages of that size in its
				   IOTLB, so leaf-only invalidations have nothing to drop on it
				   (VT-d second-stage and similar formats; docs/iommu.md,
				   "Leaf-direct") */
	FILE *log;		/* timeout diagnostics are also printed here; NULL: only kept */
};

/* Fill @cfg with every default. */
DG_EXPORT void dg_iommu_config_init(struct dg_iommu_config *cfg);

/*
 * Create an IOMMU. @cfg may be NULL (defaults). Returns NULL with errno EINVAL (a field out of
 * range or not a power of two) or ENOMEM.
 */
DG_EXPORT struct dg_iommu *dg_iommu_create(const struct dg_iommu_config *cfg);

/* Destroy an IOMMU whose devices and domains have all been destroyed (asserted). */
DG_EXPORT void dg_iommu_destroy(struct dg_iommu *mmu);

/* The effective configuration. */
DG_EXPORT void dg_iommu_config(const struct dg_iommu *mmu, struct dg_iommu_config *cfg);

/* ---- domains -------------------------------------------------------------------------- */

/* Domain ids are 1..DG_DOMAIN_ID_MAX: IOTLB tags keep the id in the low bits of the page. */
#define DG_DOMAIN_ID_MAX 1023u

/*
 * Create a domain owning a new page table of geometry @geo (see dg_pt_create(); @mem and
 * @cookie are handed to it). Returns NULL with errno EINVAL (bad geometry), ENOSPC (all
 * DG_DOMAIN_ID_MAX ids in use) or ENOMEM.
 */
DG_EXPORT struct dg_domain *dg_domain_create(struct dg_iommu *mmu, const struct dg_pt_geometry *geo,
					     const struct dg_pt_mem_ops *mem, void *cookie);

/*
 * Destroy a domain and its page table. Errors (nothing changed): -EBUSY a device is still
 * attached (or its detach timed out and was not confirmed yet). The caller guarantees no
 * concurrent map, unmap or invalidation submission for this domain.
 */
DG_EXPORT int dg_domain_destroy(struct dg_domain *dom);

DG_EXPORT uint32_t dg_domain_id(const struct dg_domain *dom);
DG_EXPORT struct dg_pt *dg_domain_pt(const struct dg_domain *dom);
DG_EXPORT struct dg_iommu *dg_domain_iommu(const struct dg_domain *dom);

/*
 * dg_pt_map() on the domain's table (same arguments and errors). @gather may be NULL: then
 * table pages the map had to replace are invalidated and released before returning (and
 * -ETIMEDOUT is returned if that wait times out; the mapping itself is in place).
 */
DG_EXPORT int dg_domain_map(struct dg_domain *dom, uint64_t iova, uint64_t phys, uint64_t size,
			    unsigned int prot, struct dg_pt_gather *gather);

/*
 * dg_pt_unmap() on the domain's table (same arguments and errors). Devices may still use
 * cached translations until dg_iommu_flush_gather(), or an invalidation plus a wait covering
 * the gather, completes.
 */
DG_EXPORT int dg_domain_unmap(struct dg_domain *dom, uint64_t iova, uint64_t size,
			      struct dg_pt_gather *gather, uint64_t *unmapped);

/* ---- devices and contexts ------------------------------------------------------------- */

enum dg_ctx_mode {
	DG_CTX_BLOCKED = 0,	/* every access faults (a new device starts here) */
	DG_CTX_TRANSLATE = 1,	/* translated through a domain's page table */
	DG_CTX_PASSTHROUGH = 2, /* identity: the IOVA is the host address, no isolation */
};

/*
 * Create device @rid (requester or stream ID, unique per IOMMU) in DG_CTX_BLOCKED mode and
 * offline. Returns NULL with errno EEXIST (rid taken), ENOSPC (max_devices reached) or ENOMEM.
 */
DG_EXPORT struct dg_device *dg_device_create(struct dg_iommu *mmu, uint32_t rid);

/*
 * Destroy a device. Its context is cleared without a wait: the caller guarantees that no
 * DMA call on it is running or will run (its thread has stopped using it).
 */
DG_EXPORT void dg_device_destroy(struct dg_device *dev);

/*
 * Change the device's context entry, safely against DMA in flight: the new entry is written,
 * a context invalidation for the device is queued, and the call returns after the wait for it
 * (the device then uses the new context for every later access, and nothing it cached under
 * the old one). Attaching the domain it already has is a no-op.
 * Errors: -EINVAL @dom belongs to another IOMMU; -ETIMEDOUT the wait timed out: the new entry
 * is in place but unconfirmed, the old domain stays referenced (dg_domain_destroy() says
 * -EBUSY) until a later context change or dg_device_sync() of this device succeeds.
 */
DG_EXPORT int dg_device_attach(struct dg_device *dev, struct dg_domain *dom);
DG_EXPORT int dg_device_passthrough(struct dg_device *dev);
DG_EXPORT int dg_device_block(struct dg_device *dev);

/* Wait again for an unconfirmed context change. Errors: -ETIMEDOUT. */
DG_EXPORT int dg_device_sync(struct dg_device *dev);

DG_EXPORT enum dg_ctx_mode dg_device_mode(const struct dg_device *dev);
DG_EXPORT struct dg_domain *dg_device_domain(const struct dg_device *dev); /* NULL unless
									     translated */
DG_EXPORT uint32_t dg_device_rid(const struct dg_device *dev);
DG_EXPORT struct dg_iommu *dg_device_iommu(const struct dg_device *dev);

/* ---- invalidation queue --------------------------------------------------------------- */

enum dg_inval_type {
	DG_INVAL_RANGE = 1, /* domain, iova, size: split into naturally aligned power-of-two
			       blocks (one PAGE command each), or one DOMAIN command when size
			       exceeds the configured threshold */
	DG_INVAL_PAGE,	    /* domain, iova, size: one block; size a power of two >= the
			       domain's granule, iova aligned to it (VT-d PSI with address mask) */
	DG_INVAL_DOMAIN,    /* domain: every translation and walk-cache entry of the domain
			       (with DG_INVAL_LEAF: every translation, walk caches kept) */
	DG_INVAL_GLOBAL,    /* everything every device caches */
	DG_INVAL_DEVICE,    /* rid: that device's whole IOTLB and walk caches (device IOTLB) */
	DG_INVAL_CONTEXT,   /* rid: that device reloads its context entry and drops the rest */
};
#define DG_INVAL_NR_TYPES 7 /* index bound for statistics arrays (types are 1..6) */

/* RANGE/PAGE/DOMAIN flag: only leaf entries changed, page-walk caches may be kept. */
#define DG_INVAL_LEAF (1u << 0)

struct dg_inval_cmd {
	enum dg_inval_type type;
	unsigned int flags; /* DG_INVAL_LEAF */
	uint32_t domain;    /* RANGE, PAGE, DOMAIN: domain id */
	uint32_t rid;	    /* DEVICE, CONTEXT: requester ID */
	uint64_t iova;	    /* RANGE, PAGE */
	uint64_t size;	    /* RANGE: bytes; PAGE: the block size */
};

/*
 * Queue @n commands as one batch and return in *seq the sequence number a wait for them
 * needs. The whole batch takes one atomic add to reserve its slots (plus a short spin if the
 * queue is full), is written without a lock, and is published to the devices either by this
 * call or by the batch owner already publishing (SMMUv3-style). Commands become visible to
 * devices before this call returns.
 * Errors (nothing queued): -EINVAL n == 0, unknown type or flags, size zero, iova or size not
 * aligned to the domain's granule, PAGE block not a power of two or misaligned; -EOVERFLOW
 * iova + size wraps past 2^64; -ERANGE range outside the domain's input space; -ENOENT
 * unknown domain id; -ENODEV unknown rid; -E2BIG the batch needs more slots than the queue.
 */
DG_EXPORT int dg_inval_submit(struct dg_iommu *mmu, const struct dg_inval_cmd *cmds, size_t n,
			      uint64_t *seq);

/*
 * Wait until every command up to @seq has been acknowledged by every online device. Waits
 * coalesce: once any waiter sees seq S complete, every wait for S' <= S returns at once.
 * The caller spins (no device thread needs to be woken). Errors: -EINVAL @seq was never
 * handed out; -ETIMEDOUT not complete within wait_timeout_ns: a diagnostic naming the devices
 * that did not acknowledge and the sequence numbers goes to the log and
 * dg_iommu_last_diag(); the queue keeps working and a later wait may succeed.
 */
DG_EXPORT int dg_inval_wait(struct dg_iommu *mmu, uint64_t seq);

/* Non-blocking: has @seq completed? (What a lazy flush policy polls.) */
DG_EXPORT bool dg_inval_done(struct dg_iommu *mmu, uint64_t seq);

/*
 * Invalidate what the gather says changed in @dom, wait, then release its table pages:
 * a RANGE command (DG_INVAL_LEAF if gather->leaf_only) and one wait; in the reference
 * configuration one PAGE command and one wait per gather->pgsize step. An empty gather is a
 * no-op. On success the gather is empty again. Errors: -EINVAL @dom not of @mmu;
 * -ETIMEDOUT the wait timed out: nothing is released and the gather is unchanged, so the
 * call can be repeated; errors of dg_inval_submit().
 */
DG_EXPORT int dg_iommu_flush_gather(struct dg_iommu *mmu, struct dg_domain *dom,
				    struct dg_pt_gather *gather);

/*
 * The last timeout diagnostic, NUL-terminated in @buf (truncated to @len). Returns its full
 * length, 0 when no wait ever timed out.
 */
DG_EXPORT size_t dg_iommu_last_diag(struct dg_iommu *mmu, char *buf, size_t len);

/* ---- faults ---------------------------------------------------------------------------- */

enum dg_fault_reason {
	DG_FAULT_UNMAPPED = 1, /* no translation for the IOVA (-EFAULT) */
	DG_FAULT_PERM,	       /* the mapping lacks the permission the access needs (-EACCES) */
	DG_FAULT_RANGE,	       /* the IOVA is outside the domain's input space (-ERANGE) */
	DG_FAULT_BLOCKED,      /* the device's context blocks all DMA (-EPERM) */
	DG_FAULT_WRAP,	       /* iova + len wraps past 2^64 (-EOVERFLOW) */
};

struct dg_fault {
	uint64_t iova;	     /* first IOVA refused (the page that faulted) */
	uint64_t len;	     /* length of the access that was refused */
	uint64_t time_ns;    /* CLOCK_MONOTONIC when recorded */
	uint32_t rid;	     /* device */
	uint32_t domain;     /* domain id, 0 when not translated */
	unsigned int access; /* DG_ACCESS_* (dev.h) */
	enum dg_fault_reason reason;
};

/*
 * Pop the oldest fault record. Errors: -EAGAIN the queue is empty. Records that found the
 * queue full are counted in dg_iommu_stats.fault_overflow, never dropped silently.
 */
DG_EXPORT int dg_iommu_fault_pop(struct dg_iommu *mmu, struct dg_fault *out);

DG_EXPORT const char *dg_fault_reason_name(enum dg_fault_reason reason);

/* ---- statistics ------------------------------------------------------------------------ */

struct dg_iommu_stats {
	/* Device side, summed over every device (destroyed ones included). */
	uint64_t iotlb_hits;	  /* pages translated from the IOTLB */
	uint64_t iotlb_misses;	  /* pages that needed a table walk */
	uint64_t walks;		  /* table walks (from the root or a walk-cache entry) */
	uint64_t walk_cache_hits; /* walks that started from a walk-cache entry */
	uint64_t faults;	  /* accesses refused */
	uint64_t cmds_processed;  /* queue commands applied by devices */
	uint64_t laps;		  /* devices that fell a whole queue behind and flushed all */
	/* CPU side. */
	uint64_t inval_cmds[DG_INVAL_NR_TYPES]; /* commands queued by type (after splitting) */
	uint64_t inval_ranges;			/* RANGE requests before splitting */
	uint64_t submits;			/* dg_inval_submit() calls that queued */
	uint64_t batches;			/* publications by a batch owner */
	uint64_t batch_cmds_max;		/* most slots one publication covered */
	uint64_t waits;				/* dg_inval_wait() calls */
	uint64_t waits_coalesced;		/* ...that found their seq already complete */
	uint64_t wait_timeouts;
	uint64_t faults_recorded; /* fault records queued */
	uint64_t fault_overflow;  /* fault records that found the queue full */
	uint64_t prefetch_fills;  /* device side: IOTLB entries the neighbour fill made (not
				     misses; dg_dev_stats.prefetch_fills summed) */
};

/* A snapshot (relaxed reads; exact once the devices are quiet). */
DG_EXPORT void dg_iommu_stats(struct dg_iommu *mmu, struct dg_iommu_stats *out);

#ifdef __cplusplus
}
#endif

#endif /* DMAGUARD_IOMMU_H */
