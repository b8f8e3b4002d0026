/* __managed__ variables of modules and libraries. The driver makes them managed memory of the daemon's
 * process when it loads the module, where this process cannot reach them; the program reads and
 * writes them through the address the driver gave (cudart stores it for the variable's host code). So
 * this process keeps a copy of each at that address (a private mapping CRIU carries like any other)
 * and keeps the two in step around the GPU's work, page protections telling who has the latest bytes:
 *
 *   CLEAN  read-only here: both copies equal.          A write makes it DIRTY, GPU work STALE.
 *   DIRTY  writable here: this copy is newer.           GPU work pushes it first, then it is STALE.
 *   STALE  inaccessible here: the GPU may have written. A touch waits for the session's work, pulls
 *                                                       the bytes and goes on CLEAN (a read) or DIRTY.
 *
 * GPU work is any call that runs on a stream (launches, copies, memsets, stream memory operations);
 * copies that name a variable go to the daemon's copy (crc_locate says device). A checkpoint carries
 * the daemon's copy (crcudad/worker/ckpt.c) and this process carries this one with its state, so a
 * DIRTY copy is pushed after the restore and a STALE one pulled. The daemon may put the variable at
 * another address after a restore (or this address may be taken here): the program keeps its address
 * and the bytes move between the two; a kernel argument that holds the address then names nothing. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include "client.h"
#include "crcuda/log.h"

enum mvar_state { MV_CLEAN, MV_DIRTY, MV_STALE };

struct mregion {
	uintptr_t base;
	size_t len;
	enum mvar_state state;
};

struct mvar {
	uint64_t owner; /* the CUmodule or CUlibrary handle the program named */
	bool library;
	char *name;
	uintptr_t addr; /* here */
	uint64_t dev;	/* in the daemon, as of generation dev_gen */
	uint64_t dev_gen;
	size_t bytes;
	size_t region;
};

static pthread_mutex_t mv_lock = PTHREAD_MUTEX_INITIALIZER;
static struct mvar *vars;
static size_t nvars;
static struct mregion *regions;
static size_t nregions;
/* Regions not STALE: GPU work has something to do only while there are some. */
static atomic_size_t unsettled;
static atomic_bool any_region;
static __thread bool in_mvar; /* this thread's own pushes and pulls are no GPU work to react to */

static size_t page_size(void)
{
	static size_t ps;

	if (!ps)
		ps = (size_t)sysconf(_SC_PAGESIZE);
	return ps;
}

static void set_state(struct mregion *r, enum mvar_state st)
{
	static const int prot[] = {
	    [MV_CLEAN] = PROT_READ, [MV_DIRTY] = PROT_READ | PROT_WRITE, [MV_STALE] = PROT_NONE};

	if ((r->state == MV_STALE) != (st == MV_STALE)) {
		if (st == MV_STALE)
			atomic_fetch_sub(&unsettled, 1);
		else
			atomic_fetch_add(&unsettled, 1);
	}
	r->state = st;
	mprotect((void *)r->base, r->len, prot[st]);
}

/* The variable's address in the daemon's current session (a restore may have moved it). */
static CUresult mvar_dev(struct mvar *v, uint64_t *dev)
{
	uint64_t gen = crc_restore_generation();
	CUdeviceptr d = 0;
	size_t bytes = 0;
	CUresult res;

	if (v->dev_gen == gen) {
		*dev = v->dev;
		return CUDA_SUCCESS;
	}
	res = v->library ? crc_fwd_cuLibraryGetManaged(&d, &bytes, (CUlibrary)(uintptr_t)v->owner, v->name)
			 : crc_fwd_cuModuleGetGlobal_v2(&d, &bytes, (CUmodule)(uintptr_t)v->owner, v->name);
	if (res != CUDA_SUCCESS)
		return res;
	if (bytes != v->bytes)
		return CUDA_ERROR_NOT_FOUND;
	v->dev = d;
	v->dev_gen = gen;
	*dev = d;
	return CUDA_SUCCESS;
}

/* One variable between the two copies, in pieces the channel takes (mv_lock held; the pages here
 * writable for a pull). drain: the session's work ends first. */
static CUresult var_copy(struct mvar *v, bool push, bool drain)
{
	size_t max = crc_chan_max_payload(&crc_client.chan) - sizeof(struct crc_call_hdr) -
		     sizeof(struct crc_mvar_req) - 64;
	CUresult res = CUDA_SUCCESS;

	for (size_t off = 0; off < v->bytes && res == CUDA_SUCCESS;) {
		size_t n = v->bytes - off < max ? v->bytes - off : max;
		struct crc_mvar_req *r;
		struct crc_call c;
		uint64_t dev;

		res = mvar_dev(v, &dev);
		if (res == CUDA_SUCCESS)
			res = crc_ctl_begin(&c, push ? CRC_OP_MVAR_PUSH : CRC_OP_MVAR_PULL, 0,
					    sizeof(*r) + (push ? n : 0), (void **)&r);
		if (res != CUDA_SUCCESS)
			break;
		/* A restore bound while this call waited to go: the variable may be elsewhere now. */
		if (v->dev_gen != crc_restore_generation()) {
			crc_call_end(&c);
			continue;
		}
		*r = (struct crc_mvar_req){.addr = dev + off, .bytes = n, .drain = drain};
		drain = false;
		if (push)
			memcpy(r + 1, (const uint8_t *)v->addr + off, n);
		res = crc_call_wait(&c, NULL, NULL);
		if (res == CUDA_SUCCESS && !push) {
			if (c.reply_len < n)
				res = CUDA_ERROR_UNKNOWN;
			else
				memcpy((uint8_t *)v->addr + off, c.reply, n);
		}
		crc_call_end(&c);
		off += n;
	}
	return res;
}

/* Every variable of region ri (mv_lock held). */
static CUresult region_copy(size_t ri, bool push, bool drain)
{
	CUresult res = CUDA_SUCCESS;

	for (size_t i = 0; i < nvars && res == CUDA_SUCCESS; i++) {
		if (vars[i].region != ri)
			continue;
		res = var_copy(&vars[i], push, drain);
		drain = false;
	}
	return res;
}

/* GPU work is about to be sent: newer bytes here go first, and every copy here is stale after it. */
void crc_mvar_before_work(void)
{
	if (in_mvar || !atomic_load_explicit(&unsettled, memory_order_acquire))
		return;
	in_mvar = true;
	pthread_mutex_lock(&mv_lock);
	for (size_t i = 0; i < nregions; i++) {
		struct mregion *r = &regions[i];
		CUresult res;

		if (r->state == MV_STALE)
			continue;
		if (r->state == MV_DIRTY) {
			/* Read-only while it goes: a write meanwhile waits in the fault for the lock. */
			mprotect((void *)r->base, r->len, PROT_READ);
			res = region_copy(i, true, false);
			if (res != CUDA_SUCCESS)
				pr_err("__managed__ variables at %#lx: cannot copy them to the GPU: CUDA "
				       "error %d",
				       (unsigned long)r->base, (int)res);
		}
		set_state(r, MV_STALE);
	}
	pthread_mutex_unlock(&mv_lock);
	in_mvar = false;
}

static bool is_write_fault(const void *uc)
{
#if defined(__x86_64__)
	return ((const ucontext_t *)uc)->uc_mcontext.gregs[REG_ERR] & 2;
#else
	(void)uc;
	return true; /* unknown: taken as a write, which costs a push at the next GPU work */
#endif
}

bool crc_mvar_fault(const void *addr, const void *uc)
{
	uintptr_t a = (uintptr_t)addr;
	bool handled = false;
	int saved_errno = errno;

	if (!atomic_load(&any_region) || in_mvar)
		return false;
	in_mvar = true;
	pthread_mutex_lock(&mv_lock);
	for (size_t i = 0; i < nregions; i++) {
		struct mregion *r = &regions[i];
		CUresult res = CUDA_SUCCESS;

		if (a < r->base || a >= r->base + r->len)
			continue;
		handled = true;
		if (r->state == MV_STALE) {
			mprotect((void *)r->base, r->len, PROT_READ | PROT_WRITE);
			/* A host function's thread pulls at once: its stream's work waits for it. */
			res = region_copy(i, false, !crc_on_hostfn_thread());
			if (res != CUDA_SUCCESS) {
				pr_err("__managed__ variables at %#lx: cannot copy them from the GPU: CUDA "
				       "error %d",
				       (unsigned long)r->base, (int)res);
				handled = false;
			}
		}
		if (handled)
			set_state(r, r->state == MV_STALE && !is_write_fault(uc) ? MV_CLEAN : MV_DIRTY);
		break;
	}
	pthread_mutex_unlock(&mv_lock);
	in_mvar = false;
	errno = saved_errno;
	return handled;
}

bool crc_mvar_contains(uint64_t addr, size_t bytes)
{
	bool in = false;

	if (!atomic_load(&any_region))
		return false;
	pthread_mutex_lock(&mv_lock);
	for (size_t i = 0; i < nvars && !in; i++)
		in = addr >= vars[i].addr && addr - vars[i].addr < vars[i].bytes &&
		     bytes <= vars[i].bytes - (addr - vars[i].addr);
	pthread_mutex_unlock(&mv_lock);
	return in;
}

uint64_t crc_mvar_device_addr(uint64_t addr)
{
	uint64_t out = addr;

	if (!atomic_load(&any_region))
		return addr;
	pthread_mutex_lock(&mv_lock);
	for (size_t i = 0; i < nvars; i++) {
		struct mvar *v = &vars[i];
		uint64_t dev;

		if (addr >= v->addr && addr - v->addr < v->bytes) {
			if (mvar_dev(v, &dev) == CUDA_SUCCESS)
				out = dev + (addr - v->addr);
			break;
		}
	}
	pthread_mutex_unlock(&mv_lock);
	return out;
}

/* Pages [base, base + len) for a copy: at that address where it is free here, else anywhere. */
static void *map_pages(uintptr_t base, size_t len, bool *fixed)
{
	void *p = mmap((void *)base, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);

	*fixed = p == (void *)base;
	if (p != MAP_FAILED && !*fixed) {
		munmap(p, len); /* an old kernel took the address as a hint */
		p = MAP_FAILED;
	}
	if (p == MAP_FAILED)
		p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	return p;
}

/* The region holding page-aligned [base, base + len) at the same address here, or a new one. */
static CUresult region_for(uintptr_t base, size_t len, size_t *ri, uintptr_t *here, bool *created)
{
	struct mregion *nr;
	bool fixed;
	void *p;

	for (size_t i = 0; i < nregions; i++) {
		struct mregion *r = &regions[i];

		if (base >= r->base && base + len <= r->base + r->len) {
			*ri = i;
			*here = base;
			*created = false;
			return CUDA_SUCCESS;
		}
	}
	/* Partly in a region (a variable sharing a page with an earlier one): its own pages here, at
	 * other addresses, rather than a region that changes shape. */
	p = map_pages(base, len, &fixed);
	for (size_t i = 0; fixed && i < nregions; i++)
		if (base < regions[i].base + regions[i].len && regions[i].base < base + len)
			fixed = false; /* cannot happen: MAP_FIXED_NOREPLACE saw it mapped */
	if (p == MAP_FAILED)
		return CUDA_ERROR_OUT_OF_MEMORY;
	nr = realloc(regions, (nregions + 1) * sizeof(*regions));
	if (!nr) {
		munmap(p, len);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	regions = nr;
	regions[nregions] = (struct mregion){.base = (uintptr_t)p, .len = len, .state = MV_DIRTY};
	atomic_fetch_add(&unsettled, 1);
	atomic_store(&any_region, true);
	*ri = nregions++;
	*here = (uintptr_t)p;
	*created = true;
	if (!fixed)
		pr_warn("__managed__ variable memory at %#lx is taken in this process: the program gets "
			"%p instead (a kernel given that pointer would not reach the variable)",
			(unsigned long)base, p);
	return CUDA_SUCCESS;
}

CUresult crc_mvar_found(uint64_t owner, bool library, const char *name, uint64_t dev, size_t bytes,
			CUdeviceptr *addr_out)
{
	size_t ps = page_size(), ri;
	uintptr_t base = dev & ~(uintptr_t)(ps - 1), here;
	size_t len = (dev + bytes + ps - 1) / ps * ps - base;
	struct mvar *nv, *v;
	bool created;
	CUresult res;

	if (!bytes)
		return CUDA_ERROR_INVALID_VALUE;
	crc_managed_fault_install();
	pthread_mutex_lock(&mv_lock);
	for (size_t i = 0; i < nvars; i++) {
		if (vars[i].owner == owner && vars[i].library == library && !strcmp(vars[i].name, name)) {
			*addr_out = vars[i].addr;
			pthread_mutex_unlock(&mv_lock);
			return CUDA_SUCCESS;
		}
	}
	nv = realloc(vars, (nvars + 1) * sizeof(*vars));
	if (!nv) {
		pthread_mutex_unlock(&mv_lock);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	vars = nv;
	res = region_for(base, len, &ri, &here, &created);
	if (res != CUDA_SUCCESS) {
		pthread_mutex_unlock(&mv_lock);
		return res;
	}
	v = &vars[nvars];
	*v = (struct mvar){.owner = owner,
			   .library = library,
			   .name = strdup(name),
			   .addr = here + (dev - base),
			   .dev = dev,
			   .dev_gen = crc_restore_generation(),
			   .bytes = bytes,
			   .region = ri};
	if (!v->name) {
		pthread_mutex_unlock(&mv_lock);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	nvars++;
	/* Its first bytes: the module's initial value, or what kernels wrote since. A new region is then
	 * CLEAN; an old one keeps its state (a STALE one pulls this variable with the others). */
	in_mvar = true;
	if (regions[ri].state != MV_STALE) {
		enum mvar_state st = regions[ri].state;

		mprotect((void *)regions[ri].base, regions[ri].len, PROT_READ | PROT_WRITE);
		res = var_copy(v, false, !crc_on_hostfn_thread());
		set_state(&regions[ri], created ? MV_CLEAN : st);
	}
	in_mvar = false;
	*addr_out = v->addr;
	pthread_mutex_unlock(&mv_lock);
	return res;
}

/* A module or library unloaded: its variables go (their pages stay: the program may still hold them). */
void crc_mvar_unloaded(uint64_t owner, bool library)
{
	pthread_mutex_lock(&mv_lock);
	for (size_t i = 0; i < nvars;) {
		if (vars[i].owner != owner || vars[i].library != library) {
			i++;
			continue;
		}
		free(vars[i].name);
		vars[i] = vars[--nvars];
	}
	pthread_mutex_unlock(&mv_lock);
}
