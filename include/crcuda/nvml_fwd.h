/* NVML queries forwarded to the GPU's host: crcuda's libnvidia-ml.so.1 (nvml/) sends a `forward` row of
 * nvml/nvml.api through libcrcuda to the application's worker in crcudad, which answers it with the
 * real NVML of its GPU (crcudad/worker/nvml.c).
 *
 * Each forwarded function is described by its parameters' kinds (generated from its signature by
 * nvml/gen_nvml.py), so one encoder and one decoder serve every row:
 *   DEV  an nvmlDevice_t: travels as the device's UUID ("GPU-..."), found again on the other side
 *   VAL  a scalar (unsigned int, enum, unsigned long long): a u64
 *   PTR  a pointer to one object of `size` bytes: its bytes go both ways (versioned structs carry their
 *        version in), NULL stays NULL
 *   STR  `char *` with its length parameter `ref` (a VAL): `length` bytes come back
 *   ARR  an array of `size`-byte elements counted by parameter `ref`: a VAL, or (count_is_ptr) a PTR
 *        to an unsigned int the callee also writes (NVML's in/out counts)
 *
 * The wire (every integer little-endian, as both ends are; no padding):
 *   request  char name[CRC_NVML_NAME_MAX] (NUL-padded), u32 nparams, then per parameter:
 *            DEV: char uuid[CRC_NVML_UUID_BYTES]; VAL: u64; PTR/STR/ARR: u32 len (CRC_NVML_NULL for a
 *            NULL pointer), then len bytes
 *   reply    i32 nvmlReturn, u32 the worker's pid, then per PTR/STR/ARR parameter: u32 len, len bytes
 * The worker checks every length against the one its own table computes, so a request cannot make it
 * read or write past a buffer. */
#ifndef CRCUDA_NVML_FWD_H
#define CRCUDA_NVML_FWD_H

#include <stddef.h>
#include <stdint.h>

#define CRC_NVML_NAME_MAX   64
#define CRC_NVML_UUID_BYTES 96
#define CRC_NVML_PARAMS_MAX 8
#define CRC_NVML_BYTES_MAX  (1u << 20) /* an array's bytes at most; a larger capacity is clamped */
#define CRC_NVML_STR_MAX    4096u
#define CRC_NVML_NULL	    0xffffffffu

enum crc_nvml_kind { CRC_NVML_DEV = 1, CRC_NVML_VAL, CRC_NVML_PTR, CRC_NVML_STR, CRC_NVML_ARR };

struct crc_nvml_param {
	uint8_t kind;	      /* enum crc_nvml_kind */
	uint8_t count_is_ptr; /* ARR: ref is a PTR to the unsigned int count */
	uint8_t ref;	      /* STR: the length parameter; ARR: the count parameter */
	uint32_t size;	      /* PTR: the object's bytes; ARR: an element's */
};

#define CRC_NVML_P_DEV                                                                                       \
	{                                                                                                    \
		CRC_NVML_DEV, 0, 0, 0                                                                        \
	}
#define CRC_NVML_P_VAL                                                                                       \
	{                                                                                                    \
		CRC_NVML_VAL, 0, 0, 0                                                                        \
	}
#define CRC_NVML_P_PTR(type)                                                                                 \
	{                                                                                                    \
		CRC_NVML_PTR, 0, 0, sizeof(type)                                                             \
	}
#define CRC_NVML_P_STR(len_index)                                                                            \
	{                                                                                                    \
		CRC_NVML_STR, 0, len_index, 1                                                                \
	}
#define CRC_NVML_P_ARR(type, ref)                                                                            \
	{                                                                                                    \
		CRC_NVML_ARR, 0, ref, sizeof(type)                                                           \
	}
#define CRC_NVML_P_ARR_IO(type, ref)                                                                         \
	{                                                                                                    \
		CRC_NVML_ARR, 1, ref, sizeof(type)                                                           \
	}

/* A forwarded function's pid array: elements start with a process id, which the client translates (the
 * worker's pid is the application's own use of the GPU). */
#define CRC_NVML_F_PID 1u

struct crc_nvml_fn {
	const char *name;
	const struct crc_nvml_param *params;
	unsigned n, flags;
};

union crc_nvml_arg {
	void *p;
	uint64_t u;
};

/* ARR's element count as the caller gives it (its capacity); 0 where the count is NULL. */
uint64_t crc_nvml_arr_count(const struct crc_nvml_fn *f, const union crc_nvml_arg *a, unsigned i);
/* The bytes parameter i carries (PTR/STR/ARR), clamped to the wire's limits. */
size_t crc_nvml_param_bytes(const struct crc_nvml_fn *f, const union crc_nvml_arg *a, unsigned i);

/* The request for f with arguments a (DEV's .p: its NUL-terminated UUID), into buf; returns its length,
 * or 0 when it does not fit in cap. */
size_t crc_nvml_encode_req(const struct crc_nvml_fn *f, const union crc_nvml_arg *a, uint8_t *buf,
			   size_t cap);
/* Fills the caller's buffers from a reply; returns -1 for a malformed one, else 0 with *ret and *pid. */
int crc_nvml_decode_reply(const struct crc_nvml_fn *f, const union crc_nvml_arg *a, const uint8_t *buf,
			  size_t len, int32_t *ret, uint32_t *pid);

/* The worker's side. crc_nvml_req_name: the request's function name (NUL-terminated), -1 if malformed.
 * crc_nvml_decode_req: a[] from the request, each PTR/STR/ARR in a zeroed buffer of its own (bufs[i],
 * to free) of lens[i] bytes holding the bytes sent; DEV's .p is the UUID inside buf. -1 when the
 * request does not match f exactly (count, kinds' lengths, a UUID without its NUL). The reply's
 * buffers have the request's lengths (lens), whatever the callee wrote into a count. */
int crc_nvml_req_name(const uint8_t *buf, size_t len, char name[CRC_NVML_NAME_MAX]);
int crc_nvml_decode_req(const struct crc_nvml_fn *f, const uint8_t *buf, size_t len, union crc_nvml_arg *a,
			void *bufs[CRC_NVML_PARAMS_MAX], size_t lens[CRC_NVML_PARAMS_MAX]);
/* The reply's length, and the reply itself (out holds crc_nvml_reply_bytes). */
size_t crc_nvml_reply_bytes(const struct crc_nvml_fn *f, const union crc_nvml_arg *a, const size_t *lens);
void crc_nvml_encode_reply(const struct crc_nvml_fn *f, const union crc_nvml_arg *a, const size_t *lens,
			   int32_t ret, uint32_t pid, uint8_t *out);

/* libcrcuda's private export table, found with cuGetExportTable (the real driver refuses the id, which
 * tells crcuda's NVML it is not under the layer). call sends a request and returns the reply's length
 * in *reply_len; its result is a CUresult (CUDA_ERROR_NOT_SUPPORTED: the daemon has no NVML). */
#define CRC_NVML_TABLE_ID                                                                                    \
	{                                                                                                    \
		{                                                                                            \
			'c', 'r', 'c', 'u', 'd', 'a', '.', 'n', 'v', 'm', 'l', '.', 'f', 'w', 'd', '1'       \
		}                                                                                            \
	}
struct crc_nvml_table {
	size_t size;
	int (*call)(const void *req, size_t len, void *reply, size_t cap, size_t *reply_len);
};

#endif
