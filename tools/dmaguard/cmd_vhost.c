/* SPDX-License-Identifier: MIT */
/*
 * tools/dmaguard/cmd_vhost.c - "dmaguard vhost": run the vhost-user net back end.
 *
 *   dmaguard vhost --socket PATH [--mode echo|sink|loop|gen] [--frame-bytes N] [--ip A.B.C.D]
 *                  [--mac XX:..:XX] [--once] [--no-iommu] [--stats-json FILE] [-v]...
 *
 * Counters are printed on stderr after every front end disconnects, on SIGUSR1 and at exit;
 * with --stats-json they are also written to FILE (replaced atomically) at the same moments,
 * which is what the QEMU tests read. SIGINT/SIGTERM stop the server.
 */
#include "cli.h"

#include <dmaguard/vhost.h>

#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static dg_vhost *the_vhost;
static const char *stats_path;

static void on_signal(int sig)
{
	if (!the_vhost)
		return;
	if (sig == SIGUSR1)
		dg_vhost_report(the_vhost);
	else
		dg_vhost_stop(the_vhost);
}

static void print_stats(const struct dg_vhost_stats *s)
{
	fprintf(stderr,
		"dmaguard vhost: messages %llu (bad %llu), iotlb misses %llu (dedup %llu) updates "
		"%llu invalidations %llu access-fails %llu, outside memory table %llu, rx %llu "
		"pkts %llu bytes (dropped %llu), tx %llu pkts %llu bytes (dropped %llu), ring "
		"errors %llu\n",
		(unsigned long long)s->messages, (unsigned long long)s->bad_messages,
		(unsigned long long)s->iotlb_misses, (unsigned long long)s->iotlb_miss_dedup,
		(unsigned long long)s->iotlb_updates, (unsigned long long)s->iotlb_invalidations,
		(unsigned long long)s->iotlb_access_fails, (unsigned long long)s->outside_memtable,
		(unsigned long long)s->queue[0].packets, (unsigned long long)s->queue[0].bytes,
		(unsigned long long)s->queue[0].dropped, (unsigned long long)s->queue[1].packets,
		(unsigned long long)s->queue[1].bytes, (unsigned long long)s->queue[1].dropped,
		(unsigned long long)s->ring_errors);
}

static void on_report(void *cookie, const struct dg_vhost_stats *s)
{
	(void)cookie;
	print_stats(s);
	if (!stats_path)
		return;

	size_t n = strlen(stats_path) + 8;
	char *tmp = malloc(n);
	FILE *f;

	if (!tmp)
		return;
	snprintf(tmp, n, "%s.tmp", stats_path);
	f = fopen(tmp, "w");
	if (!f || dg_vhost_stats_write_json(s, f) || fclose(f) || rename(tmp, stats_path)) {
		fprintf(stderr, "dmaguard vhost: cannot write %s: %s\n", stats_path,
			strerror(errno));
		if (f)
			remove(tmp);
	}
	free(tmp);
}

static void usage(FILE *out)
{
	fprintf(out,
		"usage: dmaguard vhost --socket PATH [options]\n"
		"Serve vhost-user front ends (e.g. QEMU -netdev vhost-user) as a virtio-net back end\n"
		"with a device IOTLB.\n\n"
		"  --socket PATH        unix socket to listen on (server mode)\n"
		"  --mode MODE          echo (answer ARP and ICMP echo for --ip), sink (drop),\n"
		"                       loop (return every frame), gen (fill every receive buffer\n"
		"                       with a UDP frame carrying a sequence number; transmitted\n"
		"                       frames are dropped); default echo\n"
		"  --frame-bytes N      gen: frame size, %d..%d, virtio-net header excluded\n"
		"                       (default %d)\n"
		"  --ip A.B.C.D         address answered in echo mode, source in gen mode\n"
		"                       (default 10.0.0.1)\n"
		"  --mac XX:XX:XX:XX:XX:XX  MAC answered with / sent from (default 02:00:00:00:00:01)\n"
		"  --once               exit after the first front end disconnects\n"
		"  --no-iommu           do not offer VIRTIO_F_IOMMU_PLATFORM\n"
		"  --stats-json FILE    write the counters as JSON at each disconnect, on SIGUSR1\n"
		"                       and at exit\n"
		"  -v, --verbose        more logging (twice: every message, timed; three times: every burst)\n",
		DG_VHOST_GEN_MIN_BYTES, DG_VHOST_GEN_MAX_BYTES, DG_VHOST_GEN_DEFAULT);
}

static int parse_mac(const char *s, uint8_t mac[6])
{
	unsigned int b[6];
	char end;

	if (sscanf(s, "%x:%x:%x:%x:%x:%x%c", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5], &end) != 6)
		return -1;
	for (int i = 0; i < 6; i++) {
		if (b[i] > 0xff)
			return -1;
		mac[i] = (uint8_t)b[i];
	}
	return 0;
}

static int cmd_vhost(int argc, char **argv)
{
	static const struct option opts[] = {
		{"socket", required_argument, NULL, 's'},
		{"mode", required_argument, NULL, 'm'},
		{"frame-bytes", required_argument, NULL, 'f'},
		{"ip", required_argument, NULL, 'i'},
		{"mac", required_argument, NULL, 'a'},
		{"once", no_argument, NULL, 'o'},
		{"no-iommu", no_argument, NULL, 'n'},
		{"stats-json", required_argument, NULL, 'j'},
		{"verbose", no_argument, NULL, 'v'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	struct dg_vhost_config cfg;
	struct in_addr ip;
	bool frame_set = false;
	int c, rc;

	dg_vhost_config_init(&cfg);
	optind = 1;
	while ((c = getopt_long(argc, argv, "vh", opts, NULL)) != -1) {
		switch (c) {
		case 's':
			cfg.socket_path = optarg;
			break;
		case 'm':
			if (!strcmp(optarg, "echo"))
				cfg.mode = DG_VHOST_ECHO;
			else if (!strcmp(optarg, "sink"))
				cfg.mode = DG_VHOST_SINK;
			else if (!strcmp(optarg, "loop"))
				cfg.mode = DG_VHOST_LOOP;
			else if (!strcmp(optarg, "gen"))
				cfg.mode = DG_VHOST_GEN;
			else {
				fprintf(stderr, "dmaguard vhost: unknown mode '%s'\n", optarg);
				return 2;
			}
			break;
		case 'f': {
			char *end;
			unsigned long n;

			errno = 0;
			n = strtoul(optarg, &end, 10);
			if (errno || end == optarg || *end || n < DG_VHOST_GEN_MIN_BYTES ||
			    n > DG_VHOST_GEN_MAX_BYTES) {
				fprintf(stderr, "dmaguard vhost: --frame-bytes '%s': want %d..%d\n",
					optarg, DG_VHOST_GEN_MIN_BYTES, DG_VHOST_GEN_MAX_BYTES);
				return 2;
			}
			cfg.gen_frame_bytes = (uint32_t)n;
			frame_set = true;
			break;
		}
		case 'i':
			if (inet_pton(AF_INET, optarg, &ip) != 1) {
				fprintf(stderr, "dmaguard vhost: bad address '%s'\n", optarg);
				return 2;
			}
			cfg.ipv4 = ntohl(ip.s_addr);
			break;
		case 'a':
			if (parse_mac(optarg, cfg.mac)) {
				fprintf(stderr, "dmaguard vhost: bad MAC '%s'\n", optarg);
				return 2;
			}
			break;
		case 'o':
			cfg.once = true;
			break;
		case 'n':
			cfg.iommu = false;
			break;
		case 'j':
			stats_path = optarg;
			break;
		case 'v':
			cfg.verbose++;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind != argc || !cfg.socket_path) {
		usage(stderr);
		return 2;
	}
	if (frame_set && cfg.mode != DG_VHOST_GEN) {
		fprintf(stderr, "dmaguard vhost: --frame-bytes needs --mode gen\n");
		return 2;
	}
	cfg.on_report = on_report;
	the_vhost = dg_vhost_create(&cfg);
	if (!the_vhost) {
		fprintf(stderr, "dmaguard vhost: %s\n", strerror(errno));
		return 1;
	}

	struct sigaction sa = {.sa_handler = on_signal};
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGUSR1, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);

	rc = dg_vhost_run(the_vhost);
	if (rc)
		fprintf(stderr, "dmaguard vhost: %s: %s\n", cfg.socket_path, strerror(-rc));

	struct dg_vhost_stats s;
	dg_vhost_get_stats(the_vhost, &s);
	on_report(NULL, &s);
	dg_vhost *v = the_vhost;
	the_vhost = NULL;
	dg_vhost_destroy(v);
	return rc ? 1 : 0;
}

DG_CLI_COMMAND(vhost, "vhost", "run the vhost-user net back end with a device IOTLB", cmd_vhost)
