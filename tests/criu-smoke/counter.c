/* Counter for the CRIU smoke test: becomes its own session leader (so CRIU needs no --shell-job),
 * then prints 1, 2, 3, ... on stdout, one line every 20 ms, forever. The count lives only in this
 * process's memory: a restore that restarted it would print 1 again. It starts no child processes
 * (a child left as an unreaped zombie keeps the session's pid in use and blocks restoring it). */
#include <errno.h>
#include <linux/close_range.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int main(void)
{
	/* Descriptors inherited from the test runner (ctest's own log files, which grow while the
	 * process is dumped) would make the restore fail: only stdin/out/err belong to the test. */
	close_range(3, ~0U, 0);
	if (setsid() < 0) {
		fprintf(stderr, "counter: setsid: %s\n", strerror(errno));
		return 1;
	}
	const struct timespec tick = {0, 20 * 1000 * 1000};
	for (unsigned long n = 1;; n++) {
		printf("%lu\n", n);
		if (fflush(stdout) != 0)
			return 1;
		nanosleep(&tick, NULL);
	}
}
