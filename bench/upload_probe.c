/* bench/upload_probe FILE THREADS MODE: how fast a file in the page cache reaches the device, 4 MiB at a
 * time from THREADS threads, by MODE: "pread" (into pinned staging, then copied: what a restore does),
 * "register" (the file's pages mapped and registered read-only, copied from there: no CPU copy), or
 * "piece:KIB" / "hpiece:KIB" (read and copied KIB at a time through a ring of four pinned slots per
 * thread, small enough that the device may read them from the CPU's cache; "h": each piece hashed
 * with XXH3 too, as a restore checks it), "mmap" / "mmapnt" (the file mapped once; each chunk copied from
 * the mapping into pinned staging by memcpy, or by non-temporal stores that leave the CPU's cache
 * alone), "thp" (pread into staging on 2 MiB pages, registered); pread@N and thp@N read each chunk N bytes
 * past its 4 MiB boundary (as a store whose chunk data does not start on a page). FILE may be a directory (a
 * store's packs directory): its files are read one after the other (pread and thp modes). Prints GB/s. A
 * probe for restore's upload design (bench/checkpoint.sh's "upload" line); needs a GPU. */
#include <cuda.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>
#include <emmintrin.h>

#define CHUNK (4u << 20)

static int fd;
/* FILE a directory: its files' 4 MiB chunks one after the other (pread and thp modes only). */
#define FILES_MAX 256
static int nfiles, fds[FILES_MAX];
static size_t first_chunk[FILES_MAX + 1];
static size_t nchunks;
static atomic_size_t next;
static CUdeviceptr dev;
static CUcontext ctx;
static int mode_register;
static size_t piece; /* 0: whole chunks */
static int hash_pieces;
static const char *map; /* mmap modes: the whole file */
static int nontemporal; /* mmapnt */
static int thp;		/* staging on huge pages */
static off_t shift; /* pread@N, thp@N: every chunk read N bytes past its 4 MiB boundary (a store's layout) */
#define SLOTS 4

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

#define CK(x)                                                                                                \
	do {                                                                                                 \
		CUresult r_ = (x);                                                                           \
		if (r_ != CUDA_SUCCESS) {                                                                    \
			fprintf(stderr, "%s: %d\n", #x, r_);                                                 \
			exit(1);                                                                             \
		}                                                                                            \
	} while (0)

static _Atomic unsigned long long sink;

/* dst and src 16-byte aligned, len a multiple of 64. */
static void copy_nt(void *dst, const void *src, size_t len)
{
	__m128i *d = dst;
	const __m128i *s = src;

	for (size_t i = 0; i < len / 16; i += 4) {
		__m128i a = _mm_load_si128(s + i), b = _mm_load_si128(s + i + 1),
			c = _mm_load_si128(s + i + 2), e = _mm_load_si128(s + i + 3);

		_mm_stream_si128(d + i, a);
		_mm_stream_si128(d + i + 1, b);
		_mm_stream_si128(d + i + 2, c);
		_mm_stream_si128(d + i + 3, e);
	}
	_mm_sfence();
}

static void staging_alloc(void **out, size_t len)
{
	if (!thp) {
		CK(cuMemAllocHost(out, len));
		return;
	}
	if (posix_memalign(out, 2u << 20, len)) {
		perror("posix_memalign");
		exit(1);
	}
	madvise(*out, len, MADV_HUGEPAGE);
	memset(*out, 0, len);
	CK(cuMemHostRegister(*out, len, 0));
}

static void *reader(void *arg)
{
	CUstream s;
	void *buf[2];
	CUevent ev[SLOTS];
	int k = 0;

	(void)arg;
	CK(cuCtxSetCurrent(ctx));
	CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	for (int b = 0; b < 2; b++)
		staging_alloc(&buf[b], piece ? piece * SLOTS : CHUNK);
	for (int b = 0; b < SLOTS; b++)
		CK(cuEventCreate(&ev[b], CU_EVENT_DISABLE_TIMING | CU_EVENT_BLOCKING_SYNC));
	for (size_t i; (i = atomic_fetch_add(&next, 1)) < nchunks;) {
		off_t off = (off_t)i * CHUNK;

		if (piece) {
			for (size_t o = 0; o < CHUNK; o += piece) {
				char *b = (char *)buf[0] + (k % SLOTS) * piece;

				CK(cuEventSynchronize(ev[k % SLOTS]));
				if (pread(fd, b, piece, off + (off_t)o) != (ssize_t)piece) {
					perror("pread");
					exit(1);
				}
				if (hash_pieces)
					sink ^= XXH3_64bits(b, piece);
				CK(cuMemcpyHtoDAsync(dev + off + o, b, piece, s));
				CK(cuEventRecord(ev[k % SLOTS], s));
				k++;
			}
		} else if (mode_register) {
			void *p = mmap(NULL, CHUNK, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, off);

			if (p == MAP_FAILED) {
				perror("mmap");
				exit(1);
			}
			CK(cuMemHostRegister(p, CHUNK, CU_MEMHOSTREGISTER_READ_ONLY));
			CK(cuMemcpyHtoDAsync(dev + off, p, CHUNK, s));
			CK(cuStreamSynchronize(s));
			CK(cuMemHostUnregister(p));
			munmap(p, CHUNK);
		} else {
			CK(cuEventSynchronize(ev[k]));
			if (map && nontemporal)
				copy_nt(buf[k], map + off, CHUNK);
			else if (map)
				memcpy(buf[k], map + off, CHUNK);
			else if (nfiles) {
				int f = 0;

				while (first_chunk[f + 1] <= i)
					f++;
				if (pread(fds[f], buf[k], CHUNK, (off_t)(i - first_chunk[f]) * CHUNK) !=
				    CHUNK) {
					perror("pread");
					exit(1);
				}
			} else if (pread(fd, buf[k], CHUNK, off + shift) != CHUNK) {
				perror("pread");
				exit(1);
			}
			CK(cuMemcpyHtoDAsync(dev + off, buf[k], CHUNK, s));
			CK(cuEventRecord(ev[k], s));
			k ^= 1;
		}
	}
	CK(cuStreamSynchronize(s));
	return NULL;
}

int main(int argc, char **argv)
{
	struct stat st;
	pthread_t t[64];
	int n;
	double t0;
	char *label;

	if (argc != 4)
		return 2;
	label = strdup(argv[3]);
	if (strchr(argv[3], '@')) {
		shift = atol(strchr(argv[3], '@') + 1);
		*strchr(argv[3], '@') = 0;
	}
	fd = open(argv[1], O_RDONLY);
	n = atoi(argv[2]);
	mode_register = !strcmp(argv[3], "register");
	if (!strncmp(argv[3], "piece:", 6) || !strncmp(argv[3], "hpiece:", 7)) {
		hash_pieces = argv[3][0] == 'h';
		piece = (size_t)atoi(strchr(argv[3], ':') + 1) << 10;
		if (!piece || CHUNK % piece)
			return 2;
	}
	if (fd < 0 || fstat(fd, &st) || n < 1 || n > 64)
		return 2;
	nchunks = (size_t)st.st_size / CHUNK - (shift > 0);
	if (S_ISDIR(st.st_mode)) {
		DIR *d = fdopendir(fd);
		struct dirent *de;

		nchunks = 0;
		while (d && (de = readdir(d)) && nfiles < FILES_MAX) {
			struct stat fs;
			int f = de->d_name[0] == '.' ? -1 : openat(fd, de->d_name, O_RDONLY);

			if (f < 0 || fstat(f, &fs) || fs.st_size < CHUNK) {
				if (f >= 0)
					close(f);
				continue;
			}
			fds[nfiles] = f;
			first_chunk[nfiles] = nchunks;
			nchunks += (size_t)fs.st_size / CHUNK;
			first_chunk[++nfiles] = nchunks;
		}
	}
	thp = !strcmp(argv[3], "thp");
	nontemporal = !strcmp(argv[3], "mmapnt");
	if (!strncmp(argv[3], "mmap", 4)) {
		map = mmap(NULL, nchunks * CHUNK, PROT_READ, MAP_SHARED, fd, 0);
		if (map == MAP_FAILED) {
			perror("mmap");
			return 1;
		}
	}
	CK(cuInit(0));
	CK(cuDevicePrimaryCtxRetain(&ctx, 0));
	CK(cuCtxSetCurrent(ctx));
	CK(cuMemAlloc(&dev, nchunks * CHUNK));
	t0 = now();
	for (int i = 0; i < n; i++)
		pthread_create(&t[i], NULL, reader, NULL);
	for (int i = 0; i < n; i++)
		pthread_join(t[i], NULL);
	printf("%-12s %2d threads: %.1f GB/s%s\n", label, n, nchunks * (double)CHUNK / (now() - t0) / 1e9,
	       atomic_load(&sink) == 1 ? " " : "");
	return 0;
}
