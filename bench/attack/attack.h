/* SPDX-License-Identifier: MIT */
/*
 * bench/attack/attack.h - a malicious device against every protection policy (dmaguard attack).
 *
 * Each run builds a fresh machine - an IOMMU, the DMA layer with its housekeeping thread, a
 * driver arena of "kernel" memory tagged by the oracle (oracle.h), one or two devices under
 * the policy - and lets a driver do what drivers do (map, hand the DMA address to the device,
 * unmap, reuse the memory at once) while the device does what it likes with the addresses it
 * saw. Every access the device makes is judged twice:
 *  - by the IOMMU: refused (a fault errno, and then exactly one matching record must be in the
 *    fault queue: nothing dropped) or allowed;
 *  - by the oracle: did the bytes it read, or the memory its write changed, belong to data the
 *    driver gave it? If not, the access is a *breach*.
 * A breach is then checked against what the policy documents as exposed (docs/dma-api.md) and
 * what the library itself reported at run time: identity exposes all memory, window its direct
 * region, pool its pools, the translated policies the rest of a mapped buffer's pages
 * (sub-page; not the buffer itself), lazy an unmapped buffer's pages until the flush that covers it - no longer than
 * the window dg_dma_dev_stats() reports, and only that old buffer - and any policy the buffer
 * of an unmap that returned -ETIMEDOUT until it is confirmed. A breach outside all of that is
 * undocumented: the policy is VULNERABLE.
 *
 * The attacks (docs/attack.md describes each step):
 *   stale          DMA through the IOVA right after the unmap returned and the kernel reused
 *                  the memory
 *   stale-window   the same, again and again until refused, while the driver idles or keeps
 *                  mapping and unmapping (the lazy window, measured in ns and in unmaps)
 *   subpage        64 B and 2 KiB buffers with kernel data in the rest of the page: reads and
 *                  writes of the whole page and of the cells next to the buffer (Thunderclap)
 *   perm           writes to device-read-only buffers, reads of device-write-only ones (after
 *                  the kernel wrote them again: not only the device's own data)
 *   out-of-range   IOVAs just outside a mapping, straddling its end, beyond the domain,
 *                  wrapping past 2^64
 *   other-domain   a second device uses the first device's DMA and host addresses
 *   detached       a device whose DMA state was torn down, and one never attached (blocked)
 *   withheld       the device holds a translated buffer without completing; the driver times
 *                  out and unmaps; the device uses what it holds, then tries the IOVA again
 *
 * Policies: the six of dma.h plus "linux-ref" (strict as stock Linux: DG_DMA_DEV_LINUX_REFERENCE
 * on an IOMMU in its reference configuration).
 */
#ifndef DG_BENCH_ATTACK_H
#define DG_BENCH_ATTACK_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

enum atk_policy {
	ATK_POL_IDENTITY,
	ATK_POL_STRICT,
	ATK_POL_LAZY,
	ATK_POL_WINDOW,
	ATK_POL_BOUNCE,
	ATK_POL_POOL,
	ATK_POL_LINUX_REF,
	ATK_NR_POLICIES
};

enum atk_attack {
	ATK_STALE,
	ATK_STALE_WINDOW,
	ATK_SUBPAGE,
	ATK_PERM,
	ATK_OUT_OF_RANGE,
	ATK_OTHER_DOMAIN,
	ATK_DETACHED,
	ATK_WITHHELD,
	ATK_NR_ATTACKS
};

/* Why a breach is inside the policy's documented exposure. */
enum atk_doc {
	ATK_DOC_ALL_MEMORY,    /* identity: dg_dma_stats.exposes_all_memory */
	ATK_DOC_DIRECT_REGION, /* window: the direct region (persistent_bytes) */
	ATK_DOC_POOL_MEMORY,   /* pool: memory of the device's pools (persistent_bytes) */
	ATK_DOC_SUBPAGE,       /* the rest of a live mapping's pages (subpage_bytes) */
	ATK_DOC_LAZY_WINDOW,   /* lazy: the old buffer's pages, within lazy_window_max_ns */
	ATK_DOC_UNCONFIRMED,   /* an unmap that returned -ETIMEDOUT, before its confirmation */
	ATK_NR_DOCS
};

enum atk_verdict {
	ATK_PROTECTED,	/* no breach */
	ATK_DOCUMENTED, /* breaches, every one inside the documented exposure */
	ATK_VULNERABLE, /* a breach outside it */
	ATK_BROKEN,	/* a fault without its record, or a legitimate operation that failed */
};

struct atk_config {
	unsigned int iterations;  /* rounds of each attack; 0 = 8 */
	uint64_t lazy_timeout_ns; /* lazy flush timeout; 0 = the library's default (10 ms) */
	uint64_t wait_timeout_ns; /* IOMMU invalidation wait timeout; 0 = 20 ms (withheld) */
	FILE *log;		  /* one line per breach and per anomaly; NULL = quiet */
	bool virtual_clock;	  /* no housekeeping thread: time (lazy timeouts and windows)
				     moves only when the attack waits, by exactly what it waits:
				     runs on one CPU are reproducible (fuzzing, tests, dmaguard
				     attack --virtual-clock; the library's per-CPU flush queues
				     and bounce areas follow the thread's CPU) */
	bool reuse_after_timeout; /* a negligent driver: it reuses memory even when the unmap
				     said -ETIMEDOUT (shows why it must not; tests use it to
				     prove that a breach outside the documentation is caught) */
	bool iotlb_leaf_direct;	  /* the machine's devices read last-level tables directly
				     (dg_iommu_config.iotlb_leaf_direct; the bench's setting) */
};

struct atk_result {
	enum atk_policy policy;
	enum atk_attack attack;
	uint64_t attempts;		  /* accesses the malicious device made */
	uint64_t refused;		  /* ... refused by the IOMMU with a fault errno */
	uint64_t allowed;		  /* ... that reached only what the device was given */
	uint64_t breaches;		  /* ... that reached memory it was not given */
	uint64_t breach_reads;		  /* breaches by reading */
	uint64_t breach_writes;		  /* breaches by writing */
	uint64_t bytes_exposed;		  /* bytes of such memory read or changed */
	uint64_t skipped;		  /* accesses not made: pass-through to host memory
					     outside the emulated machine */
	uint64_t documented[ATK_NR_DOCS]; /* breaches inside the documented exposure, by reason */
	uint64_t undocumented;		  /* breaches outside it */
	uint64_t faults_recorded;	  /* fault records matching a refused access */
	uint64_t faults_missing;	  /* refused accesses without their record */
	uint64_t faults_unexpected;	  /* records matching no refused access */
	uint64_t fault_overflow;	  /* records counted as overflow by the fault queue */
	uint64_t window_ns;		  /* longest time from an unmap's return to a stale access
					     that still breached */
	uint64_t window_unmaps;		  /* most driver unmaps in between */
	bool window_open;	    /* stale accesses still breached when the attack stopped */
	uint64_t lib_window_ns;	    /* lazy: dg_dma_stats.lazy_window_max_ns at the end */
	uint64_t lib_window_unmaps; /* lazy: lazy_window_max_unmaps */
	uint64_t unmap_timeouts;    /* driver unmaps that returned -ETIMEDOUT */
	uint64_t legit_failures;    /* legitimate driver or device operations that failed */
	uint64_t elapsed_ns;	    /* wall time of the run */
	enum atk_verdict verdict;
};

/* Names ("strict", "stale-window", "documented", ...) and their parsers (-EINVAL unknown). */
const char *atk_policy_name(enum atk_policy p);
const char *atk_attack_name(enum atk_attack a);
const char *atk_doc_name(enum atk_doc d);
const char *atk_verdict_name(enum atk_verdict v);
int atk_policy_parse(const char *name, enum atk_policy *p);
int atk_attack_parse(const char *name, enum atk_attack *a);

/*
 * Run one attack against one policy on a fresh machine. Returns 0 with *res filled (the
 * verdict included), or a negative errno when the machine could not be built.
 */
int atk_run(enum atk_policy policy, enum atk_attack attack, const struct atk_config *cfg,
	    struct atk_result *res);

#endif /* DG_BENCH_ATTACK_H */
