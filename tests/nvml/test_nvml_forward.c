/* NVML forwarding: every `forward` row of nvml/nvml.api, called through crcuda's libnvidia-ml.so.1 (so
 * through libcrcuda to the worker, which calls the NVML crcudad was given) and called directly on that
 * same NVML, must give the same return code and the same bytes in every output, for every device.
 * The worker's pid in a process list must come back as this process's.
 *   test_nvml_forward OUR_NVML DAEMON_NVML       the daemon forwards to DAEMON_NVML
 *   test_nvml_forward OUR_NVML --fallback        the daemon has no NVML (CRCUDAD_NVML=none): rows
 *                                                without a fallback say NOT_SUPPORTED, process lists
 *                                                are empty
 * Run under `crcudactl run` (run-forward.sh). */
#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "nvml_fwd_rows.h"

#define MAX_DEVS 8
#define ARR_CAP	 4
#define STR_CAP	 64
#define ARENA	 (CRC_NVML_PARAMS_MAX * 4096)

struct nvml {
	void *lib;
	nvmlDevice_t dev[MAX_DEVS];
};

static void *sym(void *lib, const char *name)
{
	void *p = dlsym(lib, name);

	CHECK(p != NULL);
	return p;
}

static void load(struct nvml *n, const char *path)
{
	nvmlReturn_t (*init)(void);

	n->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!n->lib) {
		fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
		exit(1);
	}
	init = (nvmlReturn_t(*)(void))sym(n->lib, "nvmlInit_v2");
	CHECK_EQ_INT(init(), NVML_SUCCESS);
}

static bool is_count(const struct crc_nvml_fn *f, unsigned i, bool *by_ptr)
{
	for (unsigned j = 0; j < f->n; j++) {
		if (f->params[j].kind == CRC_NVML_ARR && f->params[j].ref == i) {
			*by_ptr = f->params[j].count_is_ptr;
			return true;
		}
	}
	return false;
}

/* Arguments for row f on device handles d0 and d1, buffers in arena (the same pattern every time). */
static void build(const struct crc_nvml_fn *f, nvmlDevice_t d0, nvmlDevice_t d1, unsigned cap_arr,
		  unsigned cap_str, uint8_t *arena, union crc_nvml_arg *a)
{
	unsigned devs = 0;

	for (size_t k = 0; k < ARENA; k++)
		arena[k] = (uint8_t)(k * 7 + 3);
	for (unsigned i = 0; i < f->n; i++) {
		const struct crc_nvml_param *p = &f->params[i];
		uint8_t *buf = arena + i * 4096;
		bool by_ptr = false;

		switch (p->kind) {
		case CRC_NVML_DEV:
			a[i].p = devs++ ? d1 : d0;
			break;
		case CRC_NVML_VAL:
			a[i].u = is_count(f, i, &by_ptr) ? cap_arr : 1;
			for (unsigned j = 0; j < f->n; j++)
				if (f->params[j].kind == CRC_NVML_STR && f->params[j].ref == i)
					a[i].u = cap_str;
			break;
		case CRC_NVML_PTR:
			a[i].p = buf;
			if (is_count(f, i, &by_ptr)) {
				unsigned int c = cap_arr;
				memcpy(buf, &c, sizeof(c));
			}
			break;
		default:
			a[i].p = buf;
		}
	}
}

static nvmlReturn_t call(struct nvml *n, const struct crc_nvml_row *row, union crc_nvml_arg *a)
{
	return row->invoke(sym(n->lib, row->fn.name), a);
}

static size_t out_bytes(const struct crc_nvml_fn *f, unsigned i)
{
	return f->params[i].kind == CRC_NVML_DEV || f->params[i].kind == CRC_NVML_VAL ? 0 : 4096;
}

/* Both NVMLs, the same row, the same inputs: the same answer. */
static void compare(struct nvml *ours, struct nvml *real, const struct crc_nvml_row *row, unsigned d0,
		    unsigned d1, unsigned cap_arr, unsigned cap_str)
{
	static uint8_t arena_o[ARENA], arena_r[ARENA];
	union crc_nvml_arg ao[CRC_NVML_PARAMS_MAX], ar[CRC_NVML_PARAMS_MAX];
	nvmlReturn_t ro, rr;

	build(&row->fn, ours->dev[d0], ours->dev[d1], cap_arr, cap_str, arena_o, ao);
	build(&row->fn, real->dev[d0], real->dev[d1], cap_arr, cap_str, arena_r, ar);
	ro = call(ours, row, ao);
	rr = call(real, row, ar);
	if (ro != rr)
		fprintf(stderr, "%s: through crcuda %d, directly %d\n", row->fn.name, ro, rr);
	CHECK_EQ_INT(ro, rr);
	for (unsigned i = 0; i < row->fn.n; i++) {
		size_t n = out_bytes(&row->fn, i);

		if (n && memcmp(ao[i].p, ar[i].p, n)) {
			fprintf(stderr, "%s: parameter %u differs\n", row->fn.name, i);
			CHECK(0);
		}
	}
	if ((row->fn.flags & CRC_NVML_F_PID) && ro == NVML_SUCCESS) {
		for (unsigned i = 0; i < row->fn.n; i++) {
			unsigned int pid;

			if (row->fn.params[i].kind != CRC_NVML_ARR)
				continue;
			memcpy(&pid, ao[i].p, sizeof(pid));
			CHECK_EQ_INT(pid, (unsigned int)getpid());
		}
	}
}

static void fallback(struct nvml *ours, const struct crc_nvml_row *row)
{
	static uint8_t arena[ARENA];
	union crc_nvml_arg a[CRC_NVML_PARAMS_MAX];
	nvmlReturn_t r;

	build(&row->fn, ours->dev[0], ours->dev[0], ARR_CAP, STR_CAP, arena, a);
	r = call(ours, row, a);
	if (!strcmp(row->fallback, "NONE")) {
		CHECK_EQ_INT(r, NVML_ERROR_NOT_SUPPORTED);
	} else if (!strcmp(row->fallback, "EMPTY")) {
		CHECK_EQ_INT(r, NVML_SUCCESS);
		for (unsigned i = 0; i < row->fn.n; i++)
			if (row->fn.params[i].kind == CRC_NVML_ARR && row->fn.params[i].count_is_ptr)
				CHECK_EQ_INT(*(unsigned int *)a[row->fn.params[i].ref].p, 0);
	}
	/* DRIVER rows: answered from the driver API, as tests/nvml/test_nvml checks. */
}

int main(int argc, char **argv)
{
	struct nvml ours = {0}, real = {0};
	nvmlReturn_t (*count)(unsigned int *);
	nvmlReturn_t (*by_index)(unsigned int, nvmlDevice_t *);
	nvmlReturn_t (*uuid)(nvmlDevice_t, char *, unsigned int);
	nvmlReturn_t (*by_uuid)(const char *, nvmlDevice_t *);
	unsigned int n = 0, compared = 0;
	bool fallback_mode;

	if (argc != 3) {
		fprintf(stderr, "usage: %s OUR_NVML DAEMON_NVML|--fallback\n", argv[0]);
		return 2;
	}
	fallback_mode = !strcmp(argv[2], "--fallback");
	load(&ours, argv[1]);
	count = (nvmlReturn_t(*)(unsigned int *))sym(ours.lib, "nvmlDeviceGetCount_v2");
	by_index =
	    (nvmlReturn_t(*)(unsigned int, nvmlDevice_t *))sym(ours.lib, "nvmlDeviceGetHandleByIndex_v2");
	uuid = (nvmlReturn_t(*)(nvmlDevice_t, char *, unsigned int))sym(ours.lib, "nvmlDeviceGetUUID");
	CHECK_EQ_INT(count(&n), NVML_SUCCESS);
	CHECK(n >= 1 && n <= MAX_DEVS);
	for (unsigned i = 0; i < n; i++)
		CHECK_EQ_INT(by_index(i, &ours.dev[i]), NVML_SUCCESS);
	if (fallback_mode) {
		for (size_t r = 0; r < CRC_NVML_ROWS; r++)
			fallback(&ours, &crc_nvml_rows[r]);
		printf("%zu forwarded rows answered without the daemon's NVML\n", CRC_NVML_ROWS);
		return 0;
	}
	load(&real, argv[2]);
	by_uuid = (nvmlReturn_t(*)(const char *, nvmlDevice_t *))sym(real.lib, "nvmlDeviceGetHandleByUUID");
	for (unsigned i = 0; i < n; i++) {
		char s[NVML_DEVICE_UUID_V2_BUFFER_SIZE];

		CHECK_EQ_INT(uuid(ours.dev[i], s, sizeof(s)), NVML_SUCCESS);
		CHECK_EQ_INT(by_uuid(s, &real.dev[i]), NVML_SUCCESS);
	}
	for (size_t r = 0; r < CRC_NVML_ROWS; r++) {
		const struct crc_nvml_row *row = &crc_nvml_rows[r];
		bool arr_io = false, str = false;

		for (unsigned i = 0; i < row->fn.n; i++) {
			arr_io |= row->fn.params[i].kind == CRC_NVML_ARR && row->fn.params[i].count_is_ptr;
			str |= row->fn.params[i].kind == CRC_NVML_STR;
		}
		for (unsigned d = 0; d < n; d++) {
			compare(&ours, &real, row, d, (d + 1) % n, ARR_CAP, STR_CAP);
			compared++;
			/* Too small a buffer: INSUFFICIENT_SIZE and the count needed, from either. */
			if (arr_io)
				compare(&ours, &real, row, d, (d + 1) % n, 1, STR_CAP);
			if (str)
				compare(&ours, &real, row, d, (d + 1) % n, ARR_CAP, 8);
		}
	}
	printf("%zu forwarded rows on %u device(s): %u comparisons, all equal\n", CRC_NVML_ROWS, n, compared);
	return 0;
}
