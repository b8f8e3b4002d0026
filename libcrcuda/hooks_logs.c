/* The driver's logs (cuLogs*) and async notifications (cuDevice{Register,Unregister}AsyncNotification).
 * The driver is the worker's, which is this application's alone: its logs are the application's.
 * Dumps bring the worker driver's bytes back (a file is written here, at the application's path).
 * Callbacks run here: the worker registers a trampoline of its own with its driver, which has this
 * process's host-function thread call the application's function (struct crc_hostfn_page, kinds
 * CRC_HOSTFN_LOG and CRC_HOSTFN_ASYNC). The handles the application gets are this process's
 * registrations, which CRIU carries: a restored session gets them again (crc_notify_reregister). */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client.h"
#include "crcuda/errno.h"
#include "crcuda/log.h"

struct notify_reg {
	uint32_t type; /* enum crc_notify_type */
	CUdevice dev;
	void *fn, *data;
	bool out; /* the application took a handle: the driver was given a place for its own */
	struct notify_reg *next;
};

static pthread_mutex_t notify_lock = PTHREAD_MUTEX_INITIALIZER;	 /* the list */
static pthread_mutex_t deliver_lock = PTHREAD_MUTEX_INITIALIZER; /* held while a callback runs */
static struct notify_reg *notify_regs;

static struct crc_notify_req notify_req(const struct notify_reg *r, uint32_t flags)
{
	return (struct crc_notify_req){
	    .type = r->type, .device = (int32_t)r->dev, .flags = flags, .id = (uintptr_t)r};
}

static CUresult notify_ctl(uint16_t op, const struct crc_notify_req *q)
{
	struct crc_call c;
	void *args;
	CUresult res = crc_ctl_begin(&c, op, 0, sizeof(*q), &args);

	if (res == CUDA_SUCCESS) {
		memcpy(args, q, sizeof(*q));
		res = crc_call_wait(&c, NULL, NULL);
		crc_call_end(&c);
	}
	return res;
}

/* A registration with the worker; kept here on success. *handle: the application's handle. */
static CUresult notify_register(uint32_t type, CUdevice dev, void *fn, void *data, void **handle)
{
	struct notify_reg *r;
	CUresult res = crc_ready();

	if (res != CUDA_SUCCESS)
		return res;
	/* A callback's own registration would wait for the worker, which waits for the callback. */
	if (crc_on_hostfn_thread())
		return CUDA_ERROR_NOT_PERMITTED;
	/* No page (TCP): the worker cannot reach this process. */
	if (!crc_hostfn_ready())
		return CUDA_ERROR_NOT_SUPPORTED;
	r = calloc(1, sizeof(*r));
	if (!r)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*r = (struct notify_reg){.type = type, .dev = dev, .fn = fn, .data = data, .out = handle != NULL};
	{
		struct crc_notify_req q =
		    notify_req(r, (fn ? 0 : CRC_NOTIFY_NO_FN) | (handle ? 0 : CRC_NOTIFY_NO_OUT));

		res = notify_ctl(CRC_OP_NOTIFY_REGISTER, &q);
	}
	if (res != CUDA_SUCCESS || !fn) {
		free(r);
		return res;
	}
	pthread_mutex_lock(&notify_lock);
	r->next = notify_regs;
	notify_regs = r;
	pthread_mutex_unlock(&notify_lock);
	if (handle)
		*handle = r;
	return res;
}

/* Unregisters the application's handle: the worker's driver first (an unknown handle is the driver's
 * to answer, as NULL), then delivery stops here once any running callback returned. */
static CUresult notify_unregister(uint32_t type, CUdevice dev, void *handle)
{
	struct notify_reg *r, **pp, none = {.type = type, .dev = dev};
	struct crc_notify_req q;
	CUresult res = crc_ready();

	if (res != CUDA_SUCCESS)
		return res;
	if (crc_on_hostfn_thread())
		return CUDA_ERROR_NOT_PERMITTED;
	pthread_mutex_lock(&notify_lock);
	for (r = notify_regs; r && (void *)r != handle; r = r->next)
		;
	if (r && r->type != type)
		r = NULL;
	q = notify_req(&none, 0);
	q.id = r ? (uintptr_t)r : 0;
	pthread_mutex_unlock(&notify_lock);
	res = notify_ctl(CRC_OP_NOTIFY_UNREGISTER, &q);
	if (res != CUDA_SUCCESS || !r)
		return res;
	pthread_mutex_lock(&deliver_lock);
	pthread_mutex_lock(&notify_lock);
	for (pp = &notify_regs; *pp; pp = &(*pp)->next)
		if (*pp == r) {
			*pp = r->next;
			free(r);
			break;
		}
	pthread_mutex_unlock(&notify_lock);
	pthread_mutex_unlock(&deliver_lock);
	return res;
}

/* On the host-function thread: a log line or a notification from the worker's driver. */
void crc_notify_deliver(const struct crc_hostfn_page *pg)
{
	struct notify_reg *r, copy;
	bool found = false;

	pthread_mutex_lock(&deliver_lock);
	pthread_mutex_lock(&notify_lock);
	for (r = notify_regs; r; r = r->next)
		if ((uintptr_t)r == pg->data) {
			copy = *r;
			found = true;
			break;
		}
	pthread_mutex_unlock(&notify_lock);
	if (found && pg->kind == CRC_HOSTFN_LOG && copy.type == CRC_NOTIFY_LOGS) {
		size_t len = pg->len < CRC_HOSTFN_PAYLOAD ? pg->len : CRC_HOSTFN_PAYLOAD;
		char msg[CRC_HOSTFN_PAYLOAD + 1];

		memcpy(msg, pg->payload, len);
		msg[len] = 0;
		((CUlogsCallback)copy.fn)(copy.data, (CUlogLevel)pg->arg, msg, len);
	} else if (found && pg->kind == CRC_HOSTFN_ASYNC && copy.type == CRC_NOTIFY_ASYNC) {
		CUasyncNotificationInfo info;

		memset(&info, 0, sizeof(info));
		memcpy(&info, pg->payload, pg->len < sizeof(info) ? pg->len : sizeof(info));
		((CUasyncCallback)copy.fn)(&info, copy.data, (CUasyncCallbackHandle)r);
	}
	pthread_mutex_unlock(&deliver_lock);
}

/* A restored session: every registration made again in its worker (under the held channel lock). */
int crc_notify_reregister(void)
{
	int rc = 0;

	pthread_mutex_lock(&notify_lock);
	for (struct notify_reg *r = notify_regs; r && !rc; r = r->next) {
		struct crc_notify_req q = notify_req(r, r->out ? 0 : CRC_NOTIFY_NO_OUT);

		rc = crc_ctl_reregister(CRC_OP_NOTIFY_REGISTER, &q, sizeof(q));
		if (rc)
			pr_err("cannot register a %s callback with the restored session: %s",
			       r->type == CRC_NOTIFY_LOGS ? "log" : "async notification", crc_strerror(rc));
	}
	pthread_mutex_unlock(&notify_lock);
	return rc;
}

CUresult crc_hook_cuLogsRegisterCallback(CUlogsCallback callbackFunc, void *userData,
					 CUlogsCallbackHandle *callback_out)
{
	return notify_register(CRC_NOTIFY_LOGS, 0, (void *)callbackFunc, userData, (void **)callback_out);
}

CUresult crc_hook_cuLogsUnregisterCallback(CUlogsCallbackHandle callback)
{
	return notify_unregister(CRC_NOTIFY_LOGS, 0, callback);
}

CUresult crc_hook_cuDeviceRegisterAsyncNotification(CUdevice device, CUasyncCallback callbackFunc,
						    void *userData, CUasyncCallbackHandle *callback)
{
	return notify_register(CRC_NOTIFY_ASYNC, device, (void *)callbackFunc, userData, (void **)callback);
}

CUresult crc_hook_cuDeviceUnregisterAsyncNotification(CUdevice device, CUasyncCallbackHandle callback)
{
	return notify_unregister(CRC_NOTIFY_ASYNC, device, callback);
}

/* ---- dumps -------------------------------------------------------------------------------------- */
/* The worker's dump (crc_logs_req); on success *r is the driver's answer and *bytes (malloc'd) what
 * it wrote. */
static CUresult logs_dump(uint16_t op, CUlogIterator *iterator, uint32_t flags, size_t size,
			  unsigned api_flags, struct crc_logs_req *r, char **bytes)
{
	struct crc_call c;
	struct crc_logs_req *q;
	CUresult res = crc_ready();

	*bytes = NULL;
	if (res != CUDA_SUCCESS)
		return res;
	res = crc_call_begin(&c, op, 0, sizeof(*q), (void **)&q);
	if (res != CUDA_SUCCESS)
		return res;
	*q = (struct crc_logs_req){.iterator = iterator ? *iterator : 0,
				   .flags = flags | (iterator ? CRC_LOGS_ITERATOR : 0),
				   .api_flags = api_flags,
				   .size = size};
	res = crc_call_wait(&c, NULL, NULL);
	if (c.reply_len >= sizeof(*r)) {
		memcpy(r, c.reply, sizeof(*r));
		if (r->bytes > c.reply_len - sizeof(*r))
			r->bytes = c.reply_len - sizeof(*r);
		if (r->bytes && (*bytes = malloc(r->bytes)))
			memcpy(*bytes, (const char *)c.reply + sizeof(*r), r->bytes);
		else
			r->bytes = 0;
	} else if (res == CUDA_SUCCESS) {
		res = CUDA_ERROR_UNKNOWN;
	}
	crc_call_end(&c);
	return res;
}

CUresult crc_hook_cuLogsDumpToMemory(CUlogIterator *iterator, char *buffer, size_t *size, unsigned int flags)
{
	struct crc_logs_req r = {0};
	char *bytes;
	CUresult res = logs_dump(CRC_CU_cuLogsDumpToMemory, iterator,
				 (buffer ? CRC_LOGS_BUFFER : 0) | (size ? CRC_LOGS_SIZE : 0),
				 size ? *size : 0, flags, &r, &bytes);

	if (res == CUDA_SUCCESS || res == CUDA_ERROR_INVALID_VALUE) {
		if (iterator)
			*iterator = r.iterator;
		if (size)
			*size = r.size;
		if (buffer && size && r.bytes)
			memcpy(buffer, bytes, r.bytes);
	}
	free(bytes);
	return res;
}

static int write_all(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* The worker's driver dumps into a file of the worker's; the bytes are written here at the
 * application's path, appended where the driver appends (crc_logs_req). */
CUresult crc_hook_cuLogsDumpToFile(CUlogIterator *iterator, const char *pathToFile, unsigned int flags)
{
	struct crc_logs_req r = {0};
	char *bytes;
	int fd;
	CUresult res = logs_dump(CRC_CU_cuLogsDumpToFile, iterator, pathToFile ? CRC_LOGS_BUFFER : 0, 0,
				 flags, &r, &bytes);

	if (res != CUDA_SUCCESS) {
		free(bytes);
		return res;
	}
	fd = open(pathToFile,
		  O_WRONLY | O_CREAT | O_CLOEXEC | (r.flags & CRC_LOGS_APPENDED ? O_APPEND : O_TRUNC), 0666);
	/* The driver's answer for a file it cannot write (no message: natively there is none). */
	if (fd < 0 || write_all(fd, bytes ? bytes : "", r.bytes))
		res = CUDA_ERROR_INVALID_VALUE;
	if (fd >= 0)
		close(fd);
	free(bytes);
	if (res == CUDA_SUCCESS && iterator)
		*iterator = r.iterator;
	return res;
}
