/* SPDX-License-Identifier: MIT */
/*
 * tests/stress/vhost/server_stress.c - the back end as it runs for QEMU (dg_vhost_run(): a
 * control thread on the socket and a data-path thread), against a front end made of three
 * threads: a "QEMU" thread answering IOTLB misses with UPDATEs on the main socket, the main
 * thread sending INVALIDATEs (single pages and full flushes) all the time, and a "guest"
 * thread pinging through the rings with kick eventfds and kicking again every millisecond while
 * it waits (as a busy guest does). "QEMU" ignores one MISS in MISS_DROP_EVERY: the back end
 * must ask again, kicks or not. Every ping must come back intact; then the front end
 * disconnects, a new one connects to the same process and pings again (odd rounds without
 * invalidations, so that only the back end's resend deadline recovers an ignored miss).
 * Under ThreadSanitizer this checks the lock-free IOTLB readers against the writer, the
 * quiescent-state acknowledgement of invalidations and the pause protocol.
 *
 * Before that, three front ends misbehave on the socket (bad version, too many fds, a payload
 * too long) and must each be disconnected without harm.
 *
 *   stress_vhost_server [PINGS] [ROUNDS]     (default 300 pings, 2 front ends)
 */
#include "../../unit/vhost/fake_frontend.h"

#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/eventfd.h>
#include <sys/un.h>
#include <time.h>

#define CHECK(c)                                                                                \
	do {                                                                                    \
		if (!(c)) {                                                                     \
			fprintf(stderr, "stress_vhost_server: %s:%d: %s\n", __FILE__, __LINE__, \
				#c);                                                            \
			exit(1);                                                                \
		}                                                                               \
	} while (0)

static struct fe f;
static int conn = -1;
static int kick[2];
static pthread_mutex_t sock_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_bool done;
static unsigned int pings = 300;
static atomic_uint dropped; /* misses the "QEMU" thread ignored */

#define MISS_DROP_EVERY 97

/* Send one message on the socket and, if @want, read its u64 (or 8-byte) reply. */
static uint64_t sock_msg(uint32_t req, uint32_t flags, const void *payload, uint32_t size, int *fds,
			 int nfds, bool want)
{
	uint8_t buf[DG_VHOST_MSG_MAX];
	struct vu_hdr h = {.request = req, .flags = VU_VERSION | flags, .size = size};
	union {
		char c[CMSG_SPACE(16 * sizeof(int))];
		struct cmsghdr a;
	} ctl;
	struct iovec iov = {.iov_base = buf, .iov_len = sizeof(h) + size};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
	uint64_t r = 0;

	memcpy(buf, &h, sizeof(h));
	if (size)
		memcpy(buf + sizeof(h), payload, size);
	if (nfds) {
		mh.msg_control = ctl.c;
		mh.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(nfds * sizeof(int));
		memcpy(CMSG_DATA(c), fds, nfds * sizeof(int));
	}
	CHECK(sendmsg(conn, &mh, MSG_NOSIGNAL) == (ssize_t)(sizeof(h) + size));
	for (int i = 0; i < nfds; i++)
		close(fds[i]);
	if (want) {
		uint8_t rb[VU_HDR_SIZE + 8];
		CHECK(recv(conn, rb, sizeof(rb), MSG_WAITALL) == (ssize_t)sizeof(rb));
		memcpy(&r, rb + VU_HDR_SIZE, 8);
	}
	return r;
}

static void iotlb(uint8_t type, uint64_t iova, uint64_t size, uint64_t uaddr)
{
	struct vu_iotlb m = {.iova = iova, .size = size, .uaddr = uaddr, .perm = 3, .type = type};

	pthread_mutex_lock(&sock_lock);
	CHECK(sock_msg(VU_IOTLB_MSG, VU_FLAG_NEED_REPLY, &m, sizeof(m), NULL, 0, true) == 0);
	pthread_mutex_unlock(&sock_lock);
}

static void session(const char *path)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	uint64_t u;
	int fd;

	strcpy(a.sun_path, path);
	conn = socket(AF_UNIX, SOCK_STREAM, 0);
	CHECK(conn >= 0);
	for (int i = 0; connect(conn, (struct sockaddr *)&a, sizeof(a)); i++) {
		CHECK(i < 500);
		usleep(10000);
	}
	CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, f.sock) == 0);
	sock_msg(VU_GET_FEATURES, 0, NULL, 0, NULL, 0, true);
	sock_msg(VU_SET_OWNER, 0, NULL, 0, NULL, 0, false);
	u = (1ull << VU_PROTOCOL_F_REPLY_ACK) | (1ull << VU_PROTOCOL_F_BACKEND_REQ);
	CHECK(sock_msg(VU_SET_PROTOCOL_FEATURES, VU_FLAG_NEED_REPLY, &u, 8, NULL, 0, true) == 0);
	fd = f.sock[0];
	CHECK(sock_msg(VU_SET_BACKEND_REQ_FD, VU_FLAG_NEED_REPLY, NULL, 0, &fd, 1, true) == 0);
	f.sock[0] = -1;
	u = (1ull << VIRTIO_F_VERSION_1) | (1ull << VHOST_USER_F_PROTOCOL_FEATURES) |
	    (1ull << VIRTIO_F_IOMMU_PLATFORM);
	CHECK(sock_msg(VU_SET_FEATURES, VU_FLAG_NEED_REPLY, &u, 8, NULL, 0, true) == 0);
	struct vu_memory m = {.nregions = 1};
	m.regions[0] = (struct vu_region){
		.gpa = FE_GPA_BASE, .size = FE_MEM_SIZE, .uaddr = FE_UVA_BASE + FE_GPA_BASE};
	fd = dup(f.memfd);
	CHECK(sock_msg(VU_SET_MEM_TABLE, VU_FLAG_NEED_REPLY, &m, 40, &fd, 1, true) == 0);
	for (uint32_t q = 0; q < 2; q++) {
		struct vu_vring_state st = {.index = q, .num = FE_QSIZE};
		struct vu_vring_addr ad = {.index = q,
					   .desc = fe_addr(&f, FE_RING(q)),
					   .avail = fe_addr(&f, FE_RING(q) + 0x1000),
					   .used = fe_addr(&f, FE_RING(q) + 0x2000)};

		memset(fe_ptr(&f, FE_RING(q)), 0, 0x4000);
		f.avail_idx[q] = f.used_seen[q] = 0;
		CHECK(sock_msg(VU_SET_VRING_NUM, VU_FLAG_NEED_REPLY, &st, 8, NULL, 0, true) == 0);
		st.num = 0;
		CHECK(sock_msg(VU_SET_VRING_BASE, VU_FLAG_NEED_REPLY, &st, 8, NULL, 0, true) == 0);
		CHECK(sock_msg(VU_SET_VRING_ADDR, VU_FLAG_NEED_REPLY, &ad, sizeof(ad), NULL, 0,
			       true) == 0);
		kick[q] = eventfd(0, EFD_NONBLOCK);
		fd = dup(kick[q]);
		u = q;
		CHECK(sock_msg(VU_SET_VRING_KICK, VU_FLAG_NEED_REPLY, &u, 8, &fd, 1, true) == 0);
		st.num = 1;
		CHECK(sock_msg(VU_SET_VRING_ENABLE, VU_FLAG_NEED_REPLY, &st, 8, NULL, 0, true) ==
		      0);
	}
}

/* Front ends that misbehave on the socket: each is dropped, and the server goes on. */
static void bad_front_ends(const char *path)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	uint8_t b[16];

	strcpy(a.sun_path, path);
	for (int k = 0; k < 3; k++) {
		int fds[12];

		conn = socket(AF_UNIX, SOCK_STREAM, 0);
		CHECK(conn >= 0);
		for (int i = 0; connect(conn, (struct sockaddr *)&a, sizeof(a)); i++) {
			CHECK(i < 500);
			usleep(10000);
		}
		if (k == 0) { /* version 2 */
			struct vu_hdr h = {.request = VU_SET_OWNER, .flags = 2};
			CHECK(send(conn, &h, sizeof(h), 0) == sizeof(h));
		} else if (k == 1) { /* more fds than any message carries */
			for (int i = 0; i < 12; i++)
				fds[i] = dup(f.memfd);
			sock_msg(VU_SET_OWNER, 0, NULL, 0, fds, 12, false);
		} else { /* a payload far too long */
			struct vu_hdr h = {
				.request = VU_SET_MEM_TABLE, .flags = 1, .size = 1u << 20};
			CHECK(send(conn, &h, sizeof(h), 0) == sizeof(h));
		}
		CHECK(recv(conn, b, sizeof(b), 0) == 0); /* the server hung up */
		close(conn);
	}
}

static void end_session(void)
{
	close(conn);
	conn = -1;
	for (int q = 0; q < 2; q++)
		close(kick[q]);
	close(f.sock[1]);
	f.sock[1] = -1;
}

/*
 * QEMU's part: every MISS on the back-end channel gets an UPDATE on the main socket, except
 * one in MISS_DROP_EVERY, which is ignored (a MISS lost, or answered and at once invalidated):
 * the back end must ask again although the guest keeps kicking meanwhile.
 */
static void *qemu_main(void *arg)
{
	unsigned int n = 0;

	(void)arg;
	while (!atomic_load(&done)) {
		struct pollfd p = {.fd = f.sock[1], .events = POLLIN};
		struct vu_iotlb m;

		if (poll(&p, 1, 10) <= 0)
			continue;
		while (fe_backend_msg(&f, &m)) {
			CHECK(m.type == VU_IOTLB_MISS);
			if (++n % MISS_DROP_EVERY == MISS_DROP_EVERY / 2) {
				atomic_fetch_add(&dropped, 1);
				continue;
			}
			uint64_t gpa = m.iova - FE_IOVA_OFF;
			CHECK(gpa >= FE_GPA_BASE && gpa < FE_GPA_BASE + FE_MEM_SIZE);
			iotlb(VU_IOTLB_UPDATE, m.iova, 0x1000, FE_UVA_BASE + gpa);
		}
	}
	return NULL;
}

static void *guest_main(void *arg)
{
	uint8_t req[1500];
	uint64_t one = 1;

	(void)arg;
	for (unsigned int s = 0; s < pings; s++) {
		uint16_t slot = (uint16_t)(s % 128);
		size_t len = fe_make_ping(req, 0x0a000001, (uint16_t)s, 64 + s % 1300);
		uint32_t id, rlen;
		int spins = 0;

		fe_rx_post(&f, slot);
		fe_tx(&f, slot, req, (uint32_t)len);
		CHECK(write(kick[0], &one, 8) == 8);
		CHECK(write(kick[1], &one, 8) == 8);
		while (!fe_used(&f, 0, &id, &rlen)) {
			CHECK(++spins < 200000); /* 20 s */
			usleep(100);
			if (spins % 10 == 0) { /* a busy guest: kicks keep coming */
				CHECK(write(kick[0], &one, 8) == 8);
				CHECK(write(kick[1], &one, 8) == 8);
			}
		}
		CHECK(id == slot && rlen == FE_HDR + len);
		uint8_t *rep = fe_ptr(&f, FE_BUF(256 + slot)) + FE_HDR;
		CHECK(rep[34] == 0 && fe_csum(rep + 34, len - 34) == 0);
		CHECK(memcmp(rep + 42, req + 42, len - 42) == 0);
		while (fe_used(&f, 1, &id, &rlen))
			;
	}
	atomic_store(&done, true);
	return NULL;
}

static void *server_main(void *arg)
{
	CHECK(dg_vhost_run(arg) == 0);
	return NULL;
}

int main(int argc, char **argv)
{
	struct dg_vhost_config cfg;
	char path[64];
	pthread_t srv, qemu, guest;
	unsigned int rounds = 2;
	uint64_t seed = 1;

	if (argc > 1)
		pings = (unsigned int)strtoul(argv[1], NULL, 0);
	if (argc > 2)
		rounds = (unsigned int)strtoul(argv[2], NULL, 0);
	CHECK(fe_init(&f, DG_VHOST_ECHO, true) == 0);
	close(f.sock[0]);
	close(f.sock[1]);
	dg_vhost_destroy(f.v);
	snprintf(path, sizeof(path), "/tmp/dg-vhost-stress-%d.sock", (int)getpid());
	dg_vhost_config_init(&cfg);
	cfg.socket_path = path;
	cfg.verbose = -1;
	f.v = dg_vhost_create(&cfg);
	CHECK(f.v);
	CHECK(pthread_create(&srv, NULL, server_main, f.v) == 0);

	bad_front_ends(path);
	for (unsigned int r = 0; r < rounds; r++) {
		atomic_store(&done, false);
		session(path);
		CHECK(pthread_create(&qemu, NULL, qemu_main, NULL) == 0);
		CHECK(pthread_create(&guest, NULL, guest_main, NULL) == 0);
		while (!atomic_load(&done)) {
			seed = seed * 6364136223846793005ull + 1442695040888963407ull;
			if (r % 2) {
				/* No invalidation to make the back end forget an ignored miss:
				 * only its resend deadline brings the queue back. */
				usleep(200);
				continue;
			}
			if ((seed >> 33) % 8 == 0)
				iotlb(VU_IOTLB_INVALIDATE, 0xfef00000ull, 0xffffffff01100000ull, 0);
			else
				iotlb(VU_IOTLB_INVALIDATE,
				      fe_addr(&f, FE_GPA_BASE + ((seed >> 33) % 0x400) * 0x1000),
				      0x1000, 0x1234);
			usleep(200);
		}
		pthread_join(guest, NULL);
		pthread_join(qemu, NULL);
		end_session();
	}
	dg_vhost_stop(f.v);
	pthread_join(srv, NULL);

	struct dg_vhost_stats s;
	dg_vhost_get_stats(f.v, &s);
	printf("stress_vhost_server: %u front ends x %u pings: misses %llu (dedup %llu, %u "
	       "ignored), updates %llu, invalidations %llu, outside %llu\n",
	       rounds, pings, (unsigned long long)s.iotlb_misses,
	       (unsigned long long)s.iotlb_miss_dedup, atomic_load(&dropped),
	       (unsigned long long)s.iotlb_updates, (unsigned long long)s.iotlb_invalidations,
	       (unsigned long long)s.outside_memtable);
	CHECK(s.connections == rounds + 3);
	CHECK(s.icmp_replies == (uint64_t)rounds * pings);
	CHECK(s.outside_memtable == 0 && s.ring_errors == 0 && s.iotlb_access_fails == 0);
	CHECK(s.iotlb_misses > 0 && s.iotlb_invalidations > 0);
	fe_fini(&f);
	return 0;
}
