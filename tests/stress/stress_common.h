/* Host side shared by the stress programs (stress_drv.c: driver API; stress_rt.cu: cudart): options,
 * the host RNG whose next tokens depend on what came back from the device, a caching-allocator-like
 * pool (blocks freed into it and reused; emptied now and then, as torch.cuda.empty_cache would), and
 * the output. Each step prints one line, the end one checksum line: a restore that lost or reordered
 * anything (device memory, a module global, a copy into pinned or pageable memory, a host callback)
 * shows in those lines, which the driver (cr-stress.sh) compares with an uninterrupted run. */
#ifndef CRCUDA_TESTS_STRESS_COMMON_H
#define CRCUDA_TESTS_STRESS_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define ST_N	  (1u << 18) /* state words */
#define ST_TSIZE  (1u << 16) /* table words ("embedding") */
#define ST_IDX	  4096u	     /* tokens per index array, times 1..3 */
#define ST_GRID	  64u
#define ST_BLOCK  128u
#define ST_POOL	  16
#define ST_BUCKET (64u << 10)

struct st_opts {
	unsigned steps, sleep_ms, seed;
};

static inline void st_parse(int argc, char **argv, struct st_opts *o)
{
	*o = (struct st_opts){.steps = 40, .sleep_ms = 20, .seed = 1};
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--steps"))
			o->steps = (unsigned)strtoul(argv[i + 1], NULL, 0);
		else if (!strcmp(argv[i], "--sleep-ms"))
			o->sleep_ms = (unsigned)strtoul(argv[i + 1], NULL, 0);
		else if (!strcmp(argv[i], "--seed"))
			o->seed = (unsigned)strtoul(argv[i + 1], NULL, 0);
		else
			goto usage;
	}
	if ((argc - 1) % 2 == 0 && o->steps)
		return;
usage:
	fprintf(stderr, "usage: %s [--steps N] [--sleep-ms MS] [--seed N]\n", argv[0]);
	exit(2);
}

static inline uint64_t st_rng(uint64_t *s)
{
	uint64_t x = *s;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return *s = x;
}

static inline uint64_t st_fold(uint64_t h, uint64_t v)
{
	h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
	return h * 0xff51afd7ed558ccdull;
}

static inline void st_sleep_ms(unsigned ms)
{
	struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};

	while (nanosleep(&ts, &ts))
		;
}

/* Tokens of a step: in range, from the host RNG. */
static inline void st_tokens(uint64_t *rng, unsigned *dst, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		dst[i] = (unsigned)(st_rng(rng) % ST_TSIZE);
}

/* The caching allocator: blocks of whole buckets, reused by size, freed only by st_pool_empty. */
struct st_block {
	uint64_t ptr;
	size_t size;
	int used;
};
struct st_pool {
	struct st_block b[ST_POOL];
	unsigned allocs, reuses;
};
typedef int st_alloc_fn(uint64_t *ptr, size_t size);
typedef int st_free_fn(uint64_t ptr);

static inline uint64_t st_pool_get(struct st_pool *p, size_t size, st_alloc_fn *alloc)
{
	size = (size + ST_BUCKET - 1) / ST_BUCKET * ST_BUCKET;
	for (int i = 0; i < ST_POOL; i++)
		if (p->b[i].ptr && !p->b[i].used && p->b[i].size == size) {
			p->b[i].used = 1;
			p->reuses++;
			return p->b[i].ptr;
		}
	for (int i = 0; i < ST_POOL; i++)
		if (!p->b[i].ptr) {
			if (alloc(&p->b[i].ptr, size)) {
				fprintf(stderr, "stress: allocation of %zu bytes failed\n", size);
				exit(1);
			}
			p->b[i].size = size;
			p->b[i].used = 1;
			p->allocs++;
			return p->b[i].ptr;
		}
	fprintf(stderr, "stress: pool full\n");
	exit(1);
}

static inline void st_pool_put(struct st_pool *p, uint64_t ptr)
{
	for (int i = 0; i < ST_POOL; i++)
		if (p->b[i].ptr == ptr)
			p->b[i].used = 0;
}

static inline void st_pool_empty(struct st_pool *p, st_free_fn *fr)
{
	for (int i = 0; i < ST_POOL; i++)
		if (p->b[i].ptr && !p->b[i].used) {
			if (fr(p->b[i].ptr)) {
				fprintf(stderr, "stress: free failed\n");
				exit(1);
			}
			p->b[i].ptr = 0;
		}
}

/* Host callbacks' state: each folds what the step's copies brought back (pinned, pageable). */
struct st_cb {
	const unsigned long long *src;
	uint64_t acc;
	unsigned calls;
};

static inline void st_cb_run(struct st_cb *cb)
{
	cb->acc = st_fold(cb->acc, *cb->src);
	cb->calls++;
}

/* The end of a run, the same for both programs: folds the final device state, the counter, the
 * callbacks and the host RNG into the checksum, prints the result line, and says whether the device's
 * index check fired (exit status 3) or not (0). */
static inline int st_report(const char *prog, unsigned steps, uint64_t h, const unsigned *state, unsigned n,
			    const unsigned *table, unsigned tsize, unsigned long long counter,
			    const struct st_cb *pin, const struct st_cb *page, uint64_t rng, unsigned flag)
{
	for (unsigned i = 0; i < n; i++)
		h = st_fold(h, state[i]);
	for (unsigned i = 0; i < tsize; i++)
		h = st_fold(h, table[i]);
	h = st_fold(h, counter);
	h = st_fold(h, pin->acc ^ page->acc);
	h = st_fold(h, ((uint64_t)pin->calls << 32) | page->calls);
	h = st_fold(h, rng);
	printf("%s: steps=%u counter=%016llx callbacks=%u/%u checksum=%016llx\n", prog, steps, counter,
	       pin->calls, page->calls, (unsigned long long)h);
	if (flag) {
		fprintf(stderr, "%s: an index was out of range (the device-side check fired)\n", prog);
		return 3;
	}
	return 0;
}

#endif
