/* logs: the driver's error log (cuLogsCurrent, cuLogsDumpToMemory, cuLogsDumpToFile) and log callbacks
 * (cuLogsRegisterCallback, cuLogsUnregisterCallback). An unsupported limit asked of cuCtxGetLimit is
 * the error; the program prints the driver's answers and what it saw (whether the error was logged is
 * the driver's business: the same natively and through the layer, not the text): the callbacks'
 * lines, the dumps (iterator moving, the callback's line in them, a buffer too small, a file written
 * over or appended to), and no line after the callback's unregistration. */
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "cuda_test.h"

static atomic_int lines, lines2, bad_data;
static CUlogLevel last_level;
static char last_msg[4096];
static int token;

static void CUDA_CB on_log(void *data, CUlogLevel level, char *message, size_t length)
{
	if (data != &token)
		atomic_store(&bad_data, 1);
	last_level = level;
	snprintf(last_msg, sizeof(last_msg), "%.*s", (int)length, message);
	atomic_fetch_add(&lines, 1);
}

static void CUDA_CB on_log2(void *data, CUlogLevel level, char *message, size_t length)
{
	(void)level;
	(void)message;
	(void)length;
	if (data)
		atomic_store(&bad_data, 1);
	atomic_fetch_add(&lines2, 1);
}

/* Each line of a dump without its "[time][thread id]" prefix, in place. */
static char *strip_stamps(char *text)
{
	char *in = text, *out = text;

	while (*in) {
		char *mark = strstr(in, "][CUDA]"), *eol = strchr(in, '\n');

		if (mark && (!eol || mark < eol))
			in = mark + 1;
		while (*in && *in != '\n')
			*out++ = *in++;
		if (*in)
			*out++ = *in++;
	}
	*out = 0;
	return text;
}

static CUresult provoke(void)
{
	size_t v = 0;

	return cuCtxGetLimit(&v, (CUlimit)0x7fff);
}

static size_t read_file(const char *path, char *buf, size_t cap)
{
	FILE *f = fopen(path, "r");
	size_t n = 0;

	if (f) {
		n = fread(buf, 1, cap - 1, f);
		fclose(f);
	}
	buf[n] = 0;
	return n;
}

int main(void)
{
	CUlogIterator it, before, fit;
	CUlogsCallbackHandle h = NULL;
	static char buf[65536], fbuf[65536];
	char path[] = "/tmp/crcuda-logs-XXXXXX";
	size_t size;
	int fd, n;

	cu_test_init("logs");
	cu_test_primary_context(NULL);
	printf("current(NULL): %s\n", cu_error_name(cuLogsCurrent(NULL, 0)));
	printf("current(flags 1): %s\n", cu_error_name(cuLogsCurrent(&it, 1)));
	CU_CHECK(cuLogsCurrent(&it, 0));
	size = sizeof(buf);
	printf("dump(flags 1): %s\n", cu_error_name(cuLogsDumpToMemory(&it, buf, &size, 1)));
	size = sizeof(buf);
	printf("dump(buffer NULL): %s\n", cu_error_name(cuLogsDumpToMemory(&it, NULL, &size, 0)));
	printf("dump(size NULL): %s\n", cu_error_name(cuLogsDumpToMemory(&it, buf, NULL, 0)));
	size = sizeof(buf);
	CU_CHECK(cuLogsDumpToMemory(&it, buf, &size, 0));
	/* The driver's lines start with a time and a thread id: only what follows them is compared. */
	printf("dump with nothing new: size %zu, \"%s\"\n", size, strip_stamps(buf));

	printf("register(NULL function): %s\n", cu_error_name(cuLogsRegisterCallback(NULL, &token, &h)));
	CU_CHECK(cuLogsRegisterCallback(on_log, &token, &h));
	CHECK(h != NULL);
	/* No handle asked for: it is registered all the same (and can never be unregistered). */
	CU_CHECK(cuLogsRegisterCallback(on_log2, NULL, NULL));
	before = it;
	printf("cuCtxGetLimit(0x7fff): %s\n", cu_error_name(provoke()));
	n = atomic_load(&lines);
	printf("callback: %s, userData %s, level %s; the other callback %s\n", n ? "called" : "not called",
	       atomic_load(&bad_data) ? "wrong" : "right",
	       !n				  ? "-"
	       : last_level == CU_LOG_LEVEL_ERROR ? "error"
						  : "warning",
	       atomic_load(&lines2) == n ? "as often" : "not as often");

	size = sizeof(buf);
	CU_CHECK(cuLogsDumpToMemory(&it, buf, &size, 0));
	CHECK(size == strlen(buf));
	printf("dump: %s, iterator %s, ends with a newline: %s, holds the callback's line: %s\n",
	       size ? "lines" : "empty", it != before ? "moved" : "stayed",
	       size && buf[size - 1] == '\n' ? "yes" : "no", n && strstr(buf, last_msg) ? "yes" : "no");
	size = sizeof(buf);
	CU_CHECK(cuLogsDumpToMemory(&it, buf, &size, 0));
	printf("dump again: size %zu\n", size);
	if (n) {
		CUresult res;

		fit = before;
		size = 1;
		res = cuLogsDumpToMemory(&fit, buf, &size, 0);
		printf("dump into 1 byte: %s, size %zu, iterator %s\n", cu_error_name(res), size,
		       fit != before ? "moved" : "stayed");
	}

	fd = mkstemp(path);
	CHECK(fd >= 0);
	CHECK(write(fd, "BEFORE\n", 7) == 7);
	close(fd);
	fit = before;
	printf("file(NULL path): %s\n", cu_error_name(cuLogsDumpToFile(&fit, NULL, 0)));
	/* (flags other than 0: the driver takes 1, undocumented; not probed) */
	printf("file(no such directory): %s\n",
	       cu_error_name(cuLogsDumpToFile(&fit, "/nonexistent-crcuda/dir/log", 0)));
	fit = before;
	CU_CHECK(cuLogsDumpToFile(&fit, path, 0));
	read_file(path, fbuf, sizeof(fbuf));
	printf("file: iterator %s, old contents %s, holds the callback's line: %s\n",
	       fit != before ? "moved" : "stayed", !strncmp(fbuf, "BEFORE\n", 7) ? "kept" : "gone",
	       n && strstr(fbuf, last_msg) ? "yes" : "no");
	CU_CHECK(cuLogsDumpToFile(NULL, path, 0));
	read_file(path, fbuf, sizeof(fbuf));
	printf("file of all logs: holds the callback's line: %s\n",
	       n && strstr(fbuf, last_msg) ? "yes" : "no");
	unlink(path);

	printf("unregister(NULL): %s\n", cu_error_name(cuLogsUnregisterCallback(NULL)));
	CU_CHECK(cuLogsUnregisterCallback(h));
	n = atomic_load(&lines);
	printf("cuCtxGetLimit(0x7fff) again: %s\n", cu_error_name(provoke()));
	printf("after the unregistration: %d new lines; the other callback: %s\n", atomic_load(&lines) - n,
	       atomic_load(&lines2) > n ? "called" : "not called");
	cu_test_pass("logs");
}
