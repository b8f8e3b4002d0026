/* iofault: an LD_PRELOAD library that makes writes or syncs of chosen files fail, for fault tests of
 * whatever process writes them (crcudad's worker: the pack files; CRIU and its crcuda plugin: the
 * image files). Configured by the environment:
 *   IOFAULT_PATH        the faults hit files whose path (as /proc/self/fd names it) starts with this;
 *                       with a *, ? or [ in it, a shell pattern the whole path must match (fnmatch, a *
 *                       also matching slashes)
 *   IOFAULT_OPS         comma-separated: write (write, pwrite, writev, pwritev, splice into the file),
 *                       fsync (fsync, fdatasync, syncfs, sync_file_range), read (read, pread);
 *                       default write
 *   IOFAULT_ERRNO       EIO (default), ENOSPC or a number
 *   IOFAULT_AFTER_BYTES writes succeed until this many bytes went to matching files in this process
 *                       (the one that crosses it is cut short there; the next fails); default 0
 *   IOFAULT_CALL        the K-th matching call and every later one fail (default 1); with AFTER_BYTES,
 *                       whichever comes first
 *   IOFAULT_ARM_FILE    faults only while this file exists (so a long-lived daemon can be armed later)
 *   IOFAULT_LOG         appends "iofault: pid PID OP PATH: ERRNO" for every failure injected (a test
 *                       checks that the fault it meant did happen)
 *   IOFAULT_STALL_MS    instead of failing, a call that would fail first sleeps this long (a disk that
 *                       stops answering; logged "stall: pid PID OP PATH" before the sleep, so that a test
 *                       can kill that process there), then goes through
 *   IOFAULT_TRACE=1     inject nothing: append "ok: pid PID OP PATH" to IOFAULT_LOG after every
 *                       matching call that succeeded (the order in which writes and syncs reached
 *                       the disk, across processes: one O_APPEND file)
 * Without IOFAULT_PATH nothing is changed. Directories count as files (fsync of a directory). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

enum op { OP_WRITE = 1, OP_FSYNC = 2, OP_READ = 4 };

static struct {
	const char *path, *arm, *log;
	size_t path_len;
	unsigned ops;
	int err;
	long long after_bytes;
	long call, stall_ms;
	bool trace;
} cfg;
static atomic_llong bytes_done;
static atomic_long calls;
static atomic_int configured; /* 0 not yet, 1 on, 2 off */

static void configure(void)
{
	const char *v;
	int expected = 0;

	if (atomic_load(&configured))
		return;
	cfg.path = getenv("IOFAULT_PATH");
	cfg.arm = getenv("IOFAULT_ARM_FILE");
	cfg.log = getenv("IOFAULT_LOG");
	cfg.path_len = cfg.path ? strlen(cfg.path) : 0;
	v = getenv("IOFAULT_OPS");
	cfg.ops = 0;
	if (!v || strstr(v, "write"))
		cfg.ops |= OP_WRITE;
	if (v && strstr(v, "fsync"))
		cfg.ops |= OP_FSYNC;
	if (v && strstr(v, "read"))
		cfg.ops |= OP_READ;
	v = getenv("IOFAULT_STALL_MS");
	cfg.stall_ms = v ? atol(v) : 0;
	v = getenv("IOFAULT_ERRNO");
	cfg.err = !v || !strcmp(v, "EIO") ? EIO : !strcmp(v, "ENOSPC") ? ENOSPC : atoi(v);
	if (cfg.err <= 0)
		cfg.err = EIO;
	v = getenv("IOFAULT_AFTER_BYTES");
	cfg.after_bytes = v ? atoll(v) : -1;
	v = getenv("IOFAULT_TRACE");
	cfg.trace = v && !strcmp(v, "1");
	v = getenv("IOFAULT_CALL");
	cfg.call = v ? atol(v) : (cfg.after_bytes >= 0 ? -1 : 1);
	atomic_compare_exchange_strong(&configured, &expected, cfg.path_len ? 1 : 2);
}

/* The file behind fd, when it is one of ours and the fault is armed. */
static bool targeted(int fd, unsigned op, char *name, size_t len)
{
	char link[64];
	ssize_t n;

	configure();
	if (atomic_load(&configured) != 1 || !(cfg.ops & op))
		return false;
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	n = readlink(link, name, len - 1);
	if (n <= 0)
		return false;
	name[n] = 0;
	if (strpbrk(cfg.path, "*?[") ? fnmatch(cfg.path, name, 0) != 0
				     : strncmp(name, cfg.path, cfg.path_len) != 0)
		return false;
	return !cfg.arm || access(cfg.arm, F_OK) == 0;
}

static void log_line(const char *what, const char *name, const char *kind)
{
	int fd;
	char line[4400];
	int n;

	if (!cfg.log)
		return;
	fd = open(cfg.log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return;
	if (kind)
		n = snprintf(line, sizeof(line), "%s: pid %d %s %s\n", kind, (int)getpid(), what, name);
	else
		n = snprintf(line, sizeof(line), "iofault: pid %d %s %s: %s\n", (int)getpid(), what, name,
			     strerrorname_np(cfg.err) ? strerrorname_np(cfg.err) : "?");
	if (n > 0)
		(void)!write(fd, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1);
	close(fd);
}

/* For a write of len bytes to a targeted file: how many may go (len: all), or -1 to fail it. */
static ssize_t allowance(size_t len)
{
	if (cfg.trace)
		return (ssize_t)len;
	long k = atomic_fetch_add(&calls, 1) + 1;

	if (cfg.call > 0 && k >= cfg.call)
		return -1;
	if (cfg.after_bytes < 0)
		return (ssize_t)len;
	long long before = atomic_fetch_add(&bytes_done, (long long)len);

	if (before >= cfg.after_bytes)
		return -1;
	if (before + (long long)len > cfg.after_bytes)
		return (ssize_t)(cfg.after_bytes - before);
	return (ssize_t)len;
}

/* The result of a call that went through: traced where asked. */
static ssize_t traced(const char *what, const char *name, ssize_t r)
{
	if (cfg.trace && r >= 0)
		log_line(what, name, "ok");
	return r;
}

/* A call the fault falls on: fails (-1, errno set), or with IOFAULT_STALL_MS sleeps and returns 0
 * (the caller then makes the call). */
static ssize_t fail_with(const char *what, const char *name)
{
	if (cfg.stall_ms > 0) {
		struct timespec ts = {cfg.stall_ms / 1000, (cfg.stall_ms % 1000) * 1000000L};

		log_line(what, name, "stall");
		nanosleep(&ts, NULL);
		return 0;
	}
	log_line(what, name, NULL);
	errno = cfg.err;
	return -1;
}

/* The libc function this one stands in front of. */
#define REAL(name)                                                                                           \
	static __typeof__(&name) real_##name;                                                                \
	if (!real_##name)                                                                                    \
		real_##name = (__typeof__(&name))dlsym(RTLD_NEXT, #name);

ssize_t write(int fd, const void *buf, size_t len)
{
	REAL(write);
	char name[4096];
	ssize_t ok;

	if (!len || !targeted(fd, OP_WRITE, name, sizeof(name)))
		return real_write(fd, buf, len);
	ok = allowance(len);
	if (ok < 0) {
		if (fail_with("write", name) < 0)
			return -1;
		ok = (ssize_t)len;
	}
	return traced("write", name, real_write(fd, buf, (size_t)ok));
}

ssize_t pwrite(int fd, const void *buf, size_t len, off_t off)
{
	REAL(pwrite);
	char name[4096];
	ssize_t ok;

	if (!len || !targeted(fd, OP_WRITE, name, sizeof(name)))
		return real_pwrite(fd, buf, len, off);
	ok = allowance(len);
	if (ok < 0) {
		if (fail_with("pwrite", name) < 0)
			return -1;
		ok = (ssize_t)len;
	}
	return traced("pwrite", name, real_pwrite(fd, buf, (size_t)ok, off));
}

ssize_t pwrite64(int fd, const void *buf, size_t len, off_t off) __attribute__((alias("pwrite")));

static size_t iov_len(const struct iovec *iov, int n)
{
	size_t total = 0;

	for (int i = 0; i < n; i++)
		total += iov[i].iov_len;
	return total;
}

/* A vector write is all or nothing here: the fault falls on the call that would cross the limit. */
static bool vec_allowed(const struct iovec *iov, int n)
{
	size_t len = iov_len(iov, n);

	return allowance(len) == (ssize_t)len;
}

ssize_t writev(int fd, const struct iovec *iov, int n)
{
	REAL(writev);
	char name[4096];

	if (!targeted(fd, OP_WRITE, name, sizeof(name)))
		return real_writev(fd, iov, n);
	if (!vec_allowed(iov, n) && fail_with("writev", name) < 0)
		return -1;
	return traced("writev", name, real_writev(fd, iov, n));
}

ssize_t pwritev(int fd, const struct iovec *iov, int n, off_t off)
{
	REAL(pwritev);
	char name[4096];

	if (!targeted(fd, OP_WRITE, name, sizeof(name)))
		return real_pwritev(fd, iov, n, off);
	if (!vec_allowed(iov, n) && fail_with("pwritev", name) < 0)
		return -1;
	return traced("pwritev", name, real_pwritev(fd, iov, n, off));
}

ssize_t pwritev64(int fd, const struct iovec *iov, int n, off_t off) __attribute__((alias("pwritev")));

ssize_t splice(int in, loff_t *in_off, int out, loff_t *out_off, size_t len, unsigned flags)
{
	REAL(splice);
	char name[4096];
	ssize_t ok;

	if (!len || !targeted(out, OP_WRITE, name, sizeof(name)))
		return real_splice(in, in_off, out, out_off, len, flags);
	ok = allowance(len);
	if (ok < 0) {
		if (fail_with("splice", name) < 0)
			return -1;
		ok = (ssize_t)len;
	}
	return traced("splice", name, real_splice(in, in_off, out, out_off, (size_t)ok, flags));
}

/* A sync of fd: failed where the fault says so, else done (and traced). */
#define SYNC_CALL(what, fd, call)                                                                            \
	do {                                                                                                 \
		char name_[4096];                                                                            \
		if (!targeted(fd, OP_FSYNC, name_, sizeof(name_)))                                           \
			return call;                                                                         \
		if (allowance(0) < 0 && fail_with(what, name_) < 0)                                          \
			return -1;                                                                           \
		return (int)traced(what, name_, call);                                                       \
	} while (0)

int fsync(int fd)
{
	REAL(fsync);
	SYNC_CALL("fsync", fd, real_fsync(fd));
}

int fdatasync(int fd)
{
	REAL(fdatasync);
	SYNC_CALL("fdatasync", fd, real_fdatasync(fd));
}

int syncfs(int fd)
{
	REAL(syncfs);
	SYNC_CALL("syncfs", fd, real_syncfs(fd));
}

int sync_file_range(int fd, off_t off, off_t len, unsigned flags)
{
	REAL(sync_file_range);
	SYNC_CALL("sync_file_range", fd, real_sync_file_range(fd, off, len, flags));
}

ssize_t read(int fd, void *buf, size_t len)
{
	REAL(read);
	char name[4096];

	if (!len || !targeted(fd, OP_READ, name, sizeof(name)))
		return real_read(fd, buf, len);
	if (allowance(0) < 0 && fail_with("read", name) < 0)
		return -1;
	return traced("read", name, real_read(fd, buf, len));
}

ssize_t pread(int fd, void *buf, size_t len, off_t off)
{
	REAL(pread);
	char name[4096];

	if (!len || !targeted(fd, OP_READ, name, sizeof(name)))
		return real_pread(fd, buf, len, off);
	if (allowance(0) < 0 && fail_with("pread", name) < 0)
		return -1;
	return traced("pread", name, real_pread(fd, buf, len, off));
}

ssize_t pread64(int fd, void *buf, size_t len, off_t off) __attribute__((alias("pread")));
