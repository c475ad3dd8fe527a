/* SPDX-License-Identifier: MIT */
/*
 * tests/fuzz/standalone_main.c - run a libFuzzer harness without libFuzzer.
 *
 *   fuzz_NAME [-runs=N] [-seed=S] [FILE|DIR]...
 *
 * Replays every file given (directories: every file inside, sorted), then feeds N inputs
 * generated from a fixed seed: half fresh random bytes, half mutations (bit flips, byte
 * overwrites, inserts, deletes, splices) of corpus entries. The same arguments always feed the
 * same inputs, so a failure in make test reproduces exactly; long coverage-guided runs use the
 * libFuzzer build (make fuzz).
 */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "../test_rand.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

#undef MAX_INPUT /* <limits.h> has one (the terminal input queue) */
#define MAX_INPUT 4096

struct corpus {
	uint8_t **data;
	size_t *size;
	size_t n, cap;
};

static uint64_t rng_state;

static uint64_t rng(void)
{
	return splitmix64(&rng_state);
}

static int add_file(struct corpus *c, const char *path)
{
	FILE *f = fopen(path, "rb");
	uint8_t *buf;
	long len;

	if (!f) {
		fprintf(stderr, "fuzz: cannot open %s: %s\n", path, strerror(errno));
		return -1;
	}
	fseek(f, 0, SEEK_END);
	len = ftell(f);
	fseek(f, 0, SEEK_SET);
	if (len < 0)
		len = 0;
	buf = malloc((size_t)len + 1);
	if (!buf || fread(buf, 1, (size_t)len, f) != (size_t)len) {
		fprintf(stderr, "fuzz: cannot read %s\n", path);
		fclose(f);
		free(buf);
		return -1;
	}
	fclose(f);
	if (c->n == c->cap) {
		c->cap = c->cap ? 2 * c->cap : 64;
		c->data = realloc(c->data, c->cap * sizeof(*c->data));
		c->size = realloc(c->size, c->cap * sizeof(*c->size));
		if (!c->data || !c->size) {
			fprintf(stderr, "fuzz: out of memory\n");
			exit(1);
		}
	}
	c->data[c->n] = buf;
	c->size[c->n++] = (size_t)len;
	return 0;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int add_path(struct corpus *c, const char *path)
{
	struct stat st;

	if (stat(path, &st)) {
		fprintf(stderr, "fuzz: %s: %s\n", path, strerror(errno));
		return -1;
	}
	if (!S_ISDIR(st.st_mode))
		return add_file(c, path);

	DIR *d = opendir(path);
	struct dirent *e;
	char **names = NULL;
	size_t n = 0, cap = 0;
	int rc = 0;

	if (!d)
		return -1;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		if (n == cap) {
			cap = cap ? 2 * cap : 64;
			names = realloc(names, cap * sizeof(*names));
		}
		size_t len = strlen(path) + strlen(e->d_name) + 2;
		names[n] = malloc(len);
		snprintf(names[n++], len, "%s/%s", path, e->d_name);
	}
	closedir(d);
	qsort(names, n, sizeof(*names), cmp_str);
	for (size_t i = 0; i < n; i++) {
		if (add_file(c, names[i]))
			rc = -1;
		free(names[i]);
	}
	free(names);
	return rc;
}

static size_t mutate(const struct corpus *c, uint8_t *buf)
{
	size_t len = 0;

	if (c->n) {
		size_t i = rng() % c->n;
		len = c->size[i] < MAX_INPUT ? c->size[i] : MAX_INPUT;
		memcpy(buf, c->data[i], len);
	}
	unsigned int edits = 1 + (unsigned int)(rng() % 8);
	for (unsigned int k = 0; k < edits; k++) {
		switch (rng() % 5) {
		case 0: /* flip a bit */
			if (len)
				buf[rng() % len] ^= (uint8_t)(1u << (rng() % 8));
			break;
		case 1: /* overwrite a byte with an interesting value */
			if (len) {
				static const uint8_t v[] = {0, 1, 0x7f, 0x80, 0xff, 0x10, 0x40};
				buf[rng() % len] = v[rng() % sizeof(v)];
			}
			break;
		case 2: /* insert bytes */
			if (len < MAX_INPUT) {
				size_t at = len ? rng() % (len + 1) : 0, n = 1 + rng() % 16;
				if (n > MAX_INPUT - len)
					n = MAX_INPUT - len;
				memmove(buf + at + n, buf + at, len - at);
				for (size_t j = 0; j < n; j++)
					buf[at + j] = (uint8_t)rng();
				len += n;
			}
			break;
		case 3: /* delete bytes */
			if (len) {
				size_t at = rng() % len, n = 1 + rng() % 16;
				if (n > len - at)
					n = len - at;
				memmove(buf + at, buf + at + n, len - at - n);
				len -= n;
			}
			break;
		default: /* splice in part of another entry */
			if (c->n && len) {
				size_t i = rng() % c->n;
				if (c->size[i]) {
					size_t from = rng() % c->size[i], at = rng() % len;
					size_t n = c->size[i] - from;
					if (n > len - at)
						n = len - at;
					memcpy(buf + at, c->data[i] + from, n);
				}
			}
			break;
		}
	}
	return len;
}

int main(int argc, char **argv)
{
	struct corpus c = {0};
	unsigned long runs = 1000;
	uint64_t seed = 1;
	static uint8_t buf[MAX_INPUT];

	if (LLVMFuzzerInitialize)
		LLVMFuzzerInitialize(&argc, &argv);
	for (int i = 1; i < argc; i++) {
		if (!strncmp(argv[i], "-runs=", 6))
			runs = strtoul(argv[i] + 6, NULL, 0);
		else if (!strncmp(argv[i], "-seed=", 6))
			seed = strtoull(argv[i] + 6, NULL, 0);
		else if (argv[i][0] == '-')
			continue; /* other libFuzzer flags mean nothing here */
		else if (add_path(&c, argv[i]))
			return 1;
	}
	rng_state = seed;
	for (size_t i = 0; i < c.n; i++)
		LLVMFuzzerTestOneInput(c.data[i], c.size[i]);
	for (unsigned long r = 0; r < runs; r++) {
		size_t len;

		if (r & 1) {
			len = mutate(&c, buf);
		} else {
			len = (size_t)(rng() % 512);
			for (size_t j = 0; j < len; j++)
				buf[j] = (uint8_t)rng();
		}
		LLVMFuzzerTestOneInput(buf, len);
	}
	printf("fuzz: %zu corpus inputs, %lu generated, no failure\n", c.n, runs);
	for (size_t i = 0; i < c.n; i++)
		free(c.data[i]);
	free(c.data);
	free(c.size);
	return 0;
}
