/* SPDX-License-Identifier: MIT */
/*
 * bench/workloads/wl_slots.c - ring slots: how the two-step drivers (identity-2step,
 * strict-2step) place buffers in IOVA space.
 *
 * The idea of rIOMMU (ASPLOS'15) and F&S (SOSP'24), done with the two-step DMA API (Linux
 * 6.15's dma_iova_*): a device consumes a ring in order, so a driver can reserve one IOVA
 * range per ring and link each buffer into the next slot of it. No IOVA allocation and no
 * per-mapping record per I/O; the slots a poll unlinks are contiguous, so the batch end
 * invalidates them with one RANGE command and one wait; and neighbouring slots' page-table
 * entries share cache lines, so the device's IOTLB fills a line at a time.
 *
 * Slots are handed out in order (wrapping at the slot count) and each
 * driver unlinks its buffers in the order the device completes them, so a slot comes back
 * into use @nslots links after it was handed out. The workloads size @nslots so that the
 * batch that unlinked a slot has ended by then (rx: the ring plus a poll's refill; tx: the
 * outstanding sends plus a poll's worth; nvme: twice the queue depth), and the library
 * refuses a link over a slot whose unlink's batch has not ended (-EEXIST), so a mistake is a
 * counted failure, never a stale translation.
 *
 * Under identity the range reserves nothing and links return host addresses: the same driver
 * code, pass-through, which is what the two-step configurations' ratio divides by.
 */
#include "wl.h"

#include <errno.h>

int wl_slots_init(struct wl_slots *s, struct dg_dma_dev *dd, uint32_t nslots, uint64_t bytes)
{
	int e;

	s->live = false;
	s->nslots = nslots;
	s->next = 0;
	s->slot_bytes = bytes;
	if (!nslots || !bytes)
		return -EINVAL;
	e = dg_dma_iova_alloc(dd, bytes * nslots, &s->st);
	if (e)
		return e;
	if (bytes % s->st.granule) { /* slots are whole granules of the device */
		s->slot_bytes = (bytes + s->st.granule - 1) / s->st.granule * s->st.granule;
		e = dg_dma_iova_free(&s->st);
		if (!e)
			e = dg_dma_iova_alloc(dd, s->slot_bytes * nslots, &s->st);
		if (e)
			return e;
	}
	s->live = true;
	return 0;
}

int wl_slots_fini(struct wl_slots *s)
{
	int e;

	if (!s->live)
		return 0;
	e = dg_dma_iova_free(&s->st);
	if (!e)
		s->live = false;
	return e;
}

int wl_slots_link(struct wl_slots *s, void *buf, size_t len, enum dg_dma_dir dir, uint64_t *dma,
		  uint32_t *slot)
{
	uint32_t k = s->next;
	uint64_t off = (uint64_t)k * s->slot_bytes;
	int e = dg_dma_iova_link(&s->st, off, buf, len, dir, dma);

	if (!e)
		e = dg_dma_iova_sync(&s->st, off, s->slot_bytes);
	if (e)
		return e;
	s->next = k + 1 == s->nslots ? 0 : k + 1;
	*slot = k;
	return 0;
}

int wl_slots_link_bulk(struct wl_slots *s, void *const *bufs, unsigned int n, size_t len,
		       enum dg_dma_dir dir, uint64_t *dma, uint32_t *first)
{
	uint32_t k = s->next;
	unsigned int a = n;
	int e;

	if (!n || n > s->nslots)
		return -EINVAL;
	if (a > s->nslots - k)
		a = s->nslots - k; /* up to the wrap */
	e = dg_dma_iova_link_bulk(&s->st, (uint64_t)k * s->slot_bytes, s->slot_bytes, bufs, a, len,
				  dir, dma);
	if (!e)
		e = dg_dma_iova_sync(&s->st, (uint64_t)k * s->slot_bytes, a * s->slot_bytes);
	if (e)
		return e;
	if (a < n) { /* the rest from slot 0 */
		e = dg_dma_iova_link_bulk(&s->st, 0, s->slot_bytes, bufs + a, n - a, len, dir,
					  dma + a);
		if (!e)
			e = dg_dma_iova_sync(&s->st, 0, (n - a) * s->slot_bytes);
		if (e) { /* nothing stays linked (the undo waits for its own invalidation) */
			dg_dma_iova_unlink_bulk(&s->st, (uint64_t)k * s->slot_bytes, s->slot_bytes,
						a, len, dir, NULL);
			return e;
		}
	}
	*first = k;
	s->next = (uint32_t)(((uint64_t)k + n) % s->nslots);
	return 0;
}

int wl_slots_unlink_bulk(struct wl_slots *s, uint32_t first, unsigned int n, size_t len,
			 enum dg_dma_dir dir, struct dg_dma_batch *b)
{
	unsigned int a = n;
	int e;

	if (!n || n > s->nslots || first >= s->nslots)
		return -EINVAL;
	if (a > s->nslots - first)
		a = s->nslots - first;
	e = dg_dma_iova_unlink_bulk(&s->st, (uint64_t)first * s->slot_bytes, s->slot_bytes, a, len,
				    dir, b);
	if (!e && a < n)
		e = dg_dma_iova_unlink_bulk(&s->st, 0, s->slot_bytes, n - a, len, dir, b);
	return e;
}

/* Each slot compared with what it should be, in two straight runs around the wrap (no
 * per-slot wrap test, no early exit: a ring's reaps are consecutive). */
bool wl_slots_consecutive(const struct wl_slots *s, const uint32_t *slots, unsigned int n)
{
	uint32_t a = n, bad = 0;

	if (!n)
		return true;
	if (slots[0] >= s->nslots)
		return false;
	if (a > s->nslots - slots[0])
		a = s->nslots - slots[0];
	for (uint32_t i = 1; i < a; i++)
		bad |= slots[i] ^ (slots[0] + i);
	for (uint32_t i = a; i < n; i++)
		bad |= slots[i] ^ (i - a);
	return !bad;
}

int wl_slots_unlink(struct wl_slots *s, uint32_t slot, size_t len, enum dg_dma_dir dir,
		    struct dg_dma_batch *b)
{
	return dg_dma_iova_unlink(&s->st, (uint64_t)slot * s->slot_bytes, len, dir, b);
}

int wl_slots_link_sg(struct wl_slots *s, struct dg_dma_sg *sg, unsigned int nents,
		     enum dg_dma_dir dir, unsigned int *nr_dma, uint32_t *slot)
{
	uint32_t k = s->next;
	uint64_t base = (uint64_t)k * s->slot_bytes, g = s->st.granule;
	unsigned int nr = 0;
	int e = 0;

	if ((uint64_t)nents * g > s->slot_bytes)
		return -ERANGE;
	for (unsigned int i = 0; i < nents && !e; i++) {
		uint64_t a;

		e = dg_dma_iova_link(&s->st, base + i * g, sg[i].addr, sg[i].len, dir, &a);
		if (e) {
			while (i--) /* nothing stays linked (each undo waits for its own invalidation) */
				dg_dma_iova_unlink(&s->st, base + i * g, sg[i].len, dir, NULL);
			return e;
		}
		if (nr && sg[nr - 1].dma_addr + sg[nr - 1].dma_len == a) {
			sg[nr - 1].dma_len += sg[i].len;
		} else {
			sg[nr].dma_addr = a;
			sg[nr].dma_len = sg[i].len;
			nr++;
		}
	}
	e = dg_dma_iova_sync(&s->st, base, s->slot_bytes);
	if (e)
		return e;
	s->next = k + 1 == s->nslots ? 0 : k + 1;
	*slot = k;
	*nr_dma = nr;
	return 0;
}

int wl_slots_unlink_sg(struct wl_slots *s, uint32_t slot, const struct dg_dma_sg *sg,
		       unsigned int nents, enum dg_dma_dir dir, struct dg_dma_batch *b)
{
	uint64_t base = (uint64_t)slot * s->slot_bytes;
	int rc = 0;

	for (unsigned int i = 0; i < nents; i++) {
		int e = dg_dma_iova_unlink(&s->st, base + i * s->st.granule, sg[i].len, dir, b);

		if (e && !rc)
			rc = e;
	}
	return rc;
}
