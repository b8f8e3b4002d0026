/* A child forked while another thread holds libcrcuda's connect lock: a thread's first CUDA call is
 * connecting to "crcudad" (this program, listening on CRCUDA_SOCKET and never answering), so it holds
 * the lock, when the main thread forks. The child's first CUDA calls must fail at once, not wait for
 * ever on the lock it inherited held; the parent's connecting thread fails once the connection is
 * closed, and the parent's calls fail after it, without a hang.
 *   fork_locked (CRCUDA_SOCKET set; libcrcuda as libcuda.so.1)
 * Exit 0: as above; 1: a check failed (said on stderr). A hang is ended by alarm(2). */
#include <cuda.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHILD_LIMIT_S 5

static CUresult connecting_result;

static void *first_call(void *arg)
{
	(void)arg;
	connecting_result = cuInit(0);
	return NULL;
}

static int fail(const char *what)
{
	fprintf(stderr, "fork_locked: %s\n", what);
	return 1;
}

int main(void)
{
	const char *path = getenv("CRCUDA_SOCKET");
	struct sockaddr_un addr = {.sun_family = AF_UNIX};
	int lfd, cfd, count = 0, status;
	pthread_t t;
	pid_t child;

	if (!path || strlen(path) >= sizeof(addr.sun_path))
		return fail("set CRCUDA_SOCKET to a path for the silent daemon");
	memcpy(addr.sun_path, path, strlen(path) + 1);
	unlink(path);
	lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&addr, sizeof(addr)) || listen(lfd, 4))
		return fail(strerror(errno));
	alarm(60); /* the whole run */
	if (pthread_create(&t, NULL, first_call, NULL))
		return fail("pthread_create");
	/* Connected: the thread is inside its handshake (it connects with the connect lock held) until
	 * we close. */
	struct pollfd pf = {.fd = lfd, .events = POLLIN};
	if (poll(&pf, 1, 20000) != 1 || (cfd = accept(lfd, NULL, NULL)) < 0)
		return fail("the first CUDA call did not connect to CRCUDA_SOCKET");

	child = fork();
	if (child < 0)
		return fail("fork");
	if (child == 0) {
		alarm(CHILD_LIMIT_S);
		CUresult a = cuInit(0), b = cuDeviceGetCount(&count);

		printf("child: cuInit %d, cuDeviceGetCount %d\n", (int)a, (int)b);
		fflush(stdout);
		_exit(a != CUDA_SUCCESS && b != CUDA_SUCCESS ? 0 : 2);
	}
	if (waitpid(child, &status, 0) != child)
		return fail("waitpid");
	if (WIFSIGNALED(status))
		return fail(WTERMSIG(status) == SIGALRM ? "the child's first CUDA call hung (the inherited "
							  "connect lock)"
							: "the child died of a signal");
	if (WEXITSTATUS(status))
		return fail("a CUDA call of the child succeeded: it must not use its parent's connection");

	close(cfd); /* the "daemon" goes: the connecting thread's handshake fails */
	pthread_join(t, NULL);
	if (connecting_result == CUDA_SUCCESS)
		return fail("cuInit succeeded without a daemon");
	if (cuDeviceGetCount(&count) == CUDA_SUCCESS)
		return fail("cuDeviceGetCount succeeded without a daemon");
	close(lfd);
	unlink(path);
	printf("ok: the child's calls failed at once, the parent's after the connection failed\n");
	return 0;
}
