/* SPDX-License-Identifier: MIT */
/*
 * vhost/agent.h - the back end's virtqueues as translation agents of dmaguard's IOMMU engine
 * (private).
 *
 * What is the engine's and what stays vhost's:
 *
 *   front end --UPDATE--> store (vhost/iotlb.h: radix tree of granted pages, 64-bit IOVAs)
 *                            | miss in the queue's cache: 4 dependent loads, fill
 *                            v
 *   virtqueue q = engine device q: its private IOTLB (iommu/iotlb.h) is the queue's cache,
 *                            a hit is one probe (tag, domain and permission in one XOR/AND)
 *   front end --INVALIDATE--> store leaves cleared, then one engine command (RANGE on the
 *                            back end's domain) and dg_inval_wait(): each queue's agent applies
 *                            it to its own cache at its quiescent point (the end of a burst,
 *                            dg_dev_quiesce()) or is offline (asleep in epoll, dg_dev_offline())
 *
 * The engine brings the invalidation queue, the quiescent-state acknowledgement with its
 * offline protocol (an RMW on each side, so a sleeping data path never holds up a wait and
 * catches up before its next translation), the per-agent IOTLB with precise range invalidation,
 * and lap recovery. The vhost layer keeps what an engine device cannot know: its translations
 * come from UPDATE messages, not from a page-table walk (so the store stays a vhost structure,
 * filled and emptied by messages, covering the whole 64-bit IOVA space that vhost-user allows),
 * and a miss becomes a MISS message to the front end rather than a fault record.
 *
 * One engine instance per back end: an IOMMU, one domain standing for the front end's IOVA
 * space (its id tags the cache entries; its page table stays empty and is never walked) and one
 * device per virtqueue attached to it. The data path fills a device's IOTLB directly with
 * entries in the engine's format (iommu/iotlb.h: key = page | domain << 2 | perm, host =
 * iova + delta): that is the one place this layer uses the engine's private layout (struct
 * dg_device from iommu/iommu_internal.h), because an IOTLB filled by translation completions
 * (ATS-style) rather than by walks has no public entry point.
 *
 * Threading: the control thread calls vhost_engine_*(); each device's cache is read and written
 * only by the thread running the data path (the worker of dg_vhost_run(), or the caller of
 * dg_vhost_poll()), between vhost_agent_online() and vhost_agent_offline().
 */
#ifndef DG_VHOST_AGENT_H
#define DG_VHOST_AGENT_H

#include "iommu/iommu_internal.h"
#include "vhost/iotlb.h"
#include "vhost/proto.h"

#include <stdint.h>

static_assert(VU_ACCESS_RO == DG_ACCESS_READ && VU_ACCESS_WO == DG_ACCESS_WRITE,
	      "vhost-user access bits are the engine's");

/* Entries in each queue's cache (direct-mapped by IOVA page; 16 KiB per queue). */
#define VHOST_AGENT_CACHE_ENTRIES 1024

struct vhost_engine {
	struct dg_iommu *mmu;
	struct dg_domain *dom; /* the front end's IOVA space; its page table stays empty */
	uint64_t in_last;      /* last IOVA a RANGE command can name; above: a DOMAIN command */
};

/*
 * Create the engine with @n agents (devices 0..n-1, attached to the domain, offline) into
 * @dev[]. 0 or -ENOMEM/-EINVAL (errno of the engine's constructors).
 */
int vhost_engine_init(struct vhost_engine *e, struct dg_device **dev, unsigned int n);

/* Destroy the agents and the engine (no data path may run). */
void vhost_engine_fini(struct vhost_engine *e, struct dg_device **dev, unsigned int n);

/*
 * Queue the invalidation of IOVAs [first, last] (widened to whole pages; a range reaching past
 * the domain's input space, or @last == UINT64_MAX, empties the caches whole) and return in
 * *@seq what dg_inval_wait() needs. 0 or an errno of dg_inval_submit().
 */
int vhost_engine_submit(struct vhost_engine *e, uint64_t first, uint64_t last, uint64_t *seq);

/*
 * Wait until every agent has acknowledged @seq (applied it at a quiescent point) or is offline.
 * Unlike dg_inval_wait(), which spins and yields for up to its timeout, this polls
 * dg_inval_done() with a growing sleep (up to 1 ms) after a short spin: the thread it waits for
 * may need the CPU (two cores shared with a TCG guest), and an invalidation must never be
 * acknowledged before it completes, so there is no timeout: @slow(@cookie, seq, waited) is
 * called about once a second while it lasts.
 */
void vhost_engine_wait(struct vhost_engine *e, uint64_t seq, void *cookie,
		       void (*slow)(void *cookie, uint64_t seq, uint64_t waited_ns));

/*
 * The queue's cache, hit path: the host address of @iova for @access (VU_ACCESS_RO/WO), or
 * NULL when the cache does not hold the page with that permission.
 */
static dg_always_inline uint8_t *vhost_agent_probe(const struct dg_device *dev, uint64_t iova,
						   unsigned int access)
{
	const struct iotlb_ent *e =
		iotlb_probe(&dev->iotlb.lvl[0], iova, dev->tag, ~IOTLB_PERM_MASK | access);

	return e ? (uint8_t *)(uintptr_t)(iova + e->delta) : NULL;
}

/*
 * Miss path: look the page of @iova up in @store and put what was granted into the queue's
 * cache. Returns 0 with *@host set, -EAGAIN (nothing granted: the front end must be asked with
 * a MISS) or -EACCES (granted without @access).
 */
int vhost_agent_fill(struct dg_device *dev, const struct vhost_iotlb *store, uint64_t iova,
		     unsigned int access, uint8_t **host);

/* Data-path thread: quiescent point, going online (catching up) and offline (see dev.h). */
void vhost_agents_quiesce(struct dg_device **dev, unsigned int n);
void vhost_agents_online(struct dg_device **dev, unsigned int n);
void vhost_agents_offline(struct dg_device **dev, unsigned int n);

#endif /* DG_VHOST_AGENT_H */
