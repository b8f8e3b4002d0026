#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "crcuda/log.h"

static atomic_int log_level;	  /* 0 = not yet read from the environment */
static atomic_int log_fd = -1;	  /* -1 = stderr */
static struct timespec log_start; /* lines are stamped relative to the first message */
static _Thread_local char last_error[512];

const char *crc_log_last_error(void)
{
	return last_error;
}

void crc_log_clear_last_error(void)
{
	last_error[0] = 0;
}

static int parse_level(const char *s)
{
	static const char *names[] = {"error", "warn", "info", "debug"};
	for (int i = 0; i < 4; i++)
		if (!strcasecmp(s, names[i]))
			return i + 1;
	int v = atoi(s);
	return v < CRC_LOG_ERROR ? CRC_LOG_ERROR : v > CRC_LOG_DEBUG ? CRC_LOG_DEBUG : v;
}

int crc_log_level(void)
{
	int lvl = atomic_load_explicit(&log_level, memory_order_relaxed);
	if (lvl)
		return lvl;
	const char *env = getenv("CRCUDA_LOG_LEVEL");
	lvl = env && *env ? parse_level(env) : CRC_LOG_WARN;
	const char *file = getenv("CRCUDA_LOG_FILE");
	if (file && *file)
		crc_log_set_file(file);
	atomic_store(&log_level, lvl);
	return lvl;
}

void crc_log_set_level(int level)
{
	atomic_store(&log_level, level == CRC_LOG_SILENT ? CRC_LOG_SILENT
				 : level < CRC_LOG_ERROR ? CRC_LOG_ERROR
							 : level);
}

int crc_log_set_file(const char *path)
{
	int fd = -1;
	if (path) {
		fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
		if (fd < 0)
			return -errno;
	}
	int old = atomic_exchange(&log_fd, fd);
	if (old >= 0)
		close(old);
	return 0;
}

void crc_log(enum crc_log_level level, const char *file, int line, const char *fmt, ...)
{
	/* One write(2) per line from a fixed buffer: no stdio state shared with the application,
	 * safe between fork and exec, lines from threads do not interleave. */
	char buf[1024];
	int saved_errno = errno;
	struct timespec now;

	if (level == CRC_LOG_ERROR) {
		va_list cp;

		va_start(cp, fmt);
		vsnprintf(last_error, sizeof(last_error), fmt, cp);
		va_end(cp);
		errno = saved_errno;
		last_error[strcspn(last_error, "\n")] = 0;
	}
	/* Errors come here below the threshold too, to be remembered only. */
	if ((int)level > crc_log_level())
		return;
	clock_gettime(CLOCK_MONOTONIC, &now);
	if (!log_start.tv_sec && !log_start.tv_nsec)
		log_start = now;
	double t = (double)(now.tv_sec - log_start.tv_sec) + (double)(now.tv_nsec - log_start.tv_nsec) / 1e9;
	int n = snprintf(buf, sizeof(buf), "(%09.6f) %d ", t, (int)getpid());
	if (level <= CRC_LOG_WARN) {
		const char *base = strrchr(file, '/');
		n += snprintf(buf + n, sizeof(buf) - (size_t)n,
			      "%s (%s:%d): ", level == CRC_LOG_ERROR ? "Error" : "Warn",
			      base ? base + 1 : file, line);
	}
	va_list ap;
	va_start(ap, fmt);
	errno = saved_errno; /* for %m */
	if (n < (int)sizeof(buf))
		n += vsnprintf(buf + n, sizeof(buf) - (size_t)n, fmt, ap);
	va_end(ap);
	if (n >= (int)sizeof(buf) - 1)
		n = (int)sizeof(buf) - 2;
	if (n > 0 && buf[n - 1] != '\n')
		buf[n++] = '\n';
	int fd = atomic_load(&log_fd);
	ssize_t w = write(fd >= 0 ? fd : STDERR_FILENO, buf, (size_t)n);
	(void)w;
	errno = saved_errno;
}
