/* dltrace.so: an LD_PRELOAD library that logs, to stderr or $DLTRACE_FILE, what a program asks the
 * dynamic loader and the file system for (dlopen, dlmopen, dlsym; open/openat/fopen/access/stat/
 * readlink of paths) and which library calls the sleeps (nanosleep, clock_nanosleep, usleep, sleep),
 * so that a program that hangs under an interposed libcuda.so.1 (nvJPEG's hardware backend) can be
 * compared with its native run. A diagnostic for the GPU machine (tests/gpu/nvjpeg-trace.sh). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static atomic_int sleeps;

static void logf_(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void logf_(const char *fmt, ...)
{
	char line[1024];
	va_list ap;
	int n;
	static int fd = -1;

	if (fd < 0) {
		const char *f = getenv("DLTRACE_FILE");

		/* Not through our own open(): its log line would come back here. */
		fd =
		    f ? (int)syscall(SYS_openat, AT_FDCWD, f, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644)
		      : 2;
		if (fd < 0)
			fd = 2;
	}
	va_start(ap, fmt);
	n = vsnprintf(line, sizeof(line) - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if (n > (int)sizeof(line) - 2)
		n = (int)sizeof(line) - 2;
	line[n++] = '\n';
	if (write(fd, line, (size_t)n) < 0)
		return;
}

/* The library a return address is in (its file name). */

/* glibc's own dlsym, found by version past this library's (dlvsym is not interposed). */
static void *real_dlsym(void *handle, const char *symbol)
{
	static void *(*real)(void *, const char *);

	if (!real)
		real = (void *(*)(void *, const char *))dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
	if (!real)
		real = (void *(*)(void *, const char *))dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
	return real(handle, symbol);
}
#define NEXT(type, name) ((type)real_dlsym(RTLD_NEXT, name))

static const char *lib_of(const void *addr)
{
	Dl_info info;

	/* Not through this library's dladdr, which logs with lib_of. */
	if (NEXT(int (*)(const void *, Dl_info *), "dladdr")(addr, &info) && info.dli_fname) {
		const char *slash = strrchr(info.dli_fname, '/');

		return slash ? slash + 1 : info.dli_fname;
	}
	return "?";
}

void *dlopen(const char *file, int flags)
{
	void *h = NEXT(void *(*)(const char *, int), "dlopen")(file, flags);

	logf_("dlopen(%s, %#x) = %p  [from %s]", file ? file : "NULL", flags, h,
	      lib_of(__builtin_return_address(0)));
	return h;
}

void *dlmopen(Lmid_t lmid, const char *file, int flags)
{
	void *h = NEXT(void *(*)(Lmid_t, const char *, int), "dlmopen")(lmid, file, flags);

	logf_("dlmopen(%ld, %s, %#x) = %p  [from %s]%s%s", (long)lmid, file ? file : "NULL", flags, h,
	      lib_of(__builtin_return_address(0)), h ? "" : ": ", h ? "" : dlerror());
	return h;
}

/* dlsym itself: the real one comes from dlvsym (RTLD_NEXT lookups of "dlsym" would find this one).
 * Logged for the callers that are not libc or the loader: NVIDIA's libraries. */
void *dlsym(void *handle, const char *symbol)
{
	const char *from = lib_of(__builtin_return_address(0));
	/* A caller's RTLD_NEXT cannot be passed on (it would be relative to this library): none of
	 * the libraries traced here uses it; RTLD_DEFAULT comes closest. */
	void *p = real_dlsym(handle == RTLD_NEXT ? RTLD_DEFAULT : handle, symbol);

	if (strstr(from, "nv") || strstr(from, "cuda"))
		logf_("dlsym(%p, %s) = %p  [from %s]", handle, symbol, p, from);
	return p;
}

static int interesting(const char *path)
{
	return path && (strstr(path, "nvidia") || strstr(path, "cuda") || strstr(path, "libcu") ||
			strstr(path, "/proc") || strstr(path, "/dev/") || strstr(path, "nvcuvid") ||
			strstr(path, "nvjpeg") || strstr(path, "/sys/"));
}

int open(const char *path, int flags, ...)
{
	va_list ap;
	mode_t mode;
	int fd;

	va_start(ap, flags);
	mode = (mode_t)va_arg(ap, int);
	va_end(ap);
	fd = NEXT(int (*)(const char *, int, ...), "open")(path, flags, mode);
	if (interesting(path))
		logf_("open(%s, %#x) = %d  [from %s]", path, flags, fd, lib_of(__builtin_return_address(0)));
	return fd;
}

int open64(const char *path, int flags, ...)
{
	va_list ap;
	mode_t mode;
	int fd;

	va_start(ap, flags);
	mode = (mode_t)va_arg(ap, int);
	va_end(ap);
	fd = NEXT(int (*)(const char *, int, ...), "open64")(path, flags, mode);
	if (interesting(path))
		logf_("open64(%s, %#x) = %d  [from %s]", path, flags, fd,
		      lib_of(__builtin_return_address(0)));
	return fd;
}

int openat(int dirfd, const char *path, int flags, ...)
{
	va_list ap;
	mode_t mode;
	int fd;

	va_start(ap, flags);
	mode = (mode_t)va_arg(ap, int);
	va_end(ap);
	fd = NEXT(int (*)(int, const char *, int, ...), "openat")(dirfd, path, flags, mode);
	if (interesting(path))
		logf_("openat(%s, %#x) = %d  [from %s]", path, flags, fd,
		      lib_of(__builtin_return_address(0)));
	return fd;
}

FILE *fopen(const char *path, const char *mode)
{
	FILE *f = NEXT(FILE * (*)(const char *, const char *), "fopen")(path, mode);

	if (interesting(path))
		logf_("fopen(%s, %s) = %p  [from %s]", path, mode, (void *)f,
		      lib_of(__builtin_return_address(0)));
	return f;
}

FILE *fopen64(const char *path, const char *mode)
{
	FILE *f = NEXT(FILE * (*)(const char *, const char *), "fopen64")(path, mode);

	if (interesting(path))
		logf_("fopen64(%s, %s) = %p  [from %s]", path, mode, (void *)f,
		      lib_of(__builtin_return_address(0)));
	return f;
}

int access(const char *path, int mode)
{
	int r = NEXT(int (*)(const char *, int), "access")(path, mode);

	if (interesting(path))
		logf_("access(%s, %d) = %d  [from %s]", path, mode, r, lib_of(__builtin_return_address(0)));
	return r;
}

ssize_t readlink(const char *path, char *buf, size_t len)
{
	ssize_t r = NEXT(ssize_t(*)(const char *, char *, size_t), "readlink")(path, buf, len);

	if (interesting(path))
		logf_("readlink(%s) = %.*s  [from %s]", path, r > 0 ? (int)r : 0, buf,
		      lib_of(__builtin_return_address(0)));
	return r;
}

/* Path queries that do not open: stat and friends, dlinfo, dladdr, dl_iterate_phdr, threads. */
int stat(const char *path, struct stat *st)
{
	int r = NEXT(int (*)(const char *, struct stat *), "stat")(path, st);

	if (interesting(path))
		logf_("stat(%s) = %d  [from %s]", path, r, lib_of(__builtin_return_address(0)));
	return r;
}

int lstat(const char *path, struct stat *st)
{
	int r = NEXT(int (*)(const char *, struct stat *), "lstat")(path, st);

	if (interesting(path))
		logf_("lstat(%s) = %d  [from %s]", path, r, lib_of(__builtin_return_address(0)));
	return r;
}

char *realpath(const char *path, char *resolved)
{
	char *r = NEXT(char *(*)(const char *, char *), "realpath")(path, resolved);

	if (interesting(path))
		logf_("realpath(%s) = %s  [from %s]", path, r ? r : "NULL",
		      lib_of(__builtin_return_address(0)));
	return r;
}

int dlinfo(void *handle, int request, void *arg)
{
	int r = NEXT(int (*)(void *, int, void *), "dlinfo")(handle, request, arg);

	logf_("dlinfo(%p, %d) = %d  [from %s]", handle, request, r, lib_of(__builtin_return_address(0)));
	return r;
}

int dladdr(const void *addr, Dl_info *info)
{
	int r = NEXT(int (*)(const void *, Dl_info *), "dladdr")(addr, info);
	const char *from = lib_of(__builtin_return_address(0));

	if (strstr(from, "nv"))
		logf_("dladdr(%p) = %d %s  [from %s]", addr, r, r && info->dli_fname ? info->dli_fname : "",
		      from);
	return r;
}

int dl_iterate_phdr(int (*cb)(struct dl_phdr_info *, size_t, void *), void *data)
{
	const char *from = lib_of(__builtin_return_address(0));

	if (strstr(from, "nv"))
		logf_("dl_iterate_phdr  [from %s]", from);
	return NEXT(int (*)(int (*)(struct dl_phdr_info *, size_t, void *), void *), "dl_iterate_phdr")(cb,
													data);
}

int pthread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *), void *arg)
{
	int r = NEXT(int (*)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *),
		     "pthread_create")(t, attr, fn, arg);

	logf_("pthread_create(fn in %s) = %d  [from %s]", lib_of((const void *)fn), r,
	      lib_of(__builtin_return_address(0)));
	return r;
}

/* The first sleeps, with the library that sleeps: where a hang waits. */
static void sleep_seen(const char *what, const void *from)
{
	int n = atomic_fetch_add(&sleeps, 1);

	if (n < 20 || n % 1000 == 0)
		logf_("%s #%d  [from %s %p]", what, n, lib_of(from), from);
}

int nanosleep(const struct timespec *req, struct timespec *rem)
{
	sleep_seen("nanosleep", __builtin_return_address(0));
	return NEXT(int (*)(const struct timespec *, struct timespec *), "nanosleep")(req, rem);
}

int clock_nanosleep(clockid_t clk, int flags, const struct timespec *req, struct timespec *rem)
{
	sleep_seen("clock_nanosleep", __builtin_return_address(0));
	return NEXT(int (*)(clockid_t, int, const struct timespec *, struct timespec *),
		    "clock_nanosleep")(clk, flags, req, rem);
}

int usleep(useconds_t us)
{
	sleep_seen("usleep", __builtin_return_address(0));
	return NEXT(int (*)(useconds_t), "usleep")(us);
}

unsigned sleep(unsigned s)
{
	sleep_seen("sleep", __builtin_return_address(0));
	return NEXT(unsigned (*)(unsigned), "sleep")(s);
}
