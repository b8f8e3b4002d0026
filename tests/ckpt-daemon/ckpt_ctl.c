/* Drives crcudad's control interface (crcuda/ctl.h) for the daemon-side checkpoint tests, and checks
 * a checkpoint's manifest against the pattern ckpt_client wrote.
 *   ckpt_ctl SOCK quiesce|abort|resume PID
 *   ckpt_ctl SOCK checkpoint PID STORE        prints the stats
 *   ckpt_ctl SOCK checkpoint-bg PID STORE     the same, drained in the background
 *   ckpt_ctl SOCK commit PID                  prints the checkpoint id (0: committed once drained)
 *   ckpt_ctl SOCK commit-wait PID             waits for that, prints its id
 *   ckpt_ctl SOCK restore STORE ID PID SWAP   restores, hands the socket to the client at SWAP
 *   ckpt_ctl SOCK stage-restore STORE SID ID PID SWAP  stages checkpoint SID (crc_ctl_stage), then
 *                                             restores ID with its key, as restore; the staging
 *                                             connection closes last
 *   ckpt_ctl SOCK stage-race STORE SID ID PID SWAP  the same, the restore sent 50 ms after the stage
 *                                             without waiting for it, as crcudactl restore sends
 *                                             CRIU's (both must succeed)
 *   ckpt_ctl SOCK sessions
 *   ckpt_ctl - verify STORE ID READY          device-alloc regions against ckpt_client's pattern
 *   ckpt_ctl - count STORE                    prints the number of checkpoints
 *   ckpt_ctl - drop STORE ID                  deletes a checkpoint and collects what it alone held
 * Exit 0 on success, 1 on failure (the reason on stderr). */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "crc_store.h"
#include "crcuda/ctl.h"
#include "crcuda/errno.h"
#include "crcuda/sock.h"

static unsigned char pattern(int b, size_t i)
{
	return (unsigned char)(i * 131 + (size_t)b * 7 + (i >> 12));
}

static int verify(const char *store, uint64_t id, const char *ready)
{
	struct crc_store *st;
	struct crc_manifest *m;
	unsigned long long addr;
	size_t size;
	int b, found = 0, want = 0, globals = 0;
	FILE *f = fopen(ready, "r");
	unsigned char *buf = malloc(64u << 20);

	if (!f || crc_store_open(store, 0, &st) || crc_store_manifest_get(st, id, &m)) {
		fprintf(stderr, "verify: cannot open the ready file, the store or checkpoint %" PRIu64 "\n",
			id);
		return 1;
	}
	for (uint32_t r = 0; r < m->nregions; r++)
		globals += m->regions[r].kind == CRC_REGION_DEVICE_GLOBAL;
	while (fscanf(f, "%llx %zu %d", &addr, &size, &b) == 3) {
		want++;
		for (uint32_t r = 0; r < m->nregions; r++) {
			const struct crc_region *rg = &m->regions[r];
			size_t off = 0;

			if (rg->kind != CRC_REGION_DEVICE_ALLOC || rg->addr != addr)
				continue;
			for (uint32_t c = 0; c < rg->nchunks; c++) {
				size_t got;

				if (crc_store_chunk_read(st, &rg->chunks[c].hash, buf, 64u << 20, &got)) {
					fprintf(stderr, "verify: region %u chunk %u unreadable\n", r, c);
					return 1;
				}
				for (size_t i = 0; i < got && off + i < size; i++) {
					if (buf[i] != pattern(b, off + i)) {
						fprintf(stderr, "verify: %#llx byte %zu differs\n", addr,
							off + i);
						return 1;
					}
				}
				off += got;
			}
			if (rg->size < size) {
				fprintf(stderr, "verify: region %#llx has %" PRIu64 " bytes, < %zu\n", addr,
					rg->size, size);
				return 1;
			}
			found++;
		}
	}
	printf("verify: %d of %d buffers match, %d globals, %u regions, images dir %s\n", found, want,
	       globals, m->nregions,
	       crc_manifest_meta_get(m, "criu.images_dir") ? crc_manifest_meta_get(m, "criu.images_dir")
							   : "-");
	crc_manifest_free(m);
	crc_store_close(st);
	fclose(f);
	free(buf);
	return found == want && want > 0 && globals >= 3 ? 0 : 1;
}

static int send_fd(const char *path, int fd)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	int s = socket(AF_UNIX, SOCK_STREAM, 0);
	char byte = 0;

	snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
	if (connect(s, (struct sockaddr *)&a, sizeof(a)))
		return 1;
	return crc_sock_send_fds(s, &byte, 1, &fd, 1) ? 1 : (close(s), 0);
}

/* Restores checkpoint id for pid under o's stage key, on a connection of its own; the session's
 * socket goes to the client at swap. o is a copy: a stage may be using the caller's. */
static int restore_staged(const char *sock, struct crc_ctl_restore_opts o, uint64_t id, int pid,
			  const char *swap)
{
	struct crc_ctl *r = NULL;
	int fd, rc;

	rc = crc_ctl_open(sock, NULL, &r);
	if (rc) {
		fprintf(stderr, "ckpt_ctl: a second connection: %s\n", crc_strerror(rc));
		return rc;
	}
	o.ckpt_id = id;
	o.pid = pid;
	rc = crc_ctl_restore(r, &o, &fd);
	if (rc) {
		fprintf(stderr, "ckpt_ctl restore: %s\n", crc_ctl_error(r));
		crc_ctl_close(r);
		return rc;
	}
	rc = send_fd(swap, fd) ? CRC_EIO : 0;
	close(fd);
	return rc;
}

struct stage_arg {
	struct crc_ctl *c;
	struct crc_ctl_restore_opts o;
	int rc;
};

static void *stage_main(void *arg)
{
	struct stage_arg *sa = arg;

	sa->rc = crc_ctl_stage(sa->c, &sa->o);
	return NULL;
}

int main(int argc, char **argv)
{
	struct crc_ctl *c;
	const char *cmd = argc > 2 ? argv[2] : "";
	int rc;

	if (argc < 3)
		return 2;
	if (!strcmp(cmd, "verify"))
		return argc == 6 ? verify(argv[3], strtoull(argv[4], NULL, 0), argv[5]) : 2;
	if (!strcmp(cmd, "drop") && argc == 5) {
		struct crc_store *st;
		struct crc_gc_report gr;
		int r = crc_store_open(argv[3], 0, &st);

		if (!r)
			r = crc_store_manifest_delete(st, strtoull(argv[4], NULL, 0));
		if (!r)
			r = crc_store_gc(st, &gr);
		if (!r)
			crc_store_close(st);
		if (r)
			fprintf(stderr, "drop: %s\n", crc_strerror(r));
		return r ? 1 : 0;
	}
	if (!strcmp(cmd, "count")) {
		struct crc_store *st;
		uint64_t *ids;
		size_t n = 0;

		if (crc_store_open(argv[3], 0, &st) || crc_store_manifest_list(st, &ids, &n))
			return 1;
		printf("%zu\n", n);
		free(ids);
		crc_store_close(st);
		return 0;
	}
	rc = crc_ctl_open(argv[1], NULL, &c);
	if (rc) {
		fprintf(stderr, "ckpt_ctl: open: %s\n", crc_strerror(rc));
		return 1;
	}
	if (!strcmp(cmd, "quiesce")) {
		rc = crc_ctl_quiesce(c, atoi(argv[3]), 10000);
	} else if (!strcmp(cmd, "abort")) {
		rc = crc_ctl_abort(c, atoi(argv[3]));
	} else if (!strcmp(cmd, "resume")) {
		rc = crc_ctl_resume(c, atoi(argv[3]));
	} else if (!strcmp(cmd, "commit-wait")) {
		uint64_t id = 0;

		rc = crc_ctl_commit_wait(c, atoi(argv[3]), 30000, &id);
		if (!rc)
			printf("%" PRIu64 "\n", id);
	} else if (!strcmp(cmd, "checkpoint") || !strcmp(cmd, "checkpoint-bg")) {
		struct crc_ctl_ckpt_stats s;

		rc = crc_ctl_checkpoint_flags(c, atoi(argv[3]), argv[4],
					      strcmp(cmd, "checkpoint") ? CRC_CTL_CKPT_BACKGROUND : 0, &s);
		if (!rc)
			printf("checkpoint: %" PRIu64 " allocations %" PRIu64 " globals %" PRIu64
			       " modules %" PRIu64 " bytes %" PRIu64 " copied %" PRIu64
			       " snapshot %.3f s %.3f GB/s\n",
			       s.allocations, s.globals, s.modules, s.device_bytes, s.copied_bytes,
			       s.snapshot_bytes, s.seconds,
			       s.seconds > 0 ? (double)s.device_bytes / s.seconds / 1e9 : 0.0);
	} else if (!strcmp(cmd, "commit")) {
		const char *meta[] = {"test=ckpt-daemon", NULL};
		uint64_t id = 0;

		rc = crc_ctl_commit(c, atoi(argv[3]), "criu-images", meta, &id);
		if (!rc)
			printf("%" PRIu64 "\n", id);
	} else if (!strcmp(cmd, "sessions")) {
		struct crc_ctl_session *s;
		unsigned n;

		rc = crc_ctl_sessions(c, &s, &n);
		for (unsigned i = 0; !rc && i < n; i++)
			printf("session %" PRIu64 " pid %d state %u va %#" PRIx64 " bytes %" PRIu64
			       " journal %" PRIu64 "\n",
			       s[i].session_id, (int)s[i].pid, s[i].state, s[i].va_base, s[i].device_bytes,
			       s[i].journal_records);
		if (!rc)
			free(s);
	} else if (!strcmp(cmd, "restore") && argc == 7) {
		struct crc_ctl_restore_opts o = {.store_dir = argv[3],
						 .ckpt_id = strtoull(argv[4], NULL, 0),
						 .gpu = -1,
						 .pid = atoi(argv[5]),
						 .timeout_ms = 30000};
		int fd;

		rc = crc_ctl_restore(c, &o, &fd);
		if (!rc) {
			rc = send_fd(argv[6], fd) ? CRC_EIO : 0;
			close(fd);
			c = NULL;
		}
	} else if (!strcmp(cmd, "stage-race") && argc == 8) {
		struct stage_arg sa = {.c = c,
				       .o = {.store_dir = argv[3],
					     .ckpt_id = strtoull(argv[4], NULL, 0),
					     .gpu = -1,
					     .timeout_ms = 30000,
					     .stage_key = 0x5eed0000u + (uint64_t)getpid()}};
		pthread_t t;

		rc = pthread_create(&t, NULL, stage_main, &sa) ? CRC_ENOMEM : 0;
		if (!rc) {
			usleep(50000);
			rc =
			    restore_staged(argv[1], sa.o, strtoull(argv[5], NULL, 0), atoi(argv[6]), argv[7]);
			pthread_join(t, NULL);
			if (sa.rc)
				fprintf(stderr, "ckpt_ctl stage: %s\n", crc_ctl_error(c));
			rc = rc ? rc : sa.rc;
		}
	} else if (!strcmp(cmd, "stage-restore") && argc == 8) {
		struct crc_ctl_restore_opts o = {.store_dir = argv[3],
						 .ckpt_id = strtoull(argv[4], NULL, 0),
						 .gpu = -1,
						 .timeout_ms = 30000,
						 .stage_key = 0x5eed0000u + (uint64_t)getpid()};

		rc = crc_ctl_stage(c, &o);
		if (!rc)
			rc = restore_staged(argv[1], o, strtoull(argv[5], NULL, 0), atoi(argv[6]), argv[7]);
	} else {
		fprintf(stderr, "ckpt_ctl: unknown command %s\n", cmd);
		rc = CRC_EINVAL;
	}
	if (rc)
		fprintf(stderr, "ckpt_ctl %s: %s (%s)\n", cmd, crc_ctl_error(c), crc_strerror(rc));
	crc_ctl_close(c);
	return rc ? 1 : 0;
}
