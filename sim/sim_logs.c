/* The driver's error log (cuLogs*) and async notifications (cuDevice{Register,Unregister}AsyncNotification).
 *
 * Logs: the lines the simulated device writes for some of its errors (sim_log), kept in a buffer of
 * 25600 bytes as cuda.h says the driver's is (the oldest lines go first). An iterator is the number of
 * lines written before the one it names: cuLogsCurrent gives the next line's, a dump starts at the
 * iterator's line (all kept lines for NULL) and moves it past the last line dumped. Lines end with a
 * newline; a dump that leaves older lines out (the buffer lost them, or they do not fit in the
 * caller's memory) starts with a line that says so. Registered callbacks get each line as it is
 * written, on the thread whose call failed.
 *
 * Async notifications: the only type is the process's going over its device memory budget. The
 * simulated device has a budget only when CRCUDA_SIM_MEM_BUDGET_MB is set: each allocation that
 * leaves a device's memory in use above it sends CU_ASYNC_NOTIFICATION_TYPE_OVER_BUDGET, with the
 * bytes above it, to the device's callbacks, from a thread of its own. */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"

#define LOG_BYTES 25600u

struct log_line {
	unsigned long long seq;
	CUlogLevel level;
	size_t len; /* without the newline */
	char *text;
	struct log_line *next;
};

struct CUlogsCallbackEntry_st {
	CUlogsCallback fn;
	void *data;
	struct CUlogsCallbackEntry_st *next;
};

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t log_cb_lock = PTHREAD_MUTEX_INITIALIZER; /* held while callbacks run */
static struct log_line *log_head, *log_tail;
static size_t log_bytes;
static unsigned long long log_next; /* the next line's number */
static struct CUlogsCallbackEntry_st *log_cbs;

void sim_log(CUlogLevel level, const char *fmt, ...)
{
	struct log_line *l = calloc(1, sizeof(*l));
	va_list ap;
	int n;

	if (!l)
		return;
	va_start(ap, fmt);
	n = vasprintf(&l->text, fmt, ap);
	va_end(ap);
	if (n < 0) {
		free(l);
		return;
	}
	l->len = (size_t)n < LOG_BYTES / 2 ? (size_t)n : LOG_BYTES / 2;
	l->text[l->len] = 0;
	l->level = level;
	pthread_mutex_lock(&log_lock);
	l->seq = log_next++;
	if (log_tail)
		log_tail->next = l;
	else
		log_head = l;
	log_tail = l;
	log_bytes += l->len + 1;
	while (log_bytes > LOG_BYTES) {
		struct log_line *old = log_head;

		log_head = old->next;
		log_bytes -= old->len + 1;
		free(old->text);
		free(old);
	}
	pthread_mutex_unlock(&log_lock);
	pthread_mutex_lock(&log_cb_lock);
	for (struct CUlogsCallbackEntry_st *c = log_cbs; c; c = c->next) {
		char copy[LOG_BYTES / 2 + 1];

		memcpy(copy, l->text, l->len + 1);
		c->fn(c->data, level, copy, l->len);
	}
	pthread_mutex_unlock(&log_cb_lock);
}

CUresult cuLogsCurrent(CUlogIterator *iterator_out, unsigned int flags)
{
	SIM_ENTER_NOINIT(cuLogsCurrent);
	if (!iterator_out || flags)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&log_lock);
	*iterator_out = (CUlogIterator)log_next;
	pthread_mutex_unlock(&log_lock);
	return CUDA_SUCCESS;
}

/* The dump of the lines from *iterator (all for NULL) into a malloc'd string, at most `room` bytes with
 * its NUL (0: no limit), newest lines kept; *next: the iterator past them. NULL when not one line fits
 * (or memory ran out); "" when there is none. Under log_lock. */
static char *dump_text(const CUlogIterator *iterator, size_t room, CUlogIterator *next)
{
	unsigned long long from = iterator ? *iterator : 0, first = log_head ? log_head->seq : log_next;
	unsigned long long lost = 0, left_out = 0;
	size_t total = 0, n = 0;
	char head[128], *out, *p;
	struct log_line *l, *start = NULL;

	*next = (CUlogIterator)log_next;
	/* An iterator from before the kept lines (or a wrapped one) names lines the buffer lost. */
	if (from < first) {
		lost = first - from;
		from = first;
	}
	for (l = log_head; l; l = l->next)
		if (l->seq >= from) {
			total += l->len + 1;
			n++;
		}
	if (!n)
		return strdup("");
	for (start = log_head; start->seq < from; start = start->next)
		;
	/* Oldest first out until the rest, a header and the NUL fit. */
	for (;;) {
		head[0] = 0;
		if (lost + left_out)
			snprintf(head, sizeof(head), "[%llu earlier log messages not dumped]\n",
				 lost + left_out);
		if (!room || strlen(head) + total + 1 <= room)
			break;
		if (n == 1)
			return NULL;
		total -= start->len + 1;
		start = start->next;
		n--;
		left_out++;
	}
	out = malloc(strlen(head) + total + 1);
	if (!out)
		return NULL;
	p = stpcpy(out, head);
	for (l = start; l; l = l->next) {
		memcpy(p, l->text, l->len);
		p += l->len;
		*p++ = '\n';
	}
	*p = 0;
	return out;
}

CUresult cuLogsDumpToMemory(CUlogIterator *iterator, char *buffer, size_t *size, unsigned int flags)
{
	CUlogIterator next;
	char *text;
	size_t len;

	SIM_ENTER_NOINIT(cuLogsDumpToMemory);
	if (!buffer || !size || flags)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&log_lock);
	text = *size ? dump_text(iterator, *size, &next) : NULL;
	pthread_mutex_unlock(&log_lock);
	if (!text) {
		*size = 0;
		return CUDA_ERROR_INVALID_VALUE;
	}
	len = strlen(text);
	memcpy(buffer, text, len + 1);
	free(text);
	*size = len;
	if (iterator)
		*iterator = next;
	return CUDA_SUCCESS;
}

CUresult cuLogsDumpToFile(CUlogIterator *iterator, const char *pathToFile, unsigned int flags)
{
	CUlogIterator next;
	char *text;
	FILE *f;
	int bad;

	SIM_ENTER_NOINIT(cuLogsDumpToFile);
	if (!pathToFile || flags)
		return CUDA_ERROR_INVALID_VALUE;
	f = fopen(pathToFile, "w");
	if (!f)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&log_lock);
	text = dump_text(iterator, 0, &next);
	pthread_mutex_unlock(&log_lock);
	bad = !text || fputs(text, f) == EOF;
	bad |= fclose(f) != 0;
	free(text);
	if (bad)
		return CUDA_ERROR_INVALID_VALUE;
	if (iterator)
		*iterator = next;
	return CUDA_SUCCESS;
}

CUresult cuLogsRegisterCallback(CUlogsCallback callbackFunc, void *userData,
				CUlogsCallbackHandle *callback_out)
{
	struct CUlogsCallbackEntry_st *c;

	SIM_ENTER_NOINIT(cuLogsRegisterCallback);
	if (!callbackFunc)
		return CUDA_ERROR_INVALID_VALUE;
	c = calloc(1, sizeof(*c));
	if (!c)
		return CUDA_ERROR_OUT_OF_MEMORY;
	c->fn = callbackFunc;
	c->data = userData;
	pthread_mutex_lock(&log_cb_lock);
	c->next = log_cbs;
	log_cbs = c;
	pthread_mutex_unlock(&log_cb_lock);
	if (callback_out)
		*callback_out = c;
	return CUDA_SUCCESS;
}

CUresult cuLogsUnregisterCallback(CUlogsCallbackHandle callback)
{
	struct CUlogsCallbackEntry_st **pp;

	SIM_ENTER_NOINIT(cuLogsUnregisterCallback);
	pthread_mutex_lock(&log_cb_lock);
	for (pp = &log_cbs; *pp && *pp != callback; pp = &(*pp)->next)
		;
	if (!callback || !*pp) {
		pthread_mutex_unlock(&log_cb_lock);
		return CUDA_ERROR_INVALID_VALUE;
	}
	*pp = callback->next;
	pthread_mutex_unlock(&log_cb_lock);
	free(callback);
	return CUDA_SUCCESS;
}

/* ---- async notifications ------------------------------------------------------------------------ */
struct CUasyncCallbackEntry_st {
	CUdevice dev;
	CUasyncCallback fn;
	void *data;
	struct CUasyncCallbackEntry_st *next;
};

static pthread_mutex_t async_lock = PTHREAD_MUTEX_INITIALIZER; /* the list; held while callbacks run */
static struct CUasyncCallbackEntry_st *async_cbs;
static __thread bool in_async_callback;

struct over_budget {
	CUdevice dev;
	unsigned long long bytes;
};

static void *notify_thread(void *arg)
{
	struct over_budget ob = *(struct over_budget *)arg;

	free(arg);
	in_async_callback = true;
	pthread_mutex_lock(&async_lock);
	for (struct CUasyncCallbackEntry_st *c = async_cbs; c; c = c->next)
		if (c->dev == ob.dev) {
			CUasyncNotificationInfo info;

			memset(&info, 0, sizeof(info));
			info.type = CU_ASYNC_NOTIFICATION_TYPE_OVER_BUDGET;
			info.info.overBudget.bytesOverBudget = ob.bytes;
			c->fn(&info, c->data, c);
		}
	pthread_mutex_unlock(&async_lock);
	return NULL;
}

void sim_budget_check(struct sim_device *dev)
{
	unsigned long long budget_mb;
	size_t used = atomic_load(&dev->used_mem);
	struct over_budget *ob;
	pthread_attr_t attr;
	pthread_t t;
	const char *e;

	e = getenv("CRCUDA_SIM_MEM_BUDGET_MB");
	budget_mb = e && *e ? strtoull(e, NULL, 10) : 0;
	if (!budget_mb || used <= (budget_mb << 20) || !(ob = malloc(sizeof(*ob))))
		return;
	ob->dev = dev->ordinal;
	ob->bytes = used - (budget_mb << 20);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&t, &attr, notify_thread, ob))
		free(ob);
	pthread_attr_destroy(&attr);
}

CUresult cuDeviceRegisterAsyncNotification(CUdevice device, CUasyncCallback callbackFunc, void *userData,
					   CUasyncCallbackHandle *callback)
{
	struct CUasyncCallbackEntry_st *c;

	SIM_ENTER(cuDeviceRegisterAsyncNotification);
	if (in_async_callback)
		return CUDA_ERROR_NOT_PERMITTED;
	if (!sim_device_get(device))
		return CUDA_ERROR_INVALID_DEVICE;
	if (!callbackFunc || !callback)
		return CUDA_ERROR_INVALID_VALUE;
	c = calloc(1, sizeof(*c));
	if (!c)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*c = (struct CUasyncCallbackEntry_st){.dev = device, .fn = callbackFunc, .data = userData};
	pthread_mutex_lock(&async_lock);
	c->next = async_cbs;
	async_cbs = c;
	pthread_mutex_unlock(&async_lock);
	*callback = c;
	return CUDA_SUCCESS;
}

CUresult cuDeviceUnregisterAsyncNotification(CUdevice device, CUasyncCallbackHandle callback)
{
	struct CUasyncCallbackEntry_st **pp;

	SIM_ENTER(cuDeviceUnregisterAsyncNotification);
	if (in_async_callback)
		return CUDA_ERROR_NOT_PERMITTED;
	if (!sim_device_get(device))
		return CUDA_ERROR_INVALID_DEVICE;
	/* Waits for callbacks running now: none runs after this returns. */
	pthread_mutex_lock(&async_lock);
	for (pp = &async_cbs; *pp && *pp != callback; pp = &(*pp)->next)
		;
	if (!callback || !*pp || (*pp)->dev != device) {
		pthread_mutex_unlock(&async_lock);
		return CUDA_ERROR_INVALID_VALUE;
	}
	*pp = callback->next;
	pthread_mutex_unlock(&async_lock);
	free(callback);
	return CUDA_SUCCESS;
}
