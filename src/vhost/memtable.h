/* SPDX-License-Identifier: MIT */
/*
 * vhost/memtable.h - the front end's memory table: validated regions mapped into the back end.
 *
 * A region is known by three addresses: its guest physical address (gpa, what descriptors
 * carry without an IOMMU), the front end's own virtual address (uaddr, what ring addresses
 * and IOTLB UPDATEs carry) and where the back end mapped it (host). Every host pointer the back
 * end ever dereferences comes from here, so a range check against this table is the last line
 * of defence (vhost_memtable_contains()).
 *
 * Invariants after vhost_memtable_map() succeeded: 1..VU_MAX_REGIONS regions, each of non-zero
 * size, no address range that wraps, no two regions overlapping in gpa nor in uaddr, each fully
 * backed by its file (so no access faults with SIGBUS unless the front end shrinks the file
 * later, which the seal tried at map time forbids when the file allows sealing).
 */
#ifndef DG_VHOST_MEMTABLE_H
#define DG_VHOST_MEMTABLE_H

#include "vhost/proto.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct vhost_region {
	uint64_t gpa;	/* first guest physical address */
	uint64_t size;	/* bytes, > 0 */
	uint64_t uaddr; /* front end's virtual address of gpa */
	uint8_t *host;	/* back end's address of gpa */
	void *map_base; /* what mmap() returned (host rounded down to the mapping alignment) */
	size_t map_len; /* what was mapped */
};

struct vhost_memtable {
	unsigned int n; /* regions in use, 0 = no table */
	struct vhost_region r[VU_MAX_REGIONS];
};

/*
 * Check a SET_MEM_TABLE payload without touching any fd: region count 1..8 and equal to @nfds,
 * sizes non-zero, no range wrapping past 2^64 (gpa, uaddr, mmap offset), no overlap between
 * regions in gpa or uaddr. Returns 0 or -EINVAL.
 */
int vhost_memtable_validate(const struct vu_memory *m, unsigned int nfds);

/*
 * Validate, then map every region of @m from its fd into @mt (which must be empty). The fds are
 * not closed. On error nothing stays mapped and @mt is empty. Returns 0, -EINVAL (validation,
 * fd not a regular file, region past the end of its file), or the errno of fstat()/mmap().
 */
int vhost_memtable_map(struct vhost_memtable *mt, const struct vu_memory *m, const int *fds,
		       unsigned int nfds);

/* Unmap every region; @mt becomes empty. */
void vhost_memtable_unmap(struct vhost_memtable *mt);

/*
 * Host address of guest physical @gpa, and in *@room the bytes from there to the end of its
 * region. NULL when no region holds @gpa.
 */
uint8_t *vhost_memtable_gpa(const struct vhost_memtable *mt, uint64_t gpa, uint64_t *room);

/* Same for a front-end virtual address. */
uint8_t *vhost_memtable_uva(const struct vhost_memtable *mt, uint64_t uaddr, uint64_t *room);

/* Whether [host, host + len) lies inside mapped regions (possibly several adjacent ones). */
bool vhost_memtable_contains(const struct vhost_memtable *mt, const void *host, uint64_t len);

#endif /* DG_VHOST_MEMTABLE_H */
