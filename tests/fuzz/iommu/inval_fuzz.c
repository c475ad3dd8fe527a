/* SPDX-License-Identifier: MIT */
/*
 * tests/fuzz/iommu/inval_fuzz.c - fuzz invalidation command sequences: the input is a list
 * of 8-byte operations (map, unmap, invalidate with any command type and flags, bad commands,
 * dg_inval_done, quiesce/offline/online, domain switches, translate) run on three devices
 * and checked against the reference model of what each device may still have cached
 * (tests/unit/iommu/inval_model.c): a stale translation used after its invalidation was
 * applied, a wrong errno for a bad command, or a queue changed by one aborts.
 */
#include "../../unit/iommu/inval_model.h"

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	inval_model_run(data, size, NULL);
	return 0;
}
