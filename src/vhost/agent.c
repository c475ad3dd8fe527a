/* SPDX-License-Identifier: MIT */
/*
 * vhost/agent.c - the virtqueues' translation agents on the IOMMU engine (see agent.h).
 *
 * The domain is a VT-d second-stage geometry with 57 input bits and 4 KiB pages only: 4 KiB is
 * the store's granule, so each queue's IOTLB has a single level (VHOST_AGENT_CACHE_ENTRIES sets)
 * and a hit probes exactly one slot. Its page table is allocated (one empty root) but nothing is
 * ever mapped or walked. Range commands must lie inside the domain's input space; IOVAs above
 * 2^57 (possible in vhost-user, never produced by QEMU's VT-d or SMMU models) are invalidated by
 * a DOMAIN command, which empties the caches whole: correct, only slower.
 */
#include "vhost/agent.h"

#include "base/clock.h"

#include <errno.h>
#include <time.h>

int vhost_engine_init(struct vhost_engine *e, struct dg_device **dev, unsigned int n)
{
	struct dg_iommu_config cfg;
	struct dg_pt_geometry geo = {.format = DG_PT_FMT_VTD_SS,
				     .ias = 57,
				     .oas = 52,
				     .granule = VHOST_IOTLB_PAGE_SIZE,
				     .pgsize_bitmap = VHOST_IOTLB_PAGE_SIZE};
	int rc;

	dg_iommu_config_init(&cfg);
	cfg.iotlb_entries = VHOST_AGENT_CACHE_ENTRIES;
	cfg.iotlb_large_entries = 1; /* no larger page size is configured */
	cfg.walk_cache_entries = 1;  /* nothing is walked */
	cfg.fault_queue_len = 2;     /* nothing faults through the engine */
	cfg.max_devices = n;
	cfg.log = NULL; /* a wait that times out is logged by the caller */
	for (unsigned int i = 0; i < n; i++)
		dev[i] = NULL;
	e->dom = NULL;
	e->mmu = dg_iommu_create(&cfg);
	if (!e->mmu)
		return -errno;
	e->dom = dg_domain_create(e->mmu, &geo, NULL, NULL);
	if (!e->dom) {
		rc = -errno;
		goto fail;
	}
	e->in_last = (1ull << geo.ias) - 1;
	for (unsigned int i = 0; i < n; i++) {
		dev[i] = dg_device_create(e->mmu, i);
		if (!dev[i]) {
			rc = -errno;
			goto fail;
		}
		/* Offline: the attach's wait does not wait for it; it applies the context
		 * change when it first comes online. */
		if ((rc = dg_device_attach(dev[i], e->dom)))
			goto fail;
	}
	return 0;
fail:
	vhost_engine_fini(e, dev, n);
	return rc;
}

void vhost_engine_fini(struct vhost_engine *e, struct dg_device **dev, unsigned int n)
{
	for (unsigned int i = 0; i < n; i++) {
		if (dev[i])
			dg_device_destroy(dev[i]);
		dev[i] = NULL;
	}
	if (e->dom)
		(void)dg_domain_destroy(e->dom); /* no device names it any more */
	e->dom = NULL;
	if (e->mmu)
		dg_iommu_destroy(e->mmu);
	e->mmu = NULL;
}

int vhost_engine_submit(struct vhost_engine *e, uint64_t first, uint64_t last, uint64_t *seq)
{
	const uint64_t pmask = VHOST_IOTLB_PAGE_SIZE - 1;
	struct dg_inval_cmd c = {.type = DG_INVAL_DOMAIN, .domain = dg_domain_id(e->dom)};

	first &= ~pmask;
	last |= pmask;
	if (last <= e->in_last && first <= last) {
		c.type = DG_INVAL_RANGE;
		c.flags = DG_INVAL_LEAF; /* nothing is walked: no walk cache to keep or drop */
		c.iova = first;
		c.size = last - first + 1;
	}
	return dg_inval_submit(e->mmu, &c, 1, seq);
}

void vhost_engine_wait(struct vhost_engine *e, uint64_t seq, void *cookie,
		       void (*slow)(void *cookie, uint64_t seq, uint64_t waited_ns))
{
	uint64_t start = 0, report = 1000000000ull, sleep_ns = 1000;

	for (unsigned int spins = 0; !dg_inval_done(e->mmu, seq); spins++) {
		if (spins < 64) {
			dg_cpu_relax();
			continue;
		}
		uint64_t now = dg_now_ns();
		if (!start)
			start = now;
		if (now - start >= report && slow) {
			slow(cookie, seq, now - start);
			report += 1000000000ull;
		}
		struct timespec ts = {.tv_nsec = (long)sleep_ns};
		nanosleep(&ts, NULL);
		if (sleep_ns < 1000000)
			sleep_ns *= 2;
	}
}

int vhost_agent_fill(struct dg_device *dev, const struct vhost_iotlb *store, uint64_t iova,
		     unsigned int access, uint8_t **host)
{
	uint64_t page = iova & ~(VHOST_IOTLB_PAGE_SIZE - 1);
	uint64_t leaf = vhost_iotlb_lookup(store, iova >> VHOST_IOTLB_PAGE_SHIFT);
	unsigned int perm = (leaf & VHOST_IOTLB_READ ? VU_ACCESS_RO : 0) |
			    (leaf & VHOST_IOTLB_WRITE ? VU_ACCESS_WO : 0);
	uint64_t hpage = leaf & VHOST_IOTLB_ADDR_MASK;

	if (!leaf)
		return -EAGAIN;
	/*
	 * The engine's entry format (iommu/iotlb.h), written directly rather than through
	 * iotlb_insert(), which would align the host address down: a leaf's host address is the
	 * front end's page wherever the back end mapped it, not necessarily 4 KiB aligned.
	 */
	struct iotlb_ent *e = iotlb_slot(&dev->iotlb.lvl[0], iova >> VHOST_IOTLB_PAGE_SHIFT);

	/* The tag field holds the device's current cache tag (iommu/agent.c, generations). */
	e->key = page | (uint64_t)dev->ctag << IOTLB_DID_SHIFT | perm;
	e->delta = hpage - page;
	if ((perm & access) != access)
		return -EACCES;
	*host = (uint8_t *)(uintptr_t)(hpage + (iova - page));
	return 0;
}

void vhost_agents_quiesce(struct dg_device **dev, unsigned int n)
{
	for (unsigned int i = 0; i < n; i++)
		dg_dev_quiesce(dev[i]);
}

void vhost_agents_online(struct dg_device **dev, unsigned int n)
{
	for (unsigned int i = 0; i < n; i++)
		dg_dev_online(dev[i]);
}

void vhost_agents_offline(struct dg_device **dev, unsigned int n)
{
	for (unsigned int i = 0; i < n; i++)
		dg_dev_offline(dev[i]);
}
