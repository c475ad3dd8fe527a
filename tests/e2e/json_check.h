/* SPDX-License-Identifier: MIT */
/*
 * tests/e2e/json_check.h - what the benchmark JSON checkers (*_json_check.c) share: EXPECT,
 * which reports a failed condition on stderr and counts it in `fails` (the checker's exit
 * status), loading a report and checking its head (jc_load, jc_results), and lookups of a
 * result's fields that give a neutral value when a field is missing or of the wrong type, so
 * one bad field is one failure and not a crash.
 */
#ifndef DG_TESTS_E2E_JSON_CHECK_H
#define DG_TESTS_E2E_JSON_CHECK_H

#include <jansson.h>
#include <stdio.h>
#include <string.h>

static int fails __attribute__((unused));

#define EXPECT(cond, ...)                                      \
	do {                                                   \
		if (!(cond)) {                                 \
			fprintf(stderr, "FAIL: " __VA_ARGS__); \
			fputc('\n', stderr);                   \
			fails++;                               \
		}                                              \
	} while (0)

/* The string field @k of @o, or "" when it is missing or not a string. */
static inline const char *jc_str(json_t *o, const char *k)
{
	const char *s = json_string_value(json_object_get(o, k));

	return s ? s : "";
}

/* The number field @k of @o, or -1 when it is missing or not a number. */
static inline double jc_num(json_t *o, const char *k)
{
	json_t *v = json_object_get(o, k);

	return json_is_number(v) ? json_number_value(v) : -1;
}

/* The report in file @path, or NULL after saying why on stderr. */
static inline json_t *jc_load(const char *path)
{
	json_error_t err;
	json_t *root = json_load_file(path, 0, &err);

	if (!root)
		fprintf(stderr, "FAIL: %s: %s\n", path, err.text);
	return root;
}

/* Every report's head: its "suite" is @suite and "machine" an object; returns "results". */
static inline json_t *jc_results(json_t *root, const char *suite)
{
	EXPECT(!strcmp(jc_str(root, "suite"), suite), "suite");
	EXPECT(json_is_object(json_object_get(root, "machine")), "machine");
	return json_object_get(root, "results");
}

/* The result of @results whose "case" is @name, or NULL. */
static inline json_t *jc_find(json_t *results, const char *name)
{
	size_t i;
	json_t *r;

	json_array_foreach(results, i, r)
	{
		const char *c = json_string_value(json_object_get(r, "case"));

		if (c && !strcmp(c, name))
			return r;
	}
	return NULL;
}

#endif
