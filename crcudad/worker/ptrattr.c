/* cuPointerGetAttribute(s) for the session's memory. The layer backs cuMemAlloc with a VMM mapping
 * (cuMemCreate + cuMemMap at a fixed address), and the driver describes a VMM mapping differently
 * from cuMemAlloc memory: another range, no legacy IPC, other handle types. Libraries steer by these
 * answers (cuBLASLt takes another, numerically different path when cuPointerGetAttributes fails), so
 * for cuMemAlloc memory the answers are made what cuMemAlloc memory gets: the per-allocation ones
 * (context, range) from the allocation, and the ones that describe the kind of memory from a real
 * cuMemAlloc buffer, queried once per device. Page-locked memory the client shares is answered by the
 * daemon's mapping of it. Everything else is the driver's own answer.
 *
 * The array form is answered attribute by attribute, each as the driver's array form answers it alone;
 * the call fails with the first attribute that fails, as the driver's does. */
#define LOG_PREFIX "crcudad: "
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "crcuda/log.h"
#include "worker.h"

#include "crcuda/cuda_api_undef.h"

#define ATTR_MAX	  32 /* above CUDA 13's highest, CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE (21) */
#define REF_REQUEST	  ((2u << 20) + 5) /* an odd size: its range size shows how the driver rounds */
#define REF_SMALL	  (1u << 20)	   /* below 2 MiB: SYNC_MEMOPS may answer otherwise (below) */
#define MAX_ARRAY	  64
#define HOST_MAPPING_UNIT (2u << 20) /* measured: cuMemAllocHost(1 MiB) has a 2 MiB mapping */

struct answer {
	CUresult res;
	uint64_t v[2];
};

/* What a real cuMemAlloc buffer of REF_REQUEST bytes answers, per device; and SYNC_MEMOPS of one of
 * REF_SMALL bytes made beside it. Unset, the driver's SYNC_MEMOPS depends on the allocation: 1 MiB
 * answered 0 and 3 MiB 1 on an H100 and an H200 host, both 0 on another H200 host (driver 580.159.04
 * all), and a 3 MiB probe made after the reference was freed answered 0 where the program's fresh one
 * answered 1 (carved from the freed one, it seems). So both are made once, together, and an allocation
 * answers by its size (2 MiB and more: the large one's answer); the VMM mapping behind it answers 1. */
static struct {
	bool done;
	struct answer single[ATTR_MAX], array[ATTR_MAX];
	uint64_t sync_small;
} ref[CRC_MAX_DEVICES];
static pthread_mutex_t ref_lock = PTHREAD_MUTEX_INITIALIZER;

/* Attributes that describe the kind of memory, not the allocation. */
static bool kind_attribute(unsigned a)
{
	switch (a) {
	case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
	case CU_POINTER_ATTRIBUTE_HOST_POINTER:
	case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
	case CU_POINTER_ATTRIBUTE_IS_MANAGED:
	case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
	case CU_POINTER_ATTRIBUTE_MAPPED:
	case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
	case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
	case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
	case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
	case 21: /* CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE, CUDA 12.8 */
		return true;
	default:
		return false;
	}
}

static struct answer query(unsigned a, uint64_t ptr, bool array)
{
	struct answer r = {.res = CUDA_SUCCESS};
	CUpointer_attribute attr = (CUpointer_attribute)a;
	void *data = r.v;

	r.res = array ? CALL(cuPointerGetAttributes, 1, &attr, &data, ptr)
		      : CALL(cuPointerGetAttribute, r.v, attr, ptr);
	if (r.res != CUDA_SUCCESS && !array)
		memset(r.v, 0, sizeof(r.v));
	return r;
}

static void ref_init(int dev)
{
	CUdeviceptr p, small;
	CUstreamCaptureMode mode;

	if (__atomic_load_n(&ref[dev].done, __ATOMIC_ACQUIRE))
		return;
	/* The session's thread: an application capturing in the global mode must not lose its capture to
	 * these buffers (its query itself is no unsafe call). Its own mode comes back after. */
	mode = crc_thread_capture_relaxed();
	pthread_mutex_lock(&ref_lock);
	if (!ref[dev].done && CALL(cuMemAlloc_v2, &p, REF_REQUEST) == CUDA_SUCCESS) {
		for (unsigned a = 1; a < ATTR_MAX; a++) {
			ref[dev].single[a] = query(a, p, false);
			ref[dev].array[a] = query(a, p, true);
		}
		if (CALL(cuMemAlloc_v2, &small, REF_SMALL) == CUDA_SUCCESS) {
			ref[dev].sync_small = query(CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, small, false).v[0];
			CALL(cuMemFree_v2, small);
		}
		CALL(cuMemFree_v2, p);
		__atomic_store_n(&ref[dev].done, true, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&ref_lock);
	CALL(cuThreadExchangeStreamCaptureMode, &mode);
}

/* The range size the driver reports for a cuMemAlloc of `req` bytes, by the rounding the reference
 * buffer shows (exact, or up to a power of two). */
static uint64_t range_size(int dev, uint64_t req)
{
	uint64_t got = ref[dev].single[CU_POINTER_ATTRIBUTE_RANGE_SIZE].v[0], unit = 1;

	if (ref[dev].single[CU_POINTER_ATTRIBUTE_RANGE_SIZE].res != CUDA_SUCCESS || got < REF_REQUEST)
		return req;
	while (unit < got - (REF_REQUEST - 5))
		unit <<= 1;
	return got == REF_REQUEST ? req : (req + unit - 1) / unit * unit;
}

/* The driver's answer in the client's terms: its context handle, its device ordinal. */
static struct answer client_view(struct crc_session *s, unsigned a, struct answer r)
{
	if (r.res != CUDA_SUCCESS)
		return r;
	if (a == CU_POINTER_ATTRIBUTE_CONTEXT && r.v[0])
		r.v[0] = crc_find_handle(s, CRC_HT_CTX, (void *)(uintptr_t)r.v[0]);
	else if (a == CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL)
		r.v[0] = (uint32_t)crc_dev_client(s, (int)r.v[0]);
	return r;
}

/* Page-locked memory the client shares with the daemon: the daemon's mapping answers, its host
 * addresses given back as the client's. */
static struct answer pinned_answer(struct crc_session *s, const struct crc_pin *p, unsigned a, uint64_t ptr,
				   bool array)
{
	uint64_t local = (uintptr_t)p->local, delta = local - p->client_addr;
	struct answer r = client_view(s, a, query(a, ptr + delta, array));

	if (r.res != CUDA_SUCCESS)
		return r;
	switch (a) {
	case CU_POINTER_ATTRIBUTE_HOST_POINTER:
	case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
	case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
		if (r.v[0] - local < p->bytes)
			r.v[0] -= delta;
		break;
	case CU_POINTER_ATTRIBUTE_MAPPING_SIZE: /* a page-locked allocation's mapping: 2 MiB units */
		r.v[0] = (r.v[0] + HOST_MAPPING_UNIT - 1) / HOST_MAPPING_UNIT * HOST_MAPPING_UNIT;
		break;
	default:
		break;
	}
	return r;
}

static const struct crc_pin *pin_of(struct crc_session *s, uint64_t ptr)
{
	for (const struct crc_pin *p = s->pins; p; p = p->next)
		if (ptr - p->client_addr < p->bytes)
			return p;
	return NULL;
}

static const struct crc_alloc *alloc_of(struct crc_session *s, uint64_t ptr, enum crc_alloc_kind kind)
{
	for (const struct crc_alloc *a = s->allocs; a; a = a->next)
		if (a->kind == kind && ptr - a->ptr < a->size)
			return a;
	return NULL;
}

/* cuMemAlloc memory, or another session's opened with cuIpcOpenMemHandle (which natively is such
 * memory too). */
static const struct crc_alloc *mem_of(struct crc_session *s, uint64_t ptr)
{
	const struct crc_alloc *m = alloc_of(s, ptr, CRC_ALLOC_MEM);

	return m ? m : alloc_of(s, ptr, CRC_ALLOC_IPC);
}

/* The application's VMM reservations are ranges of the daemon's one reservation of the session's
 * window: the range reported is the application's. */
static struct answer reserved_answer(struct crc_session *s, unsigned a, uint64_t ptr, struct answer r)
{
	const struct crc_alloc *res = alloc_of(s, ptr, CRC_ALLOC_RESERVE);

	if (res && res->in_window && r.res == CUDA_SUCCESS) {
		if (a == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR)
			r.v[0] = res->ptr;
		else if (a == CU_POINTER_ATTRIBUTE_RANGE_SIZE)
			r.v[0] = res->size;
	}
	return r;
}

/* The device whose cuMemAlloc reference answers for cuMemAlloc memory (the current context's; its
 * reference made if need be), -1 without one. */
static int ref_device(void)
{
	CUdevice dev;

	if (crc_be.cuCtxGetDevice_fn(&dev) != CUDA_SUCCESS || dev < 0 || dev >= CRC_MAX_DEVICES)
		return -1;
	ref_init(dev);
	return dev;
}

/* The answer for attribute a of ptr, which lies in allocation m (NULL: not cuMemAlloc memory). */
static struct answer answer(struct crc_session *s, const struct crc_alloc *m, unsigned a, uint64_t ptr,
			    bool array)
{
	const struct crc_pin *pin = m ? NULL : pin_of(s, ptr);
	int dev;

	if (pin)
		return pinned_answer(s, pin, a, ptr, array);
	/* cuMemAlloc memory: what the allocation and the reference buffer say, without asking the
	 * driver about the VMM mapping behind it. */
	if (m && a == CU_POINTER_ATTRIBUTE_SYNC_MEMOPS && m->sync_set)
		return (struct answer){.v = {m->sync_memops}};
	if (m && a < ATTR_MAX && (dev = ref_device()) >= 0) {
		bool done = __atomic_load_n(&ref[dev].done, __ATOMIC_ACQUIRE);

		if (a == CU_POINTER_ATTRIBUTE_SYNC_MEMOPS && done && (m->req ? m->req : m->size) < (2u << 20))
			return (struct answer){.v = {ref[dev].sync_small}};
		if (kind_attribute(a) && done)
			return array ? ref[dev].array[a] : ref[dev].single[a];
		if (a == CU_POINTER_ATTRIBUTE_CONTEXT)
			return (struct answer){.v = {m->vhandle}};
		if (a == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR)
			return (struct answer){.v = {m->ptr}};
		if (a == CU_POINTER_ATTRIBUTE_RANGE_SIZE)
			return (struct answer){.v = {range_size(dev, m->req)}};
	}
	if (m && a == CU_POINTER_ATTRIBUTE_SYNC_MEMOPS)
		return (struct answer){.v = {0}}; /* no reference buffer: the documented default */
	struct answer r = client_view(s, a, query(a, ptr, array));

	return m ? r : reserved_answer(s, a, ptr, r);
}

/* args: ptr, attribute. Reply: 16 bytes of value. */
CUresult crc_raw_ptrattr(struct crc_session *s, const struct crc_call_hdr *h, const uint8_t *args, size_t len)
{
	uint64_t w[2], *out = crc_out(s, 16);
	struct answer r;

	(void)h;
	if (len < sizeof(w) || !out)
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(w, args, sizeof(w));
	r = answer(s, mem_of(s, w[0]), (unsigned)w[1], w[0], false);
	memcpy(out, r.v, sizeof(r.v));
	return r.res;
}

/* args: ptr, n, n attributes (8 bytes each). Reply: n values of 16 bytes. */
CUresult crc_raw_ptrattrs(struct crc_session *s, const struct crc_call_hdr *h, const uint8_t *args,
			  size_t len)
{
	uint64_t w[2], *out;
	const struct crc_alloc *m;
	CUresult res = CUDA_SUCCESS;

	(void)h;
	if (len < sizeof(w))
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(w, args, sizeof(w));
	if (!w[1] || w[1] > MAX_ARRAY || len < sizeof(w) + w[1] * 8 || !(out = crc_out(s, w[1] * 16)))
		return CUDA_ERROR_INVALID_VALUE;
	m = mem_of(s, w[0]);
	for (uint64_t i = 0; i < w[1]; i++) {
		uint64_t a;
		struct answer r;

		memcpy(&a, args + sizeof(w) + i * 8, 8);
		r = answer(s, m, (unsigned)a, w[0], true);
		memcpy(out + 2 * i, r.v, sizeof(r.v));
		if (r.res != CUDA_SUCCESS && res == CUDA_SUCCESS)
			res = r.res;
	}
	return res;
}

/* args: ptr, attribute, value (the unsigned int SYNC_MEMOPS takes; 0 for the others). Only SYNC_MEMOPS
 * is settable: the driver refuses the others itself. cuMemAlloc memory keeps the setting in its
 * allocation, whose attributes are answered from it (above), without asking the driver about the VMM
 * mapping behind it; the journal keeps those settings (the record's address, dropped with the memory's
 * free: journal.c). Other memory (page-locked memory the client shares, the application's VMM
 * mappings) is the driver's, not carried over a checkpoint. */
CUresult crc_raw_ptrset(struct crc_session *s, const struct crc_call_hdr *h, const uint8_t *args, size_t len)
{
	uint64_t w[3];
	struct crc_alloc *m = NULL;
	const struct crc_pin *pin;
	unsigned v;

	(void)h;
	if (len < sizeof(w))
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(w, args, sizeof(w));
	v = (unsigned)w[2];
	s->jaddr = w[0];
	for (struct crc_alloc *a = s->allocs; a && !m; a = a->next)
		if (a->kind == CRC_ALLOC_MEM && w[0] - a->ptr < a->size)
			m = a;
	if (!m || w[1] != CU_POINTER_ATTRIBUTE_SYNC_MEMOPS) {
		s->jdrop = true;
		pin = m ? NULL : pin_of(s, w[0]);
		return CALL(cuPointerSetAttribute, &v, (CUpointer_attribute)w[1],
			    pin ? w[0] - pin->client_addr + (uintptr_t)pin->local : w[0]);
	}
	m->sync_set = true;
	m->sync_memops = v != 0;
	return CUDA_SUCCESS;
}

/* Coredump attributes (crc_coredump_req): the value's bytes in a buffer of their size, the driver's
 * answer written over them and sent back with *size as the driver left it. A Set with a value is kept
 * by the journal (the process-wide one without the caller's context); a size query is not. */
CUresult crc_raw_coredump(struct crc_session *s, const struct crc_call_hdr *h, const uint8_t *args,
			  size_t len)
{
	struct crc_coredump_req r;
	uint8_t buf[CRC_COREDUMP_MAX];
	uint64_t *out;
	size_t size;
	void *value;
	size_t *psize;
	CUresult res;

	(void)h;
	if (len < sizeof(r))
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(&r, args, sizeof(r));
	if (r.bytes > CRC_COREDUMP_MAX || len < sizeof(r) + r.bytes || !(out = crc_out(s, 8 + r.bytes)))
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(buf, args + sizeof(r), r.bytes);
	size = r.flags & CRC_COREDUMP_VALUE ? r.bytes : r.size;
	value = r.flags & CRC_COREDUMP_VALUE ? buf : NULL;
	psize = r.flags & CRC_COREDUMP_SIZE ? &size : NULL;
	if (!value)
		s->jdrop = true;
	switch (s->msg->op) {
	case CRC_CU_cuCoredumpGetAttribute:
		res = CALL(cuCoredumpGetAttribute, (CUcoredumpSettings)r.attrib, value, psize);
		break;
	case CRC_CU_cuCoredumpGetAttributeGlobal:
		res = CALL(cuCoredumpGetAttributeGlobal, (CUcoredumpSettings)r.attrib, value, psize);
		break;
	case CRC_CU_cuCoredumpSetAttribute:
		res = CALL(cuCoredumpSetAttribute, (CUcoredumpSettings)r.attrib, value, psize);
		break;
	default:
		res = CALL(cuCoredumpSetAttributeGlobal, (CUcoredumpSettings)r.attrib, value, psize);
		break;
	}
	out[0] = size;
	memcpy(out + 1, buf, r.bytes);
	return res;
}

/* cuMemBatchDecompressAsync (crc_decompress_req): the parameters as the application wrote them, on
 * the translated stream. The layer's cuMemAlloc memory is a VMM mapping made without
 * CU_MEM_CREATE_USAGE_HW_DECOMPRESS: a device with a decompression engine may refuse it. */
CUresult crc_raw_decompress(struct crc_session *s, const struct crc_call_hdr *h, const uint8_t *args,
			    size_t len)
{
	struct crc_decompress_req r;
	CUmemDecompressParams *p = NULL, none = {0};
	union crc_slot st;
	uint64_t *out = crc_out(s, 8);
	size_t index = SIZE_MAX;
	CUresult res;

	if (len < sizeof(r) || !out)
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(&r, args, sizeof(r));
	index = r.index;
	if (r.count > CRC_DECOMPRESS_MAX || len < sizeof(r) + (r.null_array ? 0 : r.count * sizeof(*p)))
		return CUDA_ERROR_INVALID_VALUE;
	res = crc_translate(s, h, CRC_HT_STREAM, r.stream, &st);
	if (res != CUDA_SUCCESS)
		return res;
	if (r.count && !r.null_array) {
		if (!(p = malloc(r.count * sizeof(*p))))
			return CUDA_ERROR_OUT_OF_MEMORY;
		memcpy(p, args + sizeof(r), r.count * sizeof(*p));
	}
	/* No entries from an array that is not NULL: the driver is given one too. */
	res = CALL(cuMemBatchDecompressAsync, p || r.null_array ? p : &none, r.count, r.flags,
		   r.want_index ? &index : NULL, st.ptr);
	free(p);
	out[0] = index;
	return res;
}
