/* libcrcuda's export tables: which UUIDs are served, that no served slot is NULL, what the served
 * slots answer, context-local storage (including destructors on context destruction and gets from
 * several threads while another thread writes), and the integrity hash against fixed vectors that
 * integrity_ref.py computes independently. With --print-vectors it prints its hashes for
 * integrity_ref.py to compare. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <unistd.h>

#include "check.h"
#include "export_tables.h"

/* ---- A fake of the rest of libcrcuda --------------------------------------------------------- */

static _Thread_local CUcontext fake_current;

static CUresult fake_primary_ctx(CUdevice dev, CUcontext *out)
{
	if (dev < 0 || dev > 1)
		return CUDA_ERROR_INVALID_DEVICE;
	*out = (CUcontext)(uintptr_t)(0x1000 + dev);
	return CUDA_SUCCESS;
}

static CUresult fake_current_ctx(CUcontext *out)
{
	*out = fake_current;
	return CUDA_SUCCESS;
}

static CUresult fake_ctx_id(CUcontext ctx, unsigned long long *id)
{
	*id = (uintptr_t)ctx * 3;
	return CUDA_SUCCESS;
}

/* Records what slot 39 passed on. */
static CUcontext seen_ctx;
static CUstream seen_stream;
static int seen_per_thread;

static CUresult fake_stream_id(CUcontext ctx, CUstream stream, int per_thread, unsigned long long *id)
{
	seen_ctx = ctx, seen_stream = stream, seen_per_thread = per_thread;
	*id = (uintptr_t)stream + 1000 * (unsigned)per_thread;
	return CUDA_SUCCESS;
}

static CUresult fake_driver_version(int *v)
{
	*v = 13000;
	return CUDA_SUCCESS;
}

static CUresult fake_device_count(int *n)
{
	*n = 2;
	return CUDA_SUCCESS;
}

/* The two devices of integrity_ref.py (DEV0, DEV1). */
static const struct crc_integrity_device ref_dev[2] = {
    {{{0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f}},
     0,
     0x1b,
     0},
    {{{(char)0xa0, (char)0xa1, (char)0xa2, (char)0xa3, (char)0xa4, (char)0xa5, (char)0xa6, (char)0xa7,
       (char)0xa8, (char)0xa9, (char)0xaa, (char)0xab, (char)0xac, (char)0xad, (char)0xae, (char)0xaf}},
     1,
     0xc3,
     2},
};

static CUresult fake_device_identity(int ordinal, CUuuid *uuid, int *domain, int *bus, int *device)
{
	if (ordinal < 0 || ordinal > 1)
		return CUDA_ERROR_INVALID_DEVICE;
	*uuid = ref_dev[ordinal].uuid;
	*domain = ref_dev[ordinal].pci_domain;
	*bus = ref_dev[ordinal].pci_bus;
	*device = ref_dev[ordinal].pci_device;
	return CUDA_SUCCESS;
}

static const struct crc_export_env fake_env = {
    .primary_ctx = fake_primary_ctx,
    .current_ctx = fake_current_ctx,
    .ctx_id = fake_ctx_id,
    .driver_version = fake_driver_version,
    .device_count = fake_device_count,
    .device_identity = fake_device_identity,
    .stream_id = fake_stream_id,
};

/* ---- Helpers --------------------------------------------------------------------------------- */

static CUuuid uuid_of(const char *hex)
{
	CUuuid u;

	for (int i = 0; i < 16; i++) {
		unsigned v;
		CHECK(sscanf(hex + 2 * i, "%2x", &v) == 1);
		u.bytes[i] = (char)v;
	}
	return u;
}

#define U_CUDART    "6bd5fb6c5bf4e74a8987d93912fd9df9"
#define U_HOOKS	    "a094798c2e742e7493f20800200c0a66"
#define U_TLS	    "42d85a8123f6cb478298f6e78a3aecdc"
#define U_CLS	    "c693336e1121df11a8c368f355d89593"
#define U_CHECKS    "263e88607cd2614392f6bbd5006dfa7e"
#define U_INTEGRITY "d4082055bde6704b8d34ba123c66e1f2"
#define U_CTX	    "21318c60971432488ca641ff7324c8f2"
#define U_F8CF	    "f8cff95121468b4eb9e2fb469e7c0dd9"

static void *const *table(const char *hex)
{
	CUuuid u = uuid_of(hex);
	const void *t = NULL;

	CHECK_EQ_INT(crc_export_table_get(&t, &u), CUDA_SUCCESS);
	CHECK(t != NULL);
	return (void *const *)t;
}

typedef CUresult (*fn_primary_t)(CUcontext *, CUdevice);
typedef void (*fn_buf_t)(void **, size_t *);
typedef CUresult (*fn_cur_t)(CUcontext *);
typedef void (*cls_dtor_t)(CUcontext, void *, void *);
typedef CUresult (*fn_put_t)(CUcontext, void *, void *, cls_dtor_t);
typedef CUresult (*fn_del_t)(CUcontext, void *);
typedef CUresult (*fn_get_t)(void **, CUcontext, void *);
typedef CUresult (*fn_check_t)(CUcontext, unsigned *, const void **);
typedef unsigned (*fn_check3_t)(void);
typedef CUresult (*fn_integrity_t)(unsigned, uint64_t, uint64_t *);
typedef CUresult (*fn_id_t)(CUcontext, unsigned long long *);
typedef CUresult (*fn_stub_t)(void);

/* ---- Table presence and shape ---------------------------------------------------------------- */

static void test_refusals(void)
{
	CUuuid unknown = uuid_of("00112233445566778899aabbccddeeff");
	CUuuid f8cf = uuid_of(U_F8CF);
	const void *t = (const void *)&t;

	CHECK_EQ_INT(crc_export_table_get(&t, &unknown), CUDA_ERROR_INVALID_VALUE);
	CHECK(t == NULL);
	t = (const void *)&t;
	CHECK_EQ_INT(crc_export_table_get(&t, &unknown), CUDA_ERROR_INVALID_VALUE); /* logged once only */
	CHECK(t == NULL);
	CHECK_EQ_INT(crc_export_table_get(&t, &f8cf), CUDA_ERROR_INVALID_VALUE);
	CHECK(t == NULL);
	CHECK_EQ_INT(crc_export_table_get(NULL, &unknown), CUDA_ERROR_INVALID_VALUE);
	CHECK_EQ_INT(crc_export_table_get(&t, NULL), CUDA_ERROR_INVALID_VALUE);
}

/* A table with a size word: the word is words * 8 and no slot after it is NULL. */
static void check_sized(const char *hex, size_t words)
{
	void *const *t = table(hex);

	CHECK_EQ_INT((uintptr_t)t[0], words * sizeof(void *));
	for (size_t i = 1; i < words; i++) {
		if (!t[i])
			fprintf(stderr, "table %s slot %zu is NULL\n", hex, i);
		CHECK(t[i] != NULL);
	}
	/* Same table every time. */
	CHECK(table(hex) == t);
}

static void test_shapes(void)
{
	check_sized(U_CUDART, 13);
	check_sized(U_HOOKS, 7);
	check_sized(U_TLS, 4);
	check_sized(U_CHECKS, 17);
	check_sized(U_INTEGRITY, 3);
	check_sized(U_CTX, 95);
	void *const *cls = table(U_CLS);
	CHECK(cls[0] && cls[1] && cls[2]);
	CHECK(cls[3] == NULL); /* as in the real driver: the end of a table with no size word */
}

static void test_stubs(void)
{
	/* Unserved slots answer an error instead of crashing, including the module-loading ones. */
	CHECK_EQ_INT(((fn_stub_t)table(U_CUDART)[1])(), CUDA_ERROR_NOT_SUPPORTED);
	CHECK_EQ_INT(((fn_stub_t)table(U_CUDART)[1])(), CUDA_ERROR_NOT_SUPPORTED); /* logged once */
	CHECK_EQ_INT(((fn_stub_t)table(U_CUDART)[6])(), CUDA_ERROR_NOT_SUPPORTED);
	CHECK_EQ_INT(((fn_stub_t)table(U_HOOKS)[1])(), CUDA_ERROR_NOT_SUPPORTED);
	CHECK_EQ_INT(((fn_stub_t)table(U_TLS)[3])(), CUDA_ERROR_NOT_SUPPORTED);
	CHECK_EQ_INT(((fn_stub_t)table(U_CHECKS)[16])(), CUDA_ERROR_NOT_SUPPORTED);
	CHECK_EQ_INT(((fn_stub_t)table(U_INTEGRITY)[2])(), CUDA_ERROR_NOT_SUPPORTED);
	CHECK_EQ_INT(((fn_stub_t)table(U_CTX)[94])(), CUDA_ERROR_NOT_SUPPORTED);
	/* Distinct functions, so each logs its own slot. */
	CHECK(table(U_CTX)[93] != table(U_CTX)[94]);
}

/* ---- Served slots ---------------------------------------------------------------------------- */

static void test_before_init(void)
{
	CUcontext c = NULL;

	CHECK_EQ_INT(((fn_primary_t)table(U_CUDART)[2])(&c, 0), CUDA_ERROR_NOT_INITIALIZED);
	CHECK_EQ_INT(((fn_cur_t)table(U_TLS)[2])(&c), CUDA_ERROR_NOT_INITIALIZED);
	/* Integrity versions with fixed answers need nothing. */
	uint64_t h[2];
	CHECK_EQ_INT(((fn_integrity_t)table(U_INTEGRITY)[1])(13000, 1, h), CUDA_SUCCESS);
	CHECK(h[0] == 0x3341181c03cb675cull && h[1] == 0x8ed383aa1f4cd1e8ull);
	CHECK_EQ_INT(((fn_integrity_t)table(U_INTEGRITY)[1])(13002, 1, h), CUDA_ERROR_NOT_INITIALIZED);
}

static void test_slots(void)
{
	CUcontext c = NULL;
	void *p1, *p2, *p3;
	size_t n1, n2, n3;

	CHECK_EQ_INT(((fn_primary_t)table(U_CUDART)[2])(&c, 1), CUDA_SUCCESS);
	CHECK(c == (CUcontext)0x1001);
	CHECK_EQ_INT(((fn_primary_t)table(U_CUDART)[2])(&c, 7), CUDA_ERROR_INVALID_DEVICE);
	CHECK_EQ_INT(((fn_primary_t)table(U_CUDART)[2])(NULL, 0), CUDA_ERROR_INVALID_VALUE);
	CHECK_EQ_INT(((CUresult(*)(size_t))table(U_CUDART)[7])(5), CUDA_SUCCESS);
	CHECK_EQ_INT(((CUresult(*)(void))table(U_CUDART)[12])(), CUDA_SUCCESS);

	((fn_buf_t)table(U_HOOKS)[2])(&p1, &n1);
	((fn_buf_t)table(U_HOOKS)[6])(&p2, &n2);
	((fn_buf_t)table(U_HOOKS)[2])(&p3, &n3);
	CHECK(p1 && p2 && p1 != p2 && p3 == p1);
	CHECK_EQ_INT(n1, 1024);
	CHECK_EQ_INT(n2, 14);
	memset(p1, 0xab, 1024 * 8); /* the backing store is large enough whatever the unit */
	memset(p2, 0xab, 14 * 8);

	fake_current = (CUcontext)0x5000;
	CHECK_EQ_INT(((fn_cur_t)table(U_TLS)[2])(&c), CUDA_SUCCESS);
	CHECK(c == (CUcontext)0x5000);
	fake_current = NULL;
	CHECK_EQ_INT(((fn_cur_t)table(U_TLS)[2])(&c), CUDA_SUCCESS);
	CHECK(c == NULL);

	unsigned r1 = 77;
	const void *r2 = &r1;
	CHECK_EQ_INT(((fn_check_t)table(U_CHECKS)[2])((CUcontext)0x5000, &r1, &r2), CUDA_SUCCESS);
	CHECK_EQ_INT(r1, 0);
	CHECK(r2 == &r1);
	CHECK_EQ_INT(((fn_check3_t)table(U_CHECKS)[3])(), 0);

	unsigned long long id = 0;
	CHECK_EQ_INT(((fn_id_t)table(U_CTX)[4])((CUcontext)0x5000, &id), CUDA_SUCCESS);
	CHECK_EQ_INT(id, 0x5000 * 3);
	CHECK_EQ_INT(((fn_id_t)table(U_CTX)[4])(NULL, &id), CUDA_ERROR_INVALID_CONTEXT);
	fake_current = (CUcontext)0x6000;
	CHECK_EQ_INT(((fn_id_t)table(U_CTX)[4])(NULL, &id), CUDA_SUCCESS);
	CHECK_EQ_INT(id, 0x6000 * 3);
	fake_current = NULL;

	/* Slot 51 (ctx, stream, *out, per_thread): the stream object a handle stands for. Special handles
	 * become the default stream the byte argument picks (crcuda: CU_STREAM_LEGACY/PER_THREAD); other
	 * handles are themselves; a NULL out and the (CUstream)-1 handle are refused. */
	typedef CUresult (*fn_stream_resolve_t)(CUcontext, CUstream, CUstream *, unsigned char);
	fn_stream_resolve_t resolve = (fn_stream_resolve_t)table(U_CTX)[51];
	CUstream obj = NULL;
	CHECK_EQ_INT(resolve((CUcontext)0x5000, (CUstream)0x7000, &obj, 0), CUDA_SUCCESS);
	CHECK(obj == (CUstream)0x7000);
	CHECK_EQ_INT(resolve((CUcontext)0x5000, NULL, &obj, 0), CUDA_SUCCESS);
	CHECK(obj == CU_STREAM_LEGACY);
	CHECK_EQ_INT(resolve((CUcontext)0x5000, NULL, &obj, 1), CUDA_SUCCESS);
	CHECK(obj == CU_STREAM_PER_THREAD);
	CHECK_EQ_INT(resolve((CUcontext)0x5000, CU_STREAM_PER_THREAD, &obj, 0), CUDA_SUCCESS);
	CHECK(obj == CU_STREAM_PER_THREAD);
	CHECK_EQ_INT(resolve(NULL, (CUstream)0x7000, NULL, 0), CUDA_ERROR_INVALID_VALUE);
	CHECK_EQ_INT(resolve(NULL, (CUstream)(uintptr_t)-1, &obj, 0), CUDA_ERROR_INVALID_HANDLE);

	/* Slot 39 (ctx, stream, *id): the id of what slot 51 gave, as cuStreamGetId; the context counts
	 * only for the default streams; a NULL stream or id is refused. */
	typedef CUresult (*fn_stream_id_t)(CUcontext, CUstream, unsigned long long *);
	fn_stream_id_t stream_id = (fn_stream_id_t)table(U_CTX)[39];
	CHECK_EQ_INT(stream_id((CUcontext)0x5000, (CUstream)0x7100, &id), CUDA_SUCCESS);
	CHECK(seen_stream == (CUstream)0x7100 && seen_ctx == NULL && !seen_per_thread);
	CHECK_EQ_INT(id, 0x7100);
	CHECK_EQ_INT(resolve((CUcontext)0x5000, NULL, &obj, 1), CUDA_SUCCESS);
	CHECK_EQ_INT(stream_id((CUcontext)0x5000, obj, &id), CUDA_SUCCESS);
	CHECK(seen_ctx == (CUcontext)0x5000 && seen_stream == CU_STREAM_PER_THREAD && seen_per_thread == 1);
	CHECK_EQ_INT(id, 2 + 1000);
	CHECK_EQ_INT(stream_id(NULL, NULL, &id), CUDA_ERROR_INVALID_VALUE);
	CHECK_EQ_INT(stream_id(NULL, (CUstream)0x7100, NULL), CUDA_ERROR_INVALID_VALUE);
}

/* ---- Context-local storage ------------------------------------------------------------------- */

#define MAX_DTOR 4096
static struct {
	CUcontext ctx;
	void *key, *value;
} dtor_log[MAX_DTOR];
static atomic_int dtor_n;

static void dtor(CUcontext ctx, void *key, void *value)
{
	int i = atomic_fetch_add(&dtor_n, 1);

	CHECK(i < MAX_DTOR);
	dtor_log[i].ctx = ctx;
	dtor_log[i].key = key;
	dtor_log[i].value = value;
}

static fn_put_t cls_put;
static fn_del_t cls_del;
static fn_get_t cls_get;

#define CTX(n)	  ((CUcontext)(uintptr_t)(0x100000 + (n)*0x1000))
#define KEY(n)	  ((void *)(uintptr_t)(0x200000 + (n)*0x10))
#define VAL(c, k) ((void *)(uintptr_t)(((uintptr_t)(c) << 20) ^ (uintptr_t)(k) ^ 0x5a5a))

static void test_cls_basic(void)
{
	void *v = NULL;
	void *const *t = table(U_CLS);

	cls_put = (fn_put_t)t[0];
	cls_del = (fn_del_t)t[1];
	cls_get = (fn_get_t)t[2];

	CHECK_EQ_INT(cls_get(&v, CTX(1), KEY(1)), CUDA_ERROR_INVALID_HANDLE);
	CHECK_EQ_INT(cls_put(CTX(1), KEY(1), VAL(1, 1), dtor), CUDA_SUCCESS);
	CHECK_EQ_INT(cls_get(&v, CTX(1), KEY(1)), CUDA_SUCCESS);
	CHECK(v == VAL(1, 1));
	CHECK_EQ_INT(cls_get(&v, CTX(2), KEY(1)), CUDA_ERROR_INVALID_HANDLE); /* keyed by context too */
	CHECK_EQ_INT(cls_get(NULL, CTX(1), KEY(1)), CUDA_ERROR_INVALID_VALUE);

	/* NULL means the current context; with none current that is an error. */
	CHECK_EQ_INT(cls_get(&v, NULL, KEY(1)), CUDA_ERROR_INVALID_CONTEXT);
	CHECK_EQ_INT(cls_put(NULL, KEY(2), VAL(1, 2), NULL), CUDA_ERROR_INVALID_CONTEXT);
	fake_current = CTX(1);
	CHECK_EQ_INT(cls_get(&v, NULL, KEY(1)), CUDA_SUCCESS);
	CHECK(v == VAL(1, 1));
	CHECK_EQ_INT(cls_put(NULL, KEY(2), VAL(1, 2), NULL), CUDA_SUCCESS);
	CHECK_EQ_INT(cls_get(&v, CTX(1), KEY(2)), CUDA_SUCCESS);
	CHECK(v == VAL(1, 2));
	fake_current = NULL;

	/* Put again replaces, without running the old destructor. */
	CHECK_EQ_INT(cls_put(CTX(1), KEY(1), VAL(9, 9), dtor), CUDA_SUCCESS);
	CHECK_EQ_INT(cls_get(&v, CTX(1), KEY(1)), CUDA_SUCCESS);
	CHECK(v == VAL(9, 9));
	CHECK_EQ_INT(atomic_load(&dtor_n), 0);

	/* Delete drops the entry without its destructor. */
	CHECK_EQ_INT(cls_del(CTX(1), KEY(2)), CUDA_SUCCESS);
	CHECK_EQ_INT(cls_get(&v, CTX(1), KEY(2)), CUDA_ERROR_INVALID_HANDLE);
	CHECK_EQ_INT(cls_del(CTX(1), KEY(2)), CUDA_ERROR_INVALID_HANDLE);
	CHECK_EQ_INT(atomic_load(&dtor_n), 0);

	/* Destroying a context runs its destructors with (ctx, key, value), and only its own. */
	CHECK_EQ_INT(cls_put(CTX(1), KEY(3), VAL(1, 3), dtor), CUDA_SUCCESS);
	CHECK_EQ_INT(cls_put(CTX(1), KEY(4), VAL(1, 4), NULL), CUDA_SUCCESS);
	CHECK_EQ_INT(cls_put(CTX(2), KEY(3), VAL(2, 3), dtor), CUDA_SUCCESS);
	crc_export_ctx_destroyed(CTX(1));
	CHECK_EQ_INT(atomic_load(&dtor_n), 2);
	bool saw1 = false, saw3 = false;
	for (int i = 0; i < 2; i++) {
		CHECK(dtor_log[i].ctx == CTX(1));
		if (dtor_log[i].key == KEY(1) && dtor_log[i].value == VAL(9, 9))
			saw1 = true;
		if (dtor_log[i].key == KEY(3) && dtor_log[i].value == VAL(1, 3))
			saw3 = true;
	}
	CHECK(saw1 && saw3);
	for (int k = 1; k <= 4; k++)
		CHECK_EQ_INT(cls_get(&v, CTX(1), KEY(k)), CUDA_ERROR_INVALID_HANDLE);
	CHECK_EQ_INT(cls_get(&v, CTX(2), KEY(3)), CUDA_SUCCESS);
	CHECK(v == VAL(2, 3));
	crc_export_ctx_destroyed(CTX(1)); /* nothing left: no more calls */
	CHECK_EQ_INT(atomic_load(&dtor_n), 2);
	crc_export_ctx_destroyed(CTX(2));
	CHECK_EQ_INT(atomic_load(&dtor_n), 3);
	/* A reset primary context keeps its handle: it can take new values afterwards. */
	CHECK_EQ_INT(cls_put(CTX(1), KEY(1), VAL(1, 1), dtor), CUDA_SUCCESS);
	CHECK_EQ_INT(cls_get(&v, CTX(1), KEY(1)), CUDA_SUCCESS);
	crc_export_ctx_destroyed(CTX(1));
	atomic_store(&dtor_n, 0);
}

/* Growth past many doublings, then churn that leaves tombstones to be cleaned in place. */
static void test_cls_growth(void)
{
	void *v;

	for (int c = 0; c < 8; c++)
		for (int k = 0; k < 300; k++)
			CHECK_EQ_INT(cls_put(CTX(c), KEY(k), VAL(CTX(c), KEY(k)), NULL), CUDA_SUCCESS);
	for (int c = 0; c < 8; c++)
		for (int k = 0; k < 300; k++) {
			CHECK_EQ_INT(cls_get(&v, CTX(c), KEY(k)), CUDA_SUCCESS);
			CHECK(v == VAL(CTX(c), KEY(k)));
		}
	for (int c = 1; c < 8; c++)
		crc_export_ctx_destroyed(CTX(c));
	for (int i = 0; i < 20000; i++) {
		CHECK_EQ_INT(cls_put(CTX(9), KEY(1000 + i), VAL(9, i), NULL), CUDA_SUCCESS);
		CHECK_EQ_INT(cls_del(CTX(9), KEY(1000 + i)), CUDA_SUCCESS);
	}
	for (int k = 0; k < 300; k++) {
		CHECK_EQ_INT(cls_get(&v, CTX(0), KEY(k)), CUDA_SUCCESS);
		CHECK(v == VAL(CTX(0), KEY(k)));
		CHECK_EQ_INT(cls_get(&v, CTX(1), KEY(k)), CUDA_ERROR_INVALID_HANDLE);
	}
	crc_export_ctx_destroyed(CTX(0));
}

/* Readers hammer stable keys while a writer grows, churns and destroys around them. */
#define READERS	     4
#define STABLE	     64
#define READ_ROUNDS  200000
#define WRITE_ROUNDS 20000

static atomic_bool writer_done;
static atomic_long reads_done;

static void *reader(void *arg)
{
	long n = 0;
	void *v;

	(void)arg;
	fake_current = CTX(50);
	while (!atomic_load(&writer_done) || n < READ_ROUNDS) {
		int k = (int)(n % STABLE);
		CHECK_EQ_INT(cls_get(&v, NULL, KEY(k)), CUDA_SUCCESS);
		CHECK(v == VAL(CTX(50), KEY(k)));
		/* Churned keys are absent or hold their own value, never another's. */
		CUresult r = cls_get(&v, CTX(60), KEY(5000 + (int)(n % 97)));
		CHECK(r == CUDA_ERROR_INVALID_HANDLE ||
		      (r == CUDA_SUCCESS && v == VAL(CTX(60), KEY(5000 + n % 97))));
		n++;
	}
	atomic_fetch_add(&reads_done, n);
	return NULL;
}

static void *writer(void *arg)
{
	(void)arg;
	for (int i = 0; i < WRITE_ROUNDS; i++) {
		int k = 5000 + i % 97;
		CHECK_EQ_INT(cls_put(CTX(60), KEY(k), VAL(CTX(60), KEY(k)), NULL), CUDA_SUCCESS);
		if (i % 3 == 0)
			cls_del(CTX(60), KEY(5000 + (i * 7) % 97));
		/* Many short-lived contexts: growth, then tombstones. */
		CHECK_EQ_INT(cls_put(CTX(100 + i % 500), KEY(i), VAL(1, i), NULL), CUDA_SUCCESS);
		if (i % 500 == 499)
			for (int c = 0; c < 500; c++)
				crc_export_ctx_destroyed(CTX(100 + c));
	}
	atomic_store(&writer_done, true);
	return NULL;
}

static void test_cls_concurrent(void)
{
	pthread_t r[READERS], w;

	for (int k = 0; k < STABLE; k++)
		CHECK_EQ_INT(cls_put(CTX(50), KEY(k), VAL(CTX(50), KEY(k)), NULL), CUDA_SUCCESS);
	for (int i = 0; i < READERS; i++)
		CHECK_EQ_INT(pthread_create(&r[i], NULL, reader, NULL), 0);
	CHECK_EQ_INT(pthread_create(&w, NULL, writer, NULL), 0);
	CHECK_EQ_INT(pthread_join(w, NULL), 0);
	for (int i = 0; i < READERS; i++)
		CHECK_EQ_INT(pthread_join(r[i], NULL), 0);
	CHECK(atomic_load(&reads_done) >= (long)READERS * READ_ROUNDS);
	crc_export_ctx_destroyed(CTX(50));
	crc_export_ctx_destroyed(CTX(60));
}

/* ---- Integrity hash -------------------------------------------------------------------------- */

struct vector {
	const char *name;
	struct crc_integrity_input in;
	unsigned ndev;
	uint64_t want[2]; /* from integrity_ref.py */
};

#define IN_A(v)                                                                                              \
	{                                                                                                    \
		13000, v, 1234, 0x9abcdef0, 0x7f0000001000, 0x7f0000002000, 0x7f0000003000, 1700000000       \
	}
static const struct vector vectors[] = {
    {"v13000", IN_A(13000), 0, {0x3341181c03cb675cull, 0x8ed383aa1f4cd1e8ull}},
    {"v13001", IN_A(13001), 0, {0x1841181c03cb675cull, 0x8ed383aa1f4cd1e8ull}},
    {"nodev", IN_A(13002), 0, {0x4d1c76bcae844c41ull, 0x95c36ed805d60bd0ull}},
    {"onedev", IN_A(13002), 1, {0xb19a7d9fc8eb5bdaull, 0xee26a8cafd32518cull}},
    {"twodev",
     {13000, 13002, 4242, 0xf7ff1740, 0x7ffff6958240, 0x7ffff6958220, 0x7ffff2aaf4a0, 1747688686},
     2,
     {0xd7c7eceaec12b821ull, 0x02545e0a2401499bull}},
};
#define NVEC (sizeof(vectors) / sizeof(vectors[0]))

static void print_vectors(void)
{
	uint8_t d[16];

	crc_md2("abc", 3, d);
	printf("md2_abc ");
	for (int i = 0; i < 16; i++)
		printf("%02x", d[i]);
	printf("\n");
	for (size_t i = 0; i < NVEC; i++) {
		uint64_t h[2];
		crc_integrity_hash(&vectors[i].in, ref_dev, vectors[i].ndev, h);
		printf("%s %016llx %016llx\n", vectors[i].name, (unsigned long long)h[0],
		       (unsigned long long)h[1]);
	}
}

static void check_md2(const char *msg, const char *hex)
{
	uint8_t d[16];
	char got[33];

	crc_md2(msg, strlen(msg), d);
	for (int i = 0; i < 16; i++)
		snprintf(got + 2 * i, 3, "%02x", d[i]);
	CHECK_EQ_STR(got, hex);
}

static void test_integrity(void)
{
	/* RFC 1319's test suite. */
	check_md2("", "8350e5a3e24c153df2275c9f80692773");
	check_md2("abc", "da853b0d3f88d99b30283a69e6ded6bb");
	check_md2("message digest", "ab4f496bfb2a530b219ff33031fe06b0");
	check_md2("12345678901234567890123456789012345678901234567890123456789012345678901234567890",
		  "d5976f79d83d3a0dc9806c3c66f3efd8");

	for (size_t i = 0; i < NVEC; i++) {
		uint64_t h[2], h2[2];
		crc_integrity_hash(&vectors[i].in, ref_dev, vectors[i].ndev, h);
		crc_integrity_hash(&vectors[i].in, ref_dev, vectors[i].ndev, h2);
		if (h[0] != vectors[i].want[0] || h[1] != vectors[i].want[1])
			fprintf(stderr, "vector %s: got %016llx %016llx\n", vectors[i].name,
				(unsigned long long)h[0], (unsigned long long)h[1]);
		CHECK(h[0] == vectors[i].want[0] && h[1] == vectors[i].want[1]);
		CHECK(h[0] == h2[0] && h[1] == h2[1]);
	}
	/* Every input matters. */
	struct crc_integrity_input in = vectors[2].in;
	uint64_t base[2], h[2];
	crc_integrity_hash(&in, ref_dev, 0, base);
	in.unix_seconds++;
	crc_integrity_hash(&in, ref_dev, 0, h);
	CHECK(h[0] != base[0] || h[1] != base[1]);
	in = vectors[2].in;
	in.fn_address += 16;
	crc_integrity_hash(&in, ref_dev, 0, h);
	CHECK(h[0] != base[0] || h[1] != base[1]);

	/* Slot 1 hashes this process's own inputs: the pure function given the same ones agrees. */
	void *const *tbl = table(U_INTEGRITY);
	uint64_t got[2];
	CHECK_EQ_INT(((fn_integrity_t)tbl[1])(13001, 99, got), CUDA_SUCCESS);
	CHECK(got[0] == 0x1841181c03cb675cull && got[1] == 0x8ed383aa1f4cd1e8ull);
	CHECK_EQ_INT(((fn_integrity_t)tbl[1])(13002, 1747688686, NULL), CUDA_ERROR_INVALID_VALUE);
	CHECK_EQ_INT(((fn_integrity_t)tbl[1])(13002, 1747688686, got), CUDA_SUCCESS);
	struct crc_integrity_input mine = {
	    .driver_version = 13000,
	    .version = 13002,
	    .pid = (uint32_t)getpid(),
	    .tid = (uint32_t)(uintptr_t)pthread_self(),
	    .cudart_table = (uintptr_t)table(U_CUDART),
	    .integrity_table = (uintptr_t)tbl,
	    .fn_address = (uintptr_t)tbl[1],
	    .unix_seconds = 1747688686,
	};
	uint64_t want[2];
	crc_integrity_hash(&mine, ref_dev, 2, want);
	CHECK(got[0] == want[0] && got[1] == want[1]);
}

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "--print-vectors")) {
		print_vectors();
		return 0;
	}
	test_refusals();
	test_shapes();
	test_stubs();
	test_before_init();
	crc_export_tables_init(&fake_env);
	test_slots();
	test_cls_basic();
	test_cls_growth();
	test_cls_concurrent();
	test_integrity();
	printf("export tables: ok\n");
	return 0;
}
