/* SPDX-License-Identifier: MIT */
/*
 * bench/attack/oracle.h - tagged memory: what every byte a malicious device touched was.
 *
 * The "kernel" memory of an attack (the driver's arena, pool memory) is cut into 64-byte cells,
 * and every 8-byte word of a cell holds a tag that names it:
 *
 *   63      48 47           24 23    16 15        0
 *   [ 0xD6A5  |    cell id     |  gen   | word 0..7 ]
 *
 * gen is the cell's content generation: the kernel writing new data into a cell (reusing a
 * buffer after unmap, planting a secret next to a buffer) bumps it. Whatever bytes a device
 * reads can therefore be traced back exactly: which cell, which generation of its content.
 *
 * Per device the oracle knows which generations of a cell it was *given*: a mapping that lets
 * the device read the cell grants the generation the cell holds at map time (and a device that
 * legitimately wrote a generation knows it too). A read is a breach when it returns a tag of a
 * generation the device was never given - the rest of a buffer's page, a buffer the kernel
 * reused after unmap, another device's buffer. Bytes that are not tags (zeros of a bounce
 * slot's padding, the device's own pattern) are neither granted nor a breach: "unknown".
 *
 * Writes are found by comparison: after every attack write the whole tagged memory is compared
 * with what the kernel last wrote. A changed cell that no live mapping lets the device write is
 * a breach (and is repaired, so the next write is judged alone); a changed cell that is
 * writable by the device holds legitimate device data and is no longer checked until the kernel
 * writes it again.
 *
 * Why tags and not a shadow copy: a tag also says *where* a misdirected read came from (a
 * stale IOTLB entry after an IOVA was reused reads the old buffer, and the tag says so), which
 * is what separates "the old buffer inside the lazy window" from "somebody else's memory".
 */
#ifndef DG_BENCH_ATTACK_ORACLE_H
#define DG_BENCH_ATTACK_ORACLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ORC_CELL      64u /* bytes per cell */
#define ORC_MAX_DEVS  2u  /* devices whose grants are tracked */
#define ORC_MAX_AREAS 16u /* registered memory areas */
#define ORC_MAGIC     0xD6A5ull

struct orc_cell {
	uint64_t granted[ORC_MAX_DEVS][4]; /* bit g: generation g was given to the device */
	uint16_t rd[ORC_MAX_DEVS];	   /* live mappings that let the device read the cell */
	uint16_t wr[ORC_MAX_DEVS];	   /* ... write it */
	uint8_t gen;			   /* generation of the content the kernel wrote last */
	bool device_data;		   /* holds what a device wrote legitimately: unchecked */
};

struct orc_area {
	uint8_t *base;	     /* 64-byte aligned */
	size_t len;	     /* multiple of ORC_CELL */
	uint32_t first_cell; /* id of the cell at base */
	bool used;
};

struct orc {
	struct orc_area area[ORC_MAX_AREAS];
	struct orc_cell *cell; /* indexed by cell id */
	uint32_t ncells;       /* ids handed out (ids are never reused) */
	uint32_t cap;
};

/* Called for every breached cell: its host address and the breached bytes in it. */
typedef void (*orc_breach_fn)(void *arg, uintptr_t host, size_t bytes);

/* Totals of one read or write judgement. */
struct orc_verdict {
	size_t granted; /* bytes the device was given */
	size_t unknown; /* bytes that are no tag (zeros, the device's own data) */
	size_t breach;	/* bytes of memory the device was not given (read or changed) */
};

void orc_init(struct orc *o);
void orc_fini(struct orc *o);

/* Register [base, base + len) (64-byte aligned, whole cells) and tag it. Returns 0 or
 * -EINVAL / -ENOSPC / -ENOMEM. */
int orc_add_area(struct orc *o, void *base, size_t len);
/* Forget an area (its memory is about to be freed). */
void orc_remove_area(struct orc *o, const void *base);
/* Is [addr, addr + len) entirely inside registered memory? */
bool orc_covers(const struct orc *o, uintptr_t addr, uint64_t len);

/* The kernel writes new content into every cell touching [addr, addr + len). */
void orc_kernel_write(struct orc *o, const void *addr, size_t len);
/* A mapping of [addr, addr + len) for device @dev starts (@rd: it may read, @wr: write). */
void orc_grant(struct orc *o, unsigned int dev, const void *addr, size_t len, bool rd, bool wr);
/* ... and ends. */
void orc_revoke(struct orc *o, unsigned int dev, const void *addr, size_t len, bool rd, bool wr);

/*
 * The content device @dev legitimately writes into [addr, addr + len) (whole cells): the next
 * generation's tags, in @out. Call orc_device_wrote() once the write is done: @landed says the
 * bytes are in [addr, addr + len) now (false under bounce: they sit in a shadow slot until the
 * unmap copies them back, so the cells are not checked until the kernel writes them again).
 * Either way the device knows the new generation (reading it back is no breach).
 */
void orc_device_content(struct orc *o, const void *addr, size_t len, uint8_t *out);
void orc_device_wrote(struct orc *o, unsigned int dev, const void *addr, size_t len, bool landed);
/* Do the cells of [addr, addr + len) hold exactly the tags the oracle expects? */
bool orc_expected(const struct orc *o, const void *addr, size_t len);

/* Judge @len bytes device @dev read; @fn gets every breached cell. */
void orc_judge_read(const struct orc *o, unsigned int dev, const uint8_t *data, size_t len,
		    orc_breach_fn fn, void *arg, struct orc_verdict *v);
/* After a write by device @dev: find changed cells, report and repair the forbidden ones. */
void orc_judge_writes(struct orc *o, unsigned int dev, orc_breach_fn fn, void *arg,
		      struct orc_verdict *v);

#endif /* DG_BENCH_ATTACK_ORACLE_H */
