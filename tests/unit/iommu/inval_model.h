/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/iommu/inval_model.h - a reference model of what devices may still have cached,
 * driven by a byte string (the coverage unit test feeds it random bytes, the fuzz harness
 * fuzzer input). See inval_model.c.
 */
#ifndef DG_TESTS_INVAL_MODEL_H
#define DG_TESTS_INVAL_MODEL_H

#include <stddef.h>
#include <stdint.h>

/* What a run exercised, so tests can prove the interesting cases happened. */
struct inval_model_counts {
	uint64_t walks;		      /* translations that walked the table */
	uint64_t walks_seq;	      /* successful walks next to the previous one: they fill */
	uint64_t walks_far;	      /* successful walks that were not: they fill nothing */
	uint64_t prefetched;	      /* neighbour entries a walk filled (checked exactly) */
	uint64_t prefetch_hits;	      /* hits on an entry the neighbour fill made */
	uint64_t prefetch_stale_hits; /* ...that the table no longer holds (not applied yet) */
	uint64_t hits;		      /* translations served by the IOTLB */
	uint64_t stale_hits;	      /* hits that returned a translation no longer in the table */
	uint64_t refused;	      /* translations refused */
	uint64_t laps;		      /* devices that fell a whole queue behind */
	uint64_t invals;	      /* commands submitted */
	uint64_t done;		      /* dg_inval_done() that said true */
};

/*
 * Run the operations encoded in @data; aborts with a message on any violation. @counts may be
 * NULL; otherwise it is added to.
 */
void inval_model_run(const uint8_t *data, size_t size, struct inval_model_counts *counts);

#endif /* DG_TESTS_INVAL_MODEL_H */
