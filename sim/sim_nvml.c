/* The simulated device's NVML, for tests of NVML forwarding (crcudad's worker loads it when
 * CRCUDAD_NVML names it). Every forwarded row of nvml/nvml.api is answered deterministically from its
 * name, device UUID, values and the bytes it was given, so a test can call it directly and through
 * crcuda and compare the answers byte for byte:
 *   - a PTR gets bytes derived from that digest;
 *   - a STR gets 20 printable characters and a NUL (INSUFFICIENT_SIZE below 21 bytes);
 *   - an ARR counted in-out has 3 elements (INSUFFICIENT_SIZE, count 3, when fewer fit); one counted
 *     by value is filled whole;
 *   - a pid array's first element carries this process's pid, as NVML shows the caller's own use.
 * Any "GPU-..." UUID is a device. */
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "crcuda/nvml_fwd.h"
#include "nvml_types.h"

#define SIM_NVML_EXPORT __attribute__((visibility("default")))
#define SIM_DEVICES	16
#define SIM_ARR_LEN	3
#define SIM_STR_LEN	20

struct nvmlDevice_st {
	char uuid[CRC_NVML_UUID_BYTES];
};

static struct nvmlDevice_st devs[SIM_DEVICES];
static unsigned ndevs;
static atomic_int inits;

SIM_NVML_EXPORT nvmlReturn_t nvmlInit_v2(void)
{
	atomic_fetch_add(&inits, 1);
	return NVML_SUCCESS;
}

SIM_NVML_EXPORT nvmlReturn_t nvmlShutdown(void)
{
	return atomic_fetch_sub(&inits, 1) > 0 ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;
}

SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
	if (atomic_load(&inits) <= 0)
		return NVML_ERROR_UNINITIALIZED;
	if (!uuid || !device || strncasecmp(uuid, "GPU-", 4) || strlen(uuid) >= CRC_NVML_UUID_BYTES)
		return NVML_ERROR_INVALID_ARGUMENT;
	for (unsigned i = 0; i < ndevs; i++) {
		if (!strcasecmp(devs[i].uuid, uuid)) {
			*device = &devs[i];
			return NVML_SUCCESS;
		}
	}
	if (ndevs == SIM_DEVICES)
		return NVML_ERROR_NOT_FOUND;
	strcpy(devs[ndevs].uuid, uuid);
	*device = &devs[ndevs++];
	return NVML_SUCCESS;
}

/* FNV-1a over the inputs, then splitmix64 per output byte position. */
static uint64_t mix(uint64_t h, const void *p, size_t n)
{
	const uint8_t *b = p;

	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 0x100000001b3ull;
	return h;
}

static uint8_t byte_at(uint64_t h, unsigned param, size_t k)
{
	uint64_t z = h + (param + 1) * 0x9e3779b97f4a7c15ull + k * 0xbf58476d1ce4e5b9ull;

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return (uint8_t)(z ^ (z >> 31));
}

static bool counts_an_array(const struct crc_nvml_fn *f, unsigned i)
{
	for (unsigned j = 0; j < f->n; j++)
		if (f->params[j].kind == CRC_NVML_ARR && f->params[j].count_is_ptr && f->params[j].ref == i)
			return true;
	return false;
}

static nvmlReturn_t answer(const struct crc_nvml_fn *f, const union crc_nvml_arg *a)
{
	uint64_t h = mix(0xcbf29ce484222325ull, f->name, strlen(f->name));
	nvmlReturn_t ret = NVML_SUCCESS;

	if (atomic_load(&inits) <= 0)
		return NVML_ERROR_UNINITIALIZED;
	for (unsigned i = 0; i < f->n; i++) {
		const struct crc_nvml_param *p = &f->params[i];

		if (p->kind == CRC_NVML_DEV) {
			const struct nvmlDevice_st *d = a[i].p;

			if (!d)
				return NVML_ERROR_INVALID_ARGUMENT;
			h = mix(h, d->uuid, strlen(d->uuid));
		} else if (p->kind == CRC_NVML_VAL) {
			h = mix(h, &a[i].u, sizeof(a[i].u));
		} else if (p->kind == CRC_NVML_PTR && a[i].p) {
			h = mix(h, a[i].p, p->size);
		}
	}
	for (unsigned i = 0; i < f->n; i++) {
		const struct crc_nvml_param *p = &f->params[i];
		uint8_t *out = a[i].p;
		size_t n;

		if (p->kind == CRC_NVML_PTR && out && !counts_an_array(f, i)) {
			for (size_t k = 0; k < p->size; k++)
				out[k] = byte_at(h, i, k);
		} else if (p->kind == CRC_NVML_STR) {
			if (!out)
				return NVML_ERROR_INVALID_ARGUMENT;
			if (a[p->ref].u < SIM_STR_LEN + 1)
				return NVML_ERROR_INSUFFICIENT_SIZE;
			for (size_t k = 0; k < SIM_STR_LEN; k++)
				out[k] = (uint8_t)('a' + byte_at(h, i, k) % 26);
			out[SIM_STR_LEN] = 0;
		} else if (p->kind == CRC_NVML_ARR) {
			unsigned int *count = p->count_is_ptr ? a[p->ref].p : NULL;

			if (p->count_is_ptr) {
				if (!count)
					return NVML_ERROR_INVALID_ARGUMENT;
				if (*count < SIM_ARR_LEN || !out) {
					*count = SIM_ARR_LEN;
					ret = NVML_ERROR_INSUFFICIENT_SIZE;
					continue;
				}
				*count = SIM_ARR_LEN;
				n = SIM_ARR_LEN;
			} else {
				n = a[p->ref].u;
				if (n && !out)
					return NVML_ERROR_INVALID_ARGUMENT;
			}
			for (size_t k = 0; k < n * p->size; k++)
				out[k] = byte_at(h ^ mix(h, out + k, 1), i, k);
			if ((f->flags & CRC_NVML_F_PID) && n) {
				unsigned int pid = (unsigned int)getpid();

				memcpy(out, &pid, sizeof(pid));
			}
		}
	}
	return ret;
}

#define NVML_UNPAREN(...) __VA_ARGS__
#define NVML_API(sym, policy, target, ret, params, args)
#define NVML_FWD(sym, fallback, flags, ret, params, args, desc, pack, call)                                  \
	static const struct crc_nvml_param sym##_params[] = {NVML_UNPAREN desc};                             \
	static const struct crc_nvml_fn sym##_fn = {#sym, sym##_params,                                      \
						    sizeof(sym##_params) / sizeof(sym##_params[0]), flags};  \
	SIM_NVML_EXPORT ret sym params;                                                                      \
	ret sym params                                                                                       \
	{                                                                                                    \
		const union crc_nvml_arg a[] = {NVML_UNPAREN pack};                                          \
		return answer(&sym##_fn, a);                                                                 \
	}
#include "nvml_exports.def"
