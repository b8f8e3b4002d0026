/* CRIU's link remaps of a checkpoint. A file the tree maps or holds open under a name since unlinked,
 * while another name still links it (glibc's sem_open), is dumped by `--link-remap` as a hard link
 * CRIU makes beside it (link_remap.<id>, or link_remap.<id>.<n>: scripts/criu-patches/0002); with our
 * patch a successful dump keeps it for the restore, which opens the file through it and removes it.
 * A checkpoint never restored would leave it for ever: `crcudactl rm`, `store prune` and `store gc`
 * remove it with the checkpoint's images.
 *
 * Which remaps a dump made is known exactly only from its images: remap-fpath.img names the ids of the
 * linked remaps, files.img the path of each id. The post-dump action reads them (the images are
 * complete then, the tree frozen, nothing committed yet) into crcuda-link-remaps.list in the image
 * directory: "images DEV INO" (the image directory itself: a copy of it elsewhere, an import, owns
 * nothing), then one "DEV INO PATH" line per remap. A restore drops the lines of the remaps CRIU used
 * up; removal unlinks only a file still at its path with its inode, named link_remap.*: a later dump
 * may reuse a used-up name. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "crcudactl.h"

#define REMAP_LIST	      "crcuda-link-remaps.list"
#define REMAP_PREFIX	      "link_remap."
#define IMG_COMMON_MAGIC      0x54564319u /* CRIU's criu/include/magic.h */
#define IMG_FILES_MAGIC	      0x56303138u
#define IMG_REMAP_FPATH_MAGIC 0x59133954u
#define IMG_MAX_BYTES	      (256u << 20)
#define REMAP_GHOST_FLAG      (1u << 31) /* images without remap_type: a ghost's id has it */
#define REMAP_TYPE_LINKED     0
#define FD_TYPE_REG	      1

/* The protobuf wire format, as far as two of CRIU's messages need: no schema compiler or CRIU's .proto
 * files here, and the fields read (ids, a type, a name) have kept their numbers since CRIU 2. */
struct pb {
	const uint8_t *p, *end;
};

static bool pb_varint(struct pb *b, uint64_t *v)
{
	*v = 0;
	for (unsigned shift = 0; b->p < b->end && shift < 64; shift += 7) {
		uint8_t byte = *b->p++;

		*v |= (uint64_t)(byte & 0x7f) << shift;
		if (!(byte & 0x80))
			return true;
	}
	return false;
}

/* The next field: its number, and its value (varint) or bytes (length-delimited). false at the end or
 * on bytes that do not read. */
static bool pb_next(struct pb *b, uint32_t *num, uint64_t *val, struct pb *bytes)
{
	uint64_t key, len;

	if (b->p >= b->end || !pb_varint(b, &key))
		return false;
	*num = (uint32_t)(key >> 3);
	*val = 0;
	*bytes = (struct pb){NULL, NULL};
	switch (key & 7) {
	case 0:
		return pb_varint(b, val);
	case 1:
		len = 8;
		break;
	case 2:
		if (!pb_varint(b, &len) || len > (uint64_t)(b->end - b->p))
			return false;
		*bytes = (struct pb){b->p, b->p + len};
		break;
	case 5:
		len = 4;
		break;
	default:
		return false;
	}
	if (len > (uint64_t)(b->end - b->p))
		return false;
	b->p += len;
	return true;
}

static bool take_u32(const uint8_t **p, const uint8_t *end, uint32_t *v)
{
	if (end - *p < 4)
		return false;
	memcpy(v, *p, 4); /* CRIU writes them in the host's order */
	*p += 4;
	return true;
}

/* The entries of one image: fn(entry, arg) for each. 0 (also where the image is absent: nothing of
 * that kind was dumped), or -errno (-EBADMSG: not an image of that kind). */
static int img_each(const char *imgdir, const char *name, uint32_t magic, int (*fn)(struct pb, void *),
		    void *arg)
{
	char path[PATH_MAX];
	struct stat st;
	uint8_t *buf = NULL;
	int fd, rc = 0;

	snprintf(path, sizeof(path), "%s/%s", imgdir, name);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 0 : -errno;
	if (fstat(fd, &st))
		rc = -errno;
	else if (st.st_size > IMG_MAX_BYTES)
		rc = -EBADMSG; /* no image of ours is that large */
	else if (!(buf = malloc((size_t)st.st_size + 1)))
		rc = -ENOMEM;
	for (size_t got = 0; !rc && got < (size_t)st.st_size;) {
		ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);

		if (n <= 0)
			rc = n < 0 ? -errno : -EIO;
		else
			got += (size_t)n;
	}
	close(fd);
	const uint8_t *p = buf, *end = buf ? buf + st.st_size : NULL;
	uint32_t word = 0;

	/* A head magic, then the image's own (images of CRIU 1.x: the image's own alone). */
	if (!rc && (!take_u32(&p, end, &word) || (word == IMG_COMMON_MAGIC && !take_u32(&p, end, &word)) ||
		    word != magic))
		rc = -EBADMSG;
	while (!rc && p < end) {
		if (!take_u32(&p, end, &word) || word > (uint64_t)(end - p)) {
			rc = -EBADMSG;
			break;
		}
		rc = fn((struct pb){p, p + word}, arg);
		p += word;
	}
	free(buf);
	return rc;
}

struct remap_ids {
	uint32_t *id;
	size_t n, cap;
};

/* remap_file_path_entry: orig_id = 1, remap_id = 2, remap_type = 3 (LINKED 0, GHOST 1, PROCFS 2). */
static int linked_remap(struct pb e, void *arg)
{
	struct remap_ids *ids = arg;
	uint64_t val, remap_id = 0, type = UINT64_MAX;
	uint32_t num;
	struct pb bytes;
	bool have_id = false;

	while (pb_next(&e, &num, &val, &bytes)) {
		if (num == 2)
			remap_id = val, have_id = true;
		else if (num == 3)
			type = val;
	}
	if (e.p != e.end || !have_id)
		return -EBADMSG;
	if (type == UINT64_MAX ? remap_id & REMAP_GHOST_FLAG : type != REMAP_TYPE_LINKED)
		return 0;
	if (ids->n == ids->cap) {
		uint32_t *more = realloc(ids->id, (ids->cap = ids->cap ? ids->cap * 2 : 8) * sizeof(*more));

		if (!more)
			return -ENOMEM;
		ids->id = more;
	}
	ids->id[ids->n++] = (uint32_t)remap_id;
	return 0;
}

struct remap_paths {
	const struct remap_ids *ids;
	FILE *out;
	unsigned listed;
};

/* file_entry: type = 1, id = 2, reg = 3; reg_file_entry: name = 6. */
static int remap_path(struct pb e, void *arg)
{
	struct remap_paths *rp = arg;
	uint64_t val, type = 0, id = UINT64_MAX;
	uint32_t num;
	struct pb bytes, reg = {NULL, NULL};
	bool ours = false;

	while (pb_next(&e, &num, &val, &bytes)) {
		if (num == 1)
			type = val;
		else if (num == 2)
			id = val;
		else if (num == 3)
			reg = bytes;
	}
	if (e.p != e.end)
		return -EBADMSG;
	for (size_t i = 0; i < rp->ids->n && !ours; i++)
		ours = rp->ids->id[i] == id;
	if (!ours || type != FD_TYPE_REG || !reg.p)
		return 0;

	char path[PATH_MAX];
	const char *base;
	struct stat st;

	path[0] = 0;
	while (pb_next(&reg, &num, &val, &bytes))
		if (num == 6 && bytes.p && (size_t)(bytes.end - bytes.p) < sizeof(path) - 1) {
			/* Relative to the root of the tree's mount namespace, with or without its "/". */
			size_t len = (size_t)(bytes.end - bytes.p), lead = bytes.p[0] != '/';

			path[0] = '/';
			memcpy(path + lead, bytes.p, len);
			path[lead + len] = 0;
		}
	/* Only names CRIU gives its remaps are ever listed (and so ever removed). */
	base = strrchr(path, '/');
	if (!path[0] || strchr(path, '\n') || strncmp(base + 1, REMAP_PREFIX, strlen(REMAP_PREFIX)))
		return 0;
	/* Not there: the tree is in a mount namespace of its own (nothing we could remove safely). */
	if (lstat(path, &st) || !S_ISREG(st.st_mode)) {
		fprintf(stderr,
			"crcudactl: post-dump: CRIU's link remap %s is not in this mount namespace: "
			"it is left to the restore\n",
			path);
		return 0;
	}
	fprintf(rp->out, "%" PRIu64 " %" PRIu64 " %s\n", (uint64_t)st.st_dev, (uint64_t)st.st_ino, path);
	rp->listed++;
	return 0;
}

int ctl_link_remaps_record(const char *imgdir)
{
	struct remap_ids ids = {0};
	char list[PATH_MAX], tmp[PATH_MAX + 16];
	struct stat dst;
	int rc = img_each(imgdir, "remap-fpath.img", IMG_REMAP_FPATH_MAGIC, linked_remap, &ids);

	if (rc || !ids.n) {
		free(ids.id);
		return rc;
	}
	snprintf(list, sizeof(list), "%s/%s", imgdir, REMAP_LIST);
	snprintf(tmp, sizeof(tmp), "%s.tmp", list);
	FILE *f = stat(imgdir, &dst) ? NULL : fopen(tmp, "we");
	struct remap_paths rp = {.ids = &ids, .out = f};

	if (!f) {
		free(ids.id);
		return -errno;
	}
	fprintf(f, "images %" PRIu64 " %" PRIu64 "\n", (uint64_t)dst.st_dev, (uint64_t)dst.st_ino);
	rc = img_each(imgdir, "files.img", IMG_FILES_MAGIC, remap_path, &rp);
	if (!rc && rp.listed < ids.n)
		fprintf(
		    stderr,
		    "crcudactl: post-dump: %u of the dump's %zu link remaps listed in %s: the others stay "
		    "after the checkpoint is removed\n",
		    rp.listed, ids.n, imgdir);
	if ((fflush(f) || fsync(fileno(f))) && !rc)
		rc = -errno;
	if (fclose(f) && !rc)
		rc = -errno;
	if (!rc && rename(tmp, list))
		rc = -errno;
	if (rc)
		unlink(tmp);
	free(ids.id);
	return rc;
}

/* The remaps of imgdir's list that are still there (their path, their inode): removed (remove set;
 * returns how many), or else kept in the list, whose other lines go (the list with them once none is
 * left; returns 0). -errno where the list cannot be read or written. */
static int list_walk(const char *imgdir, bool remove)
{
	char list[PATH_MAX], tmp[PATH_MAX + 16], line[PATH_MAX + 64];
	struct stat dst;
	FILE *in, *out = NULL;
	unsigned kept = 0;
	int done = 0;
	uint64_t dev, ino;

	snprintf(list, sizeof(list), "%s/%s", imgdir, REMAP_LIST);
	if (!(in = fopen(list, "re")))
		return errno == ENOENT ? 0 : -errno;
	/* Another copy of the images (an import) owns nothing: the checkpoint that made them does. */
	if (!fgets(line, sizeof(line), in) || sscanf(line, "images %" SCNu64 " %" SCNu64, &dev, &ino) != 2 ||
	    stat(imgdir, &dst) || dst.st_dev != dev || dst.st_ino != ino) {
		fclose(in);
		return 0;
	}
	snprintf(tmp, sizeof(tmp), "%s.%d", list, (int)getpid());
	if (!remove && !(out = fopen(tmp, "we"))) {
		fclose(in);
		return -errno;
	}
	if (out)
		fputs(line, out);
	while (fgets(line, sizeof(line), in)) {
		char path[PATH_MAX];
		struct stat st;
		const char *base;

		if (sscanf(line, "%" SCNu64 " %" SCNu64 " %4095[^\n]", &dev, &ino, path) != 3 ||
		    !(base = strrchr(path, '/')) || strncmp(base + 1, REMAP_PREFIX, strlen(REMAP_PREFIX)))
			continue; /* not ours to touch */
		if (lstat(path, &st) || !S_ISREG(st.st_mode) || st.st_dev != dev || st.st_ino != ino)
			continue; /* gone: a restore used it up (the name may be another dump's now) */
		if (!remove) {
			fputs(line, out);
			kept++;
		} else if (unlink(path) == 0) {
			done++;
		} else {
			fprintf(stderr, "crcudactl: CRIU's link remap %s: %s\n", path, strerror(errno));
		}
	}
	fclose(in);
	if (out) {
		int rc = fflush(out) || fsync(fileno(out)) ? -errno : 0;

		if (fclose(out) && !rc)
			rc = -errno;
		if (!rc && (kept ? rename(tmp, list) : unlink(list)))
			rc = -errno;
		if (kept ? rc : 1)
			unlink(tmp);
		return rc;
	}
	return done;
}

int ctl_link_remaps_remove(const char *imgdir)
{
	return list_walk(imgdir, true);
}

int ctl_link_remaps_prune(const char *imgdir)
{
	return list_walk(imgdir, false);
}
