/* The backend: the real libcuda or the simulated device, dlopened by path, every entry point of the
 * driver API table resolved into a typed pointer. */
#define LOG_PREFIX "backend: "
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "crcuda/errno.h"
#include "crcuda/log.h"
#include "worker.h"

struct crc_backend crc_be;

CUstreamCaptureMode crc_thread_capture_relaxed(void)
{
	CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;

	CALL(cuThreadExchangeStreamCaptureMode, &mode);
	return mode;
}

struct thread_start {
	void *(*fn)(void *);
	void *arg;
};

static void *thread_main(void *arg)
{
	struct thread_start ts = *(struct thread_start *)arg;

	free(arg);
	crc_thread_capture_relaxed();
	return ts.fn(ts.arg);
}

int crc_thread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *), void *arg)
{
	struct thread_start *ts = malloc(sizeof(*ts));
	int rc;

	if (!ts)
		return ENOMEM;
	*ts = (struct thread_start){.fn = fn, .arg = arg};
	rc = pthread_create(t, attr, thread_main, ts);
	if (rc)
		free(ts);
	return rc;
}

int crc_backend_load(const char *path)
{
	unsigned missing = 0;
	/* RTLD_LOCAL: nothing else in the daemon binds to it by accident (no DEEPBIND: ASan refuses it;
	 * the daemon itself defines no cu* symbol). */
	void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);

	if (!lib) {
		pr_err("cannot load the backend %s: %s", path, dlerror());
		return CRC_ENOENT;
	}
#define CRC_CU_API(sym, parent, base, version, policy, pt, ret, params, args)                                \
	*(void **)&crc_be.sym##_fn = dlsym(lib, #sym);                                                       \
	missing += !crc_be.sym##_fn;
#include "crcuda/cuda_api.def"
#undef CRC_CU_API
	if (!crc_be.cuInit_fn || !crc_be.cuDeviceGetCount_fn) {
		pr_err("%s is not a CUDA driver (no cuInit)", path);
		return CRC_EINVAL;
	}
	pr_info("backend %s: %u of %d entry points missing", path, missing, CRC_CU_COUNT);
	return 0;
}
