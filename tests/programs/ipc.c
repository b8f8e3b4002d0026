/* CUDA IPC between two processes (the shape of NVIDIA's simpleIPC): the parent (A) forks a child (B)
 * before either touches CUDA (a forked child initialises CUDA itself). A allocates device memory,
 * writes a pattern and exports the memory and an interprocess event; the handles travel over a pipe.
 * B opens both, checks A's pattern word for word (copies) and byte for byte (a kernel), writes its
 * own pattern and records the event; A waits on the event in a stream and reads exactly B's pattern;
 * then A writes and records, B waits and reads. Then VMM memory (cuMemCreate) shared through a
 * shareable handle, a POSIX descriptor passed over a unix socket (SCM_RIGHTS): B imports and maps it,
 * reads A's pattern and writes its own, which A reads. Then a memory pool made exportable: its
 * descriptor and two pointers' export data (one of another pool, which B's import must refuse), B
 * reads and writes the pool's memory and frees it, A reads B's pattern. Error cases on both sides. Output is
 * deterministic (B prints as it goes; A prints after B has ended), so runs natively and through the layer
 * compare line for line. ipc [--hold FILE]      B, with the memory open, writes its pid to FILE and waits for
 * FILE.go ipc [--hold-end FILE]  the same once B has let go of everything it opened and imported ipc
 * --cr-export DIR    the two sides as separate programs (tests/cr/ipc-cr.sh checkpoints and ipc --cr-import
 * DIR    restores the importer alone, then the exporter), talking through files in ipc --cr-reopen DIR    DIR
 * (below); the reopener opens the restored exporter's memory ipc --cr-peek DIR      opens the exporter's
 * memory, checks it and closes it Exit 0 pass, 1 fail, 77 no device. */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cuda_test.h"
#include "ipc_share.h"

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

static void vmm_unmap(CUdeviceptr p, size_t size)
{
	CU_CHECK(cuMemUnmap(p, size));
	CU_CHECK(cuMemAddressFree(p, size));
}

static size_t vmm_size(void)
{
	CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
				    .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
				    .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR};
	size_t g;

	CU_CHECK(cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
	return (WORDS * 4 + g - 1) / g * g;
}

static int exporter(int to_b, int from_b, int fd_sock, pid_t b)
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

	/* VMM memory through a shareable handle (a descriptor over the socket). */
	{
		CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
					    .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
					    .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR};
		CUmemAllocationProp plain_prop = prop;
		CUmemGenericAllocationHandle vh, plain_h;
		size_t size = vmm_size();
		CUdeviceptr vp;
		int fd = -1;
		CUresult r;

		CU_CHECK(cuMemCreate(&vh, size, &prop, 0));
		vp = vmm_map_on(vh, size, 0);
		for (uint32_t i = 0; i < WORDS; i++)
			host[i] = pattern_b(i) ^ 0x5a5a5a5au;
		CU_CHECK(cuMemcpyHtoD(vp, host, WORDS * 4));
		CU_CHECK(cuMemExportToShareableHandle(&fd, vh, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
		fdpass_send(fd_sock, fd, "ipc");
		close(fd);
		/* A handle made without the descriptor type cannot be exported as one. */
		plain_prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
		CU_CHECK(cuMemCreate(&plain_h, size, &plain_prop, 0));
		r = cuMemExportToShareableHandle(&fd, plain_h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
		a_say("A: exporting a handle made without the descriptor type: %s\n", cu_error_name(r));
		if (r == CUDA_SUCCESS)
			rc = 1;
		CU_CHECK(cuMemRelease(plain_h));
		recv_msg(from_b, "b-vmm-wrote", NULL);
		CU_CHECK(cuMemcpyDtoH(host, vp, WORDS * 4));
		rc |= check_words(host, pattern_a, 0, "A (VMM)");
		a_say("A: read B's pattern in the shared VMM memory: %s\n", rc ? "WRONG" : "exact");
		vmm_unmap(vp, size);
		CU_CHECK(cuMemRelease(vh));
	}
	/* A memory pool shared with B (NVIDIA's streamOrderedAllocationIPC's way): its descriptor, then
	 * the export data of two pointers, the first of another pool (B's import of it into this pool
	 * must fail), the second of this pool's. */
	{
		CUmemPoolProps pp = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
				     .handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
				     .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
		CUmemoryPool pool, other;
		CUdeviceptr pool_ptr, other_ptr;
		CUmemPoolPtrExportData data[2];
		int fd = -1;

		CU_CHECK(cuMemPoolCreate(&pool, &pp));
		CU_CHECK(cuMemPoolCreate(&other, &pp));
		CU_CHECK(cuMemAllocFromPoolAsync(&pool_ptr, WORDS * 4, pool, st));
		CU_CHECK(cuMemAllocFromPoolAsync(&other_ptr, WORDS * 4, other, st));
		for (uint32_t i = 0; i < WORDS; i++)
			host[i] = pattern_b(i) ^ PATTERN_C;
		CU_CHECK(cuMemcpyHtoDAsync(pool_ptr, host, WORDS * 4, st));
		CU_CHECK(cuStreamSynchronize(st));
		/* The driver exports pointers of a pool whose handle was exported (measured on the H200). */
		CU_CHECK(cuMemPoolExportToShareableHandle(&fd, other,
							  CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
		close(fd);
		CU_CHECK(
		    cuMemPoolExportToShareableHandle(&fd, pool, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
		CU_CHECK(cuMemPoolExportPointer(&data[0], other_ptr));
		CU_CHECK(cuMemPoolExportPointer(&data[1], pool_ptr));
		fdpass_send(fd_sock, fd, "ipc");
		close(fd);
		if (write(to_b, data, sizeof(data)) != (ssize_t)sizeof(data)) {
			perror("ipc: write to the pipe");
			exit(1);
		}
		recv_msg(from_b, "b-pool-wrote", NULL);
		CU_CHECK(cuMemcpyDtoH(host, pool_ptr, WORDS * 4));
		status = check_words(host, pattern_a, 0, "A (pool)");
		a_say("A: read B's pattern in the shared pool's memory: %s\n", status ? "WRONG" : "exact");
		rc |= status;
		CU_CHECK(cuMemFreeAsync(pool_ptr, st));
		CU_CHECK(cuMemFreeAsync(other_ptr, st));
		CU_CHECK(cuStreamSynchronize(st));
		CU_CHECK(cuMemPoolDestroy(pool));
		CU_CHECK(cuMemPoolDestroy(other));
	}
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

static int importer(int to_a, int from_a, int fd_sock, const char *hold_file, const char *hold_end_file)
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

	/* The opened memory is device memory, its range the allocation's. */
	{
		unsigned type = 0;
		CUdeviceptr start = 0, base = 0;
		size_t range = 0;

		CU_CHECK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p + 100));
		CU_CHECK(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, p + 100));
		CU_CHECK(cuMemGetAddressRange(&base, &range, p + 100));
		printf("B: the opened memory is %s memory, its range starts at the pointer: %s, %s bytes\n",
		       type == CU_MEMORYTYPE_DEVICE ? "device" : "OTHER",
		       start == p && base == p ? "yes" : "NO", range >= WORDS * 4 ? "enough" : "TOO FEW");
		if (type != CU_MEMORYTYPE_DEVICE || start != p || base != p || range < WORDS * 4)
			return 1;
	}

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

	/* A's VMM memory through its shareable handle. */
	{
		CUmemGenericAllocationHandle vh, bogus_h;
		size_t size = vmm_size();
		int fd = fdpass_recv(fd_sock, "ipc"), not_ours[2];
		CUdeviceptr vp;

		CU_CHECK(cuMemImportFromShareableHandle(&vh, (void *)(intptr_t)fd,
							CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
		close(fd);
		vp = vmm_map_on(vh, size, 0);
		CU_CHECK(cuMemcpyDtoH(host, vp, WORDS * 4));
		for (uint32_t i = 0; i < WORDS; i++)
			if (host[i] != (pattern_b(i) ^ 0x5a5a5a5au)) {
				fprintf(stderr, "B: VMM word %u is %#x\n", i, host[i]);
				return 1;
			}
		printf("B: read A's pattern in the imported VMM memory: exact\n");
		for (uint32_t i = 0; i < WORDS; i++)
			host[i] = pattern_a(i);
		CU_CHECK(cuMemcpyHtoD(vp, host, WORDS * 4));
		CU_CHECK(cuCtxSynchronize());
		vmm_unmap(vp, size);
		CU_CHECK(cuMemRelease(vh));
		send_msg(to_a, "b-vmm-wrote", NULL);
		/* A descriptor that names no memory. */
		if (pipe(not_ours))
			return 1;
		r = cuMemImportFromShareableHandle(&bogus_h, (void *)(intptr_t)not_ours[0],
						   CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
		printf("B: importing a pipe as a shareable handle: %s\n",
		       r == CUDA_SUCCESS ? "SUCCESS" : "refused");
		close(not_ours[0]);
		close(not_ours[1]);
		if (r == CUDA_SUCCESS)
			return 1;
	}
	/* A's pool: imported from its descriptor, then its pointer (not the other pool's). */
	{
		CUmemPoolPtrExportData data[2];
		CUmemoryPool pool;
		CUdeviceptr p;
		int fd = fdpass_recv(fd_sock, "ipc");

		if (read(from_a, data, sizeof(data)) != (ssize_t)sizeof(data)) {
			perror("ipc: read from the pipe");
			return 1;
		}
		CU_CHECK(cuMemPoolImportFromShareableHandle(&pool, (void *)(intptr_t)fd,
							    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
		close(fd);
		r = cuMemPoolImportPointer(&p, pool, &data[0]);
		printf("B: importing another pool's pointer into the pool: %s\n",
		       r == CUDA_SUCCESS ? "SUCCESS" : "refused");
		if (r == CUDA_SUCCESS)
			return 1;
		CU_CHECK(cuMemPoolImportPointer(&p, pool, &data[1]));
		CU_CHECK(cuMemcpyDtoH(host, p, WORDS * 4));
		for (uint32_t i = 0; i < WORDS; i++)
			if (host[i] != (pattern_b(i) ^ PATTERN_C)) {
				fprintf(stderr, "B: pool word %u is %#x\n", i, host[i]);
				return 1;
			}
		printf("B: read A's pattern in the imported pool's memory: exact\n");
		for (uint32_t i = 0; i < WORDS; i++)
			host[i] = pattern_a(i);
		CU_CHECK(cuMemcpyHtoD(p, host, WORDS * 4));
		CU_CHECK(cuCtxSynchronize());
		/* Freed in the importer before the exporter frees it, as the driver asks. */
		CU_CHECK(cuMemFreeAsync(p, st));
		CU_CHECK(cuStreamSynchronize(st));
		CU_CHECK(cuMemPoolDestroy(pool));
		send_msg(to_a, "b-pool-wrote", NULL);
	}
	CU_CHECK(cuEventDestroy(ev));
	CU_CHECK(cuMemFree(counter));
	CU_CHECK(cuModuleUnload(mod));
	CU_CHECK(cuStreamDestroy(st));
	free(host);
	if (hold_end_file)
		hold(hold_end_file);
	printf("B: PASS\n");
	fflush(stdout);
	send_msg(to_a, "b-done", NULL);
	return 0;
}

/* ---- the importer checkpointed and restored while it has the exporter's memory open ---- */
static void wait_file(const char *dir, const char *name)
{
	char path[4096];
	struct stat sb;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	for (int i = 0; i < 12000 && stat(path, &sb); i++)
		usleep(10000);
	if (stat(path, &sb)) {
		fprintf(stderr, "ipc: no %s after 120 s\n", path);
		exit(1);
	}
}

static void touch_file(const char *dir, const char *name)
{
	char path[4096];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "w");
	if (!f || fclose(f)) {
		perror(path);
		exit(1);
	}
}

/* The IPC handle the exporter left in DIR/handle; exits where it cannot be read. */
static void read_handle(const char *dir, CUipcMemHandle *handle)
{
	char path[4096];
	FILE *f;

	snprintf(path, sizeof(path), "%s/handle", dir);
	f = fopen(path, "r");
	if (!f || fread(handle, sizeof(*handle), 1, f) != 1) {
		perror(path);
		exit(1);
	}
	fclose(f);
}

static uint32_t not_pattern_a(uint32_t i)
{
	return ~pattern_a(i);
}

/* Exports memory holding pattern A (its handle in DIR/handle); once the restored importer has checked
 * its own write (DIR/checked), writes the complement, which the importer must read; then checks the
 * importer's last write. */
static int cr_exporter(const char *dir)
{
	uint32_t *host = malloc(WORDS * 4);
	CUipcMemHandle handle;
	char path[4096], tmp_path[4096];
	CUdeviceptr d;
	FILE *f;

	cu_test_init("ipc");
	cu_test_primary_context(NULL);
	CU_CHECK(cuMemAlloc(&d, WORDS * 4));
	for (uint32_t i = 0; i < WORDS; i++)
		host[i] = pattern_a(i);
	CU_CHECK(cuMemcpyHtoD(d, host, WORDS * 4));
	CU_CHECK(cuIpcGetMemHandle(&handle, d));
	snprintf(tmp_path, sizeof(tmp_path), "%s/handle.tmp", dir);
	snprintf(path, sizeof(path), "%s/handle", dir);
	f = fopen(tmp_path, "w");
	if (!f || fwrite(&handle, sizeof(handle), 1, f) != 1 || fclose(f) || rename(tmp_path, path)) {
		perror(path);
		return 1;
	}
	wait_file(dir, "checked");
	for (uint32_t i = 0; i < WORDS; i++)
		host[i] = not_pattern_a(i);
	CU_CHECK(cuMemcpyHtoD(d, host, WORDS * 4));
	CU_CHECK(cuCtxSynchronize());
	touch_file(dir, "exporter-wrote");
	wait_file(dir, "done");
	CU_CHECK(cuMemcpyDtoH(host, d, WORDS * 4));
	if (check_words(host, NULL, PATTERN_C, "exporter"))
		return 1;
	printf("exporter: the restored importer's write: exact\n");
	/* The importer closed it: the test checkpoints and restores this process here, and a new importer
	 * opens the memory through the same handle. */
	touch_file(dir, "exporter-ready");
	wait_file(dir, "exporter-go");
	wait_file(dir, "done2");
	CU_CHECK(cuMemcpyDtoH(host, d, WORDS * 4));
	if (check_words(host, pattern_a, 0, "exporter (restored)"))
		return 1;
	printf("exporter: after its restore, the new importer's write through the old handle: exact\n");
	CU_CHECK(cuMemFree(d));
	free(host);
	printf("exporter: PASS\n");
	return 0;
}

/* Opens the exporter's memory, checks pattern A and writes pattern B; DIR/ready (the test checkpoints,
 * kills and restores it here) and DIR/go; then it must read pattern B (the exporter's memory as it is,
 * not a copy) and, once the exporter wrote again, the exporter's new words; writes PATTERN_C last. */
static int cr_importer(const char *dir)
{
	uint32_t *host = malloc(WORDS * 4);
	CUipcMemHandle handle;
	CUdeviceptr p;

	cu_test_init("ipc");
	cu_test_primary_context(NULL);
	wait_file(dir, "handle");
	read_handle(dir, &handle);
	CU_CHECK(cuIpcOpenMemHandle(&p, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
	CU_CHECK(cuMemcpyDtoH(host, p, WORDS * 4));
	if (check_words(host, pattern_a, 0, "importer"))
		return 1;
	printf("importer: read the exporter's pattern: exact\n");
	for (uint32_t i = 0; i < WORDS; i++)
		host[i] = pattern_b(i);
	CU_CHECK(cuMemcpyHtoD(p, host, WORDS * 4));
	CU_CHECK(cuCtxSynchronize());
	touch_file(dir, "ready");
	wait_file(dir, "go");
	CU_CHECK(cuMemcpyDtoH(host, p, WORDS * 4));
	if (check_words(host, pattern_b, 0, "importer (restored)"))
		return 1;
	printf("importer: after its restore, its own write in the exporter's memory: exact\n");
	touch_file(dir, "checked");
	wait_file(dir, "exporter-wrote");
	CU_CHECK(cuMemcpyDtoH(host, p, WORDS * 4));
	if (check_words(host, not_pattern_a, 0, "importer (restored)"))
		return 1;
	printf("importer: after its restore, the exporter's new write: exact\n");
	CU_CHECK(cuMemsetD32(p, PATTERN_C, WORDS));
	CU_CHECK(cuCtxSynchronize());
	CU_CHECK(cuIpcCloseMemHandle(p));
	touch_file(dir, "done");
	free(host);
	printf("importer: PASS\n");
	return 0;
}

/* A new importer of the restored exporter's memory, through the handle the exporter gave out before
 * its checkpoint: reads the last importer's PATTERN_C and writes pattern A (peek: only reads). */
static int cr_reopener(const char *dir, bool peek)
{
	uint32_t *host = malloc(WORDS * 4);
	CUipcMemHandle handle;
	CUdeviceptr p;

	cu_test_init("ipc");
	cu_test_primary_context(NULL);
	read_handle(dir, &handle);
	CU_CHECK(cuIpcOpenMemHandle(&p, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
	CU_CHECK(cuMemcpyDtoH(host, p, WORDS * 4));
	if (check_words(host, NULL, PATTERN_C, "reopener"))
		return 1;
	if (peek) {
		CU_CHECK(cuIpcCloseMemHandle(p));
		printf("peek: the exporter's memory: exact\n");
		return 0;
	}
	printf("reopener: the restored exporter's memory through its old handle: exact\n");
	for (uint32_t i = 0; i < WORDS; i++)
		host[i] = pattern_a(i);
	CU_CHECK(cuMemcpyHtoD(p, host, WORDS * 4));
	CU_CHECK(cuCtxSynchronize());
	CU_CHECK(cuIpcCloseMemHandle(p));
	touch_file(dir, "done2");
	free(host);
	printf("reopener: PASS\n");
	return 0;
}

int main(int argc, char **argv)
{
	const char *hold_file = argc == 3 && !strcmp(argv[1], "--hold") ? argv[2] : NULL;
	const char *hold_end_file = argc == 3 && !strcmp(argv[1], "--hold-end") ? argv[2] : NULL;
	int a2b[2], b2a[2], fds[2], rc;
	pid_t b;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 3 && !strcmp(argv[1], "--cr-export"))
		return cr_exporter(argv[2]);
	if (argc == 3 && !strcmp(argv[1], "--cr-import"))
		return cr_importer(argv[2]);
	if (argc == 3 && !strcmp(argv[1], "--cr-reopen"))
		return cr_reopener(argv[2], false);
	if (argc == 3 && !strcmp(argv[1], "--cr-peek"))
		return cr_reopener(argv[2], true);
	if (argc != 1 && !hold_file && !hold_end_file) {
		fprintf(stderr,
			"usage: ipc [--hold FILE | --hold-end FILE | --cr-export DIR | --cr-import DIR]\n");
		return 2;
	}
	if (pipe(a2b) || pipe(b2a) || socketpair(AF_UNIX, SOCK_STREAM, 0, fds)) {
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
		close(fds[0]);
		rc = importer(b2a[1], a2b[0], fds[1], hold_file, hold_end_file);
		fflush(stdout);
		_exit(rc);
	}
	close(a2b[0]);
	close(b2a[1]);
	close(fds[1]);
	rc = exporter(a2b[1], b2a[0], fds[0], b);
	if (!rc)
		printf("ipc: PASS\n");
	return rc;
}
