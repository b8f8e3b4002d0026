/* crcudactl rm ID..., and the retention that `store prune --keep N` and `run --keep N` share.
 *
 * A checkpoint goes with its manifest, its CRIU image directory (<store>/criu/<name>; images named
 * elsewhere are not the store's and stay), the link remaps its dump kept for a restore (link_remaps.c)
 * and, through gc, the chunks no other checkpoint needs. The image directory is locked first, as gc
 * does: a checkpoint still being written, or a restore reading it (restore holds a shared lock while
 * CRIU runs), keeps it, and then nothing of it is removed.
 *
 * Retention counts per program: checkpoints of one crcuda.lineage (CRCUDA_LINEAGE of the program, which
 * `crcudactl run` sets and a restored process keeps), the newest (highest id) kept. Checkpoints made
 * before lineages existed group by pid and program name. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "crc_store.h"
#include "crcuda/errno.h"
#include "crcudactl.h"

#define RM_JSON_VERSION 1

static uint64_t rm_bytes; /* nftw has no context argument */

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)ftw;
	if (flag == FTW_DP)
		return rmdir(path) ? -1 : 0;
	if (unlink(path))
		return -1;
	rm_bytes += (uint64_t)sb->st_size;
	return 0;
}

/* The store's image directory named by a manifest ("criu/<name>"), or NULL for one outside it. */
static const char *store_images(const struct crc_manifest *m)
{
	const char *rel = crc_manifest_meta_get(m, "criu.images_dir");

	if (!rel || strncmp(rel, "criu/", 5) || !rel[5] || strchr(rel + 5, '/') || !strcmp(rel + 5, "..") ||
	    !strcmp(rel + 5, "."))
		return NULL;
	return rel;
}

/* Does a checkpoint other than id name the image directory rel (the clients of one process tree share
 * theirs)? */
static bool images_shared(struct crc_store *st, uint64_t id, const char *rel)
{
	uint64_t *ids = NULL;
	size_t n = 0;
	bool shared = false;

	if (crc_store_manifest_list(st, &ids, &n))
		return true; /* not known: keep the images */
	for (size_t i = 0; i < n && !shared; i++) {
		struct crc_manifest *m = NULL;
		const char *r;

		if (ids[i] == id || crc_store_manifest_get(st, ids[i], &m))
			continue;
		r = store_images(m);
		shared = r && !strcmp(r, rel);
		crc_manifest_free(m);
	}
	free(ids);
	return shared;
}

/* Removes checkpoint id: 0, or -1 with the reason in why. *bytes grows by the images' size. */
static int remove_one(struct crc_store *st, uint64_t id, char *why, size_t len, uint64_t *bytes)
{
	struct crc_manifest *m = NULL;
	char dir[PATH_MAX * 2] = "";
	const char *rel;
	int rc, fd = -1, ret = -1;

	rc = crc_store_manifest_get(st, id, &m);
	if (rc) {
		snprintf(why, len, "%s", rc == CRC_ENOTFOUND ? "no such checkpoint" : crc_strerror(rc));
		return -1;
	}
	rel = store_images(m);
	if (rel && images_shared(st, id, rel))
		rel = NULL; /* another client of its process tree still needs them */
	if (rel) {
		snprintf(dir, sizeof(dir), "%s/%s", crc_store_dir(st), rel);
		fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
		if (fd < 0 && errno != ENOENT) {
			snprintf(why, len, "cannot open its images %s: %s", dir, strerror(errno));
			goto out;
		}
		if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB)) {
			snprintf(why, len,
				 "its images %s are in use (a restore, or the checkpoint still being "
				 "written): not removed",
				 dir);
			goto out;
		}
		if (fd < 0)
			dir[0] = 0; /* already gone */
	}
	rc = crc_store_manifest_delete(st, id);
	if (rc) {
		snprintf(why, len, "%s", rc == CRC_ENOTFOUND ? "no such checkpoint" : crc_strerror(rc));
		goto out;
	}
	if (dir[0]) {
		/* CRIU's link remaps the dump kept for a restore (none left once one succeeded). */
		ctl_link_remaps_remove(dir);
		rm_bytes = 0;
		if (nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS))
			fprintf(stderr,
				"crcudactl: checkpoint %" PRIu64
				" removed, but not all of its images %s: %s\n",
				id, dir, strerror(errno));
		*bytes += rm_bytes;
	}
	ret = 0;
out:
	if (fd >= 0)
		close(fd);
	crc_manifest_free(m);
	return ret;
}

/* The program a checkpoint belongs to, for retention. */
static void lineage_of(const struct crc_manifest *m, char *out, size_t len)
{
	const char *l = crc_manifest_meta_get(m, "crcuda.lineage"),
		   *pid = crc_manifest_meta_get(m, "crcuda.pid"),
		   *comm = crc_manifest_meta_get(m, "crcuda.comm");

	if (l && *l)
		snprintf(out, len, "%s", l);
	else if (pid)
		snprintf(out, len, "pid %s (%s), no lineage", pid, comm ? comm : "?");
	else
		snprintf(out, len, "no lineage");
}

static void report_gc(FILE *out, struct crc_store *st, uint64_t criu_bytes)
{
	struct crc_gc_report gc = {0};
	int rc = crc_store_gc(st, &gc);

	if (rc)
		ctl_error("gc after the removal failed: %s (`crcudactl store gc` retries)", crc_strerror(rc));
	else if (out)
		fprintf(out,
			"freed %.1f MiB: %.1f MiB of CRIU images, %.1f MiB of chunks no other checkpoint "
			"needs (%" PRIu64 " pack files)\n",
			(double)(criu_bytes + gc.bytes_freed) / 1048576.0, (double)criu_bytes / 1048576.0,
			(double)gc.bytes_freed / 1048576.0, gc.packs_removed + gc.orphan_packs_removed);
}

int ctl_prune(const char *store, const char *only, unsigned keep, bool dry, FILE *out)
{
	struct crc_store *st = NULL;
	uint64_t *ids = NULL, criu_bytes = 0;
	char(*keys)[CTL_LINEAGE_MAX + 64] = NULL;
	size_t n = 0, removed = 0;
	int failed = 0, rc = crc_store_open(store, 0, &st);

	if (rc || (rc = crc_store_manifest_list(st, &ids, &n))) {
		ctl_error("prune: the store %s: %s", store, crc_strerror(rc));
		crc_store_close(st);
		return -1;
	}
	keys = n ? calloc(n, sizeof(*keys)) : NULL;
	if (n && !keys) {
		free(ids);
		crc_store_close(st);
		return -1;
	}
	for (size_t i = 0; i < n; i++) {
		struct crc_manifest *m;

		if (crc_store_manifest_get(st, ids[i], &m) == 0) {
			lineage_of(m, keys[i], sizeof(keys[i]));
			crc_manifest_free(m);
		} else {
			keys[i][0] = 0; /* unreadable: left alone */
		}
	}
	/* Ids ascend: walking from the newest, the (keep+1)-th of a lineage and older ones go. */
	for (size_t i = n; i-- > 0;) {
		unsigned newer = 0;
		char why[PATH_MAX * 2 + 128];

		if (!keys[i][0] || (only && strcmp(keys[i], only)))
			continue;
		for (size_t k = i + 1; k < n; k++)
			newer += !strcmp(keys[k], keys[i]);
		if (newer < keep)
			continue;
		if (dry) {
			if (out)
				fprintf(out, "would remove checkpoint %" PRIu64 " (%s)\n", ids[i], keys[i]);
			continue;
		}
		if (remove_one(st, ids[i], why, sizeof(why), &criu_bytes)) {
			ctl_error("prune: checkpoint %" PRIu64 ": %s", ids[i], why);
			failed++;
			continue;
		}
		removed++;
		if (out)
			fprintf(out, "removed checkpoint %" PRIu64 " (%s)\n", ids[i], keys[i]);
	}
	if (removed)
		report_gc(out, st, criu_bytes);
	free(keys);
	free(ids);
	crc_store_close(st);
	return failed;
}

static void rm_usage(FILE *f)
{
	fprintf(f, "Usage: crcudactl rm [--store DIR] [--json] ID...\n"
		   "\n"
		   "Removes checkpoints: each one's manifest and CRIU images (and the link remaps CRIU\n"
		   "kept beside a file for a restore not made), then the chunks no other checkpoint\n"
		   "needs (gc). A checkpoint whose images a restore is reading is left.\n"
		   "\n"
		   "Options:\n"
		   "  -s, --store DIR  the store (default $CRCUDA_STORE, else ~/.local/share/crcuda/store)\n"
		   "      --json       machine-readable result on stdout\n"
		   "  -h, --help       this help\n"
		   "\n"
		   "Exit status: 0 all removed, 1 one or more could not be (no such checkpoint, in use),\n"
		   "2 usage error.\n");
}

int cmd_rm(int argc, char **argv, struct ctl_opts *opts)
{
	enum { OPT_JSON = 256 };
	static const struct option longopts[] = {
	    {"store", required_argument, NULL, 's'},
	    {"json", no_argument, NULL, OPT_JSON},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	const char *store_arg = NULL;
	char store[PATH_MAX], why[PATH_MAX * 2 + 128];
	struct crc_store *st = NULL;
	uint64_t *ids, criu_bytes = 0;
	json_t *done = NULL, *failed = NULL;
	int c, nfail = 0, n, rc;

	while ((c = getopt_long(argc, argv, "s:h", longopts, NULL)) != -1) {
		switch (c) {
		case 's':
			store_arg = optarg;
			break;
		case OPT_JSON:
			opts->json = true;
			break;
		case 'h':
			rm_usage(stdout);
			return CTL_EXIT_OK;
		default:
			rm_usage(stderr);
			return CTL_EXIT_USAGE;
		}
	}
	n = argc - optind;
	if (n <= 0) {
		ctl_error("rm: give one or more checkpoint IDs (see crcudactl ls)");
		rm_usage(stderr);
		return CTL_EXIT_USAGE;
	}
	ids = calloc((size_t)n, sizeof(*ids));
	if (!ids)
		return CTL_EXIT_FAILURE;
	for (int i = 0; i < n; i++) {
		char *end;

		errno = 0;
		ids[i] = strtoull(argv[optind + i], &end, 10);
		if (errno || *end || !ids[i] || argv[optind + i][0] == '-') {
			ctl_error("rm: '%s' is not a checkpoint id", argv[optind + i]);
			free(ids);
			return CTL_EXIT_USAGE;
		}
	}
	if (ctl_store_dir(store_arg, store, sizeof(store))) {
		free(ids);
		return CTL_EXIT_USAGE;
	}
	rc = crc_store_open(store, 0, &st);
	if (rc) {
		ctl_error("rm: cannot open the store %s: %s", store, crc_strerror(rc));
		free(ids);
		return CTL_EXIT_FAILURE;
	}
	if (opts->json)
		done = json_array(), failed = json_array();
	for (int i = 0; i < n; i++) {
		if (remove_one(st, ids[i], why, sizeof(why), &criu_bytes)) {
			ctl_error("rm: checkpoint %" PRIu64 ": %s", ids[i], why);
			if (failed)
				json_array_append_new(
				    failed, json_pack("{s:I, s:s}", "id", (json_int_t)ids[i], "error", why));
			nfail++;
			continue;
		}
		if (done)
			json_array_append_new(done, json_integer((json_int_t)ids[i]));
		else
			printf("removed checkpoint %" PRIu64 "\n", ids[i]);
	}
	if (nfail < n)
		report_gc(opts->json ? NULL : stdout, st, criu_bytes);
	if (opts->json)
		ctl_json_print(json_pack("{s:i, s:s, s:o, s:o, s:I}", "version", RM_JSON_VERSION, "store",
					 store, "removed", done, "failed", failed, "criu_bytes_freed",
					 (json_int_t)criu_bytes));
	crc_store_close(st);
	free(ids);
	return nfail ? CTL_EXIT_FAILURE : CTL_EXIT_OK;
}
