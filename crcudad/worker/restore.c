/* Restore of a session from the store: replay the journal in a new session at the checkpoint's own
 * device VA range with the same handles, upload the data and globals, and hand the control connection
 * over as the session's socket (REBIND).
 *
 * The range cannot move: device pointers live in the application's memory and in device memory, where
 * no translation can find them all. Each restore runs in a fresh worker process (link.h), whose device
 * address space has every range free, so it always gets it. */
#define LOG_PREFIX "crcudad: "
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "crcuda/errno.h"
#include "crcuda/log.h"
#include "crcuda/tls.h"
#include "crcuda/modimage.h"
#include "worker.h"

/* After cuda.h: define and call entry points by their ABI names. */
#include "crcuda/cuda_api_undef.h"

/* How long a restored process tree's session waits for a peer's restore to export the IPC memory it
 * had open (the tree's processes are restored side by side). */
#define IPC_TREE_WAIT_S 60.0

/* ---- restore ------------------------------------------------------------------------------------ */
struct jrec_copy {
	uint64_t seq;
	uint8_t *payload;
	uint32_t len;
};

/* The records up to the checkpoint: copies of their payloads and, at the same index, the decoded
 * records with their skip marks. */
struct jload {
	struct jrec_copy *r;
	struct crc_jrec_item *items;
	size_t n, cap;
	uint64_t upto;
};

static void jload_free(struct jload *j)
{
	for (size_t i = 0; i < j->n; i++)
		free(j->r[i].payload);
	free(j->r);
	free(j->items);
}

static int load_record(void *arg, uint64_t seq, uint32_t type, const void *payload, uint32_t len)
{
	struct jload *j = arg;
	struct jrec_copy *r;

	if (seq > j->upto)
		return 1; /* past the checkpoint: stop */
	if (j->n == j->cap) {
		size_t cap = j->cap ? j->cap * 2 : 256;
		struct crc_jrec_item *it;

		r = realloc(j->r, cap * sizeof(*r));
		if (!r)
			return CRC_ENOMEM;
		j->r = r;
		it = realloc(j->items, cap * sizeof(*it));
		if (!it)
			return CRC_ENOMEM;
		j->items = it;
		j->cap = cap;
	}
	r = &j->r[j->n];
	*r = (struct jrec_copy){.seq = seq, .payload = malloc(len ? len : 1), .len = len};
	if (!r->payload)
		return CRC_ENOMEM;
	memcpy(r->payload, payload, len);
	j->items[j->n] = (struct crc_jrec_item){.type = type};
	if (crc_jrec_decode(r->payload, len, &j->items[j->n].v)) {
		free(r->payload);
		return CRC_ECORRUPT;
	}
	j->n++;
	return 0;
}

static double oom_wait_s(void)
{
	const char *v = getenv("CRCUDA_RESTORE_OOM_WAIT_MS");

	return (v && *v ? atof(v) : 10000.0) / 1000.0;
}

static int replay_one(struct crc_session *s, struct crc_store *st, uint64_t seq,
		      const struct crc_jrec_item *r, char *why, size_t why_len)
{
	const struct crc_jrec_call *c = r->v.call;
	size_t extra = r->type == CRC_JREC_MODULE_LOAD ? c->image_bytes : 0;
	size_t len = sizeof(struct crc_msg_hdr) + sizeof(struct crc_call_hdr) + c->args_len + extra;
	struct crc_msg_hdr *m = malloc(len);
	struct crc_call_hdr *h;
	uint8_t *args;
	CUresult res;
	int rc = 0;

	if (!m)
		return CRC_ENOMEM;
	*m = (struct crc_msg_hdr){.len = (uint32_t)len, .op = c->op, .seq = seq};
	h = (struct crc_call_hdr *)(m + 1);
	*h = (struct crc_call_hdr){.ctx = c->ctx, .thread = c->thread, .flags = c->call_flags};
	args = (uint8_t *)(h + 1);
	memcpy(args, r->v.args, c->args_len);
	if (r->type == CRC_JREC_MODULE_LOAD) {
		struct crc_load_req *lr = (struct crc_load_req *)args;
		struct crc_hash hash;
		size_t got = 0;

		memcpy(hash.bytes, c->image_hash, 16);
		*lr = (struct crc_load_req){
		    .image_bytes = c->image_bytes, .offset = 0, .chunk = c->image_bytes};
		rc = crc_store_chunk_read(st, &hash, lr + 1, c->image_bytes, &got);
		if (rc || got != c->image_bytes) {
			snprintf(why, why_len, "journal record %" PRIu64 ": cannot read the module image: %s",
				 seq, crc_strerror(rc ? rc : CRC_ETRUNC));
			free(m);
			return rc ? rc : CRC_ETRUNC;
		}
	}
	s->force = r->v.handles;
	s->nforce = c->nhandles;
	s->force_mismatch = false;
	s->force_addr = r->type == CRC_JREC_MEM_ALLOC || r->type == CRC_JREC_MEM_RESERVE ? c->addr : 0;
	s->out_len = 0;
	s->call_why[0] = '\0';
	res = crc_session_execute(s, m);
	/* Out of device memory: a restore right after its process was killed may find that process's
	 * worker still freeing what the session held. Waited for (CRCUDA_RESTORE_OOM_WAIT_MS, default
	 * 10 s), then it fails as before. A failed allocation did nothing, so it is tried again whole. */
	for (double until = crc_now_s() + oom_wait_s();
	     res == CUDA_ERROR_OUT_OF_MEMORY && crc_now_s() < until;) {
		static bool said;

		if (!said) {
			said = true;
			pr_info("session %llu: out of device memory replaying record %" PRIu64
				": waiting for memory another session is freeing",
				(unsigned long long)s->id, seq);
		}
		usleep(50 * 1000);
		s->force = r->v.handles;
		s->nforce = c->nhandles;
		s->force_mismatch = false;
		s->force_addr =
		    r->type == CRC_JREC_MEM_ALLOC || r->type == CRC_JREC_MEM_RESERVE ? c->addr : 0;
		s->out_len = 0;
		s->call_why[0] = '\0';
		res = crc_session_execute(s, m);
	}
	if (res != CUDA_SUCCESS) {
		snprintf(why, why_len,
			 "journal record %" PRIu64 " (%s): %s failed on this daemon: CUDA error %d%s%s", seq,
			 crc_jrec_type_name(r->type), crc_cu_table[c->op].sym, res,
			 r->type == CRC_JREC_MEM_ALLOC ? " (the same address is needed)" : "",
			 s->call_why[0] ? ": " : "");
		if (s->call_why[0] && strlen(why) + 1 < why_len)
			snprintf(why + strlen(why), why_len - strlen(why), "%s", s->call_why);
		rc = CRC_ECUDA;
	} else if (s->nforce || s->force_mismatch) {
		snprintf(why, why_len,
			 "journal record %" PRIu64 " (%s): the replayed call did not name the same handles",
			 seq, crc_cu_table[c->op].sym);
		rc = CRC_ECORRUPT;
	}
	s->force = NULL;
	s->nforce = 0;
	s->force_addr = 0;
	s->force_mismatch = false;
	free(m);
	return rc;
}

/* Uploads the chunks of every region of one device (group, see crc_addr_group; dctx: the session's
 * context on each device) in a context of that device: readers threads, each taking the next chunk,
 * reading it into one of its two pinned staging buffers and copying it to the device on a stream of
 * its own while it reads the next. No reader waits for another (the batches of 16 that this replaced
 * waited for their slowest chunk, and uploaded 8 GiB at 35% of pinned H2D). A chunk whose manifest
 * entry has a device digest is checked once uploaded, all at once by the digest kernel at device
 * bandwidth; the others are hashed while read (on the H200 host that hashing held the upload to
 * 61-68% of pinned H2D, the reads and copies alone reach 74%). */
#define UPLOAD_READERS_MAX 32 /* CRCUDA_RESTORE_READERS */

/* By default half the CPUs, 4..12: the copies from the page cache and the DMA share the memory bus,
 * and more readers only contend for it. On the 16-CPU H100 host 8 readers uploaded 8 GiB at 35-38
 * GB/s, 12 at 33-35, 16 at 29-30 (the 16-CPU H200 host: 12 at 36-37, 16 at 34). */
static unsigned upload_readers(void)
{
	const char *env = getenv("CRCUDA_RESTORE_READERS");
	long cpus = sysconf(_SC_NPROCESSORS_ONLN) / 2;

	if (env && atoi(env) >= 1 && atoi(env) <= UPLOAD_READERS_MAX)
		return (unsigned)atoi(env);
	return cpus < 4 ? 4 : cpus > 12 ? 12 : (unsigned)cpus;
}
/* ---- staging made ahead -------------------------------------------------------------------------- */
/* A ready worker that has no session yet makes the upload's pinned buffers, so that a restore it may
 * be given does not wait for them: pinning costs about 0.5 ms per MiB (68 ms for 16 readers' buffers on
 * an H200 host, a fifth of an 8 GiB upload). A worker given a new session instead frees them. */
#define STAGED_BYTES (4u << 20) /* a store chunk (STORE_CHUNK, ckpt.c): larger ones get their own */

static struct {
	pthread_t tid;
	bool started;
	atomic_bool cancel;
	unsigned n, taken; /* made; handed to readers (under lock once the maker is joined) */
	void *buf[2 * UPLOAD_READERS_MAX];
	pthread_mutex_t lock;
} staged = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void *staged_make(void *arg)
{
	unsigned want = 2 * upload_readers();
	CUcontext ctx;

	(void)arg;
	/* Device 0's primary context, which the worker keeps for good (crc_va_window); portable
	 * buffers serve any context. */
	if (CALL(cuDevicePrimaryCtxRetain, &ctx, 0) != CUDA_SUCCESS)
		return NULL;
	if (CALL(cuCtxSetCurrent, ctx) == CUDA_SUCCESS)
		for (unsigned i = 0; i < want && !atomic_load(&staged.cancel); i++) {
			if (crc_pinned_alloc(&staged.buf[staged.n], STAGED_BYTES) != CUDA_SUCCESS)
				break;
			staged.n++;
		}
	CALL(cuCtxSetCurrent, NULL);
	CALL(cuDevicePrimaryCtxRelease_v2, 0);
	return NULL;
}

void crc_upload_staging_prepare(void)
{
	const char *v = getenv("CRCUDA_RESTORE_STAGING_AHEAD");

	if ((v && !strcmp(v, "0")) || !crcd.dev_count || staged.started)
		return;
	staged.started = !crc_thread_create(&staged.tid, NULL, staged_make, NULL);
}

/* Waits for the maker (under staged.lock, which the maker never takes: one joiner at a time). */
static void staged_join(bool cancel)
{
	if (!staged.started)
		return;
	if (cancel)
		atomic_store(&staged.cancel, true);
	pthread_join(staged.tid, NULL);
	staged.started = false;
}

void crc_upload_staging_release(void)
{
	pthread_mutex_lock(&staged.lock);
	staged_join(true);
	for (unsigned i = staged.taken; i < staged.n; i++)
		crc_pinned_free(staged.buf[i]);
	staged.n = staged.taken = 0;
	pthread_mutex_unlock(&staged.lock);
}

static void *staged_release_main(void *arg)
{
	(void)arg;
	crc_test_delay("CRCUDA_TEST_STAGING_RELEASE_DELAY_MS"); /* while the session runs */
	crc_upload_staging_release();
	return NULL;
}

void crc_upload_staging_release_async(void)
{
	pthread_t tid;

	if (!staged.started && !staged.n)
		return;
	if (crc_thread_create(&tid, NULL, staged_release_main, NULL))
		crc_upload_staging_release();
	else
		pthread_detach(tid);
}

/* A reader's staging buffer of len bytes: one made ahead where it fits, else a new one. */
static CUresult staged_take(size_t len, void **out)
{
	pthread_mutex_lock(&staged.lock);
	if (len <= STAGED_BYTES && staged.taken < staged.n) {
		*out = staged.buf[staged.taken++];
		pthread_mutex_unlock(&staged.lock);
		return CUDA_SUCCESS;
	}
	pthread_mutex_unlock(&staged.lock);
	return crc_pinned_alloc(out, len);
}

/* Records again, in their order, the events that were recorded before the checkpoint (list from
 * crc_events_recorded; NULL in older checkpoints): each on its context's default stream, where
 * nothing runs yet, so each is complete at once, as every event was when the checkpoint drained. */
int crc_events_rerecord(struct crc_session *s, const char *list, char *why, size_t why_len)
{
	const struct crc_htable *ctxs = &s->tables[CRC_HT_CTX];

	while (list && *list) {
		char *end;
		uint64_t v = strtoull(list, &end, 0);
		uint32_t i = crc_vhandle_index(v);
		CUresult res = CUDA_ERROR_INVALID_CONTEXT;

		if (end == list || crc_vhandle_tag(v) != CRC_HT_EVENT || i > s->tables[CRC_HT_EVENT].n ||
		    !s->tables[CRC_HT_EVENT].real[i].ptr) {
			snprintf(why, why_len,
				 "the checkpoint names an event the journal did not make (%.40s)", list);
			return CRC_ECORRUPT;
		}
		/* The event's context is not kept: the one that accepts the record is it. */
		for (uint32_t c = 1; c <= ctxs->n && res != CUDA_SUCCESS; c++)
			if (ctxs->real[c].ptr && CALL(cuCtxSetCurrent, ctxs->real[c].ptr) == CUDA_SUCCESS)
				res = CALL(cuEventRecord, s->tables[CRC_HT_EVENT].real[i].ptr, NULL);
		if (res != CUDA_SUCCESS) {
			snprintf(why, why_len, "recording event %#" PRIx64 " again: CUDA error %d", v, res);
			return CRC_ECUDA;
		}
		crc_event_mark(s, v); /* for the next checkpoint */
		list = *end == ',' ? end + 1 : end;
	}
	s->cur_ctx = UINT64_MAX;
	return 0;
}

/* One chunk to upload: where it goes, which chunk, and for messages where it is in the manifest. */
struct up_chunk {
	CUdeviceptr dst;
	const struct crc_hash *hash;
	const uint64_t *digest; /* checked on the device after the upload; NULL: hashed while read */
	uint64_t length;
	uint32_t region, chunk;
};

/* CRCUDA_RESTORE_VERIFY=host: every chunk hashed while read, as before device digests. */
static bool verify_on_device(void)
{
	const char *v = getenv("CRCUDA_RESTORE_VERIFY");

	return !v || strcmp(v, "host");
}

struct up_job {
	const struct up_chunk *items;
	size_t n, max;
	CUcontext ctx;
	struct crc_store *st;
	atomic_size_t next;
	atomic_int rc;
	pthread_mutex_t lock; /* the first failure's message */
	char *why;
	size_t why_len;
	double staging_s;      /* the slowest reader's staging set-up, under lock */
	double read_s, wait_s; /* the readers' time in the store's reads, and waiting for their copies */
};

/* Records the first failure (its code and message); later ones only stop the readers. */
static void up_fail(struct up_job *j, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void up_fail(struct up_job *j, int rc, const char *fmt, ...)
{
	int zero = 0;

	pthread_mutex_lock(&j->lock);
	if (atomic_compare_exchange_strong(&j->rc, &zero, rc)) {
		va_list ap;

		va_start(ap, fmt);
		vsnprintf(j->why, j->why_len, fmt, ap);
		va_end(ap);
	}
	pthread_mutex_unlock(&j->lock);
}

static void *up_reader(void *arg)
{
	struct up_job *j = arg;
	void *buf[2] = {NULL, NULL};
	CUevent ev[2] = {NULL, NULL};
	CUstream stream = NULL;
	struct crc_chunk_reader *rd = NULL;
	double t0 = crc_now_s(), t, read_s = 0, wait_s = 0;
	CUresult res = CUDA_SUCCESS;
	int k = 0;

	if (crc_chunk_reader_open(j->st, &rd)) {
		up_fail(j, CRC_ENOMEM, "out of memory");
		return NULL;
	}
	/* Threads start with no current context. */
	if (j->ctx)
		res = CALL(cuCtxSetCurrent, j->ctx);
	if (res == CUDA_SUCCESS)
		res = CALL(cuStreamCreate, &stream, CU_STREAM_NON_BLOCKING);
	for (int b = 0; b < 2 && res == CUDA_SUCCESS; b++) {
		res = staged_take(j->max, &buf[b]);
		/* Blocking: a reader waiting for its copy gives its CPU to the others' reads. */
		if (res == CUDA_SUCCESS)
			res = CALL(cuEventCreate, &ev[b], CU_EVENT_DISABLE_TIMING | CU_EVENT_BLOCKING_SYNC);
	}
	pthread_mutex_lock(&j->lock);
	if (crc_now_s() - t0 > j->staging_s)
		j->staging_s = crc_now_s() - t0;
	pthread_mutex_unlock(&j->lock);
	if (res != CUDA_SUCCESS)
		up_fail(j, CRC_ECUDA, "cannot set up staging buffers for the upload: CUDA error %d", res);
	for (size_t i; !atomic_load(&j->rc) && (i = atomic_fetch_add(&j->next, 1)) < j->n;) {
		const struct up_chunk *c = &j->items[i];
		size_t len = j->max;
		int rc;

		/* The copy out of this buffer two chunks ago is done before the buffer is refilled. */
		t = crc_now_s();
		res = CALL(cuEventSynchronize, ev[k]);
		wait_s += crc_now_s() - t;
		t = crc_now_s();
		if (res != CUDA_SUCCESS) {
			up_fail(j, CRC_ECUDA, "uploading region %u: CUDA error %d", c->region, res);
			break;
		}
		rc = c->digest ? crc_chunk_reader_read_unverified(rd, c->hash, buf[k], j->max, &len)
			       : crc_chunk_reader_read(rd, c->hash, buf[k], j->max, &len);
		read_s += crc_now_s() - t;
		if (!rc && len != c->length)
			rc = CRC_ECORRUPT;
		if (rc) {
			up_fail(j, rc, "region %u chunk %u: %s", c->region, c->chunk,
				rc == CRC_ECORRUPT && len != c->length
				    ? "its length in the store differs from the manifest's"
				    : crc_strerror(rc));
			break;
		}
		res = CALL(cuMemcpyHtoDAsync_v2, c->dst, buf[k], len, stream);
		if (res == CUDA_SUCCESS)
			res = CALL(cuEventRecord, ev[k], stream);
		if (res == CUDA_SUCCESS)
			crc_progress_add(len);
		if (res != CUDA_SUCCESS) {
			up_fail(j, CRC_ECUDA, "uploading region %u near %#" PRIx64 ": CUDA error %d",
				c->region, (uint64_t)c->dst, res);
			break;
		}
		k ^= 1;
	}
	t = crc_now_s();
	for (int b = 0; b < 2; b++)
		if (ev[b] && (res = CALL(cuEventSynchronize, ev[b])) != CUDA_SUCCESS)
			up_fail(j, CRC_ECUDA, "uploading the checkpoint's data: CUDA error %d", res);
	wait_s += crc_now_s() - t;
	pthread_mutex_lock(&j->lock);
	j->read_s += read_s;
	j->wait_s += wait_s;
	pthread_mutex_unlock(&j->lock);
	for (int b = 0; b < 2; b++) {
		crc_pinned_free(buf[b]);
		if (ev[b])
			CALL(cuEventDestroy_v2, ev[b]);
	}
	if (stream)
		CALL(cuStreamDestroy_v2, stream);
	crc_chunk_reader_close(rd);
	return NULL;
}

/* Where the digest kernel cannot run, the uploaded bytes of the chunks read unhashed are copied back
 * and hashed here (slow, and only then). */
static int check_on_host(const struct up_chunk *c, uint64_t max, char *why, size_t why_len)
{
	void *buf = malloc(max);
	struct crc_hash got;
	CUresult res;

	if (!buf) {
		snprintf(why, why_len, "out of memory");
		return CRC_ENOMEM;
	}
	res = CALL(cuMemcpyDtoH_v2, buf, c->dst, c->length);
	if (res == CUDA_SUCCESS)
		crc_hash_compute(buf, c->length, &got);
	free(buf);
	if (res != CUDA_SUCCESS) {
		snprintf(why, why_len, "reading back region %u chunk %u: CUDA error %d", c->region, c->chunk,
			 res);
		return CRC_ECUDA;
	}
	return memcmp(got.bytes, c->hash->bytes, sizeof(got.bytes)) ? CRC_ECORRUPT : 0;
}

/* The uploaded chunks that were read unhashed, checked against their digests on the device. */
static int check_uploaded(unsigned long long session, const struct up_job *j, double *seconds, char *why,
			  size_t why_len)
{
	size_t n = 0, k = 0;
	uint64_t *desc, *got;
	bool by_host = false;
	int rc = 0;

	*seconds = 0;
	for (size_t i = 0; i < j->n; i++)
		n += j->items[i].digest != NULL;
	if (!n)
		return 0;
	desc = malloc(n * 16);
	got = malloc(n * 16);
	if (!desc || !got) {
		free(desc);
		free(got);
		snprintf(why, why_len, "out of memory");
		return CRC_ENOMEM;
	}
	for (size_t i = 0; i < j->n; i++)
		if (j->items[i].digest) {
			desc[2 * k] = j->items[i].dst;
			desc[2 * k + 1] = j->items[i].length;
			k++;
		}
	rc = crc_digest_device(j->ctx, desc, n, got, seconds, why, why_len);
	if (rc) {
		pr_warn("session %llu: %s: the upload is checked on the host", session, why);
		why[0] = 0;
		by_host = true;
		rc = 0;
		if (j->ctx)
			CALL(cuCtxSetCurrent, j->ctx);
	}
	k = 0;
	for (size_t i = 0; i < j->n && !rc; i++) {
		const struct up_chunk *c = &j->items[i];

		if (!c->digest)
			continue;
		if (by_host)
			rc = check_on_host(c, j->max, why, why_len);
		else if (got[2 * k] != c->digest[0] || got[2 * k + 1] != c->digest[1])
			rc = CRC_ECORRUPT;
		k++;
		if (rc == CRC_ECORRUPT)
			snprintf(why, why_len,
				 "region %u chunk %u: the bytes read from the store differ from those "
				 "checkpointed (the store is damaged)",
				 c->region, c->chunk);
	}
	free(desc);
	free(got);
	return rc;
}

/* Whether chunk c of region r is on the device already: base (a staged restore's checkpoint, with the
 * same regions) holds the same bytes there. */
static bool chunk_on_device(const struct crc_manifest *base, uint32_t r, uint32_t c,
			    const struct crc_chunk_ref *ch)
{
	return base && !memcmp(base->regions[r].chunks[c].hash.bytes, ch->hash.bytes, sizeof(ch->hash.bytes));
}

/* What goes up to one device (a group, see crc_addr_group), in a context of that device. */
struct up_group {
	struct up_chunk *items; /* pointing into the manifest, which outlives the plan */
	size_t n, cap, unhashed;
	uint64_t max, bytes;
	CUcontext ctx;
};

/* What an upload does, made while the session is at hand (the addresses of module globals, the
 * devices' contexts), so that the upload itself needs nothing of the session and may run beside its
 * restore (a staged lazy one). */
struct up_plan {
	unsigned long long session; /* for messages */
	struct crc_store *st;
	uint64_t total;
	unsigned ngroups;
	struct up_group g[CRC_MAX_DEVICES + 1];
};

static void upload_plan_free(struct up_plan *p)
{
	for (unsigned i = 0; i < p->ngroups; i++)
		free(p->g[i].items);
	p->ngroups = 0;
}

/* The chunks of every region of one device (group; dctx: the session's context on each device), but
 * those already there (base, as chunk_on_device). */
static int upload_plan_group(struct crc_session *s, const struct crc_manifest *mf,
			     const struct crc_manifest *base, int group, CUcontext *dctx, bool on_device,
			     struct up_group *ug, char *why, size_t why_len)
{
	*ug = (struct up_group){.ctx = group >= 0 ? dctx[group] : crc_session_ctx(s)};
	for (uint32_t i = 0; i < mf->nregions; i++) {
		const struct crc_region *rg = &mf->regions[i];
		uint64_t addr = rg->addr, off = 0;

		if (rg->kind == CRC_REGION_DEVICE_GLOBAL) {
			/* "SYMBOL@0xVHANDLE": the global of that module as this daemon loaded it. */
			const char *at = rg->name ? strrchr(rg->name, '@') : NULL;
			char sym[512];
			CUdeviceptr gaddr = 0;
			size_t gsize = 0;
			CUresult res;

			if (!at || (size_t)(at - rg->name) >= sizeof(sym)) {
				snprintf(why, why_len, "region %u: bad global name", i);
				return CRC_ECORRUPT;
			}
			memcpy(sym, rg->name, (size_t)(at - rg->name));
			sym[at - rg->name] = 0;
			res = crc_global_of(s, strtoull(at + 1, NULL, 0), sym, &gaddr, &gsize);
			if (res != CUDA_SUCCESS || gsize != rg->size) {
				snprintf(
				    why, why_len,
				    "device global %s: not found after reloading its module (CUDA error %d, "
				    "%zu bytes, %" PRIu64 " expected)",
				    rg->name, res, gsize, rg->size);
				return CRC_ENOTFOUND;
			}
			addr = gaddr;
		} else if (rg->kind != CRC_REGION_DEVICE_ALLOC) {
			continue;
		}
		if (crc_addr_group(addr, dctx) != group)
			continue;
		for (uint32_t c = 0; c < rg->nchunks; c++) {
			const struct crc_chunk_ref *ch = &rg->chunks[c];

			if (chunk_on_device(base, i, c, ch)) {
				off += ch->length; /* on the device already */
				continue;
			}
			if (ug->n == ug->cap) {
				size_t cap = ug->cap ? 2 * ug->cap : 256;
				struct up_chunk *more = realloc(ug->items, cap * sizeof(*more));

				if (!more) {
					snprintf(why, why_len, "out of memory");
					return CRC_ENOMEM;
				}
				ug->items = more;
				ug->cap = cap;
			}
			ug->items[ug->n++] = (struct up_chunk){
			    .dst = addr + off,
			    .hash = &ch->hash,
			    .digest = on_device && (ch->digest[0] | ch->digest[1]) ? ch->digest : NULL,
			    .length = ch->length,
			    .region = i,
			    .chunk = c};
			ug->unhashed += ug->items[ug->n - 1].digest != NULL;
			off += ch->length;
			ug->bytes += ch->length;
			if (ch->length > ug->max)
				ug->max = ch->length;
		}
	}
	return 0;
}

/* Every device's memory, each in a context of its own device (any: the session has one; else the one
 * group -1). base: the checkpoint whose memory is on the device already (a staged restore, with the
 * same regions): only the chunks that differ from its go up; NULL: all. */
static int upload_plan(struct crc_session *s, struct crc_store *st, const struct crc_manifest *mf,
		       const struct crc_manifest *base, CUcontext *dctx, bool any, struct up_plan *p,
		       char *why, size_t why_len)
{
	bool on_device = verify_on_device();
	int rc = 0;

	*p = (struct up_plan){.session = (unsigned long long)s->id, .st = st};
	for (int g = any ? 0 : -1; g < CRC_MAX_DEVICES && !rc; g++) {
		struct up_group *ug = &p->g[p->ngroups];

		if (g >= 0 && !dctx[g])
			continue;
		rc = upload_plan_group(s, mf, base, g, dctx, on_device, ug, why, why_len);
		p->ngroups++;
		p->total += ug->bytes;
		if (g < 0)
			break;
	}
	if (rc)
		upload_plan_free(p);
	return rc;
}

/* One device's chunks: reader threads, each taking the next chunk, reading it into one of its two
 * pinned staging buffers and copying it to the device on a stream of its own while it reads the
 * next; then the digests of those read unhashed, checked on the device. */
static int upload_group(const struct up_plan *p, const struct up_group *ug, char *why, size_t why_len)
{
	struct up_job j = {.items = ug->items,
			   .n = ug->n,
			   .max = ug->max,
			   .ctx = ug->ctx,
			   .st = p->st,
			   .why = why,
			   .why_len = why_len};
	pthread_t tids[UPLOAD_READERS_MAX];
	unsigned readers, started = 0;
	double t0 = crc_now_s(), check_s = 0, t_readers, t_joined;
	int rc;

	if (!ug->n || !ug->max)
		return 0;
	/* Buffers being made ahead are waited for (making them again would cost the same). */
	pthread_mutex_lock(&staged.lock);
	staged_join(false);
	pthread_mutex_unlock(&staged.lock);
	t_readers = crc_now_s();
	pthread_mutex_init(&j.lock, NULL);
	readers = upload_readers();
	for (unsigned t = 0; t < readers && t < ug->n; t++)
		if (!crc_thread_create(&tids[started], NULL, up_reader, &j))
			started++;
	if (!started)
		up_reader(&j);
	for (unsigned t = 0; t < started; t++)
		pthread_join(tids[t], NULL);
	t_joined = crc_now_s();
	rc = atomic_load(&j.rc);
	if (!rc)
		rc = check_uploaded(p->session, &j, &check_s, why, why_len);
	if (!rc) {
		double secs = crc_now_s() - t0, busy = j.read_s + j.wait_s;

		/* Where the time went: what the readers waited on says whether the store's reads (the CPU's
		 * copies out of the page cache, or the disk) or the copies to the device held the upload. */
		pr_info("session %llu: uploaded %" PRIu64 " MiB in %.3f s (%.1f GB/s; %u readers, staging "
			"set up in %.3f s, %.3f s waiting for staging made ahead; readers %.3f s, %.0f%% of "
			"their time reading the store, %.0f%% waiting for their copies; %zu of %zu chunks "
			"checked on the device, in %.3f s)",
			p->session, ug->bytes >> 20, secs, secs > 0 ? (double)ug->bytes / secs / 1e9 : 0,
			started ? started : 1, j.staging_s, t_readers - t0, t_joined - t_readers,
			busy > 0 ? 100 * j.read_s / busy : 0, busy > 0 ? 100 * j.wait_s / busy : 0,
			ug->unhashed, ug->n, check_s);
	}
	pthread_mutex_destroy(&j.lock);
	return rc;
}

/* Runs the plan: what the session's thread or a lazy restore's upload thread does. */
static int upload_run(const struct up_plan *p, char *why, size_t why_len)
{
	int rc = 0;

	crc_progress_start(CRC_CTL_PROGRESS_RESTORE, p->total);
	for (unsigned i = 0; i < p->ngroups && !rc; i++)
		rc = upload_group(p, &p->g[i], why, why_len);
	crc_progress_end();
	crc_upload_staging_release();
	return rc;
}

/* Plans and runs it here, on the session's thread. */
static int upload_all(struct crc_session *s, struct crc_store *st, const struct crc_manifest *mf,
		      const struct crc_manifest *base, CUcontext *dctx, bool any, char *why, size_t why_len)
{
	struct up_plan p;
	int rc = upload_plan(s, st, mf, base, dctx, any, &p, why, why_len);

	if (!rc)
		rc = upload_run(&p, why, why_len);
	upload_plan_free(&p);
	s->cur_ctx = UINT64_MAX; /* the digest kernel's context may be current now */
	return rc;
}

/* ---- lazy upload: device memory goes up while the restored process comes back ------------------- */
/* With CRCUDA_RESTORE_LAZY=1 a restore answers once the journal is replayed, and a thread uploads
 * device memory meanwhile (while CRIU restores the rest of the process); the session's first request
 * waits for it (crc_upload_wait: every request, since the layer cannot tell which memory a kernel
 * touches). A restore that crcudactl stages ahead starts that thread at once, before CRIU has begun.
 * An upload that fails (a chunk corrupt or gone) leaves the session lost: every later call fails, as
 * after a lost context, and the worker's log says why. */
struct crc_upload {
	pthread_t tid;
	struct up_plan plan; /* its store: plan.st */
	struct crc_manifest *mf;
	bool owns; /* the store and mf are freed with the upload; else they are a staged restore's */
	int rc;
	double t0, seconds;
	char why[CRC_CTL_MSG_MAX];
};

/* Whether mf's memory goes up lazily. A session that exported memory uploads it before exporting it
 * again: another process may open and read it at once, which the lazy upload's wait (the client's
 * first call) would not cover. */
static bool restore_lazy(const struct crc_manifest *mf)
{
	const char *v = getenv("CRCUDA_RESTORE_LAZY");
	const char *exports = crc_manifest_meta_get(mf, "crcuda.ipc_exports");

	return v && !strcmp(v, "1") && !(exports && *exports);
}

static void *upload_main(void *arg)
{
	struct crc_upload *u = arg;

	u->rc = upload_run(&u->plan, u->why, sizeof(u->why));
	u->seconds = crc_now_s() - u->t0;
	crc_worker_restoring(-1);
	return NULL;
}

/* Starts uploading s's device memory on a thread of its own (s->upload). owns: st and mf go with it.
 * Where the plan fails, CRC_* with why; where no thread starts, it uploads here. */
static int upload_lazy_start(struct crc_session *s, struct crc_store *st, struct crc_manifest *mf, bool owns,
			     char *why, size_t why_len)
{
	CUcontext dctx[CRC_MAX_DEVICES];
	struct crc_upload *u = calloc(1, sizeof(*u));
	bool any = crc_session_dev_ctxs(s, dctx) > 0;
	int rc = 0;

	if (u && !(rc = upload_plan(s, st, mf, NULL, dctx, any, &u->plan, why, why_len))) {
		u->mf = mf;
		u->owns = owns;
		u->t0 = crc_now_s();
		crc_worker_restoring(1); /* until upload_main is done */
		if (!crc_thread_create(&u->tid, NULL, upload_main, u)) {
			s->upload = u;
			return 0;
		}
		crc_worker_restoring(-1);
		upload_plan_free(&u->plan);
	}
	free(u);
	return rc ? rc : upload_all(s, st, mf, NULL, dctx, any, why, why_len);
}

/* Waits for s's upload to end (when one is going on) and drops it: its result (why: its message). */
static int upload_join(struct crc_session *s, double *seconds, char *why, size_t why_len)
{
	struct crc_upload *u = s->upload;
	int rc;

	if (!u)
		return 0;
	pthread_join(u->tid, NULL);
	rc = u->rc;
	*seconds = u->seconds;
	if (rc)
		snprintf(why, why_len, "%s", u->why);
	if (u->owns) {
		crc_manifest_free(u->mf);
		crc_store_close(u->plan.st);
	}
	upload_plan_free(&u->plan);
	free(u);
	s->upload = NULL;
	s->cur_ctx = UINT64_MAX;
	return rc;
}

void crc_upload_wait(struct crc_session *s)
{
	char why[CRC_CTL_MSG_MAX];
	double t0 = crc_now_s(), resident = 0;

	if (!s->upload)
		return;
	if (upload_join(s, &resident, why, sizeof(why))) {
		pr_err("session %llu: uploading the restored device memory failed: %s: the session is lost",
		       (unsigned long long)s->id, why);
		s->sticky = CUDA_ERROR_ILLEGAL_STATE;
		return;
	}
	pr_info("session %llu: restored device memory resident %.3f s after the replay; the session's first "
		"request waited %.3f s for all of it (the layer cannot tell which memory a kernel touches)",
		(unsigned long long)s->id, resident, crc_now_s() - t0);
}

int crc_restore_gpus_by_uuid(struct crc_ctl_restore_wire *w, const char *uuids, char *why, size_t why_len)
{
	char have[CRC_MAX_DEVICES][48];
	unsigned n = 0;

	for (int d = 0; d < crcd.dev_count && d < CRC_MAX_DEVICES; d++) {
		CUuuid u = {0};
		const unsigned char *b = (const unsigned char *)u.bytes;

		if (crc_be.cuDeviceGetUuid_v2_fn)
			crc_be.cuDeviceGetUuid_v2_fn(&u, d);
		else if (crc_be.cuDeviceGetUuid_fn)
			crc_be.cuDeviceGetUuid_fn(&u, d);
		snprintf(have[d], sizeof(have[d]),
			 "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
			 b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
			 b[14], b[15]);
	}
	for (const char *p = uuids; *p && n < CRC_MAX_DEVICES; n++) {
		size_t len = strcspn(p, ",");
		int found = -1;

		for (int d = 0; d < crcd.dev_count && d < CRC_MAX_DEVICES && found < 0; d++)
			if (len == strlen(have[d]) && !strncasecmp(p, have[d], len))
				found = d;
		if (found < 0) {
			snprintf(why, why_len, "GPU %.*s is not one of this daemon's %d GPU(s)%s%s", (int)len,
				 p, crcd.dev_count, crcd.dev_count ? " (GPU 0 is " : "",
				 crcd.dev_count ? have[0] : "");
			if (crcd.dev_count && strlen(why) + 2 < why_len)
				strcat(why, ")");
			return CRC_ENODEV;
		}
		w->gpus[n] = found;
		p += len + (p[len] == ',');
	}
	if (n != w->ngpus) {
		snprintf(why, why_len, "malformed restore request (%u GPU UUIDs for %u GPUs)", n, w->ngpus);
		return CRC_EINVAL;
	}
	return 0;
}

/* The session's device map from --gpu (w) and the devices the checkpoint used (crcuda.devices, the
 * checkpointed daemon's ordinals by the application's; older checkpoints: crcuda.device alone). Every
 * device of the application gets a GPU of this daemon, no two the same: the used ones as asked, the
 * rest (not used before the checkpoint, maybe later) the remaining GPUs in order. */
static int map_devices(struct crc_session *s, const struct crc_manifest *mf,
		       const struct crc_ctl_restore_wire *w, char *why, size_t why_len)
{
	const char *list = crc_manifest_meta_get(mf, "crcuda.devices");
	const char *one = crc_manifest_meta_get(mf, "crcuda.device");
	int orig[CRC_MAX_DEVICES], n = 0, map[CRC_MAX_DEVICES];
	bool taken[CRC_MAX_DEVICES] = {false};
	char *end;

	for (const char *p = list  ? list
			     : one ? one
				   : "0";
	     *p && n < CRC_MAX_DEVICES; p = *end ? end + 1 : end)
		orig[n++] = (int)strtol(p, &end, 10);
	if (w->ngpus > CRC_MAX_DEVICES) {
		snprintf(why, why_len, "--gpu names %u GPUs, at most %d", w->ngpus, CRC_MAX_DEVICES);
		return CRC_EINVAL;
	}
	if (w->ngpus && w->ngpus < (unsigned)n) {
		snprintf(
		    why, why_len,
		    "--gpu names %u GPU(s), but the checkpointed session used %d devices: give one GPU per "
		    "device, in the application's device order (e.g. --gpu %s)",
		    w->ngpus, n, list ? list : "0");
		return CRC_EINVAL;
	}
	if (!w->ngpus && w->gpu >= 0 && w->gpu < crcd.dev_count && w->gpu + n > crcd.dev_count) {
		snprintf(why, why_len,
			 "--gpu %d: the checkpointed session used %d devices, which would go on GPUs %d..%d, "
			 "and this daemon has %d: give a list, one GPU per device in the application's "
			 "device order (e.g. --gpu %d,0)",
			 w->gpu, n, w->gpu, w->gpu + n - 1, crcd.dev_count, w->gpu);
		return CRC_ENODEV;
	}
	for (int i = 0; i < n; i++) {
		map[i] = w->ngpus ? w->gpus[i] : w->gpu >= 0 ? w->gpu + i : orig[i];
		if (map[i] < 0 || map[i] >= crcd.dev_count) {
			snprintf(why, why_len,
				 "GPU %d (for the application's device %d) does not exist on this daemon (%d "
				 "device(s))",
				 map[i], i, crcd.dev_count);
			return CRC_ENODEV;
		}
		if (taken[map[i]]) {
			snprintf(why, why_len, "GPU %d is named for two of the application's devices",
				 map[i]);
			return CRC_EINVAL;
		}
		taken[map[i]] = true;
	}
	for (int i = n, g = 0; i < CRC_MAX_DEVICES; i++) {
		while (g < crcd.dev_count && taken[g])
			g++;
		map[i] = g < crcd.dev_count ? g++ : i;
	}
	if (s)
		memcpy(s->dev_map, map, sizeof(map));
	return 0;
}

static uint64_t meta_u64(const struct crc_manifest *m, const char *key, bool *ok)
{
	const char *v = crc_manifest_meta_get(m, key);

	if (!v) {
		*ok = false;
		return 0;
	}
	return strtoull(v, NULL, 0);
}

/* A checkpoint being restored: its store, manifest and journal, and the session replaying it. */
struct rst {
	struct crc_store *st;
	struct crc_manifest *mf;
	struct jload j;
	struct crc_session *s;
	char store_dir[PATH_MAX];
	struct crc_ctl_restore_wire w; /* the request that made it (its device choices) */
};

static void rst_free(struct rst *r)
{
	if (r->s)
		crc_session_destroy(r->s);
	jload_free(&r->j);
	crc_manifest_free(r->mf);
	crc_store_close(r->st);
	memset(r, 0, sizeof(*r));
}

/* The checkpoint's manifest and journal from r->st (open), checked. */
static int rst_load(struct rst *r, uint64_t ckpt_id, bool tcp, const struct crc_peer *peer, char *why,
		    size_t why_len)
{
	uint64_t session;
	bool ok = true;
	int rc = crc_store_manifest_get(r->st, ckpt_id, &r->mf);

	if (rc) {
		snprintf(why, why_len, "checkpoint %" PRIu64 " in %s: %s", ckpt_id, r->store_dir,
			 crc_strerror(rc));
		return rc;
	}
	/* Another user's checkpoint is restored by root only (peer: the control connection's; over TCP
	 * the token is the authority). */
	if (!tcp && (rc = crc_manifest_check_owner(r->st, r->mf, (unsigned)peer->uid, why, why_len)))
		return rc;
	session = meta_u64(r->mf, "crcuda.session", &ok);
	r->j.upto = meta_u64(r->mf, "crcuda.journal_seq", &ok);
	meta_u64(r->mf, "crcuda.va_base", &ok);
	meta_u64(r->mf, "crcuda.va_size", &ok);
	if (!ok || !crc_manifest_meta_get(r->mf, "crcuda.handles")) {
		snprintf(why, why_len,
			 "checkpoint %" PRIu64 " lacks crcudad's metadata (not a crcuda checkpoint?)",
			 ckpt_id);
		return CRC_ECORRUPT;
	}
	rc = crc_store_journal_iterate(r->st, session, load_record, &r->j);
	if (rc < 0) {
		snprintf(why, why_len, "reading the journal of store session %" PRIu64 ": %s", session,
			 crc_strerror(rc));
		return rc;
	}
	return 0;
}

/* Opens the store and the checkpoint, makes the session at the checkpoint's device range and replays
 * its journal. */
static int rst_replay(struct rst *r, int fd, bool tcp, const struct crc_peer *peer,
		      const struct crc_ctl_restore_wire *w, const char *store_dir, char *why, size_t why_len)
{
	struct crc_peer p = *peer;
	bool ok = true;
	int rc;

	crc_test_delay("CRCUDA_TEST_REPLAY_DELAY_MS"); /* a long replay */
	snprintf(r->store_dir, sizeof(r->store_dir), "%s", store_dir);
	r->w = *w;
	rc = crc_store_open(store_dir, 0, &r->st);
	if (rc) {
		snprintf(why, why_len, "cannot open the store %s: %s", store_dir, crc_strerror(rc));
		return rc;
	}
	if ((rc = rst_load(r, w->ckpt_id, tcp, peer, why, why_len)))
		return rc;
	/* The very range: pointers into it live in the application's memory and in device memory. */
	rc = crc_va_window(meta_u64(r->mf, "crcuda.va_base", &ok), meta_u64(r->mf, "crcuda.va_size", &ok),
			   why, why_len);
	/* --gpu checked before anything is made. */
	if (!rc)
		rc = map_devices(NULL, r->mf, w, why, why_len);
	if (rc)
		return rc;
	p.pid = w->pid;
	rc = crc_session_create(fd, tcp, &p, &r->s, why, why_len);
	if (rc)
		return rc;
	/* Contexts are made, and device ordinals of later calls go, where --gpu says. */
	map_devices(r->s, r->mf, w, why, why_len);
	rc = crc_journal_mark_dead(r->j.items, r->j.n);
	if (rc)
		snprintf(why, why_len, "out of memory reading the journal");
	for (size_t i = 0; i < r->j.n && !rc; i++)
		if (!r->j.items[i].skip)
			rc = replay_one(r->s, r->st, r->j.r[i].seq, &r->j.items[i], why, why_len);
	return rc;
}

static bool same_text(const char *a, const char *b)
{
	return a == b || (a && b && !strcmp(a, b));
}

/* Whether two restore requests ask for the same GPUs. */
static bool same_gpus(const struct crc_ctl_restore_wire *a, const struct crc_ctl_restore_wire *b)
{
	return a->gpu == b->gpu && a->ngpus == b->ngpus && !memcmp(a->gpus, b->gpus, sizeof(a->gpus));
}

/* Whether checkpoint next (of the same store: rst_advance checks) can take over from cur's replayed
 * session: the same journal (record for record: the same calls made the same objects at the same
 * addresses), regions, device range and devices. Else why says what differs. */
static bool rst_same_state(const struct rst *cur, const struct rst *next, char *why, size_t why_len)
{
	static const char *const keys[] = {"crcuda.va_base", "crcuda.va_size", "crcuda.devices",
					   "crcuda.device"};
	const struct crc_manifest *a = cur->mf, *b = next->mf;

	if (!same_gpus(&cur->w, &next->w)) {
		snprintf(why, why_len, "other GPUs asked for");
		return false;
	}
	for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++)
		if (!same_text(crc_manifest_meta_get(a, keys[k]), crc_manifest_meta_get(b, keys[k]))) {
			snprintf(why, why_len, "another %s", keys[k]);
			return false;
		}
	if (cur->j.n != next->j.n) {
		snprintf(why, why_len, "%zu journal records, %zu staged", next->j.n, cur->j.n);
		return false;
	}
	for (size_t i = 0; i < cur->j.n; i++)
		if (cur->j.items[i].type != next->j.items[i].type || cur->j.r[i].len != next->j.r[i].len ||
		    memcmp(cur->j.r[i].payload, next->j.r[i].payload, cur->j.r[i].len)) {
			snprintf(why, why_len, "journal record %zu differs", i);
			return false;
		}
	if (a->nregions != b->nregions) {
		snprintf(why, why_len, "%u regions, %u staged", b->nregions, a->nregions);
		return false;
	}
	for (uint32_t i = 0; i < a->nregions; i++) {
		const struct crc_region *x = &a->regions[i], *y = &b->regions[i];
		bool same = x->kind == y->kind && x->addr == y->addr && x->size == y->size &&
			    x->nchunks == y->nchunks && same_text(x->name, y->name) &&
			    !memcmp(&x->module, &y->module, sizeof(x->module));

		for (uint32_t c = 0; same && c < x->nchunks; c++)
			same = x->chunks[c].length == y->chunks[c].length;
		if (!same) {
			snprintf(why, why_len, "region %u differs", i);
			return false;
		}
	}
	return true;
}

/* Moves the staged restore r to checkpoint w->ckpt_id: loads it, and where it continues r's state
 * uploads the chunks that differ and takes its manifest and journal. 0: done; CRC_EBUSY: it does not
 * continue it (why says how; r unchanged); else a failure (the device may hold a mix of the two: r
 * must be dropped). */
static int rst_advance(struct rst *r, const struct crc_ctl_restore_wire *w, bool tcp,
		       const struct crc_peer *peer, const char *store_dir, char *why, size_t why_len)
{
	struct rst next = {.w = *w};
	CUcontext dctx[CRC_MAX_DEVICES];
	int rc;

	snprintf(next.store_dir, sizeof(next.store_dir), "%s", store_dir);
	if (strcmp(store_dir, r->store_dir)) {
		snprintf(why, why_len, "another store");
		return CRC_EBUSY;
	}
	/* The very checkpoint staged (crcudactl restore staged it ahead): on the device already. */
	if (w->ckpt_id == r->w.ckpt_id && same_gpus(w, &r->w)) {
		r->w = *w;
		return 0;
	}
	/* Another one: on top of the staged one's memory, all of it up first. */
	if ((rc = upload_join(r->s, &(double){0}, why, why_len)))
		return rc;
	next.st = r->st;
	rc = rst_load(&next, w->ckpt_id, tcp, peer, why, why_len);
	if (!rc && !rst_same_state(r, &next, why, why_len))
		rc = CRC_EBUSY;
	/* The same records: the same ones were left out of the replay. */
	if (!rc && crc_journal_mark_dead(next.j.items, next.j.n)) {
		snprintf(why, why_len, "out of memory reading the journal");
		rc = CRC_ENOMEM;
	}
	if (!rc)
		rc = upload_all(r->s, r->st, next.mf, r->mf, dctx, crc_session_dev_ctxs(r->s, dctx) > 0, why,
				why_len);
	next.st = NULL;
	if (rc) {
		jload_free(&next.j);
		crc_manifest_free(next.mf);
		return rc;
	}
	jload_free(&r->j);
	crc_manifest_free(r->mf);
	r->j = next.j;
	r->mf = next.mf;
	r->w = *w;
	return 0;
}

/* ---- staged restores ---------------------------------------------------------------------------- */
/* A migration's destination stages each pre-copy round (crc_ctl_stage): this worker replays the
 * round's checkpoint and uploads its memory, then each later round only its changed chunks; the final
 * restore, sent here by the front under the same key, uploads the last changes and goes on as any
 * restore. The application's downtime then holds no full upload and no replay. One per worker. */
static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool held; /* r holds a staged restore */
	bool busy; /* a stage request is working on it (r taken out meanwhile) */
	/* Stage requests handed to this worker whose threads have not come to stage_take: the front
	 * hands a stage before a restore under its key, but their threads may start in either order. */
	unsigned expected;
	uint64_t key;
	struct rst r;
} stg = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};

/* Takes the restore staged under key out of stg into *r, once a stage request working on it (or
 * handed here before: expected) is done; false when there is none. busy: the caller stages now
 * (stage_done ends that); expected: it was counted at its hand-over. */
static bool stage_take(uint64_t key, struct rst *r, bool busy, bool expected)
{
	bool got;

	pthread_mutex_lock(&stg.lock);
	while (stg.busy || (!busy && stg.expected))
		pthread_cond_wait(&stg.cond, &stg.lock);
	if (expected)
		stg.expected--;
	got = stg.held && stg.key == key;
	if (got) {
		*r = stg.r;
		memset(&stg.r, 0, sizeof(stg.r));
		stg.held = false;
	}
	stg.busy = busy;
	pthread_mutex_unlock(&stg.lock);
	return got;
}

/* A stage request is done: r (when it holds a session) is what stays staged under key. */
static void stage_done(uint64_t key, struct rst *r)
{
	pthread_mutex_lock(&stg.lock);
	if (r->s) {
		stg.r = *r;
		stg.key = key;
		stg.held = true;
	}
	stg.busy = false;
	pthread_cond_broadcast(&stg.cond);
	pthread_mutex_unlock(&stg.lock);
}

void crc_restore_stage_expect(int n)
{
	pthread_mutex_lock(&stg.lock);
	stg.expected += (unsigned)n;
	pthread_cond_broadcast(&stg.cond);
	pthread_mutex_unlock(&stg.lock);
}

int crc_restore_stage(bool tcp, const struct crc_peer *peer, const struct crc_ctl_restore_wire *w,
		      const char *store_dir, bool expected, char *why, size_t why_len)
{
	struct rst r = {0};
	double t0 = crc_now_s();
	CUcontext dctx[CRC_MAX_DEVICES];
	const char *how = "staged";
	int rc = 0;

	crc_worker_restoring(1);
	crc_test_delay("CRCUDA_TEST_STAGE_DELAY_MS"); /* the restore under its key handed meanwhile */
	/* One per worker: the front sends only that key's requests here, and a worker staged under
	 * another key has its session (crc_session_create refuses a second). */
	if (stage_take(w->stage_key, &r, true, expected)) {
		char stale[CRC_CTL_MSG_MAX];

		rc = rst_advance(&r, w, tcp, peer, store_dir, stale, sizeof(stale));
		how = "moved on to";
		if (rc == CRC_EBUSY)
			pr_info("session %llu: checkpoint %" PRIu64 " does not continue the staged one (%s): "
				"staged afresh",
				(unsigned long long)r.s->id, w->ckpt_id, stale);
		if (rc) {
			rst_free(&r);
			how = "staged afresh";
		}
	}
	if (!r.s) {
		/* No process yet: the session has no connection of its own (the restore gives it one). */
		rc = rst_replay(&r, -1, tcp, peer, w, store_dir, why, why_len);
		/* Lazily: the restore that takes it goes on while the upload does. */
		if (!rc && restore_lazy(r.mf))
			rc = upload_lazy_start(r.s, r.st, r.mf, false, why, why_len);
		else if (!rc)
			rc = upload_all(r.s, r.st, r.mf, NULL, dctx, crc_session_dev_ctxs(r.s, dctx) > 0, why,
					why_len);
	}
	if (rc)
		rst_free(&r);
	else
		pr_info("session %llu: %s checkpoint %" PRIu64 " from %s in %.3f s%s",
			(unsigned long long)r.s->id, how, w->ckpt_id, store_dir, crc_now_s() - t0,
			r.s->upload ? ", its device memory still uploading" : "");
	stage_done(w->stage_key, &r);
	crc_worker_restoring(-1);
	return rc;
}

void crc_restore_stage_drop(uint64_t key)
{
	struct rst r;

	if (!stage_take(key, &r, false, false))
		return;
	pr_info("session %llu: the staged restore was not used: dropped", (unsigned long long)r.s->id);
	rst_free(&r);
}

int crc_restore(int fd, bool tcp, const struct crc_peer *peer, const struct crc_msg_hdr *req,
		const struct crc_ctl_restore_wire *w, const char *store_dir, char *why, size_t why_len)
{
	struct rst rs = {0};
	struct crc_store *st;
	struct crc_manifest *mf;
	struct crc_session *s;
	int rc = 0, memfd = -1;
	double t0 = crc_now_s();
	const char *handles, *exports, *how = "";
	bool lazy, staged = false;

	crc_worker_restoring(1);
	if (w->stage_key && stage_take(w->stage_key, &rs, false, false)) {
		/* Staged here: only what changed since goes up, then the session is this process's. */
		char stale[CRC_CTL_MSG_MAX];

		rc = rst_advance(&rs, w, tcp, peer, store_dir, stale, sizeof(stale));
		if (rc == CRC_EBUSY)
			pr_info("session %llu: checkpoint %" PRIu64 " does not continue the staged one (%s): "
				"restored afresh",
				(unsigned long long)rs.s->id, w->ckpt_id, stale);
		else if (rc)
			pr_warn("session %llu: the staged restore failed (%s): restored afresh",
				(unsigned long long)rs.s->id, stale);
		if (rc) {
			rst_free(&rs);
			rc = 0;
		} else {
			staged = true;
			how = " (staged ahead)";
			rs.s->fd = fd;
			rs.s->tcp = tcp;
			rs.s->peer = *peer;
			rs.s->peer.pid = w->pid;
		}
	}
	if (!staged && (rc = rst_replay(&rs, fd, tcp, peer, w, store_dir, why, why_len)))
		goto fail;
	st = rs.st;
	mf = rs.mf;
	s = rs.s;
	/* Handle tables continue where the checkpointed session's were. */
	handles = crc_manifest_meta_get(mf, "crcuda.handles");
	for (unsigned t = 1; t < CRC_HT_COUNT && handles && *handles; t++) {
		uint32_t n = (uint32_t)strtoul(handles, (char **)&handles, 10);

		if (n > s->tables[t].n)
			crc_register_at(s, crc_vhandle(t, n), (union crc_slot){.u64 = 0});
		if (*handles == ',')
			handles++;
	}
	exports = crc_manifest_meta_get(mf, "crcuda.ipc_exports");
	lazy = !staged && restore_lazy(mf);
	if (!lazy && !staged) {
		CUcontext dctx[CRC_MAX_DEVICES];

		rc = upload_all(s, st, mf, NULL, dctx, crc_session_dev_ctxs(s, dctx) > 0, why, why_len);
	}
	if (rc)
		goto fail;
	/* What it exported, under the keys the handles it gave out name: first, for a process tree's
	 * sessions import each other's as they are restored side by side. */
	crc_ipc_restore_exports(s, exports);
	/* Another process's memory the session had open: the export's as it is now (not in the
	 * checkpoint). A process tree's sessions are restored together: an exporter of theirs may come a
	 * moment later. */
	double ipc_wait = crc_manifest_meta_get(mf, "crcuda.tree") ? IPC_TREE_WAIT_S : 0;
	rc = crc_ipc_restore(s, crc_manifest_meta_get(mf, "crcuda.ipc_opens"), ipc_wait, why, why_len);
	if (!rc)
		rc = crc_ipc_restore_imports(s, crc_manifest_meta_get(mf, "crcuda.ipc_imports"), ipc_wait,
					     why, why_len);
	if (rc)
		goto fail;
	rc = crc_arrays_restore(s, st, mf, why, why_len);
	if (!rc)
		rc = crc_texobjs_restore(s, crc_manifest_meta_get(mf, "crcuda.texobjects"), why, why_len);
	if (rc)
		goto fail;
	rc = crc_events_rerecord(s, crc_manifest_meta_get(mf, "crcuda.recorded_events"), why, why_len);
	if (rc)
		goto fail;
	{
		/* Rebuilt at the client's first call (crc_graph_restore_pending), after its rebind. */
		const char *graphs = crc_manifest_meta_get(mf, "crcuda.graphs");

		if (graphs && *graphs && !(s->graphs_pending = strdup(graphs))) {
			snprintf(why, why_len, "out of memory");
			rc = CRC_ENOMEM;
			goto fail;
		}
	}
	{
		const char *deferred = crc_manifest_meta_get(mf, "crcuda.deferred_error");

		if (deferred)
			s->deferred = (CUresult)strtol(deferred, NULL, 10);
	}
	if (!tcp) {
		rc = crc_session_make_rings(s, &memfd);
		if (rc) {
			snprintf(why, why_len, "cannot make the session's rings: %s", crc_strerror(rc));
			goto fail;
		}
	} else {
		crc_chan_open_tcp(&s->chan, fd);
	}
	{
		/* The control reply, then the notice the restored process reads when it wakes. */
		struct crc_msg_hdr h = {
		    .len = sizeof(h) + sizeof(struct crc_ctl_reply), .op = req->op, .seq = req->seq};
		struct crc_ctl_reply r = {0};
		struct crc_sock_notice n = {.magic = CRC_PROTO_MAGIC,
					    .kind = CRC_NOTICE_REBIND,
					    .session_id = s->id,
					    .ring_size = crcd.ring_size,
					    .transport = tcp ? CRC_TRANSPORT_TCP : CRC_TRANSPORT_UNIX};
		size_t replayed = 0;

		for (size_t i = 0; i < rs.j.n; i++)
			replayed += !rs.j.items[i].skip;
		/* With TLS, the restorer (the CRIU plugin) forgets its session after the notice and passes
		 * the notice on to the restored process, which makes a new one with the notice's key. */
		if (tcp && crc_tls_on(fd)) {
			rc = crc_tls_random(n.key, sizeof(n.key));
			if (rc) {
				snprintf(why, why_len, "no random key: %s", crc_strerror(rc));
				goto fail;
			}
			n.flags = CRC_NOTICE_TLS;
			memcpy(s->tls_key, n.key, sizeof(n.key));
			s->tls_pending = true;
		}
		/* Listed as running before the restorer hears of it (its thread starts right after). */
		s->state = CRC_CTL_RUNNING;
		crc_worker_publish();
		rc = crc_sock_write_all(fd, &h, sizeof(h));
		if (!rc)
			rc = crc_sock_write_all(fd, &r, sizeof(r));
		if (!rc)
			rc = tcp ? crc_sock_write_all(fd, &n, sizeof(n))
				 : crc_sock_send_fds(fd, &n, sizeof(n), &memfd, 1);
		memset(n.key, 0, sizeof(n.key));
		if (tcp)
			crc_tls_drop(fd);
		if (memfd >= 0)
			close(memfd);
		memfd = -1;
		if (rc) {
			snprintf(why, why_len, "the restoring side went away: %s", crc_strerror(rc));
			goto fail;
		}
		pr_info("session %llu: restored checkpoint %" PRIu64
			"%s from %s (%zu of %zu journal records replayed, "
			"%u regions) in %.3f s",
			(unsigned long long)s->id, w->ckpt_id, how, store_dir, replayed, rs.j.n, mf->nregions,
			crc_now_s() - t0);
	}
	jload_free(&rs.j);
	if (lazy) {
		/* The upload goes on: the store and the manifest are its until crc_upload_wait. */
		rc = upload_lazy_start(s, st, mf, true, why, why_len);
		if (rc) {
			pr_err("session %llu: uploading the restored device memory failed: %s",
			       (unsigned long long)s->id, why);
			s->sticky = CUDA_ERROR_ILLEGAL_STATE;
		}
		if (s->upload) {
			st = NULL;
			mf = NULL;
		}
	} else if (s->upload) {
		/* Staged lazily: the upload started then goes on, and now owns them. */
		s->upload->owns = true;
		st = NULL;
		mf = NULL;
	}
	crc_manifest_free(mf);
	crc_store_close(st);
	crc_worker_restoring(-1);
	rc = crc_session_run(s);
	if (rc) {
		/* Too late for a clean reply: the client sees the socket close. */
		crc_session_destroy(s);
		close(fd);
		return 0;
	}
	return 0;
fail:
	if (memfd >= 0)
		close(memfd);
	rst_free(&rs);
	crc_worker_restoring(-1);
	return rc;
}
