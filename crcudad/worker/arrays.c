/* CUDA arrays, texture and surface objects.
 *
 * Copies with arrays (struct crc_array_copy_req) run here as one cuMemcpy3D each. Arrays themselves are
 * journaled like any object a call names (their creates replay); their contents are not device memory
 * at an address, so a checkpoint copies each live array (and each level of each mipmapped array) into
 * a region of its own, named after its handle, which a restore uploads again.
 *
 * Texture and surface objects are values the application passes into kernels, so they cannot be
 * virtual: the session keeps what each was made from, a checkpoint describes them, and a restore makes
 * them again, in increasing order of value, until the driver hands out each value the application
 * holds (values it hands out below one are held as placeholders meanwhile, then destroyed). A driver
 * that hands out a larger value fails the restore, saying so. */
#define LOG_PREFIX "arrays: "
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker.h"
#include "crcuda/array_fmt.h"
#include "crcuda/copy2d.h"
#include "crcuda/errno.h"
#include "crcuda/log.h"

/* After cuda.h: define and call entry points by their ABI names. */
#include "crcuda/cuda_api_undef.h"

/* ---- copies ------------------------------------------------------------------------------------------ */
struct real_side {
	CUmemorytype type;
	void *host;
	CUdeviceptr dev;
	CUarray array;
	size_t x, y, z, pitch, rows;
};

static CUresult real_side(struct crc_session *s, const struct crc_call_hdr *h,
			  const struct crc_array_copy_req *r, const struct crc_array_side *sd, void *inl,
			  struct real_side *out)
{
	union crc_slot a;
	CUresult res;

	*out = (struct real_side){.pitch = sd->pitch, .rows = sd->rows};
	switch (sd->loc) {
	case CRC_LOC_ARRAY:
		res = crc_translate(s, h, CRC_HT_ARRAY, sd->addr, &a);
		if (res != CUDA_SUCCESS)
			return res;
		*out = (struct real_side){
		    .type = CU_MEMORYTYPE_ARRAY, .array = a.ptr, .x = sd->x, .y = sd->y, .z = sd->z};
		return CUDA_SUCCESS;
	case CRC_LOC_DEVICE:
		out->type = CU_MEMORYTYPE_DEVICE;
		out->dev = sd->addr;
		return CUDA_SUCCESS;
	case CRC_LOC_INLINE:
		out->type = CU_MEMORYTYPE_HOST;
		out->host = inl;
		out->pitch = r->width;
		out->rows = r->height;
		return inl ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	case CRC_LOC_PINNED:
		out->type = CU_MEMORYTYPE_HOST;
		out->host = (void *)(uintptr_t)crc_pin_local(
		    s, sd->addr, crc_copy3d_extent(r->width, r->height, r->depth, sd->pitch, sd->rows));
		return out->host ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	}
	return CUDA_ERROR_INVALID_VALUE;
}

CUresult crc_raw_array_copy(struct crc_session *s, const struct crc_call_hdr *h, const uint8_t *args,
			    size_t len)
{
	const struct crc_array_copy_req *r = (const void *)args;
	bool async = s->msg->op == CRC_CU_cuMemcpy3DAsync_v2, in, out;
	struct real_side src, dst;
	uint64_t packed;
	union crc_slot st;
	void *outbuf = NULL;
	CUresult res;

	if (len < sizeof(*r) || !r->width || !r->height || !r->depth)
		return CUDA_ERROR_INVALID_VALUE;
	in = r->src.loc == CRC_LOC_INLINE;
	out = r->dst.loc == CRC_LOC_INLINE;
	packed = r->width * r->height * r->depth;
	if ((in && len - sizeof(*r) < packed) || (in && out))
		return CUDA_ERROR_INVALID_VALUE;
	res = crc_translate(s, h, CRC_HT_STREAM, r->stream, &st);
	if (res != CUDA_SUCCESS)
		return res;
	if ((in || out) && crc_stream_capturing(st.ptr)) {
		pr_warn("a copy between pageable host memory and a CUDA array on a capturing stream is not "
			"supported under crcuda; use page-locked memory (cuMemAllocHost)");
		return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	}
	if (out && !(outbuf = crc_out(s, packed)))
		return CUDA_ERROR_OUT_OF_MEMORY;
	res = real_side(s, h, r, &r->src, in ? (void *)(uintptr_t)(r + 1) : NULL, &src);
	if (res == CUDA_SUCCESS)
		res = real_side(s, h, r, &r->dst, outbuf, &dst);
	if (res == CUDA_SUCCESS) {
		CUDA_MEMCPY3D c = {.srcXInBytes = src.x,
				   .srcY = src.y,
				   .srcZ = src.z,
				   .srcMemoryType = src.type,
				   .srcHost = src.host,
				   .srcDevice = src.dev,
				   .srcArray = src.array,
				   .srcPitch = src.pitch,
				   .srcHeight = src.rows,
				   .dstXInBytes = dst.x,
				   .dstY = dst.y,
				   .dstZ = dst.z,
				   .dstMemoryType = dst.type,
				   .dstHost = dst.host,
				   .dstDevice = dst.dev,
				   .dstArray = dst.array,
				   .dstPitch = dst.pitch,
				   .dstHeight = dst.rows,
				   .WidthInBytes = r->width,
				   .Height = r->height,
				   .Depth = r->depth};

		res = async ? CALL(cuMemcpy3DAsync_v2, &c, st.ptr) : CALL(cuMemcpy3D_v2, &c);
		/* Bytes in this record or its reply: the copy is over before either goes. */
		if (res == CUDA_SUCCESS && async && (in || out))
			res = CALL(cuStreamSynchronize, st.ptr);
	}
	if (res != CUDA_SUCCESS)
		s->out_len = 0;
	return res;
}

/* ---- sparse arrays: cuMemMapArrayAsync ------------------------------------------------------------ */
/* Each entry's array or mipmapped array and (a map's) memory handle are translated, and its device
 * mask moved to the backend's ordinals; the driver gets the list at once. The journal keeps one
 * record per entry, naming the context, the array and the memory handle it used, with the legacy
 * stream for the stream (a stream destroyed later must not drop the mapping with it): a restore
 * replays them in order, after the arrays and the memory handles exist again and before the arrays'
 * contents are uploaded (restore.c), so the upload lands in the mapped tiles. */
CUresult crc_raw_array_map(struct crc_session *s, const struct crc_call_hdr *h, const uint8_t *args,
			   size_t len)
{
	const struct crc_array_map_req *r = (const void *)args;
	uint64_t(*refs)[2] = NULL;
	CUarrayMapInfo *list = NULL;
	union crc_slot st;
	unsigned njrefs = s->njrefs;
	CUresult res;

	if (len < sizeof(*r) || (len - sizeof(*r)) / sizeof(CUarrayMapInfo) < r->count)
		return CUDA_ERROR_INVALID_VALUE;
	/* The stream is no reference of the journal's records. */
	res = crc_translate(s, h, CRC_HT_STREAM, r->stream, &st);
	s->njrefs = njrefs;
	if (res != CUDA_SUCCESS)
		return res;
	if (r->count) {
		list = malloc(r->count * sizeof(*list));
		refs = calloc(r->count, sizeof(*refs));
		if (!list || !refs) {
			res = CUDA_ERROR_OUT_OF_MEMORY;
			goto out;
		}
		memcpy(list, r + 1, r->count * sizeof(*list));
	}
	for (unsigned i = 0; i < r->count && res == CUDA_SUCCESS; i++) {
		CUarrayMapInfo *e = &list[i];
		bool mipmap = e->resourceType == CU_RESOURCE_TYPE_MIPMAPPED_ARRAY;
		uint64_t v = mipmap ? (uintptr_t)e->resource.mipmap : (uintptr_t)e->resource.array;
		unsigned mask = 0;
		union crc_slot real;

		if (e->resourceType != CU_RESOURCE_TYPE_ARRAY && !mipmap) {
			res = CUDA_ERROR_INVALID_VALUE;
			break;
		}
		res = crc_translate(s, h, mipmap ? CRC_HT_MIPMAP : CRC_HT_ARRAY, v, &real);
		if (res != CUDA_SUCCESS)
			break;
		refs[i][0] = v;
		if (mipmap)
			e->resource.mipmap = real.ptr;
		else
			e->resource.array = real.ptr;
		/* An unmap's handle must be 0: the driver sees what the application gave. */
		if (e->memOperationType == CU_MEM_OPERATION_TYPE_MAP && e->memHandle.memHandle) {
			res = crc_translate(s, h, CRC_HT_MEMHANDLE, e->memHandle.memHandle, &real);
			if (res != CUDA_SUCCESS)
				break;
			refs[i][1] = e->memHandle.memHandle;
			e->memHandle.memHandle = (CUmemGenericAllocationHandle)real.u64;
		}
		for (int d = 0; d < 32; d++)
			if (e->deviceBitMask & (1u << d)) {
				int b = crc_dev_backend(s, d);

				mask |= b >= 0 && b < 32 ? 1u << b : 0;
			}
		e->deviceBitMask = mask;
	}
	s->njrefs = njrefs;
	if (res == CUDA_SUCCESS)
		res = CALL(cuMemMapArrayAsync, list, r->count, st.ptr);
	if (res != CUDA_SUCCESS)
		goto out;
	/* One record per entry, as the application gave it. */
	for (unsigned i = 0; i < r->count; i++) {
		struct crc_array_map_req *one = malloc(sizeof(*one) + sizeof(CUarrayMapInfo));

		if (!one) {
			pr_err("session %llu: out of memory journaling cuMemMapArrayAsync: checkpoints of "
			       "this session will fail",
			       (unsigned long long)s->id);
			s->force_mismatch = true;
			break;
		}
		*one = (struct crc_array_map_req){.stream = (uintptr_t)CU_STREAM_LEGACY, .count = 1};
		memcpy(one + 1, (const CUarrayMapInfo *)(r + 1) + i, sizeof(CUarrayMapInfo));
		s->jcapture = true;
		s->njnew = 0;
		s->njrefs = 0;
		s->jrefs[s->njrefs++] = refs[i][0];
		if (refs[i][1])
			s->jrefs[s->njrefs++] = refs[i][1];
		crc_journal_args(s, one, sizeof(*one) + sizeof(CUarrayMapInfo));
		crc_journal_end(s, s->msg->op, h, NULL, 0);
	}
	/* The call's own record: already written, entry by entry. */
	s->jdrop = true;
out:
	free(list);
	free(refs);
	return res;
}

/* ---- texture and surface objects ------------------------------------------------------------------ */
struct crc_texobj {
	unsigned long long value;
	bool surface, has_view;
	CUDA_RESOURCE_DESC res; /* as the application gave it: array handles virtual */
	CUDA_TEXTURE_DESC tex;
	CUDA_RESOURCE_VIEW_DESC view;
	struct crc_texobj *next;
};

static CUresult object_make(struct crc_session *s, const struct crc_call_hdr *h, const struct crc_texobj *o,
			    unsigned long long *value)
{
	CUDA_RESOURCE_DESC real = o->res;
	union crc_slot a;
	CUresult res = CUDA_SUCCESS;

	if (o->res.resType == CU_RESOURCE_TYPE_ARRAY) {
		res = crc_translate(s, h, CRC_HT_ARRAY, (uintptr_t)o->res.res.array.hArray, &a);
		real.res.array.hArray = a.ptr;
	} else if (o->res.resType == CU_RESOURCE_TYPE_MIPMAPPED_ARRAY) {
		res = crc_translate(s, h, CRC_HT_MIPMAP, (uintptr_t)o->res.res.mipmap.hMipmappedArray, &a);
		real.res.mipmap.hMipmappedArray = a.ptr;
	}
	if (res != CUDA_SUCCESS)
		return res;
	return o->surface ? CALL(cuSurfObjectCreate, value, &real)
			  : CALL(cuTexObjectCreate, value, &real, &o->tex, o->has_view ? &o->view : NULL);
}

static struct crc_texobj **object_find(struct crc_session *s, unsigned long long value, bool surface)
{
	for (struct crc_texobj **p = &s->texobjs; *p; p = &(*p)->next)
		if ((*p)->value == value && (*p)->surface == surface)
			return p;
	return NULL;
}

CUresult crc_raw_texobj(struct crc_session *s, const struct crc_call_hdr *h, const uint8_t *args, size_t len)
{
	const struct crc_texobj_req *r = (const void *)args;
	int op = s->msg->op;
	bool surface = op == CRC_CU_cuSurfObjectCreate || op == CRC_CU_cuSurfObjectDestroy ||
		       op == CRC_CU_cuSurfObjectGetResourceDesc;
	struct crc_texobj *o, **p;
	CUresult res;

	if (len < sizeof(*r))
		return CUDA_ERROR_INVALID_VALUE;
	switch (op) {
	case CRC_CU_cuTexObjectCreate:
	case CRC_CU_cuSurfObjectCreate: {
		unsigned long long *out;

		o = calloc(1, sizeof(*o));
		if (!o)
			return CUDA_ERROR_OUT_OF_MEMORY;
		o->surface = surface;
		o->has_view = r->has_view;
		memcpy(&o->res, r->res, sizeof(o->res));
		memcpy(&o->tex, r->tex, sizeof(o->tex));
		memcpy(&o->view, r->view, sizeof(o->view));
		res = object_make(s, h, o, &o->value);
		if (res == CUDA_SUCCESS && !(out = crc_out(s, sizeof(*out))))
			res = CUDA_ERROR_OUT_OF_MEMORY;
		if (res != CUDA_SUCCESS) {
			free(o);
			return res;
		}
		*out = o->value;
		o->next = s->texobjs;
		s->texobjs = o;
		return CUDA_SUCCESS;
	}
	case CRC_CU_cuTexObjectDestroy:
	case CRC_CU_cuSurfObjectDestroy:
		res = surface ? CALL(cuSurfObjectDestroy, r->value) : CALL(cuTexObjectDestroy, r->value);
		if (res == CUDA_SUCCESS && (p = object_find(s, r->value, surface))) {
			o = *p;
			*p = o->next;
			free(o);
		}
		return res;
	default: {
		CUDA_RESOURCE_DESC *out;

		p = object_find(s, r->value, surface);
		if (!p)
			return CUDA_ERROR_INVALID_VALUE;
		out = crc_out(s, sizeof(*out));
		if (!out)
			return CUDA_ERROR_OUT_OF_MEMORY;
		*out = (*p)->res;
		return CUDA_SUCCESS;
	}
	}
}

void crc_texobjs_free(struct crc_session *s)
{
	while (s->texobjs) {
		struct crc_texobj *o = s->texobjs;

		s->texobjs = o->next;
		free(o);
	}
}

static void hex_put(char **w, const void *p, size_t n)
{
	static const char digits[] = "0123456789abcdef";
	const uint8_t *b = p;

	for (size_t i = 0; i < n; i++) {
		*(*w)++ = digits[b[i] >> 4];
		*(*w)++ = digits[b[i] & 15];
	}
}

static int hex_get(const char **r, void *p, size_t n)
{
	uint8_t *b = p;

	for (size_t i = 0; i < n; i++) {
		unsigned v = 0;

		for (int k = 0; k < 2; k++) {
			char c = *(*r)++;

			if (c >= '0' && c <= '9')
				v = v << 4 | (unsigned)(c - '0');
			else if (c >= 'a' && c <= 'f')
				v = v << 4 | (unsigned)(c - 'a' + 10);
			else
				return -1;
		}
		b[i] = (uint8_t)v;
	}
	return 0;
}

/* One line an object: "T|S VALUE VIEW RES TEX VIEWDESC" (the descriptions in hex). */
char *crc_texobjs_describe(struct crc_session *s)
{
	size_t n = 0, line = 48 + 2 * (sizeof(CUDA_RESOURCE_DESC) + sizeof(CUDA_TEXTURE_DESC) +
				       sizeof(CUDA_RESOURCE_VIEW_DESC));
	char *out, *w;

	for (struct crc_texobj *o = s->texobjs; o; o = o->next)
		n++;
	out = w = malloc(n * line + 1);
	if (!out)
		return NULL;
	for (struct crc_texobj *o = s->texobjs; o; o = o->next) {
		w += sprintf(w, "%c %llx %d ", o->surface ? 'S' : 'T', o->value, o->has_view);
		hex_put(&w, &o->res, sizeof(o->res));
		*w++ = ' ';
		hex_put(&w, &o->tex, sizeof(o->tex));
		*w++ = ' ';
		hex_put(&w, &o->view, sizeof(o->view));
		*w++ = '\n';
	}
	*w = 0;
	return out;
}

static int by_value(const void *a, const void *b)
{
	const struct crc_texobj *x = *(struct crc_texobj *const *)a, *y = *(struct crc_texobj *const *)b;

	return x->value < y->value ? -1 : x->value > y->value;
}

#define PLACEHOLDERS_MAX 65536

int crc_texobjs_restore(struct crc_session *s, const char *desc, char *why, size_t why_len)
{
	struct crc_call_hdr h = {.ctx = 0};
	struct crc_texobj **v = NULL, *list = NULL;
	struct {
		unsigned long long value;
		bool surface;
	} *held = NULL;
	size_t n = 0, nheld = 0;
	int rc = 0;

	if (!desc || !*desc)
		return 0;
	for (const char *r = desc; *r && !rc;) {
		struct crc_texobj *o = calloc(1, sizeof(*o));
		int has_view = 0, used = 0;
		char kind = 0;

		if (!o)
			return CRC_ENOMEM;
		if (sscanf(r, "%c %llx %d %n", &kind, &o->value, &has_view, &used) < 3 || !used ||
		    (kind != 'T' && kind != 'S') || hex_get((r += used, &r), &o->res, sizeof(o->res)) ||
		    *r++ != ' ' || hex_get(&r, &o->tex, sizeof(o->tex)) || *r++ != ' ' ||
		    hex_get(&r, &o->view, sizeof(o->view)) || *r++ != '\n') {
			free(o);
			snprintf(why, why_len, "the checkpoint's texture objects are unreadable");
			rc = CRC_ECORRUPT;
			break;
		}
		o->surface = kind == 'S';
		o->has_view = has_view;
		o->next = list;
		list = o;
		n++;
	}
	v = calloc(n ? n : 1, sizeof(*v));
	held = calloc(PLACEHOLDERS_MAX, sizeof(*held));
	if (!rc && (!v || !held))
		rc = CRC_ENOMEM;
	n = 0;
	for (struct crc_texobj *o = list; o; o = o->next)
		v[n++] = o;
	if (!rc)
		qsort(v, n, sizeof(*v), by_value);
	CALL(cuCtxSetCurrent, crc_session_ctx(s));
	s->cur_ctx = UINT64_MAX;
	for (size_t i = 0; i < n && !rc; i++) {
		unsigned long long got = 0;
		CUresult res;

		while ((res = object_make(s, &h, v[i], &got)) == CUDA_SUCCESS && got < v[i]->value &&
		       nheld < PLACEHOLDERS_MAX) {
			held[nheld].value = got;
			held[nheld++].surface = v[i]->surface;
		}
		if (res != CUDA_SUCCESS || got != v[i]->value) {
			snprintf(why, why_len,
				 "%s object %#llx cannot be made again with its value (%s %#llx)",
				 v[i]->surface ? "surface" : "texture", v[i]->value,
				 res != CUDA_SUCCESS ? "CUDA error" : "the driver gave",
				 res != CUDA_SUCCESS ? (unsigned long long)res : got);
			if (res == CUDA_SUCCESS)
				v[i]->surface ? CALL(cuSurfObjectDestroy, got)
					      : CALL(cuTexObjectDestroy, got);
			rc = CRC_ENOTSUP;
		}
	}
	for (size_t i = 0; i < nheld; i++)
		held[i].surface ? CALL(cuSurfObjectDestroy, held[i].value)
				: CALL(cuTexObjectDestroy, held[i].value);
	if (n)
		pr_info("session %llu: %zu texture and surface objects made again (%zu placeholders)%s",
			(unsigned long long)s->id, n, nheld, rc ? ", failed" : "");
	/* The session keeps them all (a failed restore destroys the session and them with it). */
	while (list) {
		struct crc_texobj *o = list;

		list = o->next;
		o->next = s->texobjs;
		s->texobjs = o;
	}
	free(v);
	free(held);
	return rc;
}

/* ---- contents at a checkpoint, and back ---------------------------------------------------------- */
static int array_box(CUarray a, struct crc_array_box *b, size_t *bytes, char *why, size_t why_len,
		     const char *name)
{
	CUDA_ARRAY3D_DESCRIPTOR d;
	CUresult res = CALL(cuArray3DGetDescriptor_v2, &d, a);

	if (res != CUDA_SUCCESS) {
		snprintf(why, why_len, "%s: its description: CUDA error %d", name, res);
		return CRC_ECUDA;
	}
	/* A sparse array reads zeros where no tile is mapped, and drops writes there: the whole array
	 * goes and comes back as any other, once the journal has mapped its tiles again. */
	if (crc_array_box_of(&d, b) || (d.Flags & CUDA_ARRAY3D_DEFERRED_MAPPING)) {
		snprintf(why, why_len,
			 "%s: a CUDA array of format %#x (flags %#x) cannot be checkpointed yet (block-"
			 "compressed, planar and deferred-mapping arrays)",
			 name, (unsigned)d.Format, d.Flags);
		return CRC_ENOTSUP;
	}
	*bytes = b->row_bytes * b->rows * b->slices;
	return 0;
}

static CUresult array_host_copy(CUarray a, const struct crc_array_box *b, void *host, bool to_array)
{
	CUDA_MEMCPY3D c = {.WidthInBytes = b->row_bytes, .Height = b->rows, .Depth = b->slices};

	if (to_array) {
		c.srcMemoryType = CU_MEMORYTYPE_HOST;
		c.srcHost = host;
		c.srcPitch = b->row_bytes;
		c.srcHeight = b->rows;
		c.dstMemoryType = CU_MEMORYTYPE_ARRAY;
		c.dstArray = a;
	} else {
		c.srcMemoryType = CU_MEMORYTYPE_ARRAY;
		c.srcArray = a;
		c.dstMemoryType = CU_MEMORYTYPE_HOST;
		c.dstHost = host;
		c.dstPitch = b->row_bytes;
		c.dstHeight = b->rows;
	}
	return CALL(cuMemcpy3D_v2, &c);
}

#define ARRAY_CHUNK (64u << 20)

static int save_array(struct crc_ckpt *ck, CUarray a, const char *name, char *why, size_t why_len)
{
	struct crc_array_box b;
	size_t bytes;
	uint8_t *buf;
	uint32_t ri;
	CUresult res;
	int rc = array_box(a, &b, &bytes, why, why_len, name);

	if (rc)
		return rc;
	buf = malloc(bytes);
	if (!buf)
		return CRC_ENOMEM;
	res = array_host_copy(a, &b, buf, false);
	if (res != CUDA_SUCCESS) {
		snprintf(why, why_len, "%s: copying its contents: CUDA error %d", name, res);
		free(buf);
		return CRC_ECUDA;
	}
	struct crc_region_desc d = {.kind = CRC_REGION_OTHER, .size = bytes, .name = name};

	rc = crc_ckpt_region_add(ck, &d, &ri);
	for (size_t off = 0; !rc && off < bytes; off += ARRAY_CHUNK)
		rc = crc_ckpt_put_chunk(ck, ri, buf + off,
					bytes - off < ARRAY_CHUNK ? bytes - off : ARRAY_CHUNK, NULL);
	free(buf);
	if (rc)
		snprintf(why, why_len, "%s: writing its contents: %s", name, crc_strerror(rc));
	return rc;
}

#define LEVELS_MAX 32

int crc_arrays_ckpt(struct crc_session *s, struct crc_ckpt *ck, char *why, size_t why_len)
{
	struct crc_htable *ta = &s->tables[CRC_HT_ARRAY], *tm = &s->tables[CRC_HT_MIPMAP];
	CUarray *levels = NULL;
	size_t nlevels = 0;
	char name[64];
	int rc = 0;

	if (!ta->n && !tm->n)
		return 0;
	CALL(cuCtxSetCurrent, crc_session_ctx(s));
	s->cur_ctx = UINT64_MAX;
	/* Each level of each mipmapped array; the level arrays the application holds are among them. */
	for (uint32_t i = 1; i <= tm->n && !rc; i++) {
		for (unsigned l = 0; tm->real[i].ptr && l < LEVELS_MAX && !rc; l++) {
			CUarray a;
			CUarray *p;

			if (CALL(cuMipmappedArrayGetLevel, &a, tm->real[i].ptr, l) != CUDA_SUCCESS)
				break;
			p = realloc(levels, (nlevels + 1) * sizeof(*p));
			if (!p) {
				rc = CRC_ENOMEM;
				break;
			}
			levels = p;
			levels[nlevels++] = a;
			snprintf(name, sizeof(name), "mipmap@%#" PRIx64 ".%u", crc_vhandle(CRC_HT_MIPMAP, i),
				 l);
			rc = save_array(ck, a, name, why, why_len);
		}
	}
	for (uint32_t i = 1; i <= ta->n && !rc; i++) {
		bool level = false;

		for (size_t k = 0; k < nlevels && !level; k++)
			level = levels[k] == ta->real[i].ptr;
		if (!ta->real[i].ptr || level)
			continue;
		snprintf(name, sizeof(name), "array@%#" PRIx64, crc_vhandle(CRC_HT_ARRAY, i));
		rc = save_array(ck, ta->real[i].ptr, name, why, why_len);
	}
	free(levels);
	return rc;
}

/* The array a region names, in this session: NULL if none. */
static CUarray region_array(struct crc_session *s, const char *name)
{
	unsigned long long vh;
	unsigned level;
	union crc_slot slot;
	struct crc_call_hdr h = {.ctx = 0};
	CUarray a = NULL;

	if (sscanf(name, "array@%llx", &vh) == 1)
		return crc_translate(s, &h, CRC_HT_ARRAY, vh, &slot) == CUDA_SUCCESS ? slot.ptr : NULL;
	if (sscanf(name, "mipmap@%llx.%u", &vh, &level) == 2 &&
	    crc_translate(s, &h, CRC_HT_MIPMAP, vh, &slot) == CUDA_SUCCESS &&
	    CALL(cuMipmappedArrayGetLevel, &a, slot.ptr, level) == CUDA_SUCCESS)
		return a;
	return NULL;
}

int crc_arrays_restore(struct crc_session *s, struct crc_store *st, const struct crc_manifest *mf, char *why,
		       size_t why_len)
{
	int rc = 0;

	CALL(cuCtxSetCurrent, crc_session_ctx(s));
	s->cur_ctx = UINT64_MAX;
	for (uint32_t i = 0; i < mf->nregions && !rc; i++) {
		const struct crc_region *rg = &mf->regions[i];
		struct crc_array_box b;
		size_t bytes = 0, off = 0;
		uint8_t *buf;
		CUarray a;
		CUresult res;

		if (rg->kind != CRC_REGION_OTHER || !rg->name ||
		    (strncmp(rg->name, "array@", 6) && strncmp(rg->name, "mipmap@", 7)))
			continue;
		a = region_array(s, rg->name);
		if (!a) {
			snprintf(why, why_len, "%s: no such array after the replay", rg->name);
			return CRC_ECORRUPT;
		}
		rc = array_box(a, &b, &bytes, why, why_len, rg->name);
		if (rc)
			return rc;
		if (bytes != rg->size) {
			snprintf(why, why_len, "%s: %zu bytes now, %" PRIu64 " in the checkpoint", rg->name,
				 bytes, rg->size);
			return CRC_ECORRUPT;
		}
		buf = malloc(bytes);
		if (!buf)
			return CRC_ENOMEM;
		for (uint32_t c = 0; c < rg->nchunks && !rc; c++) {
			size_t got = 0;

			rc =
			    off + rg->chunks[c].length > bytes
				? CRC_ECORRUPT
				: crc_store_chunk_read(st, &rg->chunks[c].hash, buf + off, bytes - off, &got);
			off += got;
		}
		if (!rc && off != bytes)
			rc = CRC_ETRUNC;
		if (rc) {
			snprintf(why, why_len, "%s: reading its contents: %s", rg->name, crc_strerror(rc));
		} else if ((res = array_host_copy(a, &b, buf, true)) != CUDA_SUCCESS) {
			snprintf(why, why_len, "%s: uploading its contents: CUDA error %d", rg->name, res);
			rc = CRC_ECUDA;
		}
		free(buf);
		if (!rc)
			pr_info("session %llu: %s: %zu bytes uploaded", (unsigned long long)s->id, rg->name,
				bytes);
	}
	return rc;
}
