/* SPDX-License-Identifier: MIT */
/*
 * examples/dma_driver_device.c - a driver and a device, using only the installed headers and
 * pkg-config (cc dma_driver_device.c $(pkg-config --cflags --libs dmaguard)).
 *
 * The driver creates an IOMMU, a device and its DMA state under the strict policy, allocates a
 * coherent descriptor, maps a transmit buffer, and hands both to the device thread; the device
 * reads the descriptor, DMAs the buffer, writes a completion; the driver unmaps the buffer in
 * a batch and then shows that the device can no longer reach it: its next attempt faults, and
 * the fault queue says where and why.
 */
#include <dmaguard/dev.h>
#include <dmaguard/dma.h>
#include <dmaguard/iommu.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct desc { /* lives in coherent memory, shared by driver and device */
	uint64_t buf_dma;
	uint32_t len;
	uint32_t done;
};

static struct dg_device *dev;
static uint64_t desc_dma;
static atomic_int doorbell; /* 1: a descriptor is ready; 2: completion written */

static void *device_thread(void *arg)
{
	struct desc d;
	char payload[64];

	(void)arg;
	while (atomic_load(&doorbell) != 1)
		dg_dev_quiesce(dev); /* stay a good citizen while idle */
	/* Fetch the descriptor, then the buffer it points at, through the IOMMU. */
	if (dg_dev_read(dev, desc_dma, &d, sizeof(d)) ||
	    dg_dev_read(dev, d.buf_dma, payload, d.len < sizeof(payload) ? d.len : 64))
		return NULL;
	printf("device: sent \"%.*s\"\n", (int)d.len, payload);
	d.done = 1;
	dg_dev_write(dev, desc_dma, &d, sizeof(d));
	dg_dev_offline(dev); /* done with DMA: waits no longer wait for this device */
	atomic_store(&doorbell, 2);
	return NULL;
}

int main(void)
{
	static const char msg[] = "hello through the IOMMU";
	struct dg_dma_dev_config cfg;
	struct dg_dma_batch batch;
	struct dg_dma_stats st;
	struct dg_fault flt;
	struct dg_iommu *mmu;
	struct dg_dma_dev *dd;
	struct dg_dma *dma;
	struct desc *desc;
	pthread_t thr;
	uint64_t buf_dma;
	char *buf, probe[8];
	int r;

	mmu = dg_iommu_create(NULL);
	dma = mmu ? dg_dma_create(mmu, NULL) : NULL;
	dev = mmu ? dg_device_create(mmu, 0x0100) : NULL; /* bus 1, device 0, function 0 */
	if (!dma || !dev) {
		perror("setup");
		return 1;
	}
	dg_dma_dev_config_init(&cfg);
	cfg.policy = DG_DMA_STRICT;
	cfg.flags = DG_DMA_DEV_UNTRUSTED; /* external device: strict or bounce only */
	dd = dg_dma_dev_create(dma, dev, &cfg);
	if (!dd) {
		perror("dg_dma_dev_create");
		return 1;
	}

	desc = dg_dma_alloc_coherent(dd, sizeof(*desc), &desc_dma);
	buf = malloc(4096);
	if (!desc || !buf)
		return 1;
	strcpy(buf, msg);
	r = dg_dma_map_single(dd, buf, sizeof(msg) - 1, DG_DMA_TO_DEVICE, 0, &buf_dma);
	if (r) {
		fprintf(stderr, "map: %s\n", strerror(-r));
		return 1;
	}
	printf("driver: buffer %p is DMA address %#llx for the device\n", (void *)buf,
	       (unsigned long long)buf_dma);
	desc->buf_dma = buf_dma;
	desc->len = sizeof(msg) - 1;
	pthread_create(&thr, NULL, device_thread, NULL);
	atomic_store(&doorbell, 1);
	while (atomic_load(&doorbell) != 2)
		;
	pthread_join(thr, NULL);
	printf("driver: completion %u\n", desc->done);

	/* A NAPI-style completion pass: one invalidation wait for the whole batch. */
	dg_dma_batch_begin(dd, &batch);
	r = dg_dma_unmap_single(dd, buf_dma, sizeof(msg) - 1, DG_DMA_TO_DEVICE, 0, &batch);
	if (!r)
		r = dg_dma_batch_end(&batch);
	if (r) {
		fprintf(stderr, "unmap: %s\n", strerror(-r));
		return 1;
	}
	/* A second unmap of the same buffer is refused, and nothing changes. */
	r = dg_dma_unmap_single(dd, buf_dma, sizeof(msg) - 1, DG_DMA_TO_DEVICE, 0, NULL);
	printf("driver: double unmap -> %s\n", strerror(-r));

	/* A misbehaving device retries the old address: the IOMMU refuses and records it. */
	r = dg_dev_read(dev, buf_dma, probe, sizeof(probe));
	printf("device: stale read -> %s\n", strerror(-r));
	dg_dev_offline(dev);
	while (dg_iommu_fault_pop(mmu, &flt) == 0)
		printf("fault: rid %#x iova %#llx len %llu: %s\n", flt.rid,
		       (unsigned long long)flt.iova, (unsigned long long)flt.len,
		       dg_fault_reason_name(flt.reason));

	dg_dma_dev_stats(dd, &st);
	printf("stats: %llu maps, %llu unmaps, %llu waits, %llu bad unmaps refused, "
	       "%llu bytes of other data shared the buffer's page\n",
	       (unsigned long long)st.maps, (unsigned long long)st.unmaps,
	       (unsigned long long)st.inval_waits, (unsigned long long)st.err_not_mapped,
	       (unsigned long long)st.subpage_bytes);

	dg_dma_free_coherent(dd, desc, sizeof(*desc), desc_dma);
	free(buf);
	if (dg_dma_dev_destroy(dd))
		return 1;
	dg_device_destroy(dev);
	dg_dma_destroy(dma);
	dg_iommu_destroy(mmu);
	return r == -EFAULT ? 0 : 1;
}
