/* SPDX-License-Identifier: MIT */
/*
 * dmaguard/common.h - definitions shared by every dmaguard public header.
 *
 * Conventions of the whole API (docs/architecture.md, "Interfaces"):
 *  - Actions return 0 or a negative errno; predicates return bool; constructors return NULL
 *    with errno set. A count is never folded into a negative return: it comes back through
 *    an output parameter.
 *  - Objects are opaque, made by dg_*_create() and freed by dg_*_destroy().
 *  - "phys" addresses are addresses in the host's address space as the emulated IOMMU sees
 *    it: dmaguard runs in user space, so a physical address is the process virtual address
 *    of the memory (the identity "host physical" mapping). Devices reach memory only through
 *    the translations dmaguard gives them.
 */
#ifndef DMAGUARD_COMMON_H
#define DMAGUARD_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(DG_BUILDING_LIBRARY)
#define DG_EXPORT __attribute__((visibility("default")))
#else
#define DG_EXPORT
#endif

/*
 * Access permissions of a mapping, seen from the device. The values are those of Linux's
 * IOMMU_* flags, so known-answer vectors produced by Linux apply unchanged.
 *  DG_PROT_READ   the device may read the memory (DMA_TO_DEVICE)
 *  DG_PROT_WRITE  the device may write the memory (DMA_FROM_DEVICE)
 *  DG_PROT_CACHE  coherent, cacheable memory attributes
 *  DG_PROT_NOEXEC never executable (ARM XN)
 *  DG_PROT_MMIO   device memory attributes (ARM)
 *  DG_PROT_PRIV   privileged access only (ARM stage 1)
 */
#define DG_PROT_READ   (1u << 0)
#define DG_PROT_WRITE  (1u << 1)
#define DG_PROT_CACHE  (1u << 2)
#define DG_PROT_NOEXEC (1u << 3)
#define DG_PROT_MMIO   (1u << 4)
#define DG_PROT_PRIV   (1u << 5)
#define DG_PROT_ALL                                                                     \
	(DG_PROT_READ | DG_PROT_WRITE | DG_PROT_CACHE | DG_PROT_NOEXEC | DG_PROT_MMIO | \
	 DG_PROT_PRIV)

/* The library's version, for dmaguard info and pkg-config consumers. */
DG_EXPORT const char *dg_version(void);

#ifdef __cplusplus
}
#endif

#endif /* DMAGUARD_COMMON_H */
