/* Files in /dev/shm that a checkpointed tree maps shared hold state of its processes (POSIX named
 * semaphores: Python's multiprocessing; named shared memory) that CRIU does not save: it maps such a
 * file again as the file is at the restore. Where the program ran on after a --leave-running
 * checkpoint, or the file is gone, that is not the state the processes had. So the dump's post-dump
 * action (the tree still frozen) saves the contents of every such file the tree maps (those with a
 * name left: CRIU saves unlinked ones itself, as ghost files) into the image directory, and a restore
 * writes them back before CRIU runs: into the file under its name, or, for one CRIU reaches through a
 * link remap (mapped under a name since unlinked), into the file of the same inode in its directory.
 *
 * crcuda-shm.list in the image directory: one line per file, "SAVED DEV INO SIZE MODE PATH", SAVED the
 * name of the copy (crcuda-shm-N) beside it. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "crcuda/proctree.h"
#include "crcudactl.h"

#define SHM_DIR	      "/dev/shm/"
#define SHM_LIST      "crcuda-shm.list"
#define SHM_FILE_MAX  (256ull << 20) /* larger ones are left to CRIU's way (and said) */
#define SHM_FILES_MAX 4096

struct shm_seen {
	dev_t dev;
	ino_t ino;
};

/* Copies size bytes from fd to a new file at path (0600). 0 or -errno. */
static int copy_out(int fd, const char *path, uint64_t size)
{
	char buf[1 << 16];
	uint64_t off = 0;
	int out = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600), rc = 0;

	if (out < 0)
		return -errno;
	while (off < size && !rc) {
		ssize_t n = pread(fd, buf, size - off < sizeof(buf) ? size - off : sizeof(buf), (off_t)off);

		if (n <= 0)
			rc = n < 0 ? -errno : -EIO;
		else if (write(out, buf, (size_t)n) != n)
			rc = -errno;
		else
			off += (uint64_t)n;
	}
	if (!rc && fsync(out))
		rc = -errno;
	close(out);
	return rc;
}

int ctl_shm_save(pid_t root, const char *imgdir)
{
	pid_t *tree = NULL;
	size_t ntree = crc_proc_tree(root, &tree), nseen = 0;
	struct shm_seen *seen = calloc(SHM_FILES_MAX, sizeof(*seen));
	char list[PATH_MAX];
	FILE *lf = NULL;
	int rc = 0;

	snprintf(list, sizeof(list), "%s/%s", imgdir, SHM_LIST);
	if (!tree || !seen) {
		free(tree);
		free(seen);
		return -ENOMEM;
	}
	for (size_t t = 0; t < ntree && !rc; t++) {
		char maps[64], line[PATH_MAX + 256];
		FILE *mf;

		snprintf(maps, sizeof(maps), "/proc/%d/maps", (int)tree[t]);
		if (!(mf = fopen(maps, "re")))
			continue; /* gone meanwhile (CRIU dumped what was there) */
		while (!rc && fgets(line, sizeof(line), mf)) {
			char range[64], perms[8], *path = strstr(line, " " SHM_DIR);
			char mapfile[128], saved[PATH_MAX];
			struct stat st;
			int fd;

			if (!path || sscanf(line, "%63s %7s", range, perms) != 2 || perms[3] != 's')
				continue;
			path++;
			path[strcspn(path, "\n")] = 0;
			snprintf(mapfile, sizeof(mapfile), "/proc/%d/map_files/%s", (int)tree[t], range);
			fd = open(mapfile, O_RDONLY | O_CLOEXEC);
			if (fd < 0 || fstat(fd, &st) || !st.st_nlink || !S_ISREG(st.st_mode)) {
				if (fd >= 0)
					close(fd);
				continue; /* unlinked: CRIU's ghost file has its contents */
			}
			bool dup = false;
			for (size_t k = 0; k < nseen && !dup; k++)
				dup = seen[k].dev == st.st_dev && seen[k].ino == st.st_ino;
			if (dup || nseen == SHM_FILES_MAX || (uint64_t)st.st_size > SHM_FILE_MAX) {
				if (!dup)
					fprintf(
					    stderr,
					    "crcudactl: %s (%" PRIu64
					    " bytes) is restored as it will be then, "
					    "not as it is now (more than %llu MiB, or too many such files)\n",
					    path, (uint64_t)st.st_size, SHM_FILE_MAX >> 20);
				close(fd);
				continue;
			}
			seen[nseen++] = (struct shm_seen){st.st_dev, st.st_ino};
			if (!lf && !(lf = fopen(list, "we"))) {
				rc = -errno;
				close(fd);
				break;
			}
			/* " (deleted)": mapped under a name since unlinked (CRIU links it again). */
			char *del = strstr(path, " (deleted)");
			if (del)
				*del = 0;
			snprintf(saved, sizeof(saved), "%s/crcuda-shm-%zu", imgdir, nseen);
			rc = copy_out(fd, saved, (uint64_t)st.st_size);
			close(fd);
			if (!rc)
				fprintf(lf, "crcuda-shm-%zu %" PRIu64 " %" PRIu64 " %" PRIu64 " %o %s\n",
					nseen, (uint64_t)st.st_dev, (uint64_t)st.st_ino, (uint64_t)st.st_size,
					(unsigned)(st.st_mode & 07777), path);
		}
		fclose(mf);
	}
	if (lf && (fflush(lf) || fsync(fileno(lf))) && !rc)
		rc = -errno;
	if (lf)
		fclose(lf);
	free(tree);
	free(seen);
	return rc;
}

/* The file of that inode in dir (a link remap of CRIU's, or the file under another name), opened for
 * writing; -1 when there is none. */
static int open_by_inode(const char *dir, dev_t dev, ino_t ino)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int fd = -1;

	while (d && fd < 0 && (e = readdir(d))) {
		struct stat st;

		if (e->d_ino == ino && !fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) &&
		    st.st_dev == dev && st.st_ino == ino && S_ISREG(st.st_mode))
			fd = openat(dirfd(d), e->d_name, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
	}
	if (d)
		closedir(d);
	return fd;
}

int ctl_shm_restore(const char *imgdir)
{
	char list[PATH_MAX], line[PATH_MAX + 256];
	FILE *lf;
	int rc = 0;

	snprintf(list, sizeof(list), "%s/%s", imgdir, SHM_LIST);
	if (!(lf = fopen(list, "re")))
		return errno == ENOENT ? 0 : -errno;
	while (!rc && fgets(line, sizeof(line), lf)) {
		char saved[64], path[PATH_MAX], from[PATH_MAX + 80], buf[1 << 16];
		uint64_t dev, ino, size, off = 0;
		unsigned mode;
		int in, out;

		if (sscanf(line, "%63s %" SCNu64 " %" SCNu64 " %" SCNu64 " %o %4095[^\n]", saved, &dev, &ino,
			   &size, &mode, path) != 6 ||
		    strncmp(path, SHM_DIR, strlen(SHM_DIR)) || strchr(saved, '/')) {
			fprintf(stderr, "crcudactl: restore: %s: a line that does not read: %s", list, line);
			rc = -EINVAL;
			break;
		}
		/* Under its name (made again where it is gone: another node), else the same inode in its
		 * directory (CRIU's link remap of a file mapped under a name since unlinked). */
		out = open(path, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
		if (out < 0 && errno == ENOENT) {
			char dir[PATH_MAX];

			snprintf(dir, sizeof(dir), "%s", path);
			*strrchr(dir, '/') = 0;
			out = open_by_inode(dir, (dev_t)dev, (ino_t)ino);
			if (out < 0)
				out = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
					   mode & 0777);
		}
		snprintf(from, sizeof(from), "%s/%s", imgdir, saved);
		in = open(from, O_RDONLY | O_CLOEXEC);
		if (out < 0 || in < 0) {
			rc = -errno;
			fprintf(stderr, "crcudactl: restore: %s: %s\n", out < 0 ? path : from,
				strerror(errno));
		}
		while (!rc && off < size) {
			ssize_t n =
			    pread(in, buf, size - off < sizeof(buf) ? size - off : sizeof(buf), (off_t)off);

			if (n <= 0 || pwrite(out, buf, (size_t)n, (off_t)off) != n)
				rc = n < 0 ? -errno : -EIO;
			else
				off += (uint64_t)n;
		}
		if (!rc && ftruncate(out, (off_t)size))
			rc = -errno;
		if (rc && out >= 0 && in >= 0)
			fprintf(stderr, "crcudactl: restore: writing %s back: %s\n", path, strerror(-rc));
		if (in >= 0)
			close(in);
		if (out >= 0)
			close(out);
	}
	fclose(lf);
	return rc;
}
