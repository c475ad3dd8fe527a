/* SPDX-License-Identifier: MIT */
/*
 * vhost/dev.c - the vhost-user control plane: one message in, at most one reply out.
 *
 * dg_vhost_handle_message() is the whole protocol and knows nothing of sockets, so the server,
 * the fuzz harness and in-process front ends drive the same code. Each request is checked
 * before anything changes: payload size exact for its type, the fds it needs and no others
 * (extras are closed), indexes in range; a request that fails its checks changes nothing and is
 * refused (a non-zero u64 when the front end asked for a reply with need_reply, or for an IOTLB
 * message, which always gets one). A message that cannot be parsed at all, or a bad request
 * whose reply carries data (GET_*: a refusal would leave the front end waiting), returns -EPROTO
 * and the server disconnects.
 *
 * Offered: VERSION_1, IOMMU_PLATFORM (cfg.iommu), INDIRECT_DESC, PROTOCOL_FEATURES; protocol
 * features REPLY_ACK and BACKEND_REQ (what QEMU requires for the IOMMU). Not offered, so their
 * messages are refused: MQ, logging (live migration), CONFIG, in-band notifications, memory
 * slots, packed rings, event indexes, mergeable receive buffers, offloads.
 *
 * IOTLB: an UPDATE must be 4 KiB aligned (QEMU's are: it sends whole guest IOMMU pages) and lie
 * inside one memory-table region as seen by the front end (uaddr), which is what guarantees that
 * every translation lands in mapped memory. An INVALIDATE is acknowledged only after the data
 * path can no longer use what it removed (dev.h, struct vhost_sync); its uaddr and perm are
 * ignored (QEMU fills them with garbage).
 */
#include "vhost/dev.h"

#include "base/compiler.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#define OFFERED_PROTOCOL ((1ull << VU_PROTOCOL_F_REPLY_ACK) | (1ull << VU_PROTOCOL_F_BACKEND_REQ))

static uint64_t offered_features(const struct dg_vhost *v)
{
	return (1ull << VIRTIO_F_VERSION_1) | (1ull << VHOST_USER_F_PROTOCOL_FEATURES) |
	       (1ull << VIRTIO_RING_F_INDIRECT_DESC) |
	       (v->cfg.iommu ? 1ull << VIRTIO_F_IOMMU_PLATFORM : 0);
}

void vhost_log(const struct dg_vhost *v, int level, const char *fmt, ...)
{
	va_list ap;

	if (level > v->cfg.verbose)
		return;
	va_start(ap, fmt);
	if (v->cfg.verbose >= 2) { /* message traces: monotonic time, to see stalls */
		struct timespec ts;

		clock_gettime(CLOCK_MONOTONIC, &ts);
		fprintf(stderr, "[%ld.%06ld] ", (long)ts.tv_sec, ts.tv_nsec / 1000);
	}
	fprintf(stderr, "dmaguard vhost: %s", level == 0 ? "error: " : "");
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

static const char *req_name(uint32_t r)
{
	static const char *const names[] = {
		[VU_GET_FEATURES] = "GET_FEATURES",
		[VU_SET_FEATURES] = "SET_FEATURES",
		[VU_SET_OWNER] = "SET_OWNER",
		[VU_RESET_OWNER] = "RESET_OWNER",
		[VU_SET_MEM_TABLE] = "SET_MEM_TABLE",
		[VU_SET_LOG_BASE] = "SET_LOG_BASE",
		[VU_SET_LOG_FD] = "SET_LOG_FD",
		[VU_SET_VRING_NUM] = "SET_VRING_NUM",
		[VU_SET_VRING_ADDR] = "SET_VRING_ADDR",
		[VU_SET_VRING_BASE] = "SET_VRING_BASE",
		[VU_GET_VRING_BASE] = "GET_VRING_BASE",
		[VU_SET_VRING_KICK] = "SET_VRING_KICK",
		[VU_SET_VRING_CALL] = "SET_VRING_CALL",
		[VU_SET_VRING_ERR] = "SET_VRING_ERR",
		[VU_GET_PROTOCOL_FEATURES] = "GET_PROTOCOL_FEATURES",
		[VU_SET_PROTOCOL_FEATURES] = "SET_PROTOCOL_FEATURES",
		[VU_GET_QUEUE_NUM] = "GET_QUEUE_NUM",
		[VU_SET_VRING_ENABLE] = "SET_VRING_ENABLE",
		[VU_SEND_RARP] = "SEND_RARP",
		[VU_NET_SET_MTU] = "NET_SET_MTU",
		[VU_SET_BACKEND_REQ_FD] = "SET_BACKEND_REQ_FD",
		[VU_IOTLB_MSG] = "IOTLB_MSG",
		[VU_SET_VRING_ENDIAN] = "SET_VRING_ENDIAN",
		[VU_GET_CONFIG] = "GET_CONFIG",
		[VU_SET_CONFIG] = "SET_CONFIG",
		[VU_RESET_DEVICE] = "RESET_DEVICE",
	};

	return r < DG_ARRAY_SIZE(names) && names[r] ? names[r] : "unknown";
}

/* ---- synchronisation with the data path (see dev.h) ---- */

static void wake_worker(struct dg_vhost *v)
{
	uint64_t one = 1;

	if (v->sync.worker)
		(void)!write(v->sync.wake_fd, &one, sizeof(one));
}

void vhost_sync_pause(struct dg_vhost *v)
{
	if (!v->sync.worker)
		return;
	pthread_mutex_lock(&v->sync.lock);
	/* Release pairs with the acquire in the data path's quiescent point. */
	atomic_store_explicit(&v->sync.pause_req, true, memory_order_release);
	wake_worker(v);
	while (!v->sync.parked)
		pthread_cond_wait(&v->sync.cond, &v->sync.lock);
	pthread_mutex_unlock(&v->sync.lock);
}

void vhost_sync_resume(struct dg_vhost *v)
{
	if (!v->sync.worker)
		return;
	pthread_mutex_lock(&v->sync.lock);
	atomic_store_explicit(&v->sync.pause_req, false, memory_order_relaxed); /* under lock */
	pthread_cond_broadcast(&v->sync.cond);
	pthread_mutex_unlock(&v->sync.lock);
	wake_worker(v); /* the state changed: look at the queues again */
}

static bool ring_overlaps(const struct vhost_vq *q, uint64_t first, uint64_t last)
{
	const uint64_t a[3] = {q->desc_addr, q->avail_addr, q->used_addr};
	const uint64_t n[3] = {vring_desc_bytes(q->num), vring_avail_bytes(q->num),
			       vring_used_bytes(q->num)};

	if (!q->addr_set || !q->num)
		return false;
	for (unsigned int i = 0; i < 3; i++) {
		uint64_t rl = a[i] + (n[i] - 1);

		if (rl < a[i])
			rl = UINT64_MAX;
		if (a[i] <= last && first <= rl)
			return true;
	}
	return false;
}

static void wait_slow(void *cookie, uint64_t seq, uint64_t waited_ns)
{
	vhost_log(cookie, 1,
		  "invalidation %" PRIu64 " still waiting for the data path after %" PRIu64 " ms",
		  seq, waited_ns / 1000000);
}

/*
 * Translations of IOVAs [first, last] were removed or changed in the store: return once no
 * queue can use an old one. Rings the range overlaps are marked stale (relaxed stores) and the
 * range is recorded in inval_log and inval_gen bumped first: the engine's command is published
 * with a release store (or a release RMW on the slot of an agent the wait finds offline), and
 * the data path reads them only after its agents' acquire of that command
 * (dg_dev_quiesce()/dg_dev_online()), so it sees them before it translates anything again.
 */
static void invalidated(struct dg_vhost *v, uint64_t first, uint64_t last)
{
	uint64_t seq;
	int rc;

	for (unsigned int i = 0; i < VHOST_NR_VQ; i++)
		if (ring_overlaps(&v->vq[i], first, last))
			atomic_store_explicit(&v->vq[i].ring_stale, true, memory_order_relaxed);
	/* The control thread is the only writer of inval_gen and inval_log. */
	uint64_t g = atomic_load_explicit(&v->sync.inval_gen, memory_order_relaxed) + 1;
	struct vhost_inval_rec *r = &v->sync.inval_log[(g - 1) % VHOST_INVAL_LOG];

	atomic_store_explicit(&r->gen, 0, memory_order_relaxed);
	/* Seqlock writer without fences (TSan does not model them): the release stores of the
	 * range keep gen = 0 before them; they pair with the reader's acquire loads of the range
	 * in inval_range() (net.c), after which its second load of gen sees 0 or newer. */
	atomic_store_explicit(&r->first, first, memory_order_release);
	atomic_store_explicit(&r->last, last, memory_order_release);
	/* Release pairs with the reader's acquire load of gen: the range before the gen. */
	atomic_store_explicit(&r->gen, g, memory_order_release);
	/* Release pairs with the data path's acquire load of inval_gen: the record before it. */
	atomic_store_explicit(&v->sync.inval_gen, g, memory_order_release);
	/*
	 * Wake the data path even when it is asleep: the invalidation makes it forget its
	 * pending misses (what answered them may be gone), so a queue waiting for one must look
	 * again now, not at its resend deadline.
	 */
	wake_worker(v);
	rc = vhost_engine_submit(&v->engine, first, last, &seq);
	if (rc) { /* cannot happen: the command is built valid */
		vhost_log(v, 0, "invalidation not queued: %s", strerror(-rc));
		abort();
	}
	vhost_engine_wait(&v->engine, seq, v, wait_slow);
}

/* ---- lifetime ---- */

void dg_vhost_config_init(struct dg_vhost_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->mode = DG_VHOST_ECHO;
	cfg->ipv4 = 0x0a000001;
	cfg->iommu = true;
	cfg->gen_frame_bytes = DG_VHOST_GEN_DEFAULT;
}

static void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

dg_vhost *dg_vhost_create(const struct dg_vhost_config *cfg)
{
	static const uint8_t zero[6], def_mac[6] = {0x02, 0, 0, 0, 0, 0x01};
	struct dg_vhost *v;

	uint32_t gen_len = cfg && cfg->gen_frame_bytes ? cfg->gen_frame_bytes :
							 DG_VHOST_GEN_DEFAULT;

	if (!cfg || cfg->mode < DG_VHOST_ECHO || cfg->mode > DG_VHOST_GEN ||
	    (cfg->mode == DG_VHOST_GEN &&
	     (gen_len < DG_VHOST_GEN_MIN_BYTES || gen_len > DG_VHOST_GEN_MAX_BYTES))) {
		errno = EINVAL;
		return NULL;
	}
	v = calloc(1, sizeof(*v));
	if (!v) {
		errno = ENOMEM;
		return NULL;
	}
	v->cfg = *cfg;
	v->backend_fd = v->epoll_fd = v->stop_fd = v->report_fd = v->sync.wake_fd = -1;
	for (unsigned int i = 0; i < VHOST_NR_VQ; i++)
		vhost_vq_init(&v->vq[i]);
	memcpy(v->mac, memcmp(cfg->mac, zero, 6) ? cfg->mac : def_mac, 6);
	pthread_mutex_init(&v->sync.lock, NULL);
	pthread_cond_init(&v->sync.cond, NULL);
	if (cfg->socket_path && !(v->socket_path = strdup(cfg->socket_path)))
		goto fail;
	v->cfg.socket_path = v->socket_path;
	v->frames = calloc(VHOST_FRAMEQ, sizeof(*v->frames));
	v->txbuf = malloc(VHOST_FRAME_MAX + sizeof(struct virtio_net_hdr_v1));
	if (!v->frames || !v->txbuf || vhost_iotlb_init(&v->iotlb, 0)) {
		errno = ENOMEM;
		goto fail;
	}
	if (cfg->mode == DG_VHOST_GEN) {
		v->gen_len = gen_len;
		v->gen_tmpl = malloc(sizeof(struct virtio_net_hdr_v1) + gen_len);
		if (!v->gen_tmpl) {
			errno = ENOMEM;
			goto fail;
		}
		vhost_net_gen_template(v->gen_tmpl, gen_len, cfg->ipv4, v->mac);
	}
	int rc = vhost_engine_init(&v->engine, v->agent, VHOST_NR_VQ);
	if (rc) {
		errno = -rc;
		goto fail;
	}
	for (unsigned int i = 0; i < VHOST_NR_VQ; i++)
		v->vq[i].agent = v->agent[i];
	v->sync.wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	v->stop_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	v->report_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	v->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
	if (v->sync.wake_fd < 0 || v->stop_fd < 0 || v->report_fd < 0 || v->epoll_fd < 0)
		goto fail;
	struct epoll_event ev = {.events = EPOLLIN, .data.u32 = UINT32_MAX};
	if (epoll_ctl(v->epoll_fd, EPOLL_CTL_ADD, v->sync.wake_fd, &ev))
		goto fail;
	return v;
fail : {
	int e = errno;
	dg_vhost_destroy(v);
	errno = e;
	return NULL;
}
}

void dg_vhost_reset(dg_vhost *v)
{
	if (!v)
		return;
	vhost_sync_pause(v);
	for (unsigned int i = 0; i < VHOST_NR_VQ; i++) {
		struct vhost_vq *q = &v->vq[i];

		if (q->kick_fd >= 0 && v->epoll_fd >= 0)
			epoll_ctl(v->epoll_fd, EPOLL_CTL_DEL, q->kick_fd, NULL);
		close_fd(&q->kick_fd);
		close_fd(&q->call_fd);
		close_fd(&q->err_fd);
		vhost_vq_init(q);
	}
	close_fd(&v->backend_fd);
	vhost_memtable_unmap(&v->mt);
	vhost_iotlb_reset(&v->iotlb);
	if (v->engine.mmu)
		invalidated(v, 0, UINT64_MAX); /* the queues' caches, when they come back */
	atomic_store_explicit(&v->st.iotlb_entries, 0, memory_order_relaxed);
	v->features = v->protocol_features = 0;
	v->iommu = false;
	vhost_dp_reset(v);
	vhost_sync_resume(v);
}

void dg_vhost_destroy(dg_vhost *v)
{
	if (!v)
		return;
	dg_vhost_reset(v);
	vhost_engine_fini(&v->engine, v->agent, VHOST_NR_VQ);
	vhost_iotlb_destroy(&v->iotlb);
	close_fd(&v->sync.wake_fd);
	close_fd(&v->stop_fd);
	close_fd(&v->report_fd);
	close_fd(&v->epoll_fd);
	pthread_mutex_destroy(&v->sync.lock);
	pthread_cond_destroy(&v->sync.cond);
	free(v->frames);
	free(v->txbuf);
	free(v->gen_tmpl);
	free(v->socket_path);
	free(v);
}

/* ---- messages ---- */

struct msg_ctx {
	struct dg_vhost *v;
	const struct vu_hdr *hdr;
	const uint8_t *payload;
	int *fds; /* owned; entries set to -1 once taken */
	size_t nfds;
	uint8_t *reply;
	size_t *reply_len;
};

static void reply_data(struct msg_ctx *c, const void *data, uint32_t len)
{
	struct vu_hdr h = {
		.request = c->hdr->request, .flags = VU_VERSION | VU_FLAG_REPLY, .size = len};

	memcpy(c->reply, &h, sizeof(h));
	memcpy(c->reply + VU_HDR_SIZE, data, len);
	*c->reply_len = VU_HDR_SIZE + len;
}

static void reply_u64(struct msg_ctx *c, uint64_t val)
{
	reply_data(c, &val, sizeof(val));
}

/* A message refused: count it and tell the front end if it waits for an answer. */
static int refuse(struct msg_ctx *c, int err, const char *why)
{
	vhost_log(c->v, 0, "%s refused: %s (%s)", req_name(c->hdr->request), why, strerror(-err));
	vhost_count(&c->v->st.bad_messages, 1);
	if ((c->hdr->flags & VU_FLAG_NEED_REPLY) || c->hdr->request == VU_IOTLB_MSG)
		reply_u64(c, 1);
	return 0;
}

/* Requests whose reply carries data cannot be refused politely: disconnect. */
static int protocol_error(struct msg_ctx *c, const char *why)
{
	vhost_log(c->v, 0, "%s: %s: disconnecting", req_name(c->hdr->request), why);
	vhost_count(&c->v->st.bad_messages, 1);
	return -EPROTO;
}

static int take_fd(struct msg_ctx *c)
{
	int fd = c->fds[0];

	c->fds[0] = -1;
	return fd;
}

static struct vhost_vq *vq_of(struct msg_ctx *c, uint64_t index)
{
	return index < VHOST_NR_VQ ? &c->v->vq[index] : NULL;
}

static void start_or_stop_kick(struct dg_vhost *v, unsigned int i, int fd)
{
	struct vhost_vq *q = &v->vq[i];

	if (q->kick_fd >= 0)
		epoll_ctl(v->epoll_fd, EPOLL_CTL_DEL, q->kick_fd, NULL);
	close_fd(&q->kick_fd);
	q->kick_fd = fd;
	if (fd >= 0) {
		struct epoll_event ev = {.events = EPOLLIN, .data.u32 = i};

		if (epoll_ctl(v->epoll_fd, EPOLL_CTL_ADD, fd, &ev))
			vhost_log(v, 0, "vring %u: kick fd not pollable: %s", i, strerror(errno));
	}
}

static int handle_iotlb(struct msg_ctx *c)
{
	struct dg_vhost *v = c->v;
	struct vu_iotlb m;

	memcpy(&m, c->payload, sizeof(m));
	if (!v->mt.n)
		return refuse(c, -EINVAL, "no memory table");
	if (m.type == VU_IOTLB_UPDATE) {
		uint64_t room = 0, perm = 0, changed = 0;
		uint8_t *host;
		int rc;

		if (m.perm & VU_ACCESS_RO)
			perm |= VHOST_IOTLB_READ;
		if (m.perm & VU_ACCESS_WO)
			perm |= VHOST_IOTLB_WRITE;
		if (!perm || m.perm > VU_ACCESS_RW)
			return refuse(c, -EINVAL, "UPDATE with a bad permission");
		if (m.size == 0 || m.iova + (m.size - 1) < m.iova)
			return refuse(c, -ERANGE, "UPDATE range empty or wrapping past 2^64");
		host = vhost_memtable_uva(&v->mt, m.uaddr, &room);
		if (!host || room < m.size)
			return refuse(c, -EFAULT, "UPDATE outside the memory table");
		rc = vhost_iotlb_update(&v->iotlb, m.iova, m.size, (uintptr_t)host, perm, &changed);
		if (rc)
			return refuse(c, rc, "UPDATE not applied");
		if (changed) /* a new translation for a granted page: the old one may be cached */
			invalidated(v, m.iova, m.iova + (m.size - 1));
		vhost_log(v, 2, "iotlb update iova 0x%" PRIx64 " size 0x%" PRIx64 " perm %u",
			  m.iova, m.size, m.perm);
		vhost_count(&v->st.iotlb_updates, 1);
		atomic_store_explicit(&v->st.iotlb_entries, v->iotlb.entries, memory_order_relaxed);
		/* Release pairs with the data path's acquire of update_gen before it retries. */
		atomic_fetch_add_explicit(&v->sync.update_gen, 1, memory_order_release);
		wake_worker(v);
		reply_u64(c, 0);
		return 0;
	}
	if (m.type == VU_IOTLB_INVALIDATE) {
		uint64_t removed = 0;
		int rc = vhost_iotlb_invalidate(&v->iotlb, m.iova, m.size, &removed);

		if (rc)
			return refuse(c, rc, "INVALIDATE range empty or wrapping past 2^64");
		vhost_log(v, 2, "iotlb invalidate iova 0x%" PRIx64 " size 0x%" PRIx64 ": %" PRIu64,
			  m.iova, m.size, removed);
		invalidated(v, m.iova, m.iova + (m.size - 1));
		vhost_count(&v->st.iotlb_invalidations, 1);
		atomic_store_explicit(&v->st.iotlb_entries, v->iotlb.entries, memory_order_relaxed);
		reply_u64(c, 0);
		return 0;
	}
	return refuse(c, -EINVAL, "IOTLB message type not accepted from the front end");
}

static int handle_mem_table(struct msg_ctx *c)
{
	struct dg_vhost *v = c->v;
	struct vu_memory m = {0};
	struct vhost_memtable mt, old;
	int fds[VU_MAX_FDS];
	int rc;

	memcpy(&m, c->payload, c->hdr->size);
	if (m.nregions == 0 || m.nregions > VU_MAX_REGIONS || c->hdr->size != 8 + 32 * m.nregions)
		return refuse(c, -EINVAL, "bad region count or payload size");
	if (c->nfds != m.nregions)
		return refuse(c, -EINVAL, "one fd per region expected");
	for (size_t i = 0; i < c->nfds; i++)
		fds[i] = c->fds[i];
	rc = vhost_memtable_map(&mt, &m, fds, m.nregions);
	if (rc)
		return refuse(c, rc, "regions invalid or not mappable");
	for (unsigned int i = 0; i < m.nregions; i++)
		vhost_log(v, 1, "region %u: gpa 0x%" PRIx64 " size 0x%" PRIx64 " uaddr 0x%" PRIx64,
			  i, m.regions[i].gpa, m.regions[i].size, m.regions[i].uaddr);
	vhost_sync_pause(v);
	old = v->mt;
	v->mt = mt;
	/* Translations point into the old mappings: drop them all (the front end re-sends). */
	vhost_iotlb_reset(&v->iotlb);
	invalidated(v, 0, UINT64_MAX); /* the data path is parked offline: no wait */
	atomic_store_explicit(&v->st.iotlb_entries, 0, memory_order_relaxed);
	for (unsigned int i = 0; i < VHOST_NR_VQ; i++)
		v->vq[i].rings_ok = false;
	vhost_sync_resume(v);
	vhost_memtable_unmap(&old);
	if (c->hdr->flags & VU_FLAG_NEED_REPLY)
		reply_u64(c, 0);
	return 0;
}

/* Payload size each request must carry; -1: any (checked by its handler). */
static int expected_size(uint32_t req)
{
	switch (req) {
	case VU_GET_FEATURES:
	case VU_SET_OWNER:
	case VU_RESET_OWNER:
	case VU_RESET_DEVICE:
	case VU_GET_PROTOCOL_FEATURES:
	case VU_GET_QUEUE_NUM:
	case VU_SET_BACKEND_REQ_FD:
		return 0;
	case VU_SET_FEATURES:
	case VU_SET_PROTOCOL_FEATURES:
	case VU_SET_VRING_KICK:
	case VU_SET_VRING_CALL:
	case VU_SET_VRING_ERR:
		return 8;
	case VU_SET_VRING_NUM:
	case VU_SET_VRING_BASE:
	case VU_GET_VRING_BASE:
	case VU_SET_VRING_ENABLE:
		return (int)sizeof(struct vu_vring_state);
	case VU_SET_VRING_ADDR:
		return (int)sizeof(struct vu_vring_addr);
	case VU_IOTLB_MSG:
		return (int)sizeof(struct vu_iotlb);
	case VU_SET_MEM_TABLE:
		return -1;
	default:
		return -2; /* not supported */
	}
}

static int fds_expected(const struct msg_ctx *c)
{
	uint64_t u;

	switch (c->hdr->request) {
	case VU_SET_BACKEND_REQ_FD:
		return 1;
	case VU_SET_VRING_KICK:
	case VU_SET_VRING_CALL:
	case VU_SET_VRING_ERR:
		memcpy(&u, c->payload, 8);
		return (u & VU_VRING_NOFD) ? 0 : 1;
	case VU_SET_MEM_TABLE:
		return -1; /* checked against the region count */
	default:
		return 0;
	}
}

static bool replies_with_data(uint32_t req)
{
	return req == VU_GET_FEATURES || req == VU_GET_PROTOCOL_FEATURES ||
	       req == VU_GET_QUEUE_NUM || req == VU_GET_VRING_BASE;
}

static int dispatch(struct msg_ctx *c)
{
	struct dg_vhost *v = c->v;
	const struct vu_hdr *h = c->hdr;
	struct vu_vring_state st = {0};
	struct vhost_vq *q;
	uint64_t u = 0;

	if (h->size >= 8)
		memcpy(&u, c->payload, 8);
	memcpy(&st, c->payload, h->size >= 8 ? 8 : 0);

	switch (h->request) {
	case VU_GET_FEATURES:
		reply_u64(c, offered_features(v));
		return 0;
	case VU_SET_FEATURES:
		if (u & ~offered_features(v))
			return refuse(c, -EINVAL, "features not offered");
		vhost_sync_pause(v);
		v->features = u;
		v->iommu = !!(u & (1ull << VIRTIO_F_IOMMU_PLATFORM));
		for (unsigned int i = 0; i < VHOST_NR_VQ; i++) {
			v->vq[i].indirect = !!(u & (1ull << VIRTIO_RING_F_INDIRECT_DESC));
			v->vq[i].rings_ok = false;
		}
		vhost_sync_resume(v);
		vhost_log(v, 1, "features 0x%" PRIx64 "%s", u, v->iommu ? " (IOMMU)" : "");
		break;
	case VU_GET_PROTOCOL_FEATURES:
		reply_u64(c, OFFERED_PROTOCOL);
		return 0;
	case VU_SET_PROTOCOL_FEATURES:
		if (u & ~OFFERED_PROTOCOL)
			return refuse(c, -EINVAL, "protocol features not offered");
		v->protocol_features = u;
		break;
	case VU_GET_QUEUE_NUM:
		reply_u64(c, 1);
		return 0;
	case VU_SET_OWNER:
		break;
	case VU_RESET_OWNER:
	case VU_RESET_DEVICE: {
		uint64_t pf = v->protocol_features;
		int bfd = v->backend_fd;

		v->backend_fd = -1; /* the connection and its back-end channel stay */
		dg_vhost_reset(v);
		v->protocol_features = pf;
		v->backend_fd = bfd;
		break;
	}
	case VU_SET_MEM_TABLE:
		return handle_mem_table(c);
	case VU_SET_VRING_NUM:
		if (!(q = vq_of(c, st.index)))
			return refuse(c, -EINVAL, "no such vring");
		if (st.num == 0 || st.num > VRING_MAX_SIZE || (st.num & (st.num - 1)))
			return refuse(c, -EINVAL, "vring size not a power of two <= 32768");
		vhost_sync_pause(v);
		q->num = st.num;
		q->rings_ok = false;
		vhost_sync_resume(v);
		break;
	case VU_SET_VRING_ADDR: {
		struct vu_vring_addr a;

		memcpy(&a, c->payload, sizeof(a));
		if (!(q = vq_of(c, a.index)))
			return refuse(c, -EINVAL, "no such vring");
		vhost_sync_pause(v);
		q->desc_addr = a.desc;
		q->avail_addr = a.avail;
		q->used_addr = a.used;
		q->addr_set = true;
		q->rings_ok = false;
		q->broken = false;
		vhost_sync_resume(v);
		vhost_log(v, 1, "vring %u: desc 0x%" PRIx64 " avail 0x%" PRIx64 " used 0x%" PRIx64,
			  a.index, a.desc, a.avail, a.used);
		break;
	}
	case VU_SET_VRING_BASE:
		if (!(q = vq_of(c, st.index)))
			return refuse(c, -EINVAL, "no such vring");
		if (st.num > 0xffff)
			return refuse(c, -EINVAL, "vring base past 16 bits");
		vhost_sync_pause(v);
		q->last_avail = q->used_idx = q->avail_idx = (uint16_t)st.num;
		q->broken = false;
		vhost_sync_resume(v);
		break;
	case VU_GET_VRING_BASE: {
		if (!(q = vq_of(c, st.index)))
			return protocol_error(c, "no such vring");
		vhost_sync_pause(v);
		/* Stop the ring: no kick, no translation kept. */
		start_or_stop_kick(v, st.index, -1);
		q->rings_ok = false;
		q->retry_ns = 0;
		q->started = false;
		struct vu_vring_state r = {.index = st.index, .num = q->last_avail};
		vhost_sync_resume(v);
		vhost_log(v, 1, "vring %u stopped at %u", st.index, r.num);
		reply_data(c, &r, sizeof(r));
		return 0;
	}
	case VU_SET_VRING_KICK:
	case VU_SET_VRING_CALL:
	case VU_SET_VRING_ERR: {
		int fd;

		if (!(q = vq_of(c, u & VU_VRING_IDX_MASK)) ||
		    (u & ~(VU_VRING_IDX_MASK | VU_VRING_NOFD)))
			return refuse(c, -EINVAL, "no such vring");
		fd = (u & VU_VRING_NOFD) ? -1 : take_fd(c);
		vhost_sync_pause(v);
		if (h->request == VU_SET_VRING_KICK) {
			start_or_stop_kick(v, (unsigned int)(u & VU_VRING_IDX_MASK), fd);
			q->started = true;
			if (!(v->features & (1ull << VHOST_USER_F_PROTOCOL_FEATURES)))
				q->enabled = true;
		} else if (h->request == VU_SET_VRING_CALL) {
			close_fd(&q->call_fd);
			q->call_fd = fd;
		} else {
			close_fd(&q->err_fd);
			q->err_fd = fd;
		}
		vhost_sync_resume(v);
		break;
	}
	case VU_SET_VRING_ENABLE:
		if (!(q = vq_of(c, st.index)) || st.num > 1)
			return refuse(c, -EINVAL, "no such vring or bad state");
		vhost_sync_pause(v);
		q->enabled = st.num;
		vhost_sync_resume(v);
		vhost_log(v, 1, "vring %u %s", st.index, st.num ? "enabled" : "disabled");
		break;
	case VU_SET_BACKEND_REQ_FD:
		vhost_sync_pause(v);
		close_fd(&v->backend_fd);
		v->backend_fd = take_fd(c);
		vhost_sync_resume(v);
		break;
	case VU_IOTLB_MSG:
		return handle_iotlb(c);
	default:
		return refuse(c, -EOPNOTSUPP, "request not supported");
	}
	if (h->flags & VU_FLAG_NEED_REPLY)
		reply_u64(c, 0);
	return 0;
}

int dg_vhost_handle_message(dg_vhost *v, const void *msg, size_t len, const int *fds, size_t nfds,
			    void *reply, size_t *reply_len)
{
	int own[VU_MAX_FDS];
	struct vu_hdr h;
	int rc = 0, want, size;
	uint8_t payload[sizeof(struct vu_memory)] = {0};

	if (!v || !msg || !reply || !reply_len || (nfds && !fds)) {
		for (size_t i = 0; fds && i < nfds; i++)
			close(fds[i]);
		return -EINVAL;
	}
	*reply_len = 0;
	for (size_t i = 0; i < nfds; i++) {
		if (i < VU_MAX_FDS)
			own[i] = fds[i];
		else
			close(fds[i]);
	}
	if (nfds > VU_MAX_FDS)
		nfds = VU_MAX_FDS;

	struct msg_ctx c = {.v = v,
			    .hdr = &h,
			    .payload = payload,
			    .fds = own,
			    .nfds = nfds,
			    .reply = reply,
			    .reply_len = reply_len};

	vhost_count(&v->st.messages, 1);
	if (len < VU_HDR_SIZE) {
		vhost_log(v, 0, "message shorter than its header (%zu bytes): disconnecting", len);
		vhost_count(&v->st.bad_messages, 1);
		rc = -EPROTO;
		goto out;
	}
	memcpy(&h, msg, sizeof(h));
	vhost_log(v, 2, "<- %s (%u) flags 0x%x size %u fds %zu", req_name(h.request), h.request,
		  h.flags, h.size, nfds);
	if ((h.flags & VU_FLAG_VERSION_MASK) != VU_VERSION || (h.flags & VU_FLAG_REPLY) ||
	    h.size != len - VU_HDR_SIZE || h.size > sizeof(payload)) {
		vhost_log(v, 0, "%s: bad header (flags 0x%x, size %u for %zu bytes): disconnecting",
			  req_name(h.request), h.flags, h.size, len);
		vhost_count(&v->st.bad_messages, 1);
		rc = -EPROTO;
		goto out;
	}
	memcpy(payload, (const uint8_t *)msg + VU_HDR_SIZE, h.size);
	size = expected_size(h.request);
	if (size == -2) {
		if (replies_with_data(h.request))
			rc = protocol_error(&c, "not supported");
		else
			rc = refuse(&c, -EOPNOTSUPP, "request not supported");
		goto out;
	}
	if (size >= 0 && h.size != (uint32_t)size) {
		if (replies_with_data(h.request))
			rc = protocol_error(&c, "payload size wrong");
		else
			rc = refuse(&c, -EINVAL, "payload size wrong");
		goto out;
	}
	if (h.request == VU_SET_MEM_TABLE && h.size < 8) {
		rc = refuse(&c, -EINVAL, "payload size wrong");
		goto out;
	}
	want = fds_expected(&c);
	if (want >= 0 && (size_t)want != nfds) {
		if (replies_with_data(h.request))
			rc = protocol_error(&c, "wrong number of fds");
		else
			rc = refuse(&c, -EBADF, "wrong number of fds");
		goto out;
	}
	rc = dispatch(&c);
out:
	for (size_t i = 0; i < nfds; i++)
		if (own[i] >= 0)
			close(own[i]); /* unused or extra */
	return rc;
}

/* ---- counters ---- */

void dg_vhost_get_stats(const dg_vhost *v, struct dg_vhost_stats *o)
{
	const struct vhost_counters *s = &v->st;
#define LD(x) atomic_load_explicit(&s->x, memory_order_relaxed)
	*o = (struct dg_vhost_stats){
		.connections = LD(connections),
		.messages = LD(messages),
		.bad_messages = LD(bad_messages),
		.iotlb_misses = LD(iotlb_misses),
		.iotlb_miss_dedup = LD(iotlb_miss_dedup),
		.iotlb_updates = LD(iotlb_updates),
		.iotlb_invalidations = LD(iotlb_invalidations),
		.iotlb_access_fails = LD(iotlb_access_fails),
		.iotlb_entries = LD(iotlb_entries),
		.ring_translations = LD(ring_translations),
		.ring_errors = LD(ring_errors),
		.outside_memtable = LD(outside_memtable),
		.arp_replies = LD(arp_replies),
		.icmp_replies = LD(icmp_replies),
		.ignored = LD(ignored),
		.iotlb_cache_fills = LD(iotlb_cache_fills),
	};
	for (unsigned int i = 0; i < VHOST_NR_VQ; i++) {
		o->queue[i].packets = LD(q[i].packets);
		o->queue[i].bytes = LD(q[i].bytes);
		o->queue[i].dropped = LD(q[i].dropped);
		o->queue[i].kicks = LD(q[i].kicks);
		o->queue[i].calls = LD(q[i].calls);
	}
#undef LD
}

int dg_vhost_stats_write_json(const struct dg_vhost_stats *s, FILE *f)
{
	int rc = fprintf(f,
			 "{\n  \"connections\": %" PRIu64 ",\n  \"messages\": %" PRIu64
			 ",\n  \"bad_messages\": %" PRIu64 ",\n  \"iotlb_misses\": %" PRIu64
			 ",\n  \"iotlb_miss_dedup\": %" PRIu64 ",\n  \"iotlb_updates\": %" PRIu64
			 ",\n  \"iotlb_invalidations\": %" PRIu64
			 ",\n  \"iotlb_access_fails\": %" PRIu64 ",\n  \"iotlb_entries\": %" PRIu64
			 ",\n  \"ring_translations\": %" PRIu64 ",\n  \"ring_errors\": %" PRIu64
			 ",\n  \"outside_memtable\": %" PRIu64 ",\n  \"arp_replies\": %" PRIu64
			 ",\n  \"icmp_replies\": %" PRIu64 ",\n  \"ignored\": %" PRIu64
			 ",\n  \"iotlb_cache_fills\": %" PRIu64 ",\n  \"queue\": [",
			 s->connections, s->messages, s->bad_messages, s->iotlb_misses,
			 s->iotlb_miss_dedup, s->iotlb_updates, s->iotlb_invalidations,
			 s->iotlb_access_fails, s->iotlb_entries, s->ring_translations,
			 s->ring_errors, s->outside_memtable, s->arp_replies, s->icmp_replies,
			 s->ignored, s->iotlb_cache_fills);

	for (unsigned int i = 0; rc >= 0 && i < 2; i++)
		rc = fprintf(f,
			     "%s\n    {\"name\": \"%s\", \"packets\": %" PRIu64
			     ", \"bytes\": %" PRIu64 ", \"dropped\": %" PRIu64
			     ", \"kicks\": %" PRIu64 ", \"calls\": %" PRIu64 "}",
			     i ? "," : "", i ? "tx" : "rx", s->queue[i].packets, s->queue[i].bytes,
			     s->queue[i].dropped, s->queue[i].kicks, s->queue[i].calls);
	if (rc >= 0)
		rc = fprintf(f, "\n  ]\n}\n");
	return rc < 0 || ferror(f) ? -EIO : 0;
}
