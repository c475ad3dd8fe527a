/* SPDX-License-Identifier: MIT */
/*
 * vhost/virtq.c - translation, descriptor chains and the used ring of split virtqueues.
 *
 * Memory ordering with the driver (another process: C11 atomics on the shared words, as the
 * virtio spec's barriers require): the avail index is read with acquire before the entries it
 * covers; used entries are written before the used index is stored with release; the
 * avail flags (interrupt suppression) are read after a full fence that orders them after the
 * used index store, so a driver that re-enables interrupts and then looks at the used index
 * cannot miss an interrupt.
 */
#include "vhost/virtq.h"

#include <errno.h>
#include <string.h>

static _Atomic uint16_t *u16_at(uint8_t *base, uint64_t off)
{
	return (_Atomic uint16_t *)(void *)(base + off);
}

static unsigned int leaf_perm(uint64_t leaf)
{
	return (leaf & VHOST_IOTLB_READ ? VU_ACCESS_RO : 0) |
	       (leaf & VHOST_IOTLB_WRITE ? VU_ACCESS_WO : 0);
}

/* Append [host, host + len) to the segment list, merging with the last one if contiguous. */
static int add_seg(struct vhost_seg *seg, unsigned int max, unsigned int *nseg, unsigned int base,
		   uint8_t *host, uint64_t len)
{
	unsigned int n = *nseg;

	if (n > base && seg[n - 1].host + seg[n - 1].len == host &&
	    (uint64_t)seg[n - 1].len + len <= UINT32_MAX) {
		seg[n - 1].len += (uint32_t)len;
		return 0;
	}
	if (n >= max)
		return -E2BIG;
	seg[n].host = host;
	seg[n].len = (uint32_t)len;
	*nseg = n + 1;
	return 0;
}

/* The store without a cache (no agent): the host address of @addr, 0, -EAGAIN or -EACCES. */
static int store_xlate(const struct vhost_iotlb *t, uint64_t addr, unsigned int perm,
		       uint8_t **host)
{
	uint64_t leaf = vhost_iotlb_lookup(t, addr >> VHOST_IOTLB_PAGE_SHIFT);

	if (!leaf)
		return -EAGAIN;
	if ((leaf_perm(leaf) & perm) != perm)
		return -EACCES;
	*host = (uint8_t *)(uintptr_t)(leaf & VHOST_IOTLB_ADDR_MASK) +
		(addr & (VHOST_IOTLB_PAGE_SIZE - 1));
	return 0;
}

int vhost_xlate(const struct vhost_as *as, struct dg_device *agent, uint64_t addr, uint64_t len,
		unsigned int perm, bool ring, struct vhost_seg *seg, unsigned int max,
		unsigned int *nseg, struct vhost_fault *fault)
{
	unsigned int first = *nseg;
	int rc;

	if (len == 0)
		return 0;
	if (addr + (len - 1) < addr) {
		fault->addr = addr;
		fault->perm = perm;
		return -EFAULT;
	}
	while (len) {
		uint8_t *host;
		uint64_t room;

		if (as->iotlb) {
			uint64_t off = addr & (VHOST_IOTLB_PAGE_SIZE - 1);

			host = agent ? vhost_agent_probe(agent, addr, perm) : NULL;
			if (!host) {
				if (agent && as->fills)
					atomic_fetch_add_explicit(as->fills, 1,
								  memory_order_relaxed);
				rc = agent ? vhost_agent_fill(agent, as->iotlb, addr, perm, &host) :
					     store_xlate(as->iotlb, addr, perm, &host);
				if (rc) {
					fault->addr = addr - off;
					fault->perm = perm;
					return rc;
				}
			}
			room = VHOST_IOTLB_PAGE_SIZE - off;
		} else {
			host = ring ? vhost_memtable_uva(as->mt, addr, &room) :
				      vhost_memtable_gpa(as->mt, addr, &room);
			if (!host) {
				fault->addr = addr;
				fault->perm = perm;
				return -EFAULT;
			}
		}
		if (room > len)
			room = len;
		if (room > UINT32_MAX)
			room = UINT32_MAX;
		rc = add_seg(seg, max, nseg, first, host, room);
		if (rc)
			return rc;
		addr += room;
		len -= room;
	}
	/* Last line of defence: every byte handed out lies in the memory table. */
	for (unsigned int i = first; i < *nseg; i++) {
		if (!vhost_memtable_contains(as->mt, seg[i].host, seg[i].len)) {
			if (as->outside)
				atomic_fetch_add_explicit(as->outside, 1, memory_order_relaxed);
			return -EPERM;
		}
	}
	return 0;
}

void vhost_vq_init(struct vhost_vq *vq)
{
	vq->num = 0;
	vq->desc_addr = vq->avail_addr = vq->used_addr = 0;
	vq->addr_set = false;
	vq->enabled = false;
	vq->started = false;
	vq->indirect = false;
	vq->kick_fd = vq->call_fd = vq->err_fd = -1;
	vq->last_avail = vq->used_idx = vq->avail_idx = 0;
	vq->broken = false;
	atomic_store_explicit(&vq->ring_stale, false, memory_order_relaxed);
	vq->rings_ok = false;
	vq->desc = NULL;
	vq->avail = vq->used = NULL;
	vq->retry_ns = 0;
	vq->pending_used = 0;
	vq->kicks_off = false;
}

static int map_one(struct vhost_vq *vq, const struct vhost_as *as, uint64_t addr, uint64_t len,
		   unsigned int perm, uint64_t align, uint8_t **out, struct vhost_fault *fault)
{
	struct vhost_seg seg[1];
	unsigned int n = 0;
	int rc;

	if (addr & (align - 1))
		return -EINVAL;
	rc = vhost_xlate(as, vq->agent, addr, len, perm, true, seg, 1, &n, fault);
	if (rc == -E2BIG)
		return -EINVAL; /* not contiguous in host memory */
	if (rc)
		return rc;
	if ((uintptr_t)seg[0].host & (align - 1))
		return -EINVAL;
	*out = seg[0].host;
	return 0;
}

int vhost_vq_map_rings(struct vhost_vq *vq, const struct vhost_as *as, struct vhost_fault *fault)
{
	uint8_t *d, *a, *u;
	int rc;

	vq->rings_ok = false;
	if (!vq->addr_set || !vq->num)
		return -EINVAL;
	rc = map_one(vq, as, vq->desc_addr, vring_desc_bytes(vq->num), VU_ACCESS_RO, 16, &d, fault);
	if (!rc)
		rc = map_one(vq, as, vq->avail_addr, vring_avail_bytes(vq->num), VU_ACCESS_RO, 2,
			     &a, fault);
	if (!rc)
		rc = map_one(vq, as, vq->used_addr, vring_used_bytes(vq->num), VU_ACCESS_WO, 4, &u,
			     fault);
	if (rc)
		return rc;
	vq->desc = (struct vring_desc *)(void *)d;
	vq->avail = a;
	vq->used = u;
	vq->rings_ok = true;
	vq->avail_idx = vq->last_avail; /* new rings: read their avail index afresh */
	return 0;
}

int vhost_vq_avail(struct vhost_vq *vq)
{
	/* Acquire pairs with the driver's release (virtio_wmb) before its avail idx store. */
	uint16_t idx = atomic_load_explicit(u16_at(vq->avail, 2), memory_order_acquire);
	uint16_t n = (uint16_t)(idx - vq->last_avail);

	if (n > vq->num)
		return -EIO;
	vq->avail_idx = idx;
	return (int)n;
}

static void read_desc(struct vring_desc *d, const struct vring_desc *src)
{
	memcpy(d, src, sizeof(*d)); /* one copy: the driver may rewrite it meanwhile */
}

/* A chain the driver granted without the access it needs is consumed (and returned empty by
 * the caller): the front end said so, asking again would loop. */
static int consume_on_eacces(struct vhost_vq *vq, int rc)
{
	if (rc == -EACCES)
		vq->last_avail++;
	return rc;
}

int vhost_vq_pop(struct vhost_vq *vq, const struct vhost_as *as, struct vhost_chain *ch,
		 struct vhost_fault *fault)
{
	if (vq->avail_idx == vq->last_avail) {
		/* What was read last time is consumed: read the index again. */
		int avail = vhost_vq_avail(vq);

		if (avail <= 0)
			return avail == 0 ? 0 : -EIO;
	}

	uint16_t head =
		atomic_load_explicit(u16_at(vq->avail, 4 + 2ull * (vq->last_avail & (vq->num - 1))),
				     memory_order_relaxed);
	const struct vring_desc *table = vq->desc;
	uint32_t tsize = vq->num, count = 0;
	bool indirect = false;
	uint16_t idx = head;
	int rc;

	if (head >= vq->num)
		return -EINVAL;
	ch->head = head;
	ch->nseg = ch->nread = 0;
	ch->read_len = ch->write_len = 0;
	for (;;) {
		struct vring_desc d;

		if (idx >= tsize)
			return -EINVAL;
		if (++count > tsize)
			return -ELOOP;
		read_desc(&d, &table[idx]);
		if (d.flags & VRING_DESC_F_INDIRECT) {
			uint32_t n = d.len / 16;
			struct vhost_seg seg[VHOST_MAX_SEGS];
			unsigned int ns = 0;

			if (indirect || !vq->indirect || (d.flags & VRING_DESC_F_NEXT) ||
			    d.len == 0 || d.len % 16)
				return -EINVAL;
			if (n > VHOST_MAX_INDIRECT)
				return -E2BIG;
			rc = vhost_xlate(as, vq->agent, d.addr, d.len, VU_ACCESS_RO, false, seg,
					 VHOST_MAX_SEGS, &ns, fault);
			if (rc)
				return consume_on_eacces(vq, rc);
			vhost_segs_read(seg, ns, 0, vq->ind, d.len);
			table = vq->ind;
			tsize = n;
			indirect = true;
			idx = 0;
			count = 0;
			continue;
		}
		if (d.flags & VRING_DESC_F_WRITE) {
			rc = vhost_xlate(as, vq->agent, d.addr, d.len, VU_ACCESS_WO, false, ch->seg,
					 VHOST_MAX_SEGS, &ch->nseg, fault);
			ch->write_len += d.len;
		} else {
			if (ch->nseg != ch->nread)
				return -EINVAL; /* readable after writable */
			rc = vhost_xlate(as, vq->agent, d.addr, d.len, VU_ACCESS_RO, false, ch->seg,
					 VHOST_MAX_SEGS, &ch->nseg, fault);
			ch->nread = ch->nseg;
			ch->read_len += d.len;
		}
		if (rc)
			return consume_on_eacces(vq, rc);
		if (!(d.flags & VRING_DESC_F_NEXT))
			break;
		idx = d.next;
	}
	vq->last_avail++;
	return 1;
}

void vhost_vq_push(struct vhost_vq *vq, uint16_t head, uint32_t len)
{
	uint64_t off = 4 + 8ull * (vq->used_idx & (vq->num - 1));
	struct vring_used_elem e = {.id = head, .len = len};

	memcpy(vq->used + off, &e, sizeof(e));
	vq->used_idx++;
	vq->pending_used++;
}

bool vhost_vq_publish(struct vhost_vq *vq)
{
	if (!vq->pending_used)
		return false;
	vq->pending_used = 0;
	/* Release pairs with the driver's read barrier after it loads the used idx. */
	atomic_store_explicit(u16_at(vq->used, 2), vq->used_idx, memory_order_release);
	/* Full fence: the idx store above before the flags load below (see preamble). */
	atomic_thread_fence(memory_order_seq_cst);
	uint16_t flags = atomic_load_explicit(u16_at(vq->avail, 0), memory_order_relaxed);
	return !(flags & VRING_AVAIL_F_NO_INTERRUPT);
}

void vhost_vq_kicks_off(struct vhost_vq *vq)
{
	if (vq->kicks_off)
		return;
	/* Relaxed: a hint; a kick the driver sends anyway is harmless. */
	atomic_store_explicit(u16_at(vq->used, 0), VRING_USED_F_NO_NOTIFY, memory_order_relaxed);
	vq->kicks_off = true;
}

bool vhost_vq_kicks_on(struct vhost_vq *vq)
{
	atomic_store_explicit(u16_at(vq->used, 0), 0, memory_order_relaxed);
	vq->kicks_off = false;
	/* Full fence: the flag store before the avail index load below; pairs with the driver's
	 * barrier between its avail index store and its read of the used flags, so either it
	 * sees kicks enabled and kicks, or we see its entries. */
	atomic_thread_fence(memory_order_seq_cst);
	return vhost_vq_avail(vq) != 0;
}

/* Copy between a flat buffer and a segment list from byte @off on: out of the segments into
 * @out, or (@out NULL) from @in into the segments. Returns the bytes copied (short if the
 * segments end first). */
static uint64_t segs_copy(const struct vhost_seg *seg, unsigned int n, uint64_t off, uint8_t *out,
			  const uint8_t *in, uint64_t len)
{
	uint64_t done = 0;

	for (unsigned int i = 0; i < n && done < len; i++) {
		if (off >= seg[i].len) {
			off -= seg[i].len;
			continue;
		}
		uint64_t c = seg[i].len - off;
		if (c > len - done)
			c = len - done;
		if (out)
			memcpy(out + done, seg[i].host + off, c);
		else
			memcpy(seg[i].host + off, in + done, c);
		done += c;
		off = 0;
	}
	return done;
}

uint64_t vhost_segs_read(const struct vhost_seg *seg, unsigned int n, uint64_t off, void *dst,
			 uint64_t len)
{
	return segs_copy(seg, n, off, dst, NULL, len);
}

uint64_t vhost_segs_write(const struct vhost_seg *seg, unsigned int n, uint64_t off,
			  const void *src, uint64_t len)
{
	return segs_copy(seg, n, off, NULL, src, len);
}
