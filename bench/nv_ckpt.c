/* nv_ckpt PID lock|checkpoint|restore|unlock|state: NVIDIA's own driver checkpoint
 * (cuCheckpointProcess* from cuda.h), the reference bench/checkpoint.sh measures crcuda against. It
 * prints the seconds the call took. Needs the real driver (run it on the GPU machine). */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: nv_ckpt PID lock|checkpoint|restore|unlock|state\n");
		return 2;
	}
	int pid = atoi(argv[1]);
	const char *op = argv[2];
	CUresult rc = cuInit(0);
	double t0 = now_s();
	if (rc != CUDA_SUCCESS) {
	} else if (!strcmp(op, "lock")) {
		CUcheckpointLockArgs a;
		memset(&a, 0, sizeof(a));
		a.timeoutMs = 60000;
		rc = cuCheckpointProcessLock(pid, &a);
	} else if (!strcmp(op, "checkpoint")) {
		CUcheckpointCheckpointArgs a;
		memset(&a, 0, sizeof(a));
		rc = cuCheckpointProcessCheckpoint(pid, &a);
	} else if (!strcmp(op, "restore")) {
		CUcheckpointRestoreArgs a;
		memset(&a, 0, sizeof(a));
		rc = cuCheckpointProcessRestore(pid, &a);
	} else if (!strcmp(op, "unlock")) {
		CUcheckpointUnlockArgs a;
		memset(&a, 0, sizeof(a));
		rc = cuCheckpointProcessUnlock(pid, &a);
	} else if (!strcmp(op, "state")) {
		CUprocessState st;
		rc = cuCheckpointProcessGetState(pid, &st);
		if (rc == CUDA_SUCCESS)
			printf("state %d\n", (int)st);
	} else {
		fprintf(stderr, "nv_ckpt: unknown operation %s\n", op);
		return 2;
	}
	double t = now_s() - t0;
	if (rc != CUDA_SUCCESS) {
		const char *name = "?";
		cuGetErrorName(rc, &name);
		fprintf(stderr, "nv_ckpt: %s %d: %s (%d)\n", op, pid, name, (int)rc);
		return 1;
	}
	printf("%s %.3f s\n", op, t);
	return 0;
}
