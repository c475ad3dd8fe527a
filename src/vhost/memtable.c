/* SPDX-License-Identifier: MIT */
/*
 * vhost/memtable.c - validation and mapping of the front end's memory table.
 *
 * Why the checks: a region whose size is zero, whose range wraps, or that overlaps another
 * makes translation ambiguous (two host addresses for one guest address); a region that runs
 * past the end of its file maps fine but faults with SIGBUS on first touch, which would let the
 * front end crash the back end, so the file size is checked with fstat() before mmap().
 * Regions are few (at most 8), so lookups scan them linearly; the data path keeps no pointer
 * into this table across a table change (the control thread pauses it, see vhost/dev.c).
 */
#include "vhost/memtable.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* [a, a + alen) and [b, b + blen) overlap; lengths > 0 and neither range wraps. */
static bool ranges_overlap(uint64_t a, uint64_t alen, uint64_t b, uint64_t blen)
{
	return a <= b + (blen - 1) && b <= a + (alen - 1);
}

int vhost_memtable_validate(const struct vu_memory *m, unsigned int nfds)
{
	if (!m || m->nregions == 0 || m->nregions > VU_MAX_REGIONS || m->nregions != nfds)
		return -EINVAL;
	for (unsigned int i = 0; i < m->nregions; i++) {
		const struct vu_region *r = &m->regions[i];

		if (r->size == 0 || r->size > SIZE_MAX)
			return -EINVAL;
		if (r->gpa + (r->size - 1) < r->gpa || r->uaddr + (r->size - 1) < r->uaddr ||
		    r->mmap_off + (r->size - 1) < r->mmap_off ||
		    r->mmap_off + (r->size - 1) == UINT64_MAX)
			return -EINVAL;
		for (unsigned int j = 0; j < i; j++) {
			const struct vu_region *o = &m->regions[j];

			if (ranges_overlap(r->gpa, r->size, o->gpa, o->size) ||
			    ranges_overlap(r->uaddr, r->size, o->uaddr, o->size))
				return -EINVAL;
		}
	}
	return 0;
}

static int map_region(struct vhost_region *out, const struct vu_region *r, int fd)
{
	struct stat st;
	uint64_t align = (uint64_t)sysconf(_SC_PAGESIZE);

	if (fstat(fd, &st))
		return -errno;
	if (!S_ISREG(st.st_mode) || st.st_size < 0)
		return -EINVAL;
	if (r->mmap_off + r->size > (uint64_t)st.st_size)
		return -EINVAL; /* would fault with SIGBUS past the end of the file */
	/* hugetlbfs reports its page size here; mappings must be aligned to it. */
	if (st.st_blksize > 0 && ((uint64_t)st.st_blksize & ((uint64_t)st.st_blksize - 1)) == 0 &&
	    (uint64_t)st.st_blksize > align)
		align = (uint64_t)st.st_blksize;

	uint64_t start = r->mmap_off & ~(align - 1);
	uint64_t len = r->mmap_off + r->size - start;

	if (len > SIZE_MAX - align)
		return -EINVAL;
	len = (len + align - 1) & ~(align - 1);
	void *p = mmap(NULL, (size_t)len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)start);
	if (p == MAP_FAILED)
		return -errno;
	/* Best effort: forbid the front end to shrink the file under us (memfd with sealing). */
	(void)fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK);
	out->gpa = r->gpa;
	out->size = r->size;
	out->uaddr = r->uaddr;
	out->map_base = p;
	out->map_len = (size_t)len;
	out->host = (uint8_t *)p + (r->mmap_off - start);
	return 0;
}

int vhost_memtable_map(struct vhost_memtable *mt, const struct vu_memory *m, const int *fds,
		       unsigned int nfds)
{
	int rc = vhost_memtable_validate(m, nfds);

	if (rc)
		return rc;
	if (!fds)
		return -EINVAL;
	memset(mt, 0, sizeof(*mt));
	for (unsigned int i = 0; i < m->nregions; i++) {
		rc = map_region(&mt->r[i], &m->regions[i], fds[i]);
		if (rc) {
			vhost_memtable_unmap(mt);
			return rc;
		}
		mt->n = i + 1;
	}
	return 0;
}

void vhost_memtable_unmap(struct vhost_memtable *mt)
{
	for (unsigned int i = 0; i < mt->n; i++)
		munmap(mt->r[i].map_base, mt->r[i].map_len);
	memset(mt, 0, sizeof(*mt));
}

uint8_t *vhost_memtable_gpa(const struct vhost_memtable *mt, uint64_t gpa, uint64_t *room)
{
	for (unsigned int i = 0; i < mt->n; i++) {
		const struct vhost_region *r = &mt->r[i];

		if (gpa - r->gpa < r->size) {
			*room = r->size - (gpa - r->gpa);
			return r->host + (gpa - r->gpa);
		}
	}
	return NULL;
}

uint8_t *vhost_memtable_uva(const struct vhost_memtable *mt, uint64_t uaddr, uint64_t *room)
{
	for (unsigned int i = 0; i < mt->n; i++) {
		const struct vhost_region *r = &mt->r[i];

		if (uaddr - r->uaddr < r->size) {
			*room = r->size - (uaddr - r->uaddr);
			return r->host + (uaddr - r->uaddr);
		}
	}
	return NULL;
}

bool vhost_memtable_contains(const struct vhost_memtable *mt, const void *host, uint64_t len)
{
	uintptr_t p = (uintptr_t)host;

	while (len) {
		unsigned int i;

		for (i = 0; i < mt->n; i++) {
			uintptr_t base = (uintptr_t)mt->r[i].host;

			if (p - base < mt->r[i].size) {
				uint64_t room = mt->r[i].size - (p - base);

				if (len <= room)
					return true;
				len -= room;
				p += room;
				break;
			}
		}
		if (i == mt->n)
			return false;
	}
	return true;
}
