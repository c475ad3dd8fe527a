/* SPDX-License-Identifier: MIT */
/*
 * bench/bench_vhost_pvp.c - "dmaguard bench vhost-pvp": the vhost-user back end forwarding
 * 64-byte packets guest -> back end -> guest, with the guest's IOMMU off and on.
 *
 * The seed figure (DESIGN.md section 1): DPDK's vhost-user back end in a PVP loop lost 23% of its
 * packet rate when the guest's IOMMU was turned on (18.8 -> 14.5 Mpps), until its IOTLB lookups
 * left the hot path. Here the same loop runs in one process and one thread, so the figures are
 * the back end's and the front end's own costs (no scheduler, no second core):
 *
 *   front end (a virtio-net driver)               back end (dg_vhost, loop mode)
 *   guest memory: a memfd, SET_MEM_TABLE          maps it; translates what the driver posts
 *   transmit ring: 32 frames of 64 B per burst -> dg_vhost_poll(): copies each frame out and
 *   receive ring: kept full of 2 KiB buffers   <- returns it on the receive queue
 *   its own IOMMU (dmaguard engine + DMA API)     device IOTLB fed by UPDATE/INVALIDATE/MISS
 *
 * Configurations, each with its own back end and guest, measured round-robin in the same run
 * (a round of each in turn, so drift of a shared machine hits all alike):
 *   off     VIRTIO_F_IOMMU_PLATFORM not negotiated: descriptors carry guest physical
 *           addresses, the rings front-end virtual ones (the baseline)
 *   strict  the guest's device has the DMA API's strict policy; rings and the buffer pool are
 *           mapped once through it (as DPDK's virtio driver in a PVP guest does: a mempool
 *           mapped at start), so descriptors carry IOVAs; the front end answers the back end's
 *           MISS messages with UPDATEs from the guest's page table, as QEMU's vIOMMU does
 *   lazy    the same with the lazy policy (they differ only in how the mappings are torn down:
 *           the data path is the same; both are measured because the issue asks for both)
 *   gen     one direction, back end -> front end: the back end in generator mode (strict, as
 *           above) fills the 32 receive buffers the front end posts per burst; the front end
 *           checks each frame's length and sequence number and posts them again. Not a PVP loop
 *           (no transmit side): its rate is not compared with off's
 * An operation is one packet received back by the front end, its sequence number checked.
 * Warm-up (misses and UPDATEs) precedes every measurement; the back end's counters over the
 * measurement are reported and must show no miss (everything cached).
 *
 * With the dpdk-dev package installed (dpdk-testpmd in PATH), both directions against DPDK's
 * virtio_user front end (testpmd, 64 B, its own process), next to DPDK's own net_vhost back end
 * used the same way (bench_vhost_dpdk() below): front end -> back end (testpmd txonly; the back
 * end in sink mode) and back end -> front end (the back end in gen mode; testpmd rxonly).
 *
 * Fixed-count mode (--case NAME --ops N): set-up and warm-up, then exactly N packets (rounded up
 * to bursts) with no clock reads, for callgrind instruction counts per packet.
 */
#include "bench.h"

#include "vhost/proto.h"

#include <dmaguard/dma.h>
#include <dmaguard/vhost.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define MEM_SIZE  (4u << 20)
#define GPA_BASE  0x100000ull
#define QSIZE	  256u
#define BURST	  32u
#define FRAME	  64u
#define HDR	  12u
#define BUFSZ	  2048u
#define RING(q)	  (0x4000ull * (q)) /* desc, avail at +0x1000, used at +0x2000 */
#define RINGS_LEN 0x8000ull
#define BUF_OFF	  0x10000ull
#define BUF(i)	  (BUF_OFF + (uint64_t)BUFSZ * (i)) /* tx 0..255, rx 256..511 */
#define BUFS_LEN  ((uint64_t)BUFSZ * 2 * QSIZE)
#define RXQ	  0
#define TXQ	  1
#define TARGET	  0.98

enum cfg { C_OFF, C_STRICT, C_LAZY, C_GEN, NCFG };
static const char *const cfg_name[NCFG] = {"off", "strict", "lazy", "gen"};

/* One guest (front end + its IOMMU) and its back end. */
struct env {
	enum cfg cfg;
	dg_vhost *v;
	int memfd;
	uint8_t *mem;	/* guest memory as the front end sees it */
	int chan[2];	/* back-end channel: [0] given to the back end, [1] read here */
	bool iommu;	/* VIRTIO_F_IOMMU_PLATFORM negotiated */
	uint64_t rings; /* driver address of the rings (IOVA or guest physical) */
	uint64_t bufs;	/* driver address of buffer 0 */
	struct dg_iommu *gmmu;
	struct dg_dma *dma;
	struct dg_device *gdev;
	struct dg_dma_dev *dd;
	uint16_t avail[2]; /* next avail idx per queue */
	uint16_t used[2];  /* used entries consumed per queue */
	uint32_t tx_seq;   /* sequence number of the next frame sent */
	uint32_t rx_seq;   /* sequence number expected next */
	uint64_t updates;  /* UPDATEs sent in answer to misses */
	uint8_t reply[DG_VHOST_REPLY_MAX];
};

struct result {
	char name[32];
	enum cfg cfg;
	uint64_t packets;
	struct bench_summary ns; /* ns per packet */
	double mpps;		 /* 1000 / median ns */
	double vs_off;		 /* mpps / mpps of off, 0 for off itself */
	double vs_off_best;	 /* the same from the best (least disturbed) rounds */
	struct dg_vhost_stats d; /* back-end counters over the measurement */
};

static void die(const char *what, int err)
{
	fprintf(stderr, "bench vhost-pvp: %s: %s\n", what, strerror(err < 0 ? -err : err));
	exit(1);
}

static uint8_t *gp(struct env *e, uint64_t off)
{
	return e->mem + off;
}

/* Driver address of guest offset @off: IOVA through the mapping, or guest physical. */
static uint64_t daddr(const struct env *e, uint64_t off)
{
	if (off >= BUF_OFF)
		return e->bufs + (off - BUF_OFF);
	return e->rings + off;
}

static void send_msg(struct env *e, uint32_t req, const void *payload, uint32_t size, int *fds,
		     size_t nfds)
{
	uint8_t buf[DG_VHOST_MSG_MAX];
	struct vu_hdr h = {.request = req, .flags = VU_VERSION | VU_FLAG_NEED_REPLY, .size = size};
	size_t rlen = 0;
	uint64_t ack = 0;
	int rc;

	memcpy(buf, &h, sizeof(h));
	if (size)
		memcpy(buf + sizeof(h), payload, size);
	rc = dg_vhost_handle_message(e->v, buf, sizeof(h) + size, fds, nfds, e->reply, &rlen);
	if (rc)
		die("vhost-user message", rc);
	if (rlen == VU_HDR_SIZE + 8)
		memcpy(&ack, e->reply + VU_HDR_SIZE, 8);
	if (req != VU_GET_FEATURES && req != VU_GET_PROTOCOL_FEATURES && ack)
		die("vhost-user message refused", EPROTO);
}

static void send_u64(struct env *e, uint32_t req, uint64_t v)
{
	send_msg(e, req, &v, 8, NULL, 0);
}

static void send_state(struct env *e, uint32_t req, uint32_t index, uint32_t num)
{
	struct vu_vring_state s = {.index = index, .num = num};

	send_msg(e, req, &s, sizeof(s), NULL, 0);
}

/* QEMU's part: answer every MISS with an UPDATE of the page from the guest's page table. */
static unsigned int answer_misses(struct env *e)
{
	uint8_t buf[VU_HDR_SIZE + sizeof(struct vu_iotlb)];
	unsigned int n = 0;

	while (recv(e->chan[1], buf, sizeof(buf), MSG_DONTWAIT) == (ssize_t)sizeof(buf)) {
		struct vu_iotlb m;
		uint64_t page, host;

		memcpy(&m, buf + VU_HDR_SIZE, sizeof(m));
		if (m.type != VU_IOTLB_MISS)
			die("back end reported an access failure", EACCES);
		page = m.iova & ~0xfffull;
		host = dg_pt_iova_to_phys(dg_domain_pt(dg_dma_dev_domain(e->dd)), page);
		if (!host)
			die("MISS for an IOVA the guest never mapped", EFAULT);
		struct vu_iotlb u = {.iova = page,
				     .size = 4096,
				     .uaddr = host,
				     .perm = VU_ACCESS_RW,
				     .type = VU_IOTLB_UPDATE};
		send_msg(e, VU_IOTLB_MSG, &u, sizeof(u), NULL, 0);
		e->updates++;
		n++;
	}
	return n;
}

static void env_init(struct env *e, enum cfg c)
{
	struct dg_vhost_config vc;
	uint64_t feat = (1ull << VIRTIO_F_VERSION_1) | (1ull << VHOST_USER_F_PROTOCOL_FEATURES);
	int fd;

	memset(e, 0, sizeof(*e));
	e->cfg = c;
	e->iommu = c != C_OFF;
	dg_vhost_config_init(&vc);
	vc.mode = c == C_GEN ? DG_VHOST_GEN : DG_VHOST_LOOP;
	vc.gen_frame_bytes = FRAME;
	e->v = dg_vhost_create(&vc);
	e->memfd = memfd_create("pvp-guest", MFD_CLOEXEC);
	if (!e->v || e->memfd < 0 || ftruncate(e->memfd, MEM_SIZE))
		die("set-up", errno);
	e->mem = mmap(NULL, MEM_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, e->memfd, 0);
	if (e->mem == MAP_FAILED || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, e->chan))
		die("set-up", errno);
	if (e->iommu) {
		struct dg_dma_config dc = {.no_housekeeping = true};
		struct dg_dma_dev_config ddc;

		dg_dma_dev_config_init(&ddc);
		ddc.policy = c == C_LAZY ? DG_DMA_LAZY : DG_DMA_STRICT;
		e->gmmu = dg_iommu_create(NULL);
		e->dma = e->gmmu ? dg_dma_create(e->gmmu, &dc) : NULL;
		e->gdev = e->gmmu ? dg_device_create(e->gmmu, 1) : NULL;
		e->dd = e->dma && e->gdev ? dg_dma_dev_create(e->dma, e->gdev, &ddc) : NULL;
		if (!e->dd)
			die("guest IOMMU", errno);
		int rc = dg_dma_map_single(e->dd, e->mem, RINGS_LEN, DG_DMA_BIDIRECTIONAL, 0,
					   &e->rings);
		if (!rc)
			rc = dg_dma_map_single(e->dd, e->mem + BUF_OFF, BUFS_LEN,
					       DG_DMA_BIDIRECTIONAL, 0, &e->bufs);
		if (rc)
			die("guest DMA map", rc);
		feat |= 1ull << VIRTIO_F_IOMMU_PLATFORM;
	} else {
		e->rings = GPA_BASE;
		e->bufs = GPA_BASE + BUF_OFF;
	}
	send_msg(e, VU_GET_FEATURES, NULL, 0, NULL, 0);
	send_msg(e, VU_SET_OWNER, NULL, 0, NULL, 0);
	send_u64(e, VU_SET_PROTOCOL_FEATURES,
		 (1ull << VU_PROTOCOL_F_REPLY_ACK) | (1ull << VU_PROTOCOL_F_BACKEND_REQ));
	fd = dup(e->chan[0]);
	send_msg(e, VU_SET_BACKEND_REQ_FD, NULL, 0, &fd, 1);
	send_u64(e, VU_SET_FEATURES, feat);
	struct vu_memory m = {.nregions = 1};
	m.regions[0] = (struct vu_region){
		.gpa = GPA_BASE, .size = MEM_SIZE, .uaddr = (uintptr_t)e->mem, .mmap_off = 0};
	fd = dup(e->memfd);
	send_msg(e, VU_SET_MEM_TABLE, &m, 8 + 32, &fd, 1);
	for (uint32_t q = 0; q < 2; q++) {
		struct vu_vring_addr a = {.index = q};

		/* Rings: IOVAs with the IOMMU, else the front end's virtual addresses. */
		a.desc = e->iommu ? daddr(e, RING(q)) : (uintptr_t)gp(e, RING(q));
		a.avail = e->iommu ? daddr(e, RING(q) + 0x1000) :
				     (uintptr_t)gp(e, RING(q) + 0x1000);
		a.used = e->iommu ? daddr(e, RING(q) + 0x2000) : (uintptr_t)gp(e, RING(q) + 0x2000);
		send_state(e, VU_SET_VRING_NUM, q, QSIZE);
		send_state(e, VU_SET_VRING_BASE, q, 0);
		send_msg(e, VU_SET_VRING_ADDR, &a, sizeof(a), NULL, 0);
		send_u64(e, VU_SET_VRING_KICK, q | VU_VRING_NOFD);
		send_u64(e, VU_SET_VRING_CALL, q | VU_VRING_NOFD);
		send_state(e, VU_SET_VRING_ENABLE, q, 1);
	}
	/* Descriptors are fixed: tx slot i -> buffer i, rx slot i -> buffer 256 + i. */
	for (uint16_t i = 0; i < QSIZE; i++) {
		struct vring_desc tx = {.addr = daddr(e, BUF(i)), .len = HDR + FRAME};
		struct vring_desc rx = {.addr = daddr(e, BUF(QSIZE + i)),
					.len = BUFSZ,
					.flags = VRING_DESC_F_WRITE};
		uint8_t *b = gp(e, BUF(i));

		memcpy(gp(e, RING(TXQ)) + 16 * i, &tx, 16);
		memcpy(gp(e, RING(RXQ)) + 16 * i, &rx, 16);
		memset(b, 0, HDR);
		memset(b + HDR, 0xff, 6); /* broadcast */
		for (unsigned int k = 6; k < FRAME; k++)
			b[HDR + k] = (uint8_t)k;
	}
	/* The receive ring starts full (gen: empty, each burst posts its buffers). */
	if (c == C_GEN)
		return;
	for (uint16_t i = 0; i < QSIZE; i++)
		memcpy(gp(e, RING(RXQ) + 0x1000) + 4 + 2 * i, &i, 2);
	e->avail[RXQ] = QSIZE;
	__atomic_store_n((uint16_t *)(void *)(gp(e, RING(RXQ) + 0x1000) + 2), e->avail[RXQ],
			 __ATOMIC_RELEASE);
}

static void env_fini(struct env *e)
{
	dg_vhost_destroy(e->v);
	if (e->dd) {
		int rc = dg_dma_unmap_single(e->dd, e->rings, RINGS_LEN, DG_DMA_BIDIRECTIONAL, 0,
					     NULL);

		if (!rc)
			rc = dg_dma_unmap_single(e->dd, e->bufs, BUFS_LEN, DG_DMA_BIDIRECTIONAL, 0,
						 NULL);
		if (rc)
			die("guest DMA unmap", rc);
		dg_dma_housekeep(e->dma);
		if ((rc = dg_dma_dev_destroy(e->dd)))
			die("guest DMA device", rc);
		dg_device_destroy(e->gdev);
		dg_dma_destroy(e->dma);
		dg_iommu_destroy(e->gmmu);
	}
	munmap(e->mem, MEM_SIZE);
	close(e->memfd);
	close(e->chan[0]);
	close(e->chan[1]);
}

/* Next used element of queue @q, or false. */
static bool used_next(struct env *e, unsigned int q, uint32_t *id, uint32_t *len)
{
	uint8_t *used = gp(e, RING(q) + 0x2000);
	/* Acquire pairs with the back end's release store of the used index. */
	uint16_t idx = __atomic_load_n((uint16_t *)(void *)(used + 2), __ATOMIC_ACQUIRE);
	struct vring_used_elem el;

	if (idx == e->used[q])
		return false;
	memcpy(&el, used + 4 + 8 * (e->used[q] % QSIZE), sizeof(el));
	e->used[q]++;
	*id = el.id;
	*len = el.len;
	return true;
}

/* One burst: post BURST frames, run the back end, collect what came back. Returns packets. */
static unsigned int burst(struct env *e)
{
	uint8_t *tx_avail = gp(e, RING(TXQ) + 0x1000), *rx_avail = gp(e, RING(RXQ) + 0x1000);
	unsigned int got = 0, work = 0;
	uint32_t id, len;

	for (unsigned int k = 0; k < BURST; k++) {
		uint16_t slot = (uint16_t)(e->avail[TXQ] % QSIZE);

		memcpy(gp(e, BUF(slot)) + HDR + 14, &e->tx_seq, 4);
		e->tx_seq++;
		memcpy(tx_avail + 4 + 2 * slot, &slot, 2);
		e->avail[TXQ]++;
	}
	/* Release pairs with the back end's acquire of the avail index. */
	__atomic_store_n((uint16_t *)(void *)(tx_avail + 2), e->avail[TXQ], __ATOMIC_RELEASE);
	for (int tries = 0;; tries++) {
		dg_vhost_poll(e->v, &work);
		while (used_next(e, TXQ, &id, &len))
			;
		while (used_next(e, RXQ, &id, &len)) {
			uint32_t seq;

			if (id >= QSIZE || len != HDR + FRAME)
				die("bad receive element", EPROTO);
			memcpy(&seq, gp(e, BUF(QSIZE + id)) + HDR + 14, 4);
			if (seq != e->rx_seq++)
				die("frame out of order or corrupted", EPROTO);
			memcpy(rx_avail + 4 + 2 * (e->avail[RXQ] % QSIZE), &id, 2);
			e->avail[RXQ]++;
			got++;
		}
		__atomic_store_n((uint16_t *)(void *)(rx_avail + 2), e->avail[RXQ],
				 __ATOMIC_RELEASE);
		if (e->rx_seq == e->tx_seq)
			return got;
		if (!(e->iommu && answer_misses(e)) && !work && tries > 4)
			die("the back end stopped forwarding", EIO);
	}
}

/* gen: post BURST receive buffers, run the back end, check what it wrote. Returns packets. */
static unsigned int burst_gen(struct env *e)
{
	uint8_t *rx_avail = gp(e, RING(RXQ) + 0x1000);
	unsigned int got = 0, work = 0;
	uint32_t id, len;

	for (unsigned int k = 0; k < BURST; k++) {
		uint16_t slot = (uint16_t)(e->avail[RXQ] % QSIZE);

		memcpy(rx_avail + 4 + 2 * slot, &slot, 2);
		e->avail[RXQ]++;
	}
	/* Release pairs with the back end's acquire of the avail index. */
	__atomic_store_n((uint16_t *)(void *)(rx_avail + 2), e->avail[RXQ], __ATOMIC_RELEASE);
	for (int tries = 0;; tries++) {
		dg_vhost_poll(e->v, &work);
		while (used_next(e, RXQ, &id, &len)) {
			const uint8_t *p = gp(e, BUF(QSIZE + id)) + HDR + DG_VHOST_GEN_SEQ_OFFSET;
			uint64_t seq = 0;

			if (id >= QSIZE || len != HDR + FRAME)
				die("bad receive element", EPROTO);
			for (int i = 0; i < 8; i++)
				seq = seq << 8 | p[i];
			if (seq != e->rx_seq++)
				die("generated frame out of order or corrupted", EPROTO);
			got++;
		}
		if (got == BURST)
			return got;
		if (!(e->iommu && answer_misses(e)) && !work && tries > 4)
			die("the back end stopped generating", EIO);
	}
}

static uint64_t run(struct env *e, uint64_t bursts)
{
	uint64_t n = 0;

	for (uint64_t i = 0; i < bursts; i++)
		n += e->cfg == C_GEN ? burst_gen(e) : burst(e);
	return n;
}

static struct dg_vhost_stats stats_delta(const struct dg_vhost_stats *a,
					 const struct dg_vhost_stats *z)
{
	struct dg_vhost_stats d = *z;

	d.iotlb_misses -= a->iotlb_misses;
	d.iotlb_updates -= a->iotlb_updates;
	d.iotlb_invalidations -= a->iotlb_invalidations;
	d.iotlb_cache_fills -= a->iotlb_cache_fills;
	d.ring_translations -= a->ring_translations;
	d.queue[RXQ].packets -= a->queue[RXQ].packets;
	d.queue[TXQ].packets -= a->queue[TXQ].packets;
	return d;
}

/* ---- DPDK's virtio_user front end (dpdk-testpmd, its own process) ---- */

#define DPDK_WARMUP_MS 1500
#define DPDK_WINDOW_S  3
#define DPDK_PAIRS     3

/* The path of dpdk-testpmd in PATH, or NULL. */
static const char *testpmd_path(void)
{
	static char buf[512];
	const char *path = getenv("PATH");

	while (path && *path) {
		const char *end = strchr(path, ':');
		size_t n = end ? (size_t)(end - path) : strlen(path);

		if (n && n + sizeof("/dpdk-testpmd") < sizeof(buf)) {
			memcpy(buf, path, n);
			strcpy(buf + n, "/dpdk-testpmd");
			if (!access(buf, X_OK))
				return buf;
		}
		path = end ? end + 1 : NULL;
	}
	return NULL;
}

/*
 * Start dpdk-testpmd with one vdev and forwarding mode @mode, its forwarding lcore on CPU @fwd
 * (the main lcore, asleep in the statistics loop, on the other), stdout to @log. Returns its
 * pid or -1.
 */
static pid_t testpmd_start(const char *exe, const char *prefix, const char *vdev, const char *mode,
			   unsigned int fwd, const char *log)
{
	char lcores[16], main_lcore[8], pfx[64], fwd_mode[32];
	unsigned int other = fwd ? 0 : 1;
	pid_t pid;

	snprintf(lcores, sizeof(lcores), "%u,%u", other, fwd);
	snprintf(main_lcore, sizeof(main_lcore), "%u", other);
	snprintf(pfx, sizeof(pfx), "--file-prefix=%s", prefix);
	snprintf(fwd_mode, sizeof(fwd_mode), "--forward-mode=%s", mode);
	pid = fork();
	if (pid == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		int nul = open("/dev/null", O_RDWR);

		if (fd >= 0 && nul >= 0) {
			dup2(nul, 0);
			dup2(fd, 1);
			dup2(fd, 2);
		}
		execl(exe, exe, "-l", lcores, "--main-lcore", main_lcore, "--no-huge", "-m", "256",
		      "--no-pci", pfx, "--log-level=lib.eal:error", vdev, "--", fwd_mode,
		      "--txpkts=64", "--total-num-mbufs=16384", "--nb-cores=1", "--rxq=1",
		      "--txq=1", "--stats-period=1", (char *)NULL);
		_exit(127);
	}
	return pid;
}

static void testpmd_stop(pid_t pid)
{
	int st;

	if (pid <= 0)
		return;
	kill(pid, SIGINT);
	for (int i = 0; i < 50; i++) {
		if (waitpid(pid, &st, WNOHANG) == pid)
			return;
		usleep(100000);
	}
	kill(pid, SIGKILL);
	waitpid(pid, &st, 0);
}

static bool alive(pid_t pid)
{
	int st;

	return pid > 0 && waitpid(pid, &st, WNOHANG) == 0;
}

/*
 * The "Rx-pps:" figures testpmd printed in @log once per second: the leading zeros (start-up)
 * and then @skip figures (warm-up) are skipped; up to @max of the rest go to @v. Returns how many.
 */
static unsigned int testpmd_rx_pps(const char *log, unsigned int skip, double *v, unsigned int max)
{
	unsigned int n = 0;
	bool started = false;
	char line[512];
	FILE *f = fopen(log, "r");

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f) && n < max) {
		const char *p = strstr(line, "Rx-pps:");
		double x;

		if (!p)
			continue;
		x = strtod(p + 7, NULL);
		started |= x > 0;
		if (!started)
			continue;
		if (skip) {
			skip--;
			continue;
		}
		v[n++] = x;
	}
	fclose(f);
	return n;
}

static void *vhost_server(void *arg)
{
	int rc = dg_vhost_run(arg);

	if (rc)
		fprintf(stderr, "bench vhost-pvp: dmaguard vhost server: %s\n", strerror(-rc));
	return NULL;
}

/* The two directions measured against DPDK. */
enum dpdk_dir { FE_BE, BE_FE, NDIR };
static const char *const dir_name[NDIR] = {"fe-be", "be-fe"};

static void add_dpdk_result(struct bench_report *rep, enum dpdk_dir d, const char *back_end,
			    const double *mpps, unsigned int n, double net_vhost_mpps)
{
	struct bench_summary sum;
	double sorted[8];
	char name[48];
	json_t *j, *arr = json_array();

	for (unsigned int i = 0; i < n; i++) {
		sorted[i] = mpps[i];
		json_array_append_new(arr, json_real(mpps[i]));
	}
	bench_summarize(sorted, n, &sum);
	snprintf(name, sizeof(name), "dpdk-%s/%s", dir_name[d], back_end);
	j = json_pack("{s:s, s:s, s:s, s:s, s:i, s:i, s:f}", "case", name, "back_end", back_end,
		      "front_end", "virtio_user", "direction", dir_name[d], "frame_bytes",
		      (int)FRAME, "seconds", DPDK_WINDOW_S, "mpps", sum.median);
	json_object_set_new(j, "windows", arr);
	json_object_set_new(j, "vs_net_vhost",
			    net_vhost_mpps > 0 ? json_real(sum.median / net_vhost_mpps) :
						 json_null());
	bench_report_add(rep, j);
}

/*
 * Wait for testpmd's @log to show the warm-up and a window of Rx-pps figures while @a (and @b,
 * if > 0) live; their mean in Mpps, 0 if there were none.
 */
static double testpmd_window_mpps(const char *log, pid_t a, pid_t b)
{
	double pps[DPDK_WINDOW_S];
	unsigned int n = 0;
	struct bench_summary sum;

	/* testpmd's start-up (256 MiB zeroed) takes seconds on a loaded machine. */
	for (int i = 0; i < 300 && alive(a) && (b <= 0 || alive(b)); i++) {
		n = testpmd_rx_pps(log, (DPDK_WARMUP_MS + 999) / 1000, pps, DPDK_WINDOW_S);
		if (n == DPDK_WINDOW_S)
			break;
		usleep(100000);
	}
	if (!n)
		return 0;
	bench_summarize(pps, n, &sum);
	return sum.mean / 1e6; /* over the window, as dmaguard's counter delta */
}

/*
 * dmaguard's back end (in this process) and testpmd's virtio_user front end: Mpps, 0 if it did
 * not run. fe-be: sink mode, testpmd txonly, the back end's receive counter over the window.
 * be-fe: gen mode, testpmd rxonly, the front end's Rx-pps (as for net_vhost).
 */
static double dpdk_ours(const char *exe, const char *dir, enum dpdk_dir d, unsigned int k)
{
	char sock[96], log[96], vdev[160], pfx[48];
	struct dg_vhost_config vc;
	struct dg_vhost_stats a, z;
	double mpps = 0;
	pthread_t thr;
	dg_vhost *v;
	pid_t fe;
	bool ok;

	snprintf(sock, sizeof(sock), "%s/dmaguard-%s%u.sock", dir, dir_name[d], k);
	snprintf(log, sizeof(log), "%s/fe-dmaguard-%s%u.log", dir, dir_name[d], k);
	dg_vhost_config_init(&vc);
	vc.mode = d == FE_BE ? DG_VHOST_SINK : DG_VHOST_GEN;
	vc.gen_frame_bytes = FRAME;
	vc.socket_path = sock;
	vc.once = true;
	v = dg_vhost_create(&vc);
	if (!v || pthread_create(&thr, NULL, vhost_server, v))
		die("dmaguard vhost", errno);
	for (int i = 0; i < 100 && access(sock, F_OK); i++)
		usleep(10000);
	snprintf(vdev, sizeof(vdev), "--vdev=net_virtio_user0,path=%s,queues=1,queue_size=256",
		 sock);
	snprintf(pfx, sizeof(pfx), "dg-fe1-%d", (int)getpid());
	fe = testpmd_start(exe, pfx, vdev, d == FE_BE ? "txonly" : "rxonly", 1, log);
	if (d == BE_FE) {
		mpps = testpmd_window_mpps(log, fe, 0);
		ok = alive(fe);
	} else {
		/* testpmd's start-up (256 MiB zeroed) takes seconds on a loaded machine. */
		for (int i = 0; i < 2000 && alive(fe); i++) {
			dg_vhost_get_stats(v, &a);
			if (a.queue[TXQ].packets)
				break;
			usleep(10000);
		}
		usleep(DPDK_WARMUP_MS * 1000);
		dg_vhost_get_stats(v, &a);
		uint64_t t0 = bench_now_ns();
		sleep(DPDK_WINDOW_S);
		dg_vhost_get_stats(v, &z);
		uint64_t t1 = bench_now_ns();
		ok = alive(fe);
		if (z.queue[TXQ].packets > a.queue[TXQ].packets)
			mpps = (double)(z.queue[TXQ].packets - a.queue[TXQ].packets) * 1000.0 /
			       (double)(t1 - t0);
	}
	testpmd_stop(fe);
	dg_vhost_stop(v);
	pthread_join(thr, NULL);
	dg_vhost_get_stats(v, &z);
	dg_vhost_destroy(v);
	if (!ok || !(mpps > 0)) {
		printf("  dmaguard %s: testpmd did not run or moved nothing (see %s)\n",
		       dir_name[d], log);
		mpps = 0;
	} else if (z.outside_memtable || z.ring_errors) {
		printf("  dmaguard %s: outside_memtable %llu, ring_errors %llu\n", dir_name[d],
		       (unsigned long long)z.outside_memtable, (unsigned long long)z.ring_errors);
		mpps = 0;
	} else {
		unlink(log);
	}
	return mpps;
}

/*
 * DPDK's pair, testpmd's net_vhost back end and virtio_user front end: fe-be, net_vhost
 * rxonly <- virtio_user txonly, net_vhost's Rx-pps; be-fe, net_vhost txonly -> virtio_user
 * rxonly, virtio_user's Rx-pps.
 */
static double dpdk_theirs(const char *exe, const char *dir, enum dpdk_dir d, unsigned int k)
{
	char sock[96], log[96], blog[96], vdev[160], pfx[48];
	double mpps;
	pid_t be, fe;

	snprintf(sock, sizeof(sock), "%s/net_vhost-%s%u.sock", dir, dir_name[d], k);
	snprintf(blog, sizeof(blog), "%s/be-net_vhost-%s%u.log", dir, dir_name[d], k);
	snprintf(log, sizeof(log), "%s/fe-net_vhost-%s%u.log", dir, dir_name[d], k);
	snprintf(vdev, sizeof(vdev), "--vdev=net_vhost0,iface=%s,queues=1", sock);
	snprintf(pfx, sizeof(pfx), "dg-be-%d", (int)getpid());
	be = testpmd_start(exe, pfx, vdev, d == FE_BE ? "rxonly" : "txonly", 0, blog);
	for (int i = 0; i < 2000 && access(sock, F_OK) && alive(be); i++)
		usleep(10000);
	snprintf(vdev, sizeof(vdev), "--vdev=net_virtio_user0,path=%s,queues=1,queue_size=256",
		 sock);
	snprintf(pfx, sizeof(pfx), "dg-fe2-%d", (int)getpid());
	fe = testpmd_start(exe, pfx, vdev, d == FE_BE ? "txonly" : "rxonly", 1, log);
	/* One Rx-pps line per second: wait for the warm-up second and the window's. */
	mpps = testpmd_window_mpps(d == FE_BE ? blog : log, fe, be);
	testpmd_stop(fe);
	testpmd_stop(be);
	if (!(mpps > 0)) {
		printf("  net_vhost %s: testpmd did not run or moved nothing (see %s)\n",
		       dir_name[d], d == FE_BE ? blog : log);
		mpps = 0;
	} else {
		unlink(blog);
		unlink(log);
	}
	unlink(sock);
	return mpps;
}

/*
 * Both directions against DPDK, each back end with DPDK's virtio_user front end (testpmd,
 * 64 B, its own process): fe-be, the front end transmits (txonly) and the back end receives
 * (dmaguard in sink mode; net_vhost in testpmd rxonly); be-fe, the back end transmits
 * (dmaguard in gen mode; net_vhost in testpmd txonly) and the front end receives (rxonly, its
 * Rx-pps). Windows alternate between the two back ends and the two directions, DPDK_PAIRS
 * times, so that the load of a shared machine falls on all alike. Two cores: the back end and
 * the front end's forwarding lcore get one each.
 */
static void bench_vhost_dpdk(struct bench_report *rep)
{
	static const char *const what[NDIR][2] = {
		{"dmaguard vhost (sink)", "DPDK net_vhost (rxonly)"},
		{"dmaguard vhost (gen)", "DPDK net_vhost (txonly)"},
	};
	const char *exe = testpmd_path();
	char dir[] = "/tmp/dg-pvp-dpdk-XXXXXX";
	double ours[NDIR][DPDK_PAIRS], theirs[NDIR][DPDK_PAIRS], so[DPDK_PAIRS], st[DPDK_PAIRS];
	unsigned int no[NDIR] = {0}, nt[NDIR] = {0};

	if (!exe) {
		printf("\nDPDK comparison skipped: dpdk-testpmd not installed (package dpdk-dev)\n");
		return;
	}
	if (!mkdtemp(dir))
		die("mkdtemp", errno);
	/* dmaguard's threads (made from this one) on CPU 0, as net_vhost's forwarding lcore. */
	bench_pin_cpu(0);
	printf("\nDPDK's virtio_user front end (testpmd, 64 B) and each back end, both directions, "
	       "%u x %d s windows, alternating:\n",
	       DPDK_PAIRS, DPDK_WINDOW_S);
	for (unsigned int k = 0; k < DPDK_PAIRS; k++) {
		for (unsigned int d = 0; d < NDIR; d++) {
			double a = dpdk_ours(exe, dir, d, k), b = dpdk_theirs(exe, dir, d, k);

			printf("  window %u %s: dmaguard %.3f Mpps, net_vhost %.3f Mpps\n", k + 1,
			       dir_name[d], a, b);
			if (a > 0)
				ours[d][no[d]++] = a;
			if (b > 0)
				theirs[d][nt[d]++] = b;
		}
	}
	rmdir(dir); /* fails, keeping the logs, when something did not run */
	for (unsigned int d = 0; d < NDIR; d++) {
		struct bench_summary mo = {0}, mt = {0};

		memcpy(so, ours[d], sizeof(so));
		memcpy(st, theirs[d], sizeof(st));
		if (no[d])
			bench_summarize(so, no[d], &mo);
		if (nt[d])
			bench_summarize(st, nt[d], &mt);
		if (no[d])
			add_dpdk_result(rep, d, "dmaguard", ours[d], no[d], mt.median);
		if (nt[d])
			add_dpdk_result(rep, d, "net_vhost", theirs[d], nt[d], 0);
		printf("  %s:\n    %-24s %8.3f Mpps (median)\n    %-24s %8.3f Mpps (median)\n",
		       dir_name[d], what[d][0], mo.median, what[d][1], mt.median);
		if (no[d] && nt[d]) {
			printf("    dmaguard / net_vhost: %.3f (target >= 1: %s)\n",
			       mo.median / mt.median, mo.median >= mt.median ? "met" : "NOT met");
			printf("RESULT suite=vhost-pvp case=dpdk-%s mpps=%.3f net_vhost_mpps=%.3f\n",
			       dir_name[d], mo.median, mt.median);
		}
	}
}

/* ---- the suite ---- */

static json_t *result_json(const struct result *r)
{
	json_t *j = json_pack("{s:s, s:s, s:s, s:i, s:i, s:I, s:f}", "case", r->name, "iommu",
			      r->cfg == C_OFF ? "off" : "on", "guest_policy",
			      r->cfg == C_OFF  ? "none" :
			      r->cfg == C_LAZY ? "lazy" :
						 "strict",
			      "frame_bytes", (int)FRAME, "burst", (int)BURST, "packets",
			      (json_int_t)r->packets, "mpps", r->mpps);

	json_object_set_new(j, "ns_per_packet",
			    json_pack("{s:f, s:f, s:f, s:f, s:i}", "median", r->ns.median, "min",
				      r->ns.min, "max", r->ns.max, "spread", r->ns.spread, "rounds",
				      (int)r->ns.n));
	bool no_ratio = r->cfg == C_OFF || r->cfg == C_GEN; /* gen: not the same work as off */

	json_object_set_new(j, "back_end_mode", json_string(r->cfg == C_GEN ? "gen" : "loop"));
	json_object_set_new(j, "direction", json_string(r->cfg == C_GEN ? "be-fe" : "fe-be-fe"));
	json_object_set_new(j, "vs_off", no_ratio ? json_null() : json_real(r->vs_off));
	json_object_set_new(j, "vs_off_best", no_ratio ? json_null() : json_real(r->vs_off_best));
	json_object_set_new(j, "backend",
			    json_pack("{s:I, s:I, s:I, s:I, s:I, s:I}", "iotlb_misses",
				      (json_int_t)r->d.iotlb_misses, "iotlb_updates",
				      (json_int_t)r->d.iotlb_updates, "iotlb_invalidations",
				      (json_int_t)r->d.iotlb_invalidations, "iotlb_cache_fills",
				      (json_int_t)r->d.iotlb_cache_fills, "ring_translations",
				      (json_int_t)r->d.ring_translations, "outside_memtable",
				      (json_int_t)r->d.outside_memtable));
	return j;
}

static void usage(FILE *out)
{
	fprintf(out,
		"usage: dmaguard bench vhost-pvp [--no-dpdk | --dpdk-only] [OPTIONS]\n"
		"  --no-dpdk       skip the DPDK comparison even when dpdk-testpmd is installed\n"
		"                  (it is also skipped with --quick, --case and --ops)\n"
		"  --dpdk-only     run only the DPDK comparison (empty without dpdk-testpmd)\n\n");
	bench_usage_common(out);
}

static int bench_vhost_pvp_main(int argc, char **argv)
{
	struct bench_opts o;
	struct env env[NCFG];
	struct result res[NCFG];
	bool want[NCFG], any = false, dpdk = true, dpdk_only = false;
	struct bench_report rep;

	if (bench_parse_common(&argc, argv, &o))
		return 2;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--no-dpdk")) {
			dpdk = false;
			continue;
		}
		if (!strcmp(argv[i], "--dpdk-only")) {
			dpdk_only = true;
			continue;
		}
		return bench_help_or_unknown("vhost-pvp", argv[i], usage);
	}
	if (o.list) {
		for (int c = 0; c < NCFG; c++)
			printf("%s\n", cfg_name[c]);
		return 0;
	}
	if (dpdk_only) {
		if (bench_report_init(&rep, "vhost-pvp"))
			return 1;
		bench_vhost_dpdk(&rep);
		return bench_report_close(&rep, o.json_path);
	}
	for (int c = 0; c < NCFG; c++) {
		want[c] = bench_case_selected(&o, cfg_name[c]);
		any |= want[c];
	}
	if (!any) {
		fprintf(stderr, "bench vhost-pvp: no case named '%s' (see --list)\n",
			o.case_name ? o.case_name : "");
		return 2;
	}
	bench_pin_cpu(0);
	for (int c = 0; c < NCFG; c++) {
		if (!want[c])
			continue;
		env_init(&env[c], (enum cfg)c);
		run(&env[c], 64); /* warm-up: misses answered, caches filled */
	}
	if (o.ops) {
		for (int c = 0; c < NCFG; c++) {
			if (!want[c])
				continue;
			uint64_t n = run(&env[c], (o.ops + BURST - 1) / BURST);
			printf("RESULT suite=vhost-pvp case=%s ops=%llu fixed_count=1\n",
			       cfg_name[c], (unsigned long long)n);
			env_fini(&env[c]);
		}
		return 0;
	}
	printf("dmaguard bench vhost-pvp: %u-byte frames guest -> back end -> guest, bursts of "
	       "%u, one thread, %s\n",
	       FRAME, BURST, bench_cpu_model());
	/* Size a round to duration / rounds per configuration. */
	double budget_ns = o.duration_s * 1e9 / (o.quick ? 2.0 : 1.0) / o.rounds;
	uint64_t per = 1;
	for (int c = 0; c < NCFG; c++) {
		if (!want[c])
			continue;
		for (;;) {
			uint64_t t0 = bench_now_ns();
			run(&env[c], per);
			uint64_t ns = bench_now_ns() - t0;
			if (ns > budget_ns / 8 || per > (1ull << 22))
				break;
			per *= 2;
		}
		break;
	}
	per *= 8;
	double samples[NCFG][64];
	struct dg_vhost_stats a[NCFG], z[NCFG];
	unsigned int rounds = o.rounds < 64 ? o.rounds : 64;

	memset(res, 0, sizeof(res));
	for (int c = 0; c < NCFG; c++)
		if (want[c])
			dg_vhost_get_stats(env[c].v, &a[c]);
	for (unsigned int r = 0; r < rounds; r++) {
		for (int c = 0; c < NCFG; c++) {
			if (!want[c])
				continue;
			uint64_t t0 = bench_now_ns();
			uint64_t n = run(&env[c], per);
			uint64_t ns = bench_now_ns() - t0;

			samples[c][r] = (double)ns / (double)n;
			res[c].packets += n;
		}
	}
	for (int c = 0; c < NCFG; c++) {
		if (!want[c])
			continue;
		dg_vhost_get_stats(env[c].v, &z[c]);
		res[c].cfg = (enum cfg)c;
		snprintf(res[c].name, sizeof(res[c].name), "%s", cfg_name[c]);
		bench_summarize(samples[c], rounds, &res[c].ns);
		res[c].mpps = res[c].ns.median > 0 ? 1000.0 / res[c].ns.median : 0;
		res[c].d = stats_delta(&a[c], &z[c]);
		env_fini(&env[c]);
	}
	printf("\n  %-8s %10s %10s %8s %8s %8s %8s %8s\n", "case", "ns/packet", "Mpps", "spread",
	       "vs off", "best", "misses", "fills");
	for (int c = 0; c < NCFG; c++) {
		if (!want[c])
			continue;
		if (c != C_OFF && c != C_GEN && want[C_OFF] && res[C_OFF].mpps > 0) {
			res[c].vs_off = res[c].mpps / res[C_OFF].mpps;
			res[c].vs_off_best = res[C_OFF].ns.min / res[c].ns.min;
		}
		printf("  %-8s %10.1f %10.3f %7.0f%% %8.3f %8.3f %8llu %8llu\n", res[c].name,
		       res[c].ns.median, res[c].mpps, 100 * res[c].ns.spread, res[c].vs_off,
		       res[c].vs_off_best, (unsigned long long)res[c].d.iotlb_misses,
		       (unsigned long long)res[c].d.iotlb_cache_fills);
	}
	for (int c = 0; c < NCFG; c++) {
		if (!want[c])
			continue;
		printf("RESULT suite=vhost-pvp case=%s mpps=%.3f ns_per_packet=%.1f vs_off=%.3f "
		       "vs_off_best=%.3f misses=%llu\n",
		       res[c].name, res[c].mpps, res[c].ns.median, res[c].vs_off,
		       res[c].vs_off_best, (unsigned long long)res[c].d.iotlb_misses);
		if (c != C_OFF && res[c].vs_off > 0)
			printf("  target: IOMMU on (%s) at >= %.2f of off: median %.3f, best rounds "
			       "%.3f\n",
			       res[c].name, TARGET, res[c].vs_off, res[c].vs_off_best);
	}
	if (bench_report_init(&rep, "vhost-pvp"))
		return 1;
	for (int c = 0; c < NCFG; c++)
		if (want[c])
			bench_report_add(&rep, result_json(&res[c]));
	if (dpdk && !o.quick && !o.case_name)
		bench_vhost_dpdk(&rep);
	return bench_report_close(&rep, o.json_path);
}

DG_BENCH_SUITE(vhost_pvp, "vhost-pvp",
	       "vhost-user back end: 64 B guest -> back end -> guest, IOMMU off vs on (and DPDK)",
	       bench_vhost_pvp_main)
