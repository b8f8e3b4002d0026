/* The CRIU plugin's own image (criu-plugin/crcuda_plugin.c, image_read): the record a dump leaves in
 * CRIU's image directory (crcuda.img: the store, the checkpoint, the task and its socket), read back
 * at restore from a directory anyone with the images may have edited. The plugin's source is
 * compiled in here (its functions are static); CRIU's exports it uses are stubbed. */
#include <dirent.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <unistd.h>

#include "fuzz.h"

int criu_get_image_dir(void);
void print_on_level(unsigned int loglevel, const char *format, ...);
int add_inventory_plugin(const char *name);
bool check_and_remove_inventory_plugin(const char *name, size_t n);

static int image_dir = -1;
static char image_path[64];

static void cleanup(void)
{
	char f[128];

	snprintf(f, sizeof(f), "%s/crcuda.img", image_path);
	unlink(f);
	rmdir(image_path);
}

int criu_get_image_dir(void)
{
	return image_dir;
}

/* CRIU's log: formatted (so the sanitizers check the arguments), then dropped. */
void print_on_level(unsigned int loglevel, const char *format, ...)
{
	char buf[1024];
	va_list ap;

	(void)loglevel;
	va_start(ap, format);
	vsnprintf(buf, sizeof(buf), format, ap);
	va_end(ap);
}

int add_inventory_plugin(const char *name)
{
	(void)name;
	return 0;
}

bool check_and_remove_inventory_plugin(const char *name, size_t n)
{
	(void)name;
	(void)n;
	return false;
}

#include "../criu-plugin/crcuda_plugin.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int fd, rc;

	fuzz_quiet();
	if (image_dir < 0) {
		snprintf(image_path, sizeof(image_path), "/tmp/crcuda-fuzz-criu-XXXXXX");
		FUZZ_CHECK(mkdtemp(image_path));
		image_dir = open(image_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		FUZZ_CHECK(image_dir >= 0);
		atexit(cleanup);
	}
	fd = openat(image_dir, PLUGIN_IMG, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	FUZZ_CHECK(fd >= 0);
	FUZZ_CHECK(write(fd, data, size) == (ssize_t)size);
	close(fd);
	memset(&P, 0, sizeof(P));
	rc = image_read();
	FUZZ_CHECK(rc == 0 || rc == -1);
	FUZZ_CHECK(memchr(P.store, 0, sizeof(P.store)) != NULL);
	return 0;
}
