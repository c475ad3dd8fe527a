/* SPDX-License-Identifier: MIT */
/*
 * dmaguard/vhost.h - a vhost-user net back end with a device IOTLB.
 *
 * The back end serves one front end at a time (QEMU, or any vhost-user front end) on a unix
 * socket in server mode, as a virtio-net device with one receive and one transmit split
 * virtqueue. With VIRTIO_F_IOMMU_PLATFORM negotiated, every address the front end gives (rings
 * and buffers) is an IOVA that the back end translates through its device IOTLB, filled by the
 * front end's IOTLB UPDATE messages and emptied by its INVALIDATE messages; a translation the
 * IOTLB does not hold is asked for with a MISS on the back-end channel.
 *
 * Two ways to use it:
 *  - As a server: dg_vhost_create() then dg_vhost_run(), which accepts front ends on
 *    cfg->socket_path one after the other and serves each until it disconnects. A data-path
 *    thread processes the queues while the calling thread serves the socket, so a queue that
 *    waits for a MISS never stalls the message loop.
 *  - In process, with no socket and no thread: dg_vhost_handle_message() feeds one vhost-user
 *    message (with its fds) and returns the reply; dg_vhost_poll() runs the data path once. The
 *    fuzz harness and benchmarks drive the back end this way.
 *
 * Modes of the net device (struct dg_vhost_config.mode):
 *  DG_VHOST_ECHO  answers ARP requests and ICMP echo requests for cfg->ipv4; the ICMP payload
 *                 is returned untouched; everything else is counted and dropped.
 *  DG_VHOST_SINK  counts and drops every transmitted frame.
 *  DG_VHOST_LOOP  returns every transmitted frame on the receive queue, unchanged.
 *  DG_VHOST_GEN   a traffic generator: fills every receive buffer the driver posts with a
 *                 frame of cfg->gen_frame_bytes (an Ethernet broadcast carrying an IPv4/UDP
 *                 datagram from cfg->ipv4 and cfg->mac to port 9, whose payload starts with a
 *                 64-bit big-endian sequence number at DG_VHOST_GEN_SEQ_OFFSET: 0, 1, 2, ... per
 *                 front end); transmitted frames are counted and dropped as in sink mode.
 *
 * Bad input from the front end (malformed messages, bad memory tables, rings or descriptors
 * outside the memory table, IOTLB ranges that wrap) is logged, counted in struct
 * dg_vhost_stats and either refused (a non-zero reply when one is expected) or answered with a
 * disconnect; the server then waits for the next front end. No input makes the back end touch
 * memory outside the front end's memory table (stats.outside_memtable counts attempts the last
 * line of defence caught; it stays 0 unless there is a bug).
 */
#ifndef DMAGUARD_VHOST_H
#define DMAGUARD_VHOST_H

#include <dmaguard/common.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dg_vhost dg_vhost;

enum dg_vhost_mode {
	DG_VHOST_ECHO = 1,
	DG_VHOST_SINK,
	DG_VHOST_LOOP,
	DG_VHOST_GEN,
};

/* Generator mode: frame sizes accepted (without the virtio-net header) and the default. */
#define DG_VHOST_GEN_MIN_BYTES 60
#define DG_VHOST_GEN_MAX_BYTES 9216
#define DG_VHOST_GEN_DEFAULT   64
/* Offset in a generated frame of its sequence number (after Ethernet, IPv4 and UDP headers). */
#define DG_VHOST_GEN_SEQ_OFFSET 42

struct dg_vhost_stats;

struct dg_vhost_config {
	const char *socket_path; /* server socket; required by dg_vhost_run() only */
	enum dg_vhost_mode mode;
	uint32_t ipv4;	/* echo: the address answered, host byte order (10.0.0.1 = 0x0a000001) */
	uint8_t mac[6]; /* echo: the MAC answered with; all zero = 02:00:00:00:00:01 */
	bool once;	/* dg_vhost_run() returns after the first front end disconnects */
	bool iommu;	/* offer VIRTIO_F_IOMMU_PLATFORM (default true via dg_vhost_config_init) */
	int verbose;	/* 0: errors only, 1: connections and negotiation, 2: every message */
	uint32_t gen_frame_bytes; /* gen: frame size, DG_VHOST_GEN_MIN_BYTES..MAX_BYTES (the
				     virtio-net header not included); 0 = DG_VHOST_GEN_DEFAULT */
	/*
	 * Called by dg_vhost_run() in its own thread after each front end disconnects and when
	 * dg_vhost_report() was called; may be NULL. Must not call back into the back end.
	 */
	void (*on_report)(void *cookie, const struct dg_vhost_stats *stats);
	void *cookie;
};

/* Counters, cumulative over the back end's life. Queue 0 receives, queue 1 transmits. */
struct dg_vhost_queue_stats {
	uint64_t packets; /* frames moved through the queue */
	uint64_t bytes;	  /* their bytes, virtio-net header excluded */
	uint64_t dropped; /* frames dropped (rx: no buffer or too small; tx: too big); gen: receive
			     buffers too small for a frame (returned empty) */
	uint64_t kicks;	  /* notifications received from the driver */
	uint64_t calls;	  /* notifications sent to the driver */
};

struct dg_vhost_stats {
	uint64_t connections;	      /* front ends accepted */
	uint64_t messages;	      /* vhost-user messages received */
	uint64_t bad_messages;	      /* messages refused or answered with a disconnect */
	uint64_t iotlb_misses;	      /* MISS messages sent to the front end */
	uint64_t iotlb_miss_dedup;    /* misses not sent again because one was pending */
	uint64_t iotlb_updates;	      /* UPDATE messages applied */
	uint64_t iotlb_invalidations; /* INVALIDATE messages applied */
	uint64_t iotlb_access_fails;  /* accesses outside what was granted (ACCESS_FAIL sent) */
	uint64_t iotlb_entries;	      /* 4 KiB translations held now */
	uint64_t ring_translations;   /* times a ring address was (re)translated */
	uint64_t ring_errors;	      /* queues stopped for a malformed ring or descriptor */
	uint64_t outside_memtable;    /* accesses outside the memory table refused: must be 0 */
	uint64_t arp_replies;	      /* echo mode */
	uint64_t icmp_replies;	      /* echo mode */
	uint64_t ignored;	      /* echo mode: frames that were neither */
	uint64_t iotlb_cache_fills;   /* per-queue cache misses looked up in the IOTLB's store */
	struct dg_vhost_queue_stats queue[2];
};

/* Fill @cfg with defaults: echo mode, 10.0.0.1, IOMMU offered, errors only, 64-byte frames. */
DG_EXPORT void dg_vhost_config_init(struct dg_vhost_config *cfg);

/*
 * Create a back end. Returns NULL with errno EINVAL (bad mode; gen mode with a frame size
 * outside DG_VHOST_GEN_MIN_BYTES..DG_VHOST_GEN_MAX_BYTES), ENOMEM, or an errno of
 * eventfd()/epoll_create1(). @cfg is copied (socket_path too).
 */
DG_EXPORT dg_vhost *dg_vhost_create(const struct dg_vhost_config *cfg);

/* Stop any data-path thread, close every fd, unmap every region and free @v (NULL is a no-op). */
DG_EXPORT void dg_vhost_destroy(dg_vhost *v);

/*
 * Serve front ends on cfg->socket_path (an existing socket file there is replaced) until
 * dg_vhost_stop() or, with cfg->once, until the first front end disconnects. Returns 0, or a
 * negative errno of socket()/bind()/listen()/accept()/pthread_create(). Not reentrant: one
 * dg_vhost_run() per back end at a time, and no dg_vhost_handle_message()/dg_vhost_poll()
 * during it.
 */
DG_EXPORT int dg_vhost_run(dg_vhost *v);

/* Make dg_vhost_run() return soon. Async-signal-safe; may be called from any thread. */
DG_EXPORT void dg_vhost_stop(dg_vhost *v);

/* Make dg_vhost_run() call cfg->on_report soon. Async-signal-safe; any thread. */
DG_EXPORT void dg_vhost_report(dg_vhost *v);

/*
 * Snapshot of the counters. Any thread, any time; each counter is read atomically but the
 * snapshot as a whole is not (counters of a running back end move while it is taken).
 */
DG_EXPORT void dg_vhost_get_stats(const dg_vhost *v, struct dg_vhost_stats *out);

/* Largest vhost-user message dg_vhost_handle_message() accepts (header + payload). */
#define DG_VHOST_MSG_MAX (12 + 264)
/* Largest reply it produces. */
#define DG_VHOST_REPLY_MAX (12 + 40)

/*
 * In process: handle one vhost-user message of @len bytes (12-byte header and payload) with the
 * @nfds file descriptors @fds that came with it. The back end takes ownership of every fd,
 * whatever the result (it keeps the ones it uses and closes the others). When the message calls
 * for a reply, it is written to @reply (DG_VHOST_REPLY_MAX bytes) and *@reply_len is set; else
 * *@reply_len is 0. A refused message still returns 0 when its refusal is a reply.
 * Returns 0, or:
 *  -EPROTO   the message cannot be parsed (short header, payload size not matching, version)
 *            and the connection must be dropped (dg_vhost_run() disconnects)
 *  -EINVAL   @v, @msg, @reply or @reply_len NULL, or @nfds > 0 with @fds NULL
 * A front end that disconnects is modelled by dg_vhost_reset().
 */
DG_EXPORT int dg_vhost_handle_message(dg_vhost *v, const void *msg, size_t len, const int *fds,
				      size_t nfds, void *reply, size_t *reply_len);

/*
 * In process: run the data path once over every started queue (at most a burst per queue).
 * Sets *@work to the number of descriptor chains consumed (may be NULL). Returns 0 or -EINVAL.
 * Must not run concurrently with dg_vhost_handle_message() unless through dg_vhost_run().
 */
DG_EXPORT int dg_vhost_poll(dg_vhost *v, unsigned int *work);

/*
 * Forget the front end: stop the queues, close their fds and the back-end channel, unmap the
 * memory table, empty the IOTLB and the negotiated features. Counters are kept.
 */
DG_EXPORT void dg_vhost_reset(dg_vhost *v);

/* Write the counters as one JSON object (keys as in struct dg_vhost_stats) to @f. 0 or -EIO. */
DG_EXPORT int dg_vhost_stats_write_json(const struct dg_vhost_stats *s, FILE *f);

#ifdef __cplusplus
}
#endif

#endif /* DMAGUARD_VHOST_H */
