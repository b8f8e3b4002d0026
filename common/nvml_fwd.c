/* The wire of forwarded NVML queries (crcuda/nvml_fwd.h): the client's encoder and decoder, the
 * worker's. Lengths are computed from the function's description on each side, never taken from the
 * peer, so a request or reply that disagrees is refused rather than trusted. */
#include <stdlib.h>
#include <string.h>

#include "crcuda/nvml_fwd.h"

static int is_buffer(uint8_t kind)
{
	return kind == CRC_NVML_PTR || kind == CRC_NVML_STR || kind == CRC_NVML_ARR;
}

uint64_t crc_nvml_arr_count(const struct crc_nvml_fn *f, const union crc_nvml_arg *a, unsigned i)
{
	const struct crc_nvml_param *p = &f->params[i];
	unsigned int count;

	if (!p->count_is_ptr)
		return a[p->ref].u;
	if (!a[p->ref].p)
		return 0;
	memcpy(&count, a[p->ref].p, sizeof(count));
	return count;
}

size_t crc_nvml_param_bytes(const struct crc_nvml_fn *f, const union crc_nvml_arg *a, unsigned i)
{
	const struct crc_nvml_param *p = &f->params[i];
	uint64_t n;

	switch (p->kind) {
	case CRC_NVML_PTR:
		return p->size;
	case CRC_NVML_STR:
		n = a[p->ref].u;
		return n > CRC_NVML_STR_MAX ? CRC_NVML_STR_MAX : (size_t)n;
	case CRC_NVML_ARR:
		n = crc_nvml_arr_count(f, a, i);
		if (n > CRC_NVML_BYTES_MAX / p->size)
			n = CRC_NVML_BYTES_MAX / p->size;
		return (size_t)n * p->size;
	default:
		return 0;
	}
}

struct cursor {
	uint8_t *w;
	const uint8_t *r;
	size_t left;
};

static int put(struct cursor *c, const void *src, size_t n)
{
	if (n > c->left)
		return -1;
	memcpy(c->w, src, n);
	c->w += n;
	c->left -= n;
	return 0;
}

static int take(struct cursor *c, void *dst, size_t n)
{
	if (n > c->left)
		return -1;
	if (dst)
		memcpy(dst, c->r, n);
	c->r += n;
	c->left -= n;
	return 0;
}

static int put_u32(struct cursor *c, uint32_t v)
{
	return put(c, &v, sizeof(v));
}

static int take_u32(struct cursor *c, uint32_t *v)
{
	return take(c, v, sizeof(*v));
}

size_t crc_nvml_encode_req(const struct crc_nvml_fn *f, const union crc_nvml_arg *a, uint8_t *buf, size_t cap)
{
	struct cursor c = {.w = buf, .left = cap};
	char name[CRC_NVML_NAME_MAX] = {0};
	uint32_t n = f->n;

	if (strlen(f->name) >= sizeof(name) || f->n > CRC_NVML_PARAMS_MAX)
		return 0;
	memcpy(name, f->name, strlen(f->name));
	if (put(&c, name, sizeof(name)) || put_u32(&c, n))
		return 0;
	for (unsigned i = 0; i < f->n; i++) {
		char uuid[CRC_NVML_UUID_BYTES] = {0};
		size_t len;

		switch (f->params[i].kind) {
		case CRC_NVML_DEV:
			strncpy(uuid, a[i].p ? (const char *)a[i].p : "", sizeof(uuid) - 1);
			if (put(&c, uuid, sizeof(uuid)))
				return 0;
			break;
		case CRC_NVML_VAL:
			if (put(&c, &a[i].u, sizeof(a[i].u)))
				return 0;
			break;
		default:
			if (!a[i].p) {
				if (put_u32(&c, CRC_NVML_NULL))
					return 0;
				break;
			}
			len = crc_nvml_param_bytes(f, a, i);
			if (put_u32(&c, (uint32_t)len) || put(&c, a[i].p, len))
				return 0;
		}
	}
	return cap - c.left;
}

int crc_nvml_decode_reply(const struct crc_nvml_fn *f, const union crc_nvml_arg *a, const uint8_t *buf,
			  size_t len, int32_t *ret, uint32_t *pid)
{
	struct cursor c = {.r = buf, .left = len};
	/* The lengths the request had: the reply may change a count before the array it bounds. */
	size_t want[CRC_NVML_PARAMS_MAX];

	for (unsigned i = 0; i < f->n; i++)
		want[i] = is_buffer(f->params[i].kind) && a[i].p ? crc_nvml_param_bytes(f, a, i) : 0;
	if (take(&c, ret, sizeof(*ret)) || take_u32(&c, pid))
		return -1;
	for (unsigned i = 0; i < f->n; i++) {
		uint32_t n;

		if (!is_buffer(f->params[i].kind))
			continue;
		if (take_u32(&c, &n))
			return -1;
		if (!a[i].p) {
			if (n != CRC_NVML_NULL)
				return -1;
			continue;
		}
		if (n != want[i] || take(&c, a[i].p, n))
			return -1;
	}
	return c.left < 8 ? 0 : -1; /* a transport may pad the reply to 8 bytes */
}

int crc_nvml_req_name(const uint8_t *buf, size_t len, char name[CRC_NVML_NAME_MAX])
{
	if (len < CRC_NVML_NAME_MAX || !memchr(buf, 0, CRC_NVML_NAME_MAX))
		return -1;
	memcpy(name, buf, CRC_NVML_NAME_MAX);
	return 0;
}

int crc_nvml_decode_req(const struct crc_nvml_fn *f, const uint8_t *buf, size_t len, union crc_nvml_arg *a,
			void *bufs[CRC_NVML_PARAMS_MAX], size_t lens[CRC_NVML_PARAMS_MAX])
{
	struct cursor c = {.r = buf, .left = len};
	uint32_t sent[CRC_NVML_PARAMS_MAX] = {0}, n;
	const uint8_t *data[CRC_NVML_PARAMS_MAX] = {0};

	memset(bufs, 0, CRC_NVML_PARAMS_MAX * sizeof(bufs[0]));
	memset(lens, 0, CRC_NVML_PARAMS_MAX * sizeof(lens[0]));
	if (f->n > CRC_NVML_PARAMS_MAX || take(&c, NULL, CRC_NVML_NAME_MAX) || take_u32(&c, &n) || n != f->n)
		return -1;
	/* First every value and length as sent, then the buffers, whose sizes may depend on a count that
	 * comes after them in the list (nvmlDeviceGetProcessUtilization). */
	for (unsigned i = 0; i < f->n; i++) {
		switch (f->params[i].kind) {
		case CRC_NVML_DEV:
			a[i].p = (void *)c.r;
			if (!memchr(c.r, 0, c.left < CRC_NVML_UUID_BYTES ? c.left : CRC_NVML_UUID_BYTES) ||
			    take(&c, NULL, CRC_NVML_UUID_BYTES))
				return -1;
			break;
		case CRC_NVML_VAL:
			if (take(&c, &a[i].u, sizeof(a[i].u)))
				return -1;
			break;
		case CRC_NVML_PTR:
		case CRC_NVML_STR:
		case CRC_NVML_ARR:
			if (take_u32(&c, &sent[i]))
				return -1;
			data[i] = c.r;
			if (sent[i] != CRC_NVML_NULL && take(&c, NULL, sent[i]))
				return -1;
			a[i].p = NULL;
			break;
		default:
			return -1;
		}
	}
	if (c.left)
		return -1;
	/* Counts first (a PTR another parameter counts by), so that each length can be checked. */
	for (int pass = 0; pass < 2; pass++) {
		for (unsigned i = 0; i < f->n; i++) {
			const struct crc_nvml_param *p = &f->params[i];
			size_t want;

			if (!is_buffer(p->kind) || (p->kind == CRC_NVML_ARR) != (pass == 1) ||
			    sent[i] == CRC_NVML_NULL)
				continue;
			if (p->kind == CRC_NVML_ARR && p->count_is_ptr && !a[p->ref].p)
				goto bad;
			want = crc_nvml_param_bytes(f, a, i);
			if (sent[i] != want || !(bufs[i] = calloc(1, want ? want : 1)))
				goto bad;
			memcpy(bufs[i], data[i], want);
			a[i].p = bufs[i];
			lens[i] = want;
		}
	}
	/* A clamped length clamps what the callee is told, so it writes no further than the buffer. */
	for (unsigned i = 0; i < f->n; i++) {
		const struct crc_nvml_param *p = &f->params[i];
		unsigned int count;

		if (p->kind == CRC_NVML_STR) {
			a[p->ref].u = lens[i];
		} else if (p->kind == CRC_NVML_ARR && a[i].p) {
			if (!p->count_is_ptr) {
				a[p->ref].u = lens[i] / p->size;
			} else {
				count = (unsigned int)(lens[i] / p->size);
				memcpy(a[p->ref].p, &count, sizeof(count));
			}
		}
	}
	return 0;
bad:
	for (unsigned i = 0; i < CRC_NVML_PARAMS_MAX; i++) {
		free(bufs[i]);
		bufs[i] = NULL;
	}
	return -1;
}

size_t crc_nvml_reply_bytes(const struct crc_nvml_fn *f, const union crc_nvml_arg *a, const size_t *lens)
{
	size_t n = 2 * sizeof(uint32_t);

	for (unsigned i = 0; i < f->n; i++)
		if (is_buffer(f->params[i].kind))
			n += sizeof(uint32_t) + (a[i].p ? lens[i] : 0);
	return n;
}

void crc_nvml_encode_reply(const struct crc_nvml_fn *f, const union crc_nvml_arg *a, const size_t *lens,
			   int32_t ret, uint32_t pid, uint8_t *out)
{
	struct cursor c = {.w = out, .left = crc_nvml_reply_bytes(f, a, lens)};

	put(&c, &ret, sizeof(ret));
	put_u32(&c, pid);
	for (unsigned i = 0; i < f->n; i++) {
		size_t len;

		if (!is_buffer(f->params[i].kind))
			continue;
		if (!a[i].p) {
			put_u32(&c, CRC_NVML_NULL);
			continue;
		}
		len = lens[i];
		put_u32(&c, (uint32_t)len);
		put(&c, a[i].p, len);
	}
}
