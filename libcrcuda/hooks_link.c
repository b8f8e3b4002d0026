/* The JIT linker (cuLinkCreate/AddData/AddFile/Complete/Destroy). The client collects the inputs and
 * options; cuLinkComplete sends the whole link to the daemon, which links with the real driver and
 * answers the image, the logs and the wall time. The image is then the application's to load
 * (cuModuleLoadData, journaled like any load). Files are read here: the daemon may not see them.
 * Options whose values are host pointers other than the log buffers (symbol tables) are refused.
 * Unlike the driver, an input's errors (a PTX syntax error) surface at cuLinkComplete, not at
 * cuLinkAddData, with the same error log. */
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "crcuda/errno.h"
#include "crcuda/log.h"
#include "crcuda/modimage.h"
#include "crcuda/proto.h"
#include "hooks.h"

#define LINK_MAGIC     0x4c494e4bu
#define LINK_MAX_OPTS  32
#define LINK_MAX_INPUT 64

struct link_input {
	uint32_t type;
	char *name;
	void *data;
	size_t size;
};

struct link {
	uint32_t magic;
	unsigned nopts, ninputs;
	CUjit_option opts[LINK_MAX_OPTS];
	void **values; /* the application's option values: the outputs are written there */
	struct link_input inputs[LINK_MAX_INPUT];
	void *image; /* the last link's output, until cuLinkDestroy */
};

static bool option_ok(CUjit_option o)
{
	switch (o) {
	case CU_JIT_GLOBAL_SYMBOL_NAMES:
	case CU_JIT_GLOBAL_SYMBOL_ADDRESSES:
	case CU_JIT_GLOBAL_SYMBOL_COUNT:
	case CU_JIT_REFERENCED_KERNEL_NAMES:
	case CU_JIT_REFERENCED_VARIABLE_NAMES:
	case CU_JIT_REFERENCED_KERNEL_COUNT:
	case CU_JIT_REFERENCED_VARIABLE_COUNT:
		return false;
	default:
		return o >= 0 && o < CU_JIT_NUM_OPTIONS;
	}
}

CUresult crc_hook_cuLinkCreate_v2(unsigned int numOptions, CUjit_option *options, void **optionValues,
				  CUlinkState *stateOut)
{
	struct link *l;

	if (!stateOut || numOptions > LINK_MAX_OPTS || (numOptions && (!options || !optionValues)))
		return CUDA_ERROR_INVALID_VALUE;
	for (unsigned i = 0; i < numOptions; i++)
		if (!option_ok(options[i])) {
			pr_warn("cuLinkCreate: JIT option %d is not supported under crcuda (it names host "
				"symbols the daemon cannot reach)",
				(int)options[i]);
			return CUDA_ERROR_NOT_SUPPORTED;
		}
	l = calloc(1, sizeof(*l));
	if (!l)
		return CUDA_ERROR_OUT_OF_MEMORY;
	l->magic = LINK_MAGIC;
	l->nopts = numOptions;
	if (numOptions)
		memcpy(l->opts, options, numOptions * sizeof(*options));
	l->values = optionValues;
	*stateOut = (CUlinkState)l;
	return CUDA_SUCCESS;
}

CUresult crc_hook_cuLinkCreate(unsigned int numOptions, CUjit_option *options, void **optionValues,
			       CUlinkState *stateOut)
{
	return crc_hook_cuLinkCreate_v2(numOptions, options, optionValues, stateOut);
}

static struct link *link_of(CUlinkState state)
{
	struct link *l = (struct link *)state;

	return l && l->magic == LINK_MAGIC ? l : NULL;
}

/* Keeps a copy of the input (the application may reuse its buffer before cuLinkComplete). */
static CUresult add_input(struct link *l, CUjitInputType type, const void *data, size_t size,
			  const char *name)
{
	struct link_input *in;

	if (!l || !data || !size || type >= CU_JIT_NUM_INPUT_TYPES)
		return CUDA_ERROR_INVALID_VALUE;
	if (l->ninputs == LINK_MAX_INPUT)
		return CUDA_ERROR_OUT_OF_MEMORY;
	in = &l->inputs[l->ninputs];
	*in = (struct link_input){
	    .type = type, .size = size, .data = malloc(size), .name = strdup(name ? name : "")};
	if (!in->data || !in->name) {
		free(in->data);
		free(in->name);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	memcpy(in->data, data, size);
	l->ninputs++;
	return CUDA_SUCCESS;
}

CUresult crc_hook_cuLinkAddData_v2(CUlinkState state, CUjitInputType type, void *data, size_t size,
				   const char *name, unsigned int numOptions, CUjit_option *options,
				   void **optionValues)
{
	(void)numOptions, (void)options, (void)optionValues; /* per-input options: the link's apply */
	return add_input(link_of(state), type, data, size, name);
}

CUresult crc_hook_cuLinkAddData(CUlinkState state, CUjitInputType type, void *data, size_t size,
				const char *name, unsigned int numOptions, CUjit_option *options,
				void **optionValues)
{
	return crc_hook_cuLinkAddData_v2(state, type, data, size, name, numOptions, options, optionValues);
}

CUresult crc_hook_cuLinkAddFile_v2(CUlinkState state, CUjitInputType type, const char *path,
				   unsigned int numOptions, CUjit_option *options, void **optionValues)
{
	size_t len;
	void *buf;
	CUresult res;
	int rc;

	(void)numOptions, (void)options, (void)optionValues;
	if (!link_of(state) || !path)
		return CUDA_ERROR_INVALID_VALUE;
	rc = crc_modimage_read_file(path, &buf, &len);
	if (rc)
		return rc == CRC_ENOTFOUND ? CUDA_ERROR_FILE_NOT_FOUND : CUDA_ERROR_INVALID_VALUE;
	/* Text inputs keep their NUL; binary ones are their bytes. */
	res = add_input(link_of(state), type, buf, type == CU_JIT_INPUT_PTX ? len : len - 1, path);
	free(buf);
	return res;
}

CUresult crc_hook_cuLinkAddFile(CUlinkState state, CUjitInputType type, const char *path,
				unsigned int numOptions, CUjit_option *options, void **optionValues)
{
	return crc_hook_cuLinkAddFile_v2(state, type, path, numOptions, options, optionValues);
}

static size_t pad8(size_t n)
{
	return (n + 7) & ~(size_t)7;
}

/* The option's value as the request carries it (the log buffers are the daemon's own). */
static uint64_t option_value(const struct link *l, unsigned i)
{
	switch (l->opts[i]) {
	case CU_JIT_INFO_LOG_BUFFER:
	case CU_JIT_ERROR_LOG_BUFFER:
	case CU_JIT_WALL_TIME:
		return 0;
	default:
		return (uintptr_t)l->values[i];
	}
}

/* The daemon's answers written back where the driver writes them: the logs into the application's
 * buffers (their sizes: the bytes written), the wall time and threads per block into the values. */
static void write_back(struct link *l, const struct crc_link_reply *r, const char *info, const char *err)
{
	for (unsigned i = 0; i < l->nopts; i++) {
		void **v = &l->values[i];
		size_t cap;

		switch (l->opts[i]) {
		case CU_JIT_INFO_LOG_BUFFER:
		case CU_JIT_ERROR_LOG_BUFFER:
			for (unsigned j = 0; j < l->nopts; j++) {
				bool info_buf = l->opts[i] == CU_JIT_INFO_LOG_BUFFER;
				uint64_t n = info_buf ? r->info_len : r->error_len;

				if (l->opts[j] != (info_buf ? CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES
							    : CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES) ||
				    !*v)
					continue;
				cap = (uintptr_t)l->values[j];
				if (!cap)
					break;
				n = n < cap ? n : cap - 1;
				memcpy(*v, info_buf ? info : err, n);
				((char *)*v)[n] = '\0';
				l->values[j] = (void *)(uintptr_t)(n + 1);
			}
			break;
		case CU_JIT_WALL_TIME:
			memcpy(v, &r->wall_time, sizeof(r->wall_time));
			break;
		case CU_JIT_THREADS_PER_BLOCK:
			*v = (void *)(uintptr_t)r->threads_per_block;
			break;
		default:
			break;
		}
	}
}

CUresult crc_hook_cuLinkComplete(CUlinkState state, void **cubinOut, size_t *sizeOut)
{
	struct link *l = link_of(state);
	size_t len = sizeof(struct crc_link_req) + (l ? l->nopts : 0) * sizeof(struct crc_link_opt);
	const struct crc_link_reply *r;
	struct crc_call c;
	uint8_t *w;
	void *args;
	CUresult res;

	if (!l || !cubinOut || !sizeOut)
		return CUDA_ERROR_INVALID_VALUE;
	for (unsigned i = 0; i < l->ninputs; i++)
		len +=
		    sizeof(struct crc_link_input) + pad8(strlen(l->inputs[i].name)) + pad8(l->inputs[i].size);
	if (len > crc_chan_max_payload(&crc_client.chan) - 64) {
		pr_warn("cuLinkComplete: %zu bytes of inputs are more than one request carries under crcuda",
			len);
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	res = crc_call_begin(&c, CRC_CU_cuLinkComplete, 0, len, &args);
	if (res != CUDA_SUCCESS)
		return res;
	w = args;
	*(struct crc_link_req *)w = (struct crc_link_req){.nopts = l->nopts, .ninputs = l->ninputs};
	w += sizeof(struct crc_link_req);
	for (unsigned i = 0; i < l->nopts; i++, w += sizeof(struct crc_link_opt))
		*(struct crc_link_opt *)w =
		    (struct crc_link_opt){.option = l->opts[i], .value = option_value(l, i)};
	for (unsigned i = 0; i < l->ninputs; i++) {
		const struct link_input *in = &l->inputs[i];
		size_t nl = strlen(in->name);

		*(struct crc_link_input *)w =
		    (struct crc_link_input){.type = in->type, .name_len = (uint32_t)nl, .size = in->size};
		w += sizeof(struct crc_link_input);
		memcpy(w, in->name, nl);
		w += pad8(nl);
		memcpy(w, in->data, in->size);
		w += pad8(in->size);
	}
	res = crc_call_wait(&c, NULL, NULL);
	r = c.reply;
	if (res == CUDA_SUCCESS &&
	    (c.reply_len < sizeof(*r) || r->info_len > c.reply_len || r->error_len > c.reply_len ||
	     r->image_len > c.reply_len ||
	     c.reply_len < sizeof(*r) + pad8(r->info_len) + pad8(r->error_len) + pad8(r->image_len)))
		res = CUDA_ERROR_UNKNOWN;
	if (res == CUDA_SUCCESS) {
		const char *info = (const char *)(r + 1), *err = info + pad8(r->info_len);
		const uint8_t *image = (const uint8_t *)err + pad8(r->error_len);

		write_back(l, r, info, err);
		res = (CUresult)r->result;
		if (res == CUDA_SUCCESS) {
			free(l->image);
			l->image = malloc(r->image_len ? r->image_len : 1);
			if (!l->image) {
				res = CUDA_ERROR_OUT_OF_MEMORY;
			} else {
				memcpy(l->image, image, r->image_len);
				*cubinOut = l->image;
				*sizeOut = r->image_len;
			}
		}
	}
	crc_call_end(&c);
	return res;
}

CUresult crc_hook_cuLinkDestroy(CUlinkState state)
{
	struct link *l = link_of(state);

	if (!l)
		return CUDA_ERROR_INVALID_VALUE;
	for (unsigned i = 0; i < l->ninputs; i++) {
		free(l->inputs[i].data);
		free(l->inputs[i].name);
	}
	free(l->image);
	l->magic = 0;
	free(l);
	return CUDA_SUCCESS;
}
