/* SPDX-License-Identifier: MIT */
/*
 * vhost/dev.h - the back end's state shared by its control plane (dev.c: vhost-user messages),
 * its data path (net.c: the net device's queues) and its server (server.c: socket, threads).
 *
 * Two threads touch a device: the control thread (messages) and the data path (one thread in
 * dg_vhost_run(), or the caller of dg_vhost_poll()). They meet in three ways:
 *  - pause (struct vhost_sync): a message that changes the memory table, a ring, a feature or an
 *    fd first parks the data path at a quiescent point (between bursts, offline), changes the
 *    state, then lets it go;
 *  - invalidation (the IOMMU engine, vhost/agent.h): the control thread clears the store's
 *    leaves, marks rings the range overlaps as stale, bumps inval_gen, queues one engine command
 *    and acknowledges the INVALIDATE to the front end only after dg_inval_wait(): every queue's
 *    agent has applied the command to its cache at a quiescent point, or is offline (asleep in
 *    epoll_wait, holding nothing) and will apply it before its next translation. After its
 *    quiescent point the data path drops the ring translations marked stale and forgets the
 *    pending misses that the new invalidations cover (inval_gen, inval_log);
 *  - update: after an UPDATE the control thread bumps update_gen and wakes the data path, which
 *    retries the queues that stopped on a miss.
 * With no data-path thread (in-process use) the caller serialises everything: dg_vhost_poll()
 * brings the agents online, passes the quiescent point, runs, and takes them offline again, so
 * a message handled between two polls never waits for them.
 */
#ifndef DG_VHOST_DEV_H
#define DG_VHOST_DEV_H

#include <dmaguard/vhost.h>

#include "vhost/agent.h"
#include "vhost/iotlb.h"
#include "vhost/memtable.h"
#include "vhost/virtq.h"

#include <pthread.h>
#include <stdatomic.h>

#define VHOST_NR_VQ	       2 /* 0 receive, 1 transmit */
#define VHOST_RXQ	       0
#define VHOST_TXQ	       1
#define VHOST_BURST	       64
#define VHOST_MAX_PENDING      32   /* outstanding IOTLB misses remembered for de-duplication */
#define VHOST_INVAL_LOG	       64   /* recent invalidated ranges the data path can look up */
#define VHOST_FRAME_MAX	       9216 /* largest frame carried (jumbo); larger ones are dropped */
#define VHOST_FRAMEQ	       64   /* frames waiting for receive buffers */
#define VHOST_MISS_RESEND_NS   100000000ull /* a miss unanswered this long is sent again */
#define VHOST_MISS_SENDFAIL_NS 1000000ull   /* a MISS that could not be sent: try again after */
#define VHOST_IDLE_MS	       100	    /* the data path's longest sleep */
#define VHOST_SPIN_NS	       50000ull	    /* polling goes on this long after the last work */

struct vhost_counters {
	_Atomic uint64_t connections, messages, bad_messages;
	_Atomic uint64_t iotlb_misses, iotlb_miss_dedup, iotlb_updates, iotlb_invalidations;
	_Atomic uint64_t iotlb_access_fails, iotlb_entries, ring_translations, ring_errors;
	_Atomic uint64_t outside_memtable, arp_replies, icmp_replies, ignored, iotlb_cache_fills;
	struct {
		_Atomic uint64_t packets, bytes, dropped, kicks, calls;
	} q[VHOST_NR_VQ];
};

struct vhost_sync {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool worker; /* a data-path thread exists (set before it starts) */
	/* Bumped (release) by the control thread before it queues each invalidation's engine
	   command, after recording the range in inval_log; read (acquire) by the data path at its
	   quiescent point, which then forgets the pending misses the new ranges cover. */
	_Atomic uint64_t inval_gen;
	/* Invalidation number g (g >= 1) is described by inval_log[(g - 1) % VHOST_INVAL_LOG], a
	   seqlock whose gen word says which invalidation it holds (0 while rewritten). */
	struct vhost_inval_rec {
		_Atomic uint64_t gen, first, last;
	} inval_log[VHOST_INVAL_LOG];
	_Atomic uint64_t update_gen; /* bumped by the control thread after each UPDATE */
	_Atomic bool pause_req;	     /* control thread wants the data path parked */
	bool parked;		     /* data path parked (lock) */
	_Atomic bool stop;	     /* data-path thread must exit */
	int wake_fd;		     /* eventfd: wakes the data path */
};

struct vhost_miss {
	uint64_t page; /* IOVA page asked for */
	unsigned int perm;
	uint64_t sent_ns;
};

struct vhost_frame {
	uint32_t len;
	uint8_t data[VHOST_FRAME_MAX];
};

struct dg_vhost {
	struct dg_vhost_config cfg;
	char *socket_path;
	uint8_t mac[6];

	/* Control thread state (the data path reads it only while not paused). */
	uint64_t features;	    /* acked virtio features */
	uint64_t protocol_features; /* acked protocol features */
	bool iommu;		    /* VIRTIO_F_IOMMU_PLATFORM acked */
	int backend_fd;		    /* back-end channel, -1: none; the data path sends on it */
	struct vhost_memtable mt;
	struct vhost_iotlb iotlb;   /* the store of what UPDATEs granted */
	struct vhost_engine engine; /* the per-queue caches' IOMMU engine (vhost/agent.h) */
	struct dg_device *agent[VHOST_NR_VQ]; /* queue i's agent (also vq[i].agent) */
	struct vhost_vq vq[VHOST_NR_VQ];
	int epoll_fd; /* kick fds and wake_fd, waited on by the data path */

	/* Data path state. */
	uint64_t local_gen;	  /* inval_gen last acknowledged */
	uint64_t seen_update_gen; /* update_gen last acted upon */
	struct vhost_miss miss[VHOST_MAX_PENDING];
	unsigned int nmiss;
	struct vhost_frame *frames; /* VHOST_FRAMEQ frames waiting for receive buffers */
	unsigned int fq_head, fq_len;
	uint8_t *txbuf;	   /* VHOST_FRAME_MAX + header */
	uint8_t *gen_tmpl; /* gen mode: virtio-net header + frame with sequence number 0 */
	uint32_t gen_len;  /* gen mode: frame bytes (header excluded) */
	uint64_t gen_seq;  /* gen mode: sequence number of the next frame (per front end) */

	struct vhost_sync sync;
	struct vhost_counters st;
	int stop_fd;   /* eventfd: dg_vhost_stop() */
	int report_fd; /* eventfd: dg_vhost_report() */
	pthread_t thread;
};

/* Count one event. */
static inline void vhost_count(_Atomic uint64_t *c, uint64_t n)
{
	atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

/* Error log (always) and debug log (cfg.verbose >= level). */
void vhost_log(const struct dg_vhost *v, int level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* The address space the queues use now. */
static inline struct vhost_as vhost_dev_as(struct dg_vhost *v)
{
	return (struct vhost_as){.mt = &v->mt,
				 .iotlb = v->iommu ? &v->iotlb : NULL,
				 .outside = &v->st.outside_memtable,
				 .fills = &v->st.iotlb_cache_fills};
}

/* Data path (net.c): quiescent point, then one pass over the queues. */
void vhost_dp_quiescent(struct dg_vhost *v);
unsigned int vhost_dp_poll(struct dg_vhost *v);
/* Driver kicks off while the data path polls, on before it sleeps (*@pending: entries arrived
 * in the meantime, do not sleep). */
void vhost_dp_kicks(struct dg_vhost *v, bool on, bool *pending);
/* How long the data path may sleep with nothing to do: until the first queue waiting for a
 * miss must look again (rounded up), at most VHOST_IDLE_MS. */
int vhost_dp_idle_timeout_ms(const struct dg_vhost *v);
/* Forget data-path state tied to the front end (queued frames, pending misses). */
void vhost_dp_reset(struct dg_vhost *v);

/* Generator mode: write the virtio-net header and a @len-byte frame with sequence number 0
 * from @ip and @mac into @out (HDR + @len bytes). Pure function. */
void vhost_net_gen_template(uint8_t *out, uint32_t len, uint32_t ip, const uint8_t mac[6]);

/* Echo mode: the reply to @in (ARP or ICMP echo for @ip), or 0 if none. Pure function. */
size_t vhost_net_echo(const uint8_t *in, size_t len, uint32_t ip, const uint8_t mac[6],
		      uint8_t *out, size_t cap, int *kind);
#define VHOST_ECHO_ARP	   1
#define VHOST_ECHO_ICMP	   2
#define VHOST_ECHO_IGNORED 3

/* Control side of struct vhost_sync (dev.c). */
void vhost_sync_pause(struct dg_vhost *v);
void vhost_sync_resume(struct dg_vhost *v);

#endif /* DG_VHOST_DEV_H */
