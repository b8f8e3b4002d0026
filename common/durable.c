#include "crcuda/durable.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

int crc_sync_dir_files(int dir_fd)
{
	int dfd = openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC), rc = 0;
	struct dirent *e;
	DIR *d;

	if (dfd < 0)
		return -errno;
	if (!(d = fdopendir(dfd))) {
		rc = -errno;
		close(dfd);
		return rc;
	}
	while (!rc && (e = readdir(d))) {
		int fd;

		if (e->d_type != DT_REG && e->d_type != DT_UNKNOWN)
			continue;
		fd = openat(dirfd(d), e->d_name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
		if (fd < 0)
			continue;
		if (fsync(fd))
			rc = -errno;
		close(fd);
	}
	if (!rc && fsync(dirfd(d)))
		rc = -errno;
	closedir(d);
	return rc;
}
