/* Pinned host staging for checkpoint and restore copies, on 2 MiB pages where the kernel gives them
 * (transparent huge pages, "madvise" mode or "always"), registered with the driver. On the H100 host
 * 8 threads reading the page cache into staging and copying it to the device reached 37.9 GB/s through
 * cuMemAllocHost's 4 KiB pages and 50.4 GB/s through 2 MiB ones (bench/upload-probe.sh, "pread"
 * against "thp"): the copy engine's and the CPU's address translations, one per 2 MiB instead of one
 * per 4 KiB. CRCUDA_PINNED_HUGE=0: cuMemHostAlloc, as before. */
#define LOG_PREFIX "pinned: "
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "crcuda/log.h"
#include "worker.h"

#define HUGE_PAGE (2u << 20)
#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25 /* Linux 6.1; glibc 2.36 does not name it. Older kernels: EINVAL. */
#endif

static bool huge_pages(void)
{
	/* Decided once (crc_pinned_free frees as crc_pinned_alloc made); readers ask at once. */
	static atomic_int huge = -1;

	if (atomic_load(&huge) < 0) {
		const char *v = getenv("CRCUDA_PINNED_HUGE");

		atomic_store(&huge, !(v && !strcmp(v, "0")));
	}
	return atomic_load(&huge);
}

CUresult crc_pinned_alloc(void **out, size_t len)
{
	size_t size = (len + HUGE_PAGE - 1) & ~(size_t)(HUGE_PAGE - 1);
	void *p;
	CUresult res;

	if (!huge_pages())
		return CALL(cuMemHostAlloc, out, len, CU_MEMHOSTALLOC_PORTABLE);
	if (posix_memalign(&p, HUGE_PAGE, size))
		return CUDA_ERROR_OUT_OF_MEMORY;
	/* A hint: where the kernel has no huge page to give, 4 KiB pages, as cuMemHostAlloc's. */
	madvise(p, size, MADV_HUGEPAGE);
	/* Faulted in by the CPU first: a fault in an advised aligned range takes a whole huge page. */
	for (size_t o = 0; o < size; o += HUGE_PAGE)
		((volatile char *)p)[o] = 0;
	/* Where a fault found no free huge page (memory in small pieces, as after a build) it took 4 KiB
	 * ones: collapsed now, the kernel compacting as it must. Staging is mostly made ahead of a
	 * restore, off its path; already huge, this is a walk of the page tables. */
	if (madvise(p, size, MADV_COLLAPSE) && errno != EINVAL)
		pr_debug("staging %p (%zu MiB) not on huge pages: %s", p, size >> 20, strerror(errno));
	res = CALL(cuMemHostRegister_v2, p, size, CU_MEMHOSTREGISTER_PORTABLE);
	if (res != CUDA_SUCCESS) {
		free(p);
		return res;
	}
	*out = p;
	return CUDA_SUCCESS;
}

void crc_pinned_free(void *p)
{
	if (!p)
		return;
	if (!huge_pages()) {
		CALL(cuMemFreeHost, p);
		return;
	}
	/* Still registered, it must not go back to the heap (the next buffer made there would be refused,
	 * or the device would write into reused memory): kept. */
	CUresult res = CALL(cuMemHostUnregister, p);

	if (res != CUDA_SUCCESS) {
		pr_warn("cannot unregister pinned staging %p (%d): kept", p, (int)res);
		return;
	}
	free(p);
}
