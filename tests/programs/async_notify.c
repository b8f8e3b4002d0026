/* async_notify: async notifications (cuDeviceRegisterAsyncNotification and its unregistration). The
 * only type is a process over its device memory budget: the program allocates 64 MiB twice and waits
 * up to 2 s for notifications (the simulated device has a budget when CRCUDA_SIM_MEM_BUDGET_MB is set,
 * as its tests do; a GPU may never send one). It prints the driver's answers (bad device, NULL
 * arguments, a registration from inside a callback) and what the callbacks got: the type, the bytes
 * over, their userData and handle, and nothing for an unregistered callback. */
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "cuda_test.h"

struct got {
	atomic_int n;
	unsigned type;
	unsigned long long over;
	CUasyncCallbackHandle handle;
	CUresult nested;
};

static struct got g1, g2;

static void on_note(CUasyncNotificationInfo *info, void *userData, CUasyncCallbackHandle callback)
{
	struct got *g = userData;
	CUasyncCallbackHandle other;

	g->type = info->type;
	g->over =
	    info->type == CU_ASYNC_NOTIFICATION_TYPE_OVER_BUDGET ? info->info.overBudget.bytesOverBudget : 0;
	g->handle = callback;
	g->nested = cuDeviceRegisterAsyncNotification(0, on_note, NULL, &other);
	atomic_fetch_add(&g->n, 1);
}

static void wait_for(struct got *g)
{
	struct timespec ts = {0, 10 * 1000 * 1000};

	for (int i = 0; i < 200 && !atomic_load(&g->n); i++)
		nanosleep(&ts, NULL);
}

static void report(const char *what, struct got *g, CUasyncCallbackHandle h)
{
	int n = atomic_load(&g->n);

	if (!n) {
		printf("%s: no notification\n", what);
		return;
	}
	printf("%s: notified (type %u, %llu MiB over budget, handle %s, a registration inside: %s)\n", what,
	       g->type, g->over >> 20, g->handle == h ? "its own" : "another", cu_error_name(g->nested));
}

int main(void)
{
	CUdevice dev;
	CUasyncCallbackHandle h1 = NULL, h2 = NULL;
	CUdeviceptr a, b;
	CUresult res;
	struct timespec ts = {0, 200 * 1000 * 1000};

	cu_test_init("async_notify");
	cu_test_primary_context(&dev);
	printf("register(device 99): %s\n",
	       cu_error_name(cuDeviceRegisterAsyncNotification(99, on_note, &g1, &h1)));
	printf("register(NULL function): %s\n",
	       cu_error_name(cuDeviceRegisterAsyncNotification(dev, NULL, &g1, &h1)));
	/* (a NULL handle: the H100's driver, 580, crashes on it; not probed) */
	res = cuDeviceRegisterAsyncNotification(dev, on_note, &g1, &h1);
	printf("register: %s\n", cu_error_name(res));
	if (res == CUDA_ERROR_NOT_SUPPORTED)
		cu_test_pass("async_notify");
	CU_CHECK(res);
	CU_CHECK(cuDeviceRegisterAsyncNotification(dev, on_note, &g2, &h2));
	CHECK(h1 && h2 && h1 != h2);

	CU_CHECK(cuMemAlloc(&a, 64 << 20));
	wait_for(&g1);
	wait_for(&g2);
	report("first callback", &g1, h1);
	report("second callback", &g2, h2);

	printf("unregister(device 99): %s\n", cu_error_name(cuDeviceUnregisterAsyncNotification(99, h1)));
	printf("unregister(NULL): %s\n", cu_error_name(cuDeviceUnregisterAsyncNotification(dev, NULL)));
	CU_CHECK(cuDeviceUnregisterAsyncNotification(dev, h1));
	memset(&g1, 0, sizeof(g1));
	memset(&g2, 0, sizeof(g2));
	CU_CHECK(cuMemAlloc(&b, 64 << 20));
	wait_for(&g2);
	nanosleep(&ts, NULL);
	report("unregistered callback", &g1, h1);
	report("second callback", &g2, h2);
	CU_CHECK(cuDeviceUnregisterAsyncNotification(dev, h2));
	CU_CHECK(cuMemFree(a));
	CU_CHECK(cuMemFree(b));
	cu_test_pass("async_notify");
}
