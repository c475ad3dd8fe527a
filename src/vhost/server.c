/* SPDX-License-Identifier: MIT */
/*
 * vhost/server.c - dg_vhost_run(): the unix socket server and the data-path thread.
 *
 * The calling thread is the control thread: it accepts one front end at a time, reads each
 * message (header with its SCM_RIGHTS fds, then the payload), hands it to
 * dg_vhost_handle_message() and writes the reply. A second thread runs the data path: it polls
 * the queues while there is work, goes on polling for VHOST_SPIN_NS after the last work it found
 * (a driver that refills its ring a few microseconds later then finds the back end still
 * polling with kicks off, instead of paying a kick, an eventfd write, and the back end a
 * wake-up: DPDK's back end polls without ever sleeping, Linux vhost-net's busyloop_timeout does
 * the same as here), and otherwise sleeps in epoll_wait() on the kick eventfds and
 * its wake eventfd, its queues' agents offline (see dev.h) so that an invalidation never waits
 * for a sleeping thread. Its sleep ends at the latest when a queue waiting for the answer to a miss must ask
 * again (net.c), whatever the kicks do meanwhile, and after VHOST_IDLE_MS otherwise.
 *
 * A front end that sends garbage, stalls in the middle of a message (5 s receive timeout) or
 * disconnects is dropped: the device is reset (fds closed, memory unmapped, IOTLB emptied) and
 * the server waits for the next one in the same process.
 */
#include "vhost/dev.h"

#include "base/clock.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define RECV_TIMEOUT_S 5

static void *worker_main(void *arg)
{
	struct dg_vhost *v = arg;

	uint64_t spin_until = 0; /* 0: work was found by the last pass */

	vhost_agents_online(v->agent, VHOST_NR_VQ);
	/* Acquire pairs with the release store in stop_worker(). */
	while (!atomic_load_explicit(&v->sync.stop, memory_order_acquire)) {
		struct epoll_event ev[4];
		int n;

		bool pending = false;

		vhost_dp_quiescent(v);
		if (vhost_dp_poll(v)) {
			vhost_dp_kicks(v, false, NULL); /* polling: the driver need not kick */
			spin_until = 0;
			continue;
		}
		/* Nothing now: keep polling (kicks still off) for VHOST_SPIN_NS before sleeping. */
		uint64_t now = dg_now_ns();
		if (!spin_until)
			spin_until = now + VHOST_SPIN_NS;
		if (now < spin_until) {
			dg_cpu_relax();
			continue;
		}
		spin_until = 0;
		vhost_dp_kicks(v, true, &pending);
		if (pending)
			continue;
		/* Offline while asleep: invalidations do not wait for us; nothing cached is used
		 * until the agents caught up again (vhost_agents_online()). */
		vhost_agents_offline(v->agent, VHOST_NR_VQ);
		n = epoll_wait(v->epoll_fd, ev, 4, vhost_dp_idle_timeout_ms(v));
		vhost_agents_online(v->agent, VHOST_NR_VQ);
		for (int i = 0; i < n; i++) {
			uint32_t qi = ev[i].data.u32;
			int fd = qi < VHOST_NR_VQ ? v->vq[qi].kick_fd : v->sync.wake_fd;
			uint64_t cnt;

			if (fd >= 0 && read(fd, &cnt, sizeof(cnt)) == sizeof(cnt) &&
			    qi < VHOST_NR_VQ)
				vhost_count(&v->st.q[qi].kicks, 1);
		}
	}
	vhost_agents_offline(v->agent, VHOST_NR_VQ);
	return NULL;
}

static void stop_worker(struct dg_vhost *v)
{
	uint64_t one = 1;

	/* Release pairs with the acquire in worker_main(). */
	atomic_store_explicit(&v->sync.stop, true, memory_order_release);
	(void)!write(v->sync.wake_fd, &one, sizeof(one));
	pthread_join(v->thread, NULL);
	v->sync.worker = false;
	atomic_store_explicit(&v->sync.stop, false, memory_order_relaxed);
}

void dg_vhost_stop(dg_vhost *v)
{
	uint64_t one = 1;

	(void)!write(v->stop_fd, &one, sizeof(one));
}

void dg_vhost_report(dg_vhost *v)
{
	uint64_t one = 1;

	(void)!write(v->report_fd, &one, sizeof(one));
}

static void report(struct dg_vhost *v)
{
	struct dg_vhost_stats s;

	if (!v->cfg.on_report)
		return;
	dg_vhost_get_stats(v, &s);
	v->cfg.on_report(v->cfg.cookie, &s);
}

static bool drain(int fd)
{
	uint64_t cnt;

	return read(fd, &cnt, sizeof(cnt)) == sizeof(cnt);
}

/* Read exactly @len bytes (the socket has a receive timeout). */
static int read_full(int fd, void *buf, size_t len)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n = recv(fd, (uint8_t *)buf + done, len - done, 0);

		if (n == 0)
			return -ECONNRESET;
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		done += (size_t)n;
	}
	return 0;
}

/* One message off the socket into @buf; its fds into @fds. 0, or an error: disconnect. */
static int recv_message(struct dg_vhost *v, int conn, uint8_t *buf, size_t *len, int *fds,
			size_t *nfds)
{
	union {
		char buf[CMSG_SPACE(VU_MAX_FDS * sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = {.iov_base = buf, .iov_len = VU_HDR_SIZE};
	struct msghdr mh = {.msg_iov = &iov,
			    .msg_iovlen = 1,
			    .msg_control = ctl.buf,
			    .msg_controllen = sizeof(ctl.buf)};
	struct vu_hdr h;
	ssize_t n;
	int rc;

	*nfds = 0;
	do {
		n = recvmsg(conn, &mh, MSG_CMSG_CLOEXEC);
	} while (n < 0 && errno == EINTR);
	if (n <= 0)
		return n == 0 ? -ECONNRESET : -errno;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < k && *nfds < VU_MAX_FDS; i++)
			memcpy(&fds[(*nfds)++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
	}
	if (mh.msg_flags & MSG_CTRUNC) {
		vhost_log(v, 0, "message with more than %u fds: disconnecting", VU_MAX_FDS);
		return -EPROTO; /* the caller closes what arrived */
	}
	if ((size_t)n < VU_HDR_SIZE && (rc = read_full(conn, buf + n, VU_HDR_SIZE - (size_t)n)))
		return rc;
	memcpy(&h, buf, sizeof(h));
	if (h.size > DG_VHOST_MSG_MAX - VU_HDR_SIZE) {
		vhost_log(v, 0, "message of %u payload bytes (request %u): disconnecting", h.size,
			  h.request);
		vhost_count(&v->st.bad_messages, 1);
		return -EPROTO;
	}
	if ((rc = read_full(conn, buf + VU_HDR_SIZE, h.size)))
		return rc;
	*len = VU_HDR_SIZE + h.size;
	return 0;
}

static int send_full(int fd, const void *buf, size_t len)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n = send(fd, (const uint8_t *)buf + done, len - done, MSG_NOSIGNAL);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		done += (size_t)n;
	}
	return 0;
}

/* Serve one front end until it goes away. Returns true if dg_vhost_stop() was called. */
static bool serve(struct dg_vhost *v, int conn)
{
	uint8_t buf[DG_VHOST_MSG_MAX], reply[DG_VHOST_REPLY_MAX];
	struct timeval tv = {.tv_sec = RECV_TIMEOUT_S};
	bool stop = false;

	setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	for (;;) {
		struct pollfd p[4] = {{.fd = conn, .events = POLLIN},
				      {.fd = v->stop_fd, .events = POLLIN},
				      {.fd = v->report_fd, .events = POLLIN},
				      {.fd = v->backend_fd, .events = POLLIN}};
		int fds[VU_MAX_FDS];
		size_t len = 0, nfds = 0, rlen = 0;
		int rc;

		if (poll(p, v->backend_fd >= 0 ? 4 : 3, -1) < 0) {
			if (errno == EINTR)
				continue;
			vhost_log(v, 0, "poll: %s", strerror(errno));
			break;
		}
		if (p[1].revents && drain(v->stop_fd)) {
			stop = true;
			break;
		}
		if (p[2].revents && drain(v->report_fd))
			report(v);
		if (v->backend_fd >= 0 && p[3].revents) {
			/* Replies on the back-end channel are not asked for; drop anything. */
			char junk[256];

			if (recv(v->backend_fd, junk, sizeof(junk), MSG_DONTWAIT) == 0) {
				vhost_log(v, 1, "back-end channel closed");
				vhost_sync_pause(v);
				close(v->backend_fd);
				v->backend_fd = -1;
				vhost_sync_resume(v);
			}
		}
		if (!p[0].revents)
			continue;
		rc = recv_message(v, conn, buf, &len, fds, &nfds);
		if (rc) {
			for (size_t i = 0; i < nfds; i++)
				close(fds[i]);
			if (rc != -ECONNRESET)
				vhost_log(v, 0, "receive: %s: disconnecting", strerror(-rc));
			break;
		}
		rc = dg_vhost_handle_message(v, buf, len, fds, nfds, reply, &rlen);
		if (rc)
			break;
		if (rlen && (rc = send_full(conn, reply, rlen))) {
			vhost_log(v, 0, "send: %s: disconnecting", strerror(-rc));
			break;
		}
	}
	return stop;
}

static int listen_on(const char *path)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	int fd;

	if (!path || strlen(path) >= sizeof(a.sun_path))
		return -EINVAL;
	strcpy(a.sun_path, path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	unlink(path);
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) || listen(fd, 1)) {
		int e = -errno;

		close(fd);
		return e;
	}
	return fd;
}

int dg_vhost_run(dg_vhost *v)
{
	int lfd, rc = 0;

	if (!v)
		return -EINVAL;
	lfd = listen_on(v->cfg.socket_path);
	if (lfd < 0)
		return lfd;
	v->sync.worker = true;
	if ((rc = pthread_create(&v->thread, NULL, worker_main, v))) {
		v->sync.worker = false;
		close(lfd);
		unlink(v->cfg.socket_path);
		return -rc;
	}
	vhost_log(v, 1, "listening on %s", v->cfg.socket_path);
	for (;;) {
		struct pollfd p[3] = {{.fd = lfd, .events = POLLIN},
				      {.fd = v->stop_fd, .events = POLLIN},
				      {.fd = v->report_fd, .events = POLLIN}};

		if (poll(p, 3, -1) < 0) {
			if (errno == EINTR)
				continue;
			rc = -errno;
			break;
		}
		if (p[1].revents && drain(v->stop_fd))
			break;
		if (p[2].revents && drain(v->report_fd))
			report(v);
		if (!p[0].revents)
			continue;
		int conn = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (conn < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			rc = -errno;
			break;
		}
		vhost_count(&v->st.connections, 1);
		vhost_log(v, 1, "front end connected");
		bool stop = serve(v, conn);
		close(conn);
		dg_vhost_reset(v);
		vhost_log(v, 1, "front end disconnected");
		report(v);
		if (stop || v->cfg.once)
			break;
	}
	stop_worker(v);
	close(lfd);
	unlink(v->cfg.socket_path);
	return rc;
}
