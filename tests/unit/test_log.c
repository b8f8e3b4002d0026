#define LOG_PREFIX "logtest: "
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "check.h"
#include "crcuda/log.h"

int main(void)
{
	char path[] = "/tmp/crcuda-logtest-XXXXXX";
	int fd = mkstemp(path);
	CHECK(fd >= 0);
	close(fd);
	setenv("CRCUDA_LOG_FILE", path, 1);
	setenv("CRCUDA_LOG_LEVEL", "info", 1);
	CHECK_EQ_INT(crc_log_level(), CRC_LOG_INFO);
	pr_info("hello %d", 42);
	pr_debug("not shown");
	pr_err("broken %s", "thing");
	char buf[4096] = {0};
	fd = open(path, O_RDONLY);
	CHECK(fd >= 0);
	CHECK(read(fd, buf, sizeof(buf) - 1) > 0);
	close(fd);
	unlink(path);
	CHECK(strstr(buf, "logtest: hello 42\n") != NULL);
	CHECK(strstr(buf, "not shown") == NULL);
	/* Errors carry file:line and the per-file prefix. */
	CHECK(strstr(buf, "Error (test_log.c:") != NULL);
	CHECK(strstr(buf, "logtest: broken thing\n") != NULL);
	return 0;
}
