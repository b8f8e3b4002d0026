/* Test only, never in a product: LD_PRELOAD'ed into crcudad (cr-stress.sh --daemon-preload), it leaks
 * one descriptor and SOAK_LEAK_KB KiB (default 256) of written memory for every connection the front
 * daemon accepts, so that the soak (tests/stress/soak.sh) can be shown to fail on a leak. Inert in any
 * other process (the workers inherit LD_PRELOAD). */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

/* The last leaked block and descriptor: stored, so that the compiler keeps the leaks. */
void *volatile soak_leak_last;
volatile int soak_leak_fd;

static void leak_some(void)
{
	const char *kb = getenv("SOAK_LEAK_KB");
	size_t n = (kb ? strtoul(kb, NULL, 10) : 256) * 1024;
	char *p = malloc(n);
	int saved = errno;

	if (p) {
		memset(p, 0x5a, n);
		soak_leak_last = p;
	}
	soak_leak_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	errno = saved;
}

int accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags)
{
	static int (*real_accept4)(int, struct sockaddr *, socklen_t *, int);
	int conn;

	if (!real_accept4)
		*(void **)&real_accept4 = dlsym(RTLD_NEXT, "accept4");
	conn = real_accept4(fd, addr, len, flags);
	if (conn >= 0 && !strcmp(program_invocation_short_name, "crcudad"))
		leak_some();
	return conn;
}
