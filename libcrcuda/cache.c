/* The client's tables of what it knows about daemon objects, indexed by virtual handle: contexts
 * (device, flags), functions and kernels (parameter layout, attributes), streams (flags, priority).
 * Entries are never freed while the process runs (a destroyed object's entry is marked dead), so a
 * lookup racing a destroy reads stale data, never freed memory. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"

struct table {
	pthread_rwlock_t lock;
	void **slots;
	uint32_t cap;
};

static struct table tables[CRC_HT_COUNT] = {
#define CRC__INIT(tag, type) [CRC_HT_##tag] = {.lock = PTHREAD_RWLOCK_INITIALIZER},
    CRC_HANDLE_TYPES(CRC__INIT)
#undef CRC__INIT
};

static void *table_get(uint64_t handle, unsigned want_tag)
{
	unsigned tag = crc_vhandle_tag(handle);
	uint32_t idx = crc_vhandle_index(handle);
	struct table *t;
	void *p = NULL;

	if (tag == CRC_HT_NONE || (want_tag && tag != want_tag))
		return NULL;
	t = &tables[tag];
	pthread_rwlock_rdlock(&t->lock);
	if (idx < t->cap)
		p = t->slots[idx];
	pthread_rwlock_unlock(&t->lock);
	return p;
}

/* The entry for handle, created zeroed with `size` bytes if absent. */
static void *table_put(uint64_t handle, size_t size)
{
	unsigned tag = crc_vhandle_tag(handle);
	uint32_t idx = crc_vhandle_index(handle);
	struct table *t;
	void *p;

	if (tag == CRC_HT_NONE)
		return NULL;
	t = &tables[tag];
	pthread_rwlock_wrlock(&t->lock);
	if (idx >= t->cap) {
		uint32_t cap = t->cap ? t->cap : 64;
		void **slots;

		while (cap <= idx)
			cap *= 2;
		slots = realloc(t->slots, cap * sizeof(*slots));
		if (!slots) {
			pthread_rwlock_unlock(&t->lock);
			return NULL;
		}
		memset(slots + t->cap, 0, (cap - t->cap) * sizeof(*slots));
		t->slots = slots;
		t->cap = cap;
	}
	p = t->slots[idx];
	if (!p)
		p = t->slots[idx] = calloc(1, size);
	pthread_rwlock_unlock(&t->lock);
	return p;
}

struct crc_ctx_info *crc_ctx_info(uint64_t ctx)
{
	struct crc_ctx_info *c = table_get(ctx, CRC_HT_CTX);

	return c && c->live ? c : NULL;
}

void crc_ctx_register(uint64_t ctx, CUdevice dev, unsigned flags, bool primary)
{
	struct crc_ctx_info *c = table_put(ctx, sizeof(*c));

	if (!c)
		return;
	c->dev = dev;
	c->flags = flags;
	c->primary = primary;
	c->green = 0;
	c->live = true;
}

void crc_ctx_forget(uint64_t ctx)
{
	struct crc_ctx_info *c = table_get(ctx, CRC_HT_CTX);

	if (c && !c->primary)
		c->live = false;
}

struct crc_green_info *crc_green_info(uint64_t green)
{
	struct crc_green_info *g = table_get(green, CRC_HT_GREENCTX);

	return g && g->live ? g : NULL;
}

void crc_green_register(uint64_t green, CUdevice dev)
{
	struct crc_green_info *g = table_put(green, sizeof(*g));

	if (g)
		*g = (struct crc_green_info){.live = true, .dev = dev};
}

void crc_green_forget(uint64_t green)
{
	struct crc_green_info *g = table_get(green, CRC_HT_GREENCTX);

	if (g)
		g->live = false;
}

static const char *collective_prefixes; /* "p1,p2,...", read once */

static void read_collective_prefixes(void)
{
	const char *e = getenv("CRCUDA_COLLECTIVE_KERNELS");

	collective_prefixes = e ? strdup(e) : "ncclDevKernel_,ncclKernel_";
}

bool crc_collective_kernel(const char *name)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	const char *prefixes;

	pthread_once(&once, read_collective_prefixes);
	prefixes = collective_prefixes;
	if (!name || !prefixes || !*prefixes)
		return false;
	/* A C++ kernel's mangled name: _Z, the identifier's length, the identifier. */
	if (name[0] == '_' && name[1] == 'Z' && isdigit((unsigned char)name[2]))
		for (name += 2; isdigit((unsigned char)*name); name++)
			;
	for (const char *p = prefixes; *p;) {
		size_t n = strcspn(p, ",");

		if (n && !strncmp(name, p, n))
			return true;
		p += n + (p[n] == ',');
	}
	return false;
}

struct crc_func_info *crc_func_lookup(uint64_t handle)
{
	unsigned tag = crc_vhandle_tag(handle);

	if (tag != CRC_HT_FUNC && tag != CRC_HT_KERNEL)
		return NULL;
	return table_get(handle, tag);
}

struct crc_func_info *crc_func_store(uint64_t owner, const char *name, const struct crc_getfn_reply *r,
				     const struct crc_kparam_wire *params)
{
	struct crc_func_info *f = table_put(r->handle, sizeof(*f));
	size_t n = r->nparams == UINT32_MAX ? 0 : r->nparams;

	if (!f)
		return NULL;
	if (f->handle == r->handle) /* looked up again: same object, same answer */
		return f;
	f->params = n ? malloc(n * sizeof(*params)) : NULL;
	if (n && !f->params)
		return NULL;
	if (n)
		memcpy(f->params, params, n * sizeof(*params));
	f->nparams = r->nparams;
	f->param_bytes = r->param_bytes;
	memcpy(f->attrs, r->attrs, sizeof(f->attrs));
	f->owner = owner;
	f->name = strdup(name ? name : "");
	f->collective = crc_collective_kernel(f->name);
	__atomic_store_n(&f->handle, r->handle, __ATOMIC_RELEASE);
	return f;
}

struct crc_stream_info *crc_stream_lookup(uint64_t handle)
{
	struct crc_stream_info *s = table_get(handle, CRC_HT_STREAM);

	return s && s->handle == handle ? s : NULL;
}

void crc_stream_store(uint64_t handle, uint64_t ctx, unsigned flags, int priority)
{
	struct crc_stream_info *s = table_put(handle, sizeof(*s));

	if (!s)
		return;
	s->ctx = ctx;
	s->flags = flags;
	s->priority = priority;
	s->handle = handle;
}

void crc_stream_forget(uint64_t handle)
{
	struct crc_stream_info *s = table_get(handle, CRC_HT_STREAM);

	if (s)
		s->handle = 0;
}

struct crc_pinned *crc_pinned_find(const void *p, size_t n)
{
	uintptr_t a = (uintptr_t)p;
	struct crc_pinned *r;

	pthread_mutex_lock(&crc_client.pinned_lock);
	for (r = crc_client.pinned; r; r = r->next)
		if (a >= r->addr && a - r->addr < r->bytes && n <= r->bytes - (a - r->addr))
			break;
	pthread_mutex_unlock(&crc_client.pinned_lock);
	return r;
}
