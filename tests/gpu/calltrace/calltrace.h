/* calltrace: a libcuda.so.1 that logs every driver call in order with its arguments, result and
 * answers, then forwards it to CALLTRACE_REAL (see calltrace.c). */
#ifndef CRCUDA_CALLTRACE_H
#define CRCUDA_CALLTRACE_H

#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <cudaProfiler.h>
#include <stddef.h>
#include <stdint.h>

#include "crcuda/cuda_api.h"
#include "crcuda/cuda_api_undef.h"

#define EXPORT __attribute__((visibility("default")))

struct ct_line {
	char buf[2048];
	size_t len;
};

extern void *ct_real[CRC_CU_COUNT];
/* This library's own entry point of each row. */
extern void *const ct_self[CRC_CU_COUNT];
extern int ct_on;

void ct_begin(struct ct_line *l, int id);
void ct_val(struct ct_line *l, const void *v, size_t size);
void ct_result(struct ct_line *l, long long r);
void ct_mem(struct ct_line *l, int arg, const void *p, size_t size);
void ct_str(struct ct_line *l, int arg, const char *s);
void ct_end(struct ct_line *l);

/* Export tables named in CALLTRACE_WRAP_EXPORT are copied with each slot replaced by a trampoline that
 * logs the call (as six integer arguments: enough for the slots this is used on) and forwards it. */
#define CT_TABLES 4
#define CT_SLOTS  128
typedef uint64_t ct_slot_fn(uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t);
extern ct_slot_fn *const ct_tramp[CT_TABLES][CT_SLOTS];
uint64_t ct_export_call(int table, int slot, uint64_t a, uint64_t b, uint64_t c, uint64_t d, uint64_t e,
			uint64_t f);

#endif
