/* SPDX-License-Identifier: MIT */
/* base/version.c - the library version string (set by meson from project()). */
#include <dmaguard/common.h>

DG_EXPORT const char *dg_version(void)
{
	return DG_VERSION;
}
