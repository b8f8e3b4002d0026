/* CUDA IPC between two processes (the shape of NVIDIA's simpleIPC): the parent (A) forks a child (B)
 * before either touches CUDA (a forked child initialises CUDA itself). A allocates device memory,
 * writes a pattern and exports the memory and an interprocess event; the handles travel over a pipe.
 * B opens both, checks A's pattern word for word (copies) and byte for byte (a kernel), writes its
 * own pattern and records the event; A waits on the event in a stream and reads exactly B's pattern;
 * then A writes and records, B waits and reads. Error cases on both sides. Output is deterministic
 * (B prints as it goes; A prints after B has ended), so runs natively and through the layer compare
 * line for line.
 *   ipc [--hold FILE]   B, with the memory open, writes its pid to FILE and waits for FILE.go
 * Exit 0 pass, 1 fail, 77 no device. */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cuda_test.h"

extern const unsigned char memset_fatbin[];

#define WORDS (1u << 20) /* 4 MiB */

static uint32_t pattern_a(uint32_t i)
{
	return i * 2654435761u ^ 0xa5a5a5a5u;
}
static uint32_t pattern_b(uint32_t i)
{
	return i * 40503u + 7u;
}
#define PATTERN_C 0x3c3c3c3cu

struct msg {
	char what[16];
	CUipcMemHandle mem;
	CUipcEventHandle ev;
};

static void send_msg(int fd, const char *what, const struct msg *m)
{
	struct msg out = m ? *m : (struct msg){0};

	snprintf(out.what, sizeof(out.what), "%s", what);
	if (write(fd, &out, sizeof(out)) != (ssize_t)sizeof(out)) {
		perror("ipc: write to the pipe");
		exit(1);
	}
}

static void recv_msg(int fd, const char *what, struct msg *m)
{
	struct msg in;
	size_t got = 0;

	while (got < sizeof(in)) {
		ssize_t n = read(fd, (char *)&in + got, sizeof(in) - got);

		if (n <= 0) {
			fprintf(stderr, "ipc: the other process went away waiting for '%s'\n", what);
			exit(1);
		}
		got += (size_t)n;
	}
	if (strcmp(in.what, what)) {
		fprintf(stderr, "ipc: got '%s', expected '%s'\n", in.what, what);
		exit(1);
	}
	if (m)
		*m = in;
}

/* A's lines, printed once B has ended. */
static char a_out[4096];
static size_t a_len;
static void a_say(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	a_len += (size_t)vsnprintf(a_out + a_len, sizeof(a_out) - a_len, fmt, ap);
	va_end(ap);
}

static int check_words(const uint32_t *got, uint32_t (*want)(uint32_t), uint32_t fixed, const char *who)
{
	for (uint32_t i = 0; i < WORDS; i++) {
		uint32_t w = want ? want(i) : fixed;

		if (got[i] != w) {
			fprintf(stderr, "%s: word %u is %#x, expected %#x\n", who, i, got[i], w);
			return 1;
		}
	}
	return 0;
}

static int exporter(int to_b, int from_b, pid_t b)
{
	CUdeviceptr d, opened;
	CUevent ev, plain;
	CUstream st;
	CUipcEventHandle ev_handle;
	struct msg m = {0};
	uint32_t *host = malloc(WORDS * 4);
	int status, rc = 0;

	cu_test_init("ipc");
	cu_test_primary_context(NULL);
	CU_CHECK(cuMemAlloc(&d, WORDS * 4));
	for (uint32_t i = 0; i < WORDS; i++)
		host[i] = pattern_a(i);
	CU_CHECK(cuMemcpyHtoD(d, host, WORDS * 4));
	CU_CHECK(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
	CU_CHECK(cuEventCreate(&ev, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING));
	CU_CHECK(cuIpcGetMemHandle(&m.mem, d));
	CU_CHECK(cuIpcGetEventHandle(&m.ev, ev));
	send_msg(to_b, "handles", &m);
	a_say("A: exported %u words and an interprocess event\n", WORDS);

	/* Its own handle: the driver opens it in another process only. */
	CU_EXPECT(cuIpcOpenMemHandle(&opened, m.mem, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
		  CUDA_ERROR_INVALID_CONTEXT);
	a_say("A: opening its own memory handle: CUDA_ERROR_INVALID_CONTEXT\n");
	/* An event made without CU_EVENT_INTERPROCESS has no handle. */
	CU_CHECK(cuEventCreate(&plain, CU_EVENT_DISABLE_TIMING));
	{
		CUresult r = cuIpcGetEventHandle(&ev_handle, plain);

		if (r == CUDA_SUCCESS) {
			fprintf(stderr, "A: a handle of an ordinary event\n");
			return 1;
		}
		a_say("A: handle of an ordinary event: %s\n", cu_error_name(r));
	}

	/* B wrote its pattern and recorded the event after it: a stream waiting on the event sees it. */
	recv_msg(from_b, "b-recorded", NULL);
	CU_CHECK(cuStreamWaitEvent(st, ev, 0));
	memset(host, 0, WORDS * 4);
	CU_CHECK(cuMemcpyDtoHAsync(host, d, WORDS * 4, st));
	CU_CHECK(cuStreamSynchronize(st));
	rc |= check_words(host, pattern_b, 0, "A");
	CU_CHECK(cuEventSynchronize(ev));
	a_say("A: read B's pattern after waiting on the event: %s\n", rc ? "WRONG" : "exact");

	/* Now A writes and records; B waits on the event. */
	CU_CHECK(cuMemsetD32Async(d, PATTERN_C, WORDS, st));
	CU_CHECK(cuEventRecord(ev, st));
	send_msg(to_b, "a-recorded", NULL);

	/* B closed the memory; A frees it, and B's open of the old handle must fail. */
	recv_msg(from_b, "b-closed", NULL);
	CU_CHECK(cuCtxSynchronize());
	CU_CHECK(cuMemFree(d));
	send_msg(to_b, "a-freed", NULL);
	recv_msg(from_b, "b-done", NULL);
	CU_CHECK(cuEventDestroy(ev));
	CU_CHECK(cuEventDestroy(plain));
	CU_CHECK(cuStreamDestroy(st));
	free(host);
	if (waitpid(b, &status, 0) != b || !WIFEXITED(status) || WEXITSTATUS(status)) {
		fprintf(stderr, "A: B failed (status %#x)\n", status);
		rc = 1;
	}
	fputs(a_out, stdout);
	return rc;
}

static void hold(const char *file)
{
	char go[4096];
	FILE *f = fopen(file, "w");
	struct stat sb;

	if (!f) {
		perror(file);
		exit(1);
	}
	fprintf(f, "%d\n", (int)getpid());
	fclose(f);
	snprintf(go, sizeof(go), "%s.go", file);
	for (int i = 0; i < 6000 && stat(go, &sb); i++)
		usleep(10000);
}

static int importer(int to_a, int from_a, const char *hold_file)
{
	CUdeviceptr p, p2, bogus_ptr;
	CUevent ev;
	CUstream st;
	CUmodule mod;
	CUfunction count_bytes;
	CUdeviceptr counter;
	struct msg m;
	CUipcMemHandle zero = {{0}};
	uint32_t *host = malloc(WORDS * 4), count = 0, want = 0;
	unsigned char value = 0xa5;
	unsigned long long n = WORDS * 4ull;
	void *args[] = {&p, &n, &value, &counter};
	CUresult r;

	cu_test_init("ipc");
	cu_test_primary_context(NULL);
	CU_CHECK(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
	recv_msg(from_a, "handles", &m);
	CU_CHECK(cuIpcOpenMemHandle(&p, m.mem, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
	CU_CHECK(cuIpcOpenEventHandle(&ev, m.ev));
	printf("B: opened A's memory and event\n");
	if (hold_file)
		hold(hold_file);

	/* A's pattern, word for word. */
	CU_CHECK(cuMemcpyDtoH(host, p, WORDS * 4));
	if (check_words(host, pattern_a, 0, "B"))
		return 1;
	printf("B: read A's pattern: exact\n");
	/* ... and by a kernel of B's, byte for byte. */
	for (uint32_t i = 0; i < WORDS; i++)
		for (int k = 0; k < 4; k++)
			want += (unsigned char)(pattern_a(i) >> (8 * k)) == value;
	CU_CHECK(cuModuleLoadData(&mod, memset_fatbin));
	CU_CHECK(cuModuleGetFunction(&count_bytes, mod, "_Z11count_bytesPKhyhPj"));
	CU_CHECK(cuMemAlloc(&counter, 4));
	CU_CHECK(cuMemsetD32(counter, 0, 1));
	CU_CHECK(
	    cuLaunchKernel(count_bytes, (unsigned)((n + 255) / 256), 1, 1, 256, 1, 1, 0, st, args, NULL));
	CU_CHECK(cuStreamSynchronize(st));
	CU_CHECK(cuMemcpyDtoH(&count, counter, 4));
	if (count != want) {
		fprintf(stderr, "B: the kernel counted %u bytes of %#x in A's memory, expected %u\n", count,
			value, want);
		return 1;
	}
	printf("B: a kernel counted %u bytes of 0x%02x in A's memory, as expected\n", count, value);

	/* Opened twice: the same pointer, closed twice. */
	CU_CHECK(cuIpcOpenMemHandle(&p2, m.mem, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
	printf("B: opened again: %s pointer\n", p2 == p ? "the same" : "ANOTHER");
	if (p2 != p)
		return 1;
	CU_CHECK(cuIpcCloseMemHandle(p2));

	/* B's pattern, then the event recorded after it. */
	for (uint32_t i = 0; i < WORDS; i++)
		host[i] = pattern_b(i);
	CU_CHECK(cuMemcpyHtoDAsync(p, host, WORDS * 4, st));
	CU_CHECK(cuEventRecord(ev, st));
	send_msg(to_a, "b-recorded", NULL);

	/* A's memset, recorded by A: waiting on the event shows it. */
	recv_msg(from_a, "a-recorded", NULL);
	CU_CHECK(cuEventSynchronize(ev));
	CU_CHECK(cuEventQuery(ev));
	CU_CHECK(cuMemcpyDtoH(host, p, WORDS * 4));
	if (check_words(host, NULL, PATTERN_C, "B"))
		return 1;
	printf("B: read A's memset after waiting on the event: exact\n");

	/* Errors. */
	r = cuIpcOpenMemHandle(&bogus_ptr, zero, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
	printf("B: opening a zeroed memory handle: %s\n", cu_error_name(r));
	if (r == CUDA_SUCCESS)
		return 1;
	CU_CHECK(cuIpcCloseMemHandle(p));
	r = cuIpcCloseMemHandle(p);
	printf("B: closing it once more: %s\n", cu_error_name(r));
	if (r == CUDA_SUCCESS)
		return 1;
	send_msg(to_a, "b-closed", NULL);
	recv_msg(from_a, "a-freed", NULL);
	r = cuIpcOpenMemHandle(&bogus_ptr, m.mem, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
	printf("B: opening the handle of freed memory: %s\n", cu_error_name(r));
	if (r == CUDA_SUCCESS)
		return 1;
	CU_CHECK(cuEventDestroy(ev));
	CU_CHECK(cuMemFree(counter));
	CU_CHECK(cuModuleUnload(mod));
	CU_CHECK(cuStreamDestroy(st));
	free(host);
	printf("B: PASS\n");
	fflush(stdout);
	send_msg(to_a, "b-done", NULL);
	return 0;
}

int main(int argc, char **argv)
{
	const char *hold_file = argc == 3 && !strcmp(argv[1], "--hold") ? argv[2] : NULL;
	int a2b[2], b2a[2], rc;
	pid_t b;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc != 1 && !hold_file) {
		fprintf(stderr, "usage: ipc [--hold FILE]\n");
		return 2;
	}
	if (pipe(a2b) || pipe(b2a)) {
		perror("pipe");
		return 1;
	}
	fflush(stdout);
	/* Before any CUDA call: each process initialises its own. */
	b = fork();
	if (b < 0) {
		perror("fork");
		return 1;
	}
	if (b == 0) {
		close(a2b[1]);
		close(b2a[0]);
		rc = importer(b2a[1], a2b[0], hold_file);
		fflush(stdout);
		_exit(rc);
	}
	close(a2b[0]);
	close(b2a[1]);
	rc = exporter(a2b[1], b2a[0], b);
	if (!rc)
		printf("ipc: PASS\n");
	return rc;
}
