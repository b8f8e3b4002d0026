/* CRIU's images as crcudactl reads them for the link remaps a dump left (crcudactl/link_remaps.c):
 * remap-fpath.img and files.img, as anyone with the image directory may have written them. The input:
 * a little-endian u32 length, that many bytes of remap-fpath.img, then files.img. Both go into a
 * scratch directory; ctl_link_remaps_record lists the remaps they name, and ctl_link_remaps_prune
 * reads that list back (prune never unlinks a remap: only ctl_link_remaps_remove does, never called
 * here). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz.h"

int ctl_link_remaps_record(const char *imgdir);
int ctl_link_remaps_prune(const char *imgdir);

static char dir[64];

/* The scratch directory goes with the fuzzer. */
static void remove_dir(void)
{
	static const char *const names[] = {"remap-fpath.img", "files.img", "crcuda-link-remaps.list"};
	char path[128];

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
		unlink(path);
	}
	rmdir(dir);
}

static void put_file(const char *name, const uint8_t *p, size_t n)
{
	char path[128];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	FUZZ_CHECK(fd >= 0);
	FUZZ_CHECK(write(fd, p, n) == (ssize_t)n);
	close(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char list[128];
	uint32_t n;

	if (!dir[0]) {
		snprintf(dir, sizeof(dir), "/tmp/crcuda-fuzz-remaps.XXXXXX");
		FUZZ_CHECK(mkdtemp(dir) != NULL);
		atexit(remove_dir);
	}
	if (size < 4)
		return 0;
	n = (uint32_t)data[0] | (uint32_t)data[1] << 8 | (uint32_t)data[2] << 16 | (uint32_t)data[3] << 24;
	data += 4;
	size -= 4;
	if (n > size)
		n = (uint32_t)size;
	put_file("remap-fpath.img", data, n);
	put_file("files.img", data + n, size - n);
	snprintf(list, sizeof(list), "%s/crcuda-link-remaps.list", dir);
	unlink(list);
	ctl_link_remaps_record(dir);
	ctl_link_remaps_prune(dir);
	return 0;
}
