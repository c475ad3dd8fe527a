/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/vhost/fake_frontend.h - an in-process vhost-user front end and virtio-net driver
 * for the back end's tests (unit, fuzz, stress): guest memory in a memfd, split rings laid out
 * at fixed guest addresses, messages built and fed through dg_vhost_handle_message(), frames
 * posted and collected the way a driver does.
 *
 * Address map (all inside one memfd of FE_MEM_SIZE bytes):
 *   gpa 0x00000.. 0x0ffff   free (a guest address below the region: no region holds it)
 *   gpa FE_GPA_BASE + ...   the region: rings of queue q at FE_RING(q), buffers at FE_BUF(i)
 * The front end's own "virtual address" of gpa g is FE_UVA_BASE + g (not a real pointer: the
 * back end must convert it through the memory table). With the IOMMU the driver uses IOVA
 * g + FE_IOVA_OFF, so a back end that mixed up address kinds would miss or fault.
 */
#ifndef DG_TEST_FAKE_FRONTEND_H
#define DG_TEST_FAKE_FRONTEND_H

#include <dmaguard/vhost.h>

#include "vhost/proto.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#define FE_MEM_SIZE (4u << 20)
#define FE_GPA_BASE 0x100000ull
#define FE_UVA_BASE 0x7f0000000000ull
#define FE_IOVA_OFF 0x40000000ull
#define FE_QSIZE    256u
#define FE_RING(q)  (FE_GPA_BASE + 0x10000ull * (q))
#define FE_BUF(i)   (FE_GPA_BASE + 0x40000ull + 0x1000ull * (i))
#define FE_NBUF	    512u /* 2 MiB of 4 KiB buffers */
#define FE_HDR	    12u

struct fe {
	dg_vhost *v;
	int memfd;
	uint8_t *mem; /* mem[0] is gpa FE_GPA_BASE */
	int sock[2];  /* back-end channel: [0] given to the back end, [1] read here */
	bool iommu;
	uint16_t avail_idx[2];
	uint16_t used_seen[2];
	uint8_t reply[DG_VHOST_REPLY_MAX];
	size_t reply_len;
};

static inline uint8_t *fe_ptr(struct fe *f, uint64_t gpa)
{
	return f->mem + (gpa - FE_GPA_BASE);
}

/* Driver-side address of guest physical @gpa. */
static inline uint64_t fe_addr(const struct fe *f, uint64_t gpa)
{
	return f->iommu ? gpa + FE_IOVA_OFF : gpa;
}

/* Send one message; returns dg_vhost_handle_message()'s result. */
static inline int fe_send(struct fe *f, uint32_t req, uint32_t flags, const void *payload,
			  uint32_t size, const int *fds, size_t nfds)
{
	uint8_t buf[DG_VHOST_MSG_MAX + 64];
	struct vu_hdr h = {.request = req, .flags = VU_VERSION | flags, .size = size};

	memcpy(buf, &h, sizeof(h));
	if (size)
		memcpy(buf + sizeof(h), payload, size);
	return dg_vhost_handle_message(f->v, buf, sizeof(h) + size, fds, nfds, f->reply,
				       &f->reply_len);
}

/* The u64 of the last reply, or UINT64_MAX if there was none. */
static inline uint64_t fe_reply_u64(const struct fe *f)
{
	uint64_t u;

	if (f->reply_len != VU_HDR_SIZE + 8)
		return UINT64_MAX;
	memcpy(&u, f->reply + VU_HDR_SIZE, 8);
	return u;
}

static inline int fe_u64(struct fe *f, uint32_t req, uint64_t val)
{
	return fe_send(f, req, VU_FLAG_NEED_REPLY, &val, 8, NULL, 0);
}

static inline int fe_state(struct fe *f, uint32_t req, uint32_t index, uint32_t num)
{
	struct vu_vring_state s = {.index = index, .num = num};

	return fe_send(f, req, VU_FLAG_NEED_REPLY, &s, sizeof(s), NULL, 0);
}

static inline int fe_iotlb(struct fe *f, uint8_t type, uint64_t iova, uint64_t size, uint64_t uaddr,
			   uint8_t perm)
{
	struct vu_iotlb m = {
		.iova = iova, .size = size, .uaddr = uaddr, .perm = perm, .type = type};

	return fe_send(f, VU_IOTLB_MSG, VU_FLAG_NEED_REPLY, &m, sizeof(m), NULL, 0);
}

/* Grant the IOMMU mapping of [gpa, gpa + len) (page granular). */
static inline int fe_map(struct fe *f, uint64_t gpa, uint64_t len, uint8_t perm)
{
	uint64_t first = gpa & ~0xfffull, last = (gpa + len - 1) | 0xfff;

	return fe_iotlb(f, VU_IOTLB_UPDATE, first + FE_IOVA_OFF, last - first + 1,
			FE_UVA_BASE + first, perm);
}

static inline int fe_set_mem_table(struct fe *f)
{
	struct vu_memory m = {.nregions = 1};
	int fd = dup(f->memfd);

	m.regions[0] = (struct vu_region){.gpa = FE_GPA_BASE,
					  .size = FE_MEM_SIZE,
					  .uaddr = FE_UVA_BASE + FE_GPA_BASE,
					  .mmap_off = 0};
	return fe_send(f, VU_SET_MEM_TABLE, VU_FLAG_NEED_REPLY, &m, 8 + 32, &fd, 1);
}

/* Lay out and announce vring @q (no kick fd: the test polls). */
static inline int fe_setup_vring(struct fe *f, uint32_t q)
{
	uint64_t base = FE_RING(q);
	struct vu_vring_addr a = {.index = q};
	int rc = 0;

	memset(fe_ptr(f, base), 0, 0x4000);
	/* Rings are given as front-end virtual addresses, or IOVAs with the IOMMU. */
	a.desc = f->iommu ? fe_addr(f, base) : FE_UVA_BASE + base;
	a.avail = f->iommu ? fe_addr(f, base + 0x1000) : FE_UVA_BASE + base + 0x1000;
	a.used = f->iommu ? fe_addr(f, base + 0x2000) : FE_UVA_BASE + base + 0x2000;
	rc |= fe_state(f, VU_SET_VRING_NUM, q, FE_QSIZE);
	rc |= fe_state(f, VU_SET_VRING_BASE, q, 0);
	rc |= fe_send(f, VU_SET_VRING_ADDR, VU_FLAG_NEED_REPLY, &a, sizeof(a), NULL, 0);
	rc |= fe_u64(f, VU_SET_VRING_KICK, q | VU_VRING_NOFD);
	rc |= fe_u64(f, VU_SET_VRING_CALL, q | VU_VRING_NOFD);
	rc |= fe_state(f, VU_SET_VRING_ENABLE, q, 1);
	f->avail_idx[q] = 0;
	f->used_seen[q] = 0;
	return rc;
}

/* Negotiate and start both queues. Returns 0 or the first failure. */
static inline int fe_start(struct fe *f)
{
	uint64_t features = (1ull << VIRTIO_F_VERSION_1) |
			    (1ull << VHOST_USER_F_PROTOCOL_FEATURES) |
			    (1ull << VIRTIO_RING_F_INDIRECT_DESC);
	int rc, fd;

	if (f->iommu)
		features |= 1ull << VIRTIO_F_IOMMU_PLATFORM;
	if ((rc = fe_send(f, VU_GET_FEATURES, 0, NULL, 0, NULL, 0)))
		return rc;
	if ((rc = fe_send(f, VU_SET_OWNER, 0, NULL, 0, NULL, 0)))
		return rc;
	if ((rc = fe_u64(f, VU_SET_PROTOCOL_FEATURES,
			 (1ull << VU_PROTOCOL_F_REPLY_ACK) | (1ull << VU_PROTOCOL_F_BACKEND_REQ))))
		return rc;
	fd = dup(f->sock[0]);
	if ((rc = fe_send(f, VU_SET_BACKEND_REQ_FD, VU_FLAG_NEED_REPLY, NULL, 0, &fd, 1)))
		return rc;
	if ((rc = fe_u64(f, VU_SET_FEATURES, features)) || fe_reply_u64(f) != 0)
		return rc ? rc : -EINVAL;
	if ((rc = fe_set_mem_table(f)) || fe_reply_u64(f) != 0)
		return rc ? rc : -EINVAL;
	for (uint32_t q = 0; q < 2; q++)
		if ((rc = fe_setup_vring(f, q)))
			return rc;
	return 0;
}

/* A front end for a back end made from @cfg (copied; its verbose is forced quiet). */
static inline int fe_init_cfg(struct fe *f, const struct dg_vhost_config *config, bool iommu)
{
	struct dg_vhost_config cfg = *config;

	memset(f, 0, sizeof(*f));
	f->sock[0] = f->sock[1] = -1;
	cfg.verbose = -1; /* tests feed bad input on purpose: keep the log quiet */
	f->iommu = iommu;
	f->v = dg_vhost_create(&cfg);
	f->memfd = memfd_create("fe-guest", MFD_CLOEXEC);
	if (!f->v || f->memfd < 0 || ftruncate(f->memfd, FE_MEM_SIZE))
		return -errno;
	f->mem = mmap(NULL, FE_MEM_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, f->memfd, 0);
	if (f->mem == MAP_FAILED)
		return -errno;
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, f->sock))
		return -errno;
	return 0;
}

static inline int fe_init(struct fe *f, enum dg_vhost_mode mode, bool iommu)
{
	struct dg_vhost_config cfg;

	dg_vhost_config_init(&cfg);
	cfg.mode = mode;
	return fe_init_cfg(f, &cfg, iommu);
}

static inline void fe_fini(struct fe *f)
{
	dg_vhost_destroy(f->v);
	if (f->mem && f->mem != MAP_FAILED)
		munmap(f->mem, FE_MEM_SIZE);
	if (f->memfd >= 0)
		close(f->memfd);
	for (int i = 0; i < 2; i++)
		if (f->sock[i] >= 0)
			close(f->sock[i]);
}

static inline struct vring_desc *fe_desc(struct fe *f, uint32_t q)
{
	return (struct vring_desc *)(void *)fe_ptr(f, FE_RING(q));
}

/* Make descriptor @head available on queue @q. */
static inline void fe_avail(struct fe *f, uint32_t q, uint16_t head)
{
	uint8_t *avail = fe_ptr(f, FE_RING(q) + 0x1000);
	uint16_t idx = f->avail_idx[q];

	memcpy(avail + 4 + 2 * (idx % FE_QSIZE), &head, 2);
	idx++;
	__atomic_store_n((uint16_t *)(void *)(avail + 2), idx, __ATOMIC_RELEASE);
	f->avail_idx[q] = idx;
}

/* Next used element of queue @q, or false if none. */
static inline bool fe_used(struct fe *f, uint32_t q, uint32_t *id, uint32_t *len)
{
	uint8_t *used = fe_ptr(f, FE_RING(q) + 0x2000);
	uint16_t idx = __atomic_load_n((uint16_t *)(void *)(used + 2), __ATOMIC_ACQUIRE);
	struct vring_used_elem e;

	if (idx == f->used_seen[q])
		return false;
	memcpy(&e, used + 4 + 8 * (f->used_seen[q] % FE_QSIZE), sizeof(e));
	f->used_seen[q]++;
	*id = e.id;
	*len = e.len;
	return true;
}

static inline void fe_set_desc(struct fe *f, uint32_t q, uint16_t i, uint64_t gpa, uint32_t len,
			       uint16_t flags, uint16_t next)
{
	struct vring_desc d = {.addr = fe_addr(f, gpa), .len = len, .flags = flags, .next = next};

	memcpy(&fe_desc(f, q)[i], &d, sizeof(d));
}

/* Transmit @frame from buffer slot @slot through descriptor @slot of the transmit queue. */
static inline void fe_tx(struct fe *f, uint16_t slot, const void *frame, uint32_t len)
{
	uint8_t *b = fe_ptr(f, FE_BUF(slot));

	memset(b, 0, FE_HDR);
	memcpy(b + FE_HDR, frame, len);
	fe_set_desc(f, 1, slot, FE_BUF(slot), FE_HDR + len, 0, 0);
	fe_avail(f, 1, slot);
}

/* Post receive buffer slot @slot (2 KiB) through descriptor @slot of the receive queue. */
static inline void fe_rx_post(struct fe *f, uint16_t slot)
{
	fe_set_desc(f, 0, slot, FE_BUF(256 + slot), 2048, VRING_DESC_F_WRITE, 0);
	fe_avail(f, 0, slot);
}

/* Read one message the back end sent on its channel (non-blocking); false if none. */
static inline bool fe_backend_msg(struct fe *f, struct vu_iotlb *m)
{
	uint8_t buf[VU_HDR_SIZE + sizeof(*m)];

	if (recv(f->sock[1], buf, sizeof(buf), MSG_DONTWAIT) != (ssize_t)sizeof(buf))
		return false;
	memcpy(m, buf + VU_HDR_SIZE, sizeof(*m));
	return true;
}

static inline uint16_t fe_csum(const uint8_t *p, size_t len)
{
	uint32_t s = 0;

	for (size_t i = 0; i + 1 < len; i += 2)
		s += (uint32_t)(p[i] << 8 | p[i + 1]);
	if (len & 1)
		s += (uint32_t)p[len - 1] << 8;
	while (s >> 16)
		s = (s & 0xffff) + (s >> 16);
	return (uint16_t)~s;
}

/* An ICMP echo request 10.0.0.2 -> @dst with @plen payload bytes; returns the frame length. */
static inline size_t fe_make_ping(uint8_t *fr, uint32_t dst, uint16_t seq, size_t plen)
{
	static const uint8_t us[6] = {0x52, 0x54, 0, 0x12, 0x34, 0x56};
	size_t tot = 20 + 8 + plen;
	uint8_t *ip = fr + 14, *icmp = ip + 20;

	memset(fr, 0, 14 + tot);
	memset(fr, 0xff, 6);
	memcpy(fr + 6, us, 6);
	fr[12] = 0x08;
	ip[0] = 0x45;
	ip[2] = (uint8_t)(tot >> 8);
	ip[3] = (uint8_t)tot;
	ip[6] = 0x40; /* don't fragment */
	ip[8] = 64;
	ip[9] = 1;
	ip[12] = 10, ip[13] = 0, ip[14] = 0, ip[15] = 2;
	ip[16] = (uint8_t)(dst >> 24), ip[17] = (uint8_t)(dst >> 16);
	ip[18] = (uint8_t)(dst >> 8), ip[19] = (uint8_t)dst;
	uint16_t c = fe_csum(ip, 20);
	ip[10] = (uint8_t)(c >> 8), ip[11] = (uint8_t)c;
	icmp[0] = 8;
	icmp[4] = 0x12, icmp[5] = 0x34;
	icmp[6] = (uint8_t)(seq >> 8), icmp[7] = (uint8_t)seq;
	for (size_t i = 0; i < plen; i++)
		icmp[8 + i] = (uint8_t)(i * 7 + seq);
	c = fe_csum(icmp, 8 + plen);
	icmp[2] = (uint8_t)(c >> 8), icmp[3] = (uint8_t)c;
	return 14 + tot;
}

#endif /* DG_TEST_FAKE_FRONTEND_H */
