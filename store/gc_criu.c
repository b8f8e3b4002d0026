/* gc of CRIU image directories: <store>/criu/<name> that no manifest names (criu.images_dir) are
 * what a checkpoint left when it failed or was killed before its commit. A checkpoint in progress
 * holds an exclusive flock on its directory until after the commit, so: lock first (skipping what is
 * locked), then read the manifests, then remove what is ours and named by none. A directory younger
 * than CRIU_GC_MIN_AGE_S is left too (it may be between mkdir and flock). */
#define LOG_PREFIX "store: "
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "crc_store.h"
#include "crcuda/errno.h"
#include "crcuda/log.h"

#define CRIU_GC_MIN_AGE_S 60

/* Removes dir and everything under it; adds the sizes of removed files to *bytes. */
static int rm_tree(int parent, const char *name, uint64_t *bytes)
{
	int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	struct dirent *de;
	struct stat sb;
	int rc = 0;

	if (!d) {
		if (fd >= 0)
			close(fd);
		return -errno;
	}
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (fstatat(fd, de->d_name, &sb, AT_SYMLINK_NOFOLLOW))
			continue;
		if (S_ISDIR(sb.st_mode))
			rc = rm_tree(fd, de->d_name, bytes) ?: rc;
		else if (unlinkat(fd, de->d_name, 0) == 0)
			*bytes += (uint64_t)sb.st_size;
		else
			rc = -errno;
	}
	closedir(d);
	if (unlinkat(parent, name, AT_REMOVEDIR))
		rc = -errno;
	return rc;
}

int crc_store_gc_criu(struct crc_store *st, void (*before_remove)(const char *dir), uint64_t *dirs_removed,
		      uint64_t *bytes_freed)
{
	char path[PATH_MAX];
	struct cand {
		char *name;
		int fd;
	} *c = NULL;
	size_t n = 0, cap = 0, nids = 0;
	uint64_t *ids = NULL, removed = 0, bytes = 0;
	time_t now = time(NULL);
	struct dirent *de;
	int rc = 0, dfd;
	DIR *d;

	if (!st)
		return CRC_EINVAL;
	snprintf(path, sizeof(path), "%s/criu", crc_store_dir(st));
	d = opendir(path);
	if (!d)
		goto out; /* no CRIU images at all */
	dfd = dirfd(d);
	while ((de = readdir(d))) {
		struct stat sb;
		int fd;

		if (de->d_name[0] == '.' || fstatat(dfd, de->d_name, &sb, AT_SYMLINK_NOFOLLOW) ||
		    !S_ISDIR(sb.st_mode) || now - sb.st_mtime < CRIU_GC_MIN_AGE_S)
			continue;
		fd = openat(dfd, de->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (fd < 0)
			continue;
		if (flock(fd, LOCK_EX | LOCK_NB)) { /* a checkpoint is writing it */
			close(fd);
			continue;
		}
		if (n == cap) {
			struct cand *nc = realloc(c, (cap = cap ? cap * 2 : 16) * sizeof(*c));

			if (!nc) {
				close(fd);
				rc = CRC_ENOMEM;
				goto out;
			}
			c = nc;
		}
		c[n].name = strdup(de->d_name);
		c[n++].fd = fd;
	}
	/* Only now the manifests: a commit made while its directory was locked is seen here. */
	rc = crc_store_manifest_list(st, &ids, &nids);
	for (size_t i = 0; !rc && i < nids; i++) {
		struct crc_manifest *m;
		const char *v;

		rc = crc_store_manifest_get(st, ids[i], &m);
		if (rc)
			break;
		v = crc_manifest_meta_get(m, "criu.images_dir");
		for (size_t k = 0; v && k < n; k++)
			if (c[k].name && !strncmp(v, "criu/", 5) && !strcmp(v + 5, c[k].name)) {
				free(c[k].name);
				c[k].name = NULL; /* named: kept */
			}
		crc_manifest_free(m);
	}
	if (rc) {
		pr_err("gc of CRIU images: reading the manifests: %s (nothing removed)", crc_strerror(rc));
		goto out;
	}
	for (size_t k = 0; k < n; k++) {
		if (!c[k].name)
			continue;
		if (before_remove) {
			char dir[PATH_MAX + 256];

			snprintf(dir, sizeof(dir), "%s/%s", path, c[k].name);
			before_remove(dir);
		}
		int r = rm_tree(dfd, c[k].name, &bytes);

		if (r)
			pr_warn("gc: removing CRIU images %s/%s: %s", path, c[k].name, strerror(-r));
		else
			pr_info("gc: removed CRIU images %s/%s that no checkpoint names", path, c[k].name);
		removed += r == 0;
	}
out:
	for (size_t k = 0; k < n; k++) {
		free(c[k].name);
		close(c[k].fd);
	}
	free(c);
	free(ids);
	if (d)
		closedir(d);
	if (dirs_removed)
		*dirs_removed = removed;
	if (bytes_freed)
		*bytes_freed = bytes;
	return rc;
}
