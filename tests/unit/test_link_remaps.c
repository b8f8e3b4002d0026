/* crcudactl/link_remaps.c on images made here the way CRIU writes them (a head magic and the image's,
 * then size-prefixed protobuf entries): which link remaps a dump made (only linked ones, only names
 * CRIU gives them), what removal takes (only those still there with their inode, only through the
 * image directory that listed them), what a restore's pruning forgets, and images that do not read. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "crcudactl.h"

#define IMG_COMMON_MAGIC      0x54564319u
#define IMG_FILES_MAGIC	      0x56303138u
#define IMG_REMAP_FPATH_MAGIC 0x59133954u

struct buf {
	uint8_t b[4096];
	size_t n;
};

static void put_varint(struct buf *b, uint64_t v)
{
	do {
		b->b[b->n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
		v >>= 7;
	} while (v);
}

static void put_uint(struct buf *b, unsigned field, uint64_t v)
{
	put_varint(b, (uint64_t)field << 3);
	put_varint(b, v);
}

static void put_bytes(struct buf *b, unsigned field, const void *p, size_t len)
{
	put_varint(b, (uint64_t)field << 3 | 2);
	put_varint(b, len);
	memcpy(b->b + b->n, p, len);
	b->n += len;
}

static void put_u32(struct buf *b, uint32_t v)
{
	memcpy(b->b + b->n, &v, 4);
	b->n += 4;
}

static void put_entry(struct buf *img, const struct buf *e)
{
	put_u32(img, (uint32_t)e->n);
	memcpy(img->b + img->n, e->b, e->n);
	img->n += e->n;
}

/* remap_file_path_entry: orig_id 1, remap_id 2, remap_type 3 (LINKED 0, GHOST 1). */
static void remap_entry(struct buf *img, uint32_t orig, uint32_t remap, int type)
{
	struct buf e = {.n = 0};

	put_uint(&e, 1, orig);
	put_uint(&e, 2, remap);
	if (type >= 0)
		put_uint(&e, 3, (uint64_t)type);
	put_entry(img, &e);
}

/* file_entry {type 1 (REG 1), id 2, reg 3 {id 1, flags 2, pos 3, fown 5 {}, name 6}}; the name as CRIU
 * writes it, from the root of the tree's mount namespace (path without its first "/"). */
static void file_entry(struct buf *img, uint32_t id, const char *path)
{
	struct buf reg = {.n = 0}, e = {.n = 0}, fown = {.n = 0};

	put_uint(&fown, 1, 0);
	put_uint(&reg, 1, id);
	put_uint(&reg, 2, 0);
	put_uint(&reg, 3, 0);
	put_bytes(&reg, 5, fown.b, fown.n);
	put_bytes(&reg, 6, path + 1, strlen(path) - 1);
	put_uint(&reg, 7, 42); /* mnt_id: fields read past */
	put_uint(&e, 1, 1);
	put_uint(&e, 2, id);
	put_bytes(&e, 3, reg.b, reg.n);
	put_entry(img, &e);
}

static void write_file(const char *dir, const char *name, const void *p, size_t len)
{
	char path[PATH_MAX];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	CHECK(fd >= 0);
	CHECK(write(fd, p, len) == (ssize_t)len);
	close(fd);
}

static void make_file(const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);

	CHECK(fd >= 0);
	CHECK(write(fd, "sem", 3) == 3);
	close(fd);
}

static ino_t ino_of(const char *path)
{
	struct stat st;

	return lstat(path, &st) ? 0 : st.st_ino;
}

static char list[PATH_MAX + 64];

static int list_lines(void)
{
	char line[PATH_MAX + 64];
	FILE *f = fopen(list, "r");
	int n = 0;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		n++;
	fclose(f);
	return n - 1; /* the "images" line */
}

int main(void)
{
	char top[] = "/tmp/crcuda-unit-remaps.XXXXXX", img[PATH_MAX], copy[PATH_MAX], shm[PATH_MAX],
	     sem[PATH_MAX + 16], mine[PATH_MAX + 16], ghost[PATH_MAX + 16], other[PATH_MAX + 16],
	     oddname[PATH_MAX + 16], cmd[4 * PATH_MAX];
	struct buf fpath = {.n = 0}, files = {.n = 0};

	CHECK(mkdtemp(top));
	snprintf(img, sizeof(img), "%s/img", top);
	snprintf(copy, sizeof(copy), "%s/copy", top);
	snprintf(shm, sizeof(shm), "%s/shm", top);
	CHECK(!mkdir(img, 0700) && !mkdir(copy, 0700) && !mkdir(shm, 0700));
	snprintf(list, sizeof(list), "%s/crcuda-link-remaps.list", img);
	snprintf(sem, sizeof(sem), "%s/sem.x", shm);
	snprintf(mine, sizeof(mine), "%s/link_remap.5", shm);
	snprintf(ghost, sizeof(ghost), "%s/link_remap.7", shm);
	snprintf(other, sizeof(other), "%s/link_remap.5.1", shm);
	snprintf(oddname, sizeof(oddname), "%s/sem.y", shm);
	/* The program's semaphore, this dump's remap of it, another dump's, and files by other names. */
	make_file(sem);
	CHECK(!link(sem, mine) && !link(sem, other));
	make_file(ghost);
	make_file(oddname);

	/* No remap-fpath.img: the dump made no remap, nothing is listed. */
	CHECK_EQ_INT(ctl_link_remaps_record(img), 0);
	CHECK_EQ_INT(access(list, F_OK), -1);

	/* Linked remap 5 (of file 1), a ghost 7 (of file 2), a linked 9 named unlike CRIU's remaps; an old
	 * image's entry without remap_type (8 | the ghost flag). */
	put_u32(&fpath, IMG_COMMON_MAGIC);
	put_u32(&fpath, IMG_REMAP_FPATH_MAGIC);
	remap_entry(&fpath, 1, 5, 0);
	remap_entry(&fpath, 2, 7, 1);
	remap_entry(&fpath, 3, 9, 0);
	remap_entry(&fpath, 4, 8u | 1u << 31, -1);
	put_u32(&files, IMG_COMMON_MAGIC);
	put_u32(&files, IMG_FILES_MAGIC);
	file_entry(&files, 1, sem);
	file_entry(&files, 5, mine);
	file_entry(&files, 7, ghost);
	file_entry(&files, 9, oddname);
	write_file(img, "remap-fpath.img", fpath.b, fpath.n);
	write_file(img, "files.img", files.b, files.n);

	CHECK_EQ_INT(ctl_link_remaps_record(img), 0);
	CHECK_EQ_INT(list_lines(), 1);

	/* A copy of the images (an import) owns nothing. */
	snprintf(cmd, sizeof(cmd), "cp %s/* %s/", img, copy);
	CHECK(system(cmd) == 0);
	CHECK_EQ_INT(ctl_link_remaps_remove(copy), 0);
	CHECK(ino_of(mine) == ino_of(sem));

	/* Another file under the remap's name (not its inode): not the dump's. */
	ino_t sem_ino = ino_of(sem);
	CHECK(!rename(mine, oddname));
	make_file(mine);
	CHECK_EQ_INT(ctl_link_remaps_remove(img), 0);
	CHECK(ino_of(mine) && ino_of(mine) != sem_ino);
	CHECK(!unlink(mine) && !rename(oddname, mine));

	/* Removal: the dump's remap only. */
	CHECK_EQ_INT(ctl_link_remaps_remove(img), 1);
	CHECK_EQ_INT(access(mine, F_OK), -1);
	CHECK(ino_of(sem) == sem_ino && ino_of(other) == sem_ino && ino_of(ghost));

	/* A restore used the remap up (CRIU removed it): pruning forgets it, the list goes; a later dump's
	 * remap of the same file under the same name is then not taken. */
	CHECK(!link(sem, mine));
	CHECK_EQ_INT(ctl_link_remaps_record(img), 0);
	CHECK(!unlink(mine));
	CHECK_EQ_INT(ctl_link_remaps_prune(img), 0);
	CHECK_EQ_INT(access(list, F_OK), -1);
	CHECK(!link(sem, mine));
	CHECK_EQ_INT(ctl_link_remaps_remove(img), 0);
	CHECK(ino_of(mine) == sem_ino);

	/* A failed restore left it: pruning keeps it, removal then takes it. */
	CHECK_EQ_INT(ctl_link_remaps_record(img), 0);
	CHECK_EQ_INT(ctl_link_remaps_prune(img), 0);
	CHECK_EQ_INT(list_lines(), 1);
	CHECK_EQ_INT(ctl_link_remaps_remove(img), 1);
	CHECK_EQ_INT(access(mine, F_OK), -1);

	/* Images that do not read: a clear error, no list. */
	CHECK(!unlink(list));
	write_file(img, "files.img", files.b, files.n - 3); /* cut inside an entry */
	CHECK_EQ_INT(ctl_link_remaps_record(img), -EBADMSG);
	CHECK_EQ_INT(access(list, F_OK), -1);
	files.b[5] ^= 1; /* the image's magic */
	write_file(img, "files.img", files.b, files.n);
	CHECK_EQ_INT(ctl_link_remaps_record(img), -EBADMSG);
	fpath.b[fpath.n - 1] = 0xff; /* a varint that does not end */
	write_file(img, "remap-fpath.img", fpath.b, fpath.n);
	CHECK_EQ_INT(ctl_link_remaps_record(img), -EBADMSG);
	CHECK_EQ_INT(access(list, F_OK), -1);

	snprintf(cmd, sizeof(cmd), "rm -rf %s", top);
	CHECK(system(cmd) == 0);
	printf("unit_link_remaps: ok\n");
	return 0;
}
