/* crcudad-worker: one application session's GPU process. Started by crcudad's front (front/), never by
 * hand: loads the backend (the real driver or the simulated device) by path, initialises it, retains
 * device 0's primary context and reserves the session's device VA range, says READY in its status page
 * (link.h), then serves the one connection the front hands it: a new session, or a restore. It exits
 * when that session ends, so its contexts, and whatever a fault did to them, go with it.
 *
 * usage: crcudad-worker --backend-lib PATH [--va-base ADDR] [--va-session BYTES] [--ring-size BYTES]
 *                       [--probe] [--log-level N]   (descriptors CRC_LINK_FD and CRC_LINK_STATUS_FD open) */
#define LOG_PREFIX "worker: "
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "crcuda/errno.h"
#include "crcuda/log.h"
#include "crcuda/tls.h"
#include "link.h"
#include "worker.h"

/* After cuda.h: define and call entry points by their ABI names. */
#include "crcuda/cuda_api_undef.h"

struct crc_daemon crcd = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .va_base = CRC_DEFAULT_VA_BASE,
    .va_session = CRC_DEFAULT_VA_SESSION,
    .ring_size = CRC_DEFAULT_RING,
};

_Static_assert(CU_DEVICE_ATTRIBUTE_MAX <= CRC_DEV_ATTR_SLOTS, "device attribute cache too small");
_Static_assert(CU_FUNC_ATTRIBUTE_MAX <= CRC_FUNC_ATTR_SLOTS, "function attribute cache too small");

static struct crc_worker_status *status;
static bool window_reserved;

/* Device facts every client caches (names, UUIDs, attributes, memory, PCI ids, driver version). The
 * front hands a worker those its first worker collected (known: in the status page already), which
 * saves a cold start the hundreds of attribute queries. */
static void collect_devices(const struct crc_hello_reply *known)
{
	struct crc_hello_reply *p = &crcd.proto;
	int count = 0;
	CUresult res;

	p->magic = CRC_PROTO_MAGIC;
	p->version = CRC_PROTO_VERSION;
	res = crc_be.cuInit_fn(0);
	p->init_result = res;
	if (res != CUDA_SUCCESS) {
		pr_err("backend cuInit failed: %d", res);
		return;
	}
	if (known->magic == CRC_PROTO_MAGIC && known->version == CRC_PROTO_VERSION && !known->init_result &&
	    crc_be.cuDeviceGetCount_fn(&count) == CUDA_SUCCESS && (uint32_t)count == known->dev_count) {
		*p = *known;
		crcd.dev_count = count;
		return;
	}
	crc_be.cuDriverGetVersion_fn(&p->driver_version);
	crc_be.cuDeviceGetCount_fn(&count);
	if (count > CRC_MAX_DEVICES)
		count = CRC_MAX_DEVICES;
	p->dev_count = (uint32_t)count;
	crcd.dev_count = count;
	for (int d = 0; d < count; d++) {
		struct crc_dev_info *di = &p->devs[d];
		CUuuid uuid = {0};
		size_t total = 0;

		crc_be.cuDeviceGetName_fn(di->name, sizeof(di->name), d);
		if (crc_be.cuDeviceGetUuid_v2_fn)
			crc_be.cuDeviceGetUuid_v2_fn(&uuid, d);
		else
			crc_be.cuDeviceGetUuid_fn(&uuid, d);
		memcpy(di->uuid, uuid.bytes, sizeof(di->uuid));
		crc_be.cuDeviceTotalMem_v2_fn(&total, d);
		di->total_mem = total;
		crc_be.cuDeviceGetPCIBusId_fn(di->pci_bus_id, sizeof(di->pci_bus_id), d);
		for (int a = 1; a < CU_DEVICE_ATTRIBUTE_MAX; a++)
			if (crc_be.cuDeviceGetAttribute_fn(&di->attrs[a], (CUdevice_attribute)a, d) !=
			    CUDA_SUCCESS)
				di->attrs[a] = 0;
		/* The device cannot reach the application's pageable memory: it is another process's. A
		 * program that would hand malloc'd memory to kernels (HMM) takes its managed-memory path
		 * instead (systemWideAtomics). */
		di->attrs[CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS] = 0;
		di->attrs[CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES] = 0;
		pr_debug("device %d: %s, %zu MiB, %s", d, di->name, total >> 20, di->pci_bus_id);
	}
}

/* Reserves [base, base + size) at exactly that address, so that pointers handed out in it can be had
 * again after a restore; frees the range held before. A context is needed: device 0's primary one, kept
 * for good (a warm worker has paid for it before its application arrives). */
int crc_va_window(uint64_t base, uint64_t size, char *why, size_t why_len)
{
	CUdeviceptr got = 0;
	CUcontext ctx;
	CUresult res;

	if (window_reserved && base == crcd.va_base && size == crcd.va_session)
		return 0;
	if (!crcd.dev_count) {
		snprintf(why, why_len, "the daemon has no GPU (cuInit: %d)", crcd.proto.init_result);
		return CRC_ENODEV;
	}
	if (base % CRC_GRANULE || size % CRC_GRANULE || !size) {
		snprintf(why, why_len, "device VA range %#" PRIx64 "+%#" PRIx64 " is not 2 MiB aligned", base,
			 size);
		return CRC_EINVAL;
	}
	res = crc_be.cuDevicePrimaryCtxRetain_fn(&ctx, 0);
	if (res == CUDA_SUCCESS)
		res = crc_be.cuCtxSetCurrent_fn(ctx);
	if (res == CUDA_SUCCESS && window_reserved) {
		crc_be.cuMemAddressFree_fn(crcd.va_base, crcd.va_session);
		crc_be.cuDevicePrimaryCtxRelease_v2_fn(0);
		window_reserved = false;
	}
	if (res == CUDA_SUCCESS)
		res = crc_be.cuMemAddressReserve_fn(&got, size, 0, base, 0);
	if (res != CUDA_SUCCESS) {
		snprintf(why, why_len,
			 "cannot reserve the device VA range %#" PRIx64 "+%#" PRIx64 ": error %d", base, size,
			 res);
		return CRC_ECUDA;
	}
	if (got != base) {
		snprintf(why, why_len,
			 "the device VA range %#" PRIx64 "+%#" PRIx64 " is not free in a fresh worker (the "
			 "driver offered %#llx)",
			 base, size, (unsigned long long)got);
		crc_be.cuMemAddressFree_fn(got, size);
		return CRC_EBUSY;
	}
	crc_be.cuCtxSetCurrent_fn(NULL);
	crcd.va_base = base;
	crcd.va_session = size;
	window_reserved = true;
	return 0;
}

/* The status page's session part, from the live session (seqlock: the front reads it any time). */
void crc_worker_publish(void)
{
	struct crc_ctl_session_wire w = {.worker_pid = getpid()};
	struct crc_session *s;

	pthread_mutex_lock(&crcd.lock);
	s = crcd.session;
	if (s) {
		w.session_id = s->id;
		w.pid = s->peer.pid;
		w.uid = s->peer.uid;
		w.va_base = s->va_base;
		w.va_size = s->va_size;
		w.device_bytes = s->mapped_bytes;
		w.state = s->state;
		w.transport = s->tcp ? CRC_TRANSPORT_TCP : CRC_TRANSPORT_UNIX;
		w.journal_records = s->njrec;
		w.devices = s->devices;
	}
	pthread_mutex_unlock(&crcd.lock);
	atomic_fetch_add_explicit(&status->seq, 1, memory_order_acq_rel);
	atomic_thread_fence(memory_order_release);
	status->session = w;
	atomic_thread_fence(memory_order_release);
	atomic_fetch_add_explicit(&status->seq, 1, memory_order_acq_rel);
}

/* ---- progress (crc_worker_status.progress, read by the front for crcudactl) ---- */
static double progress_t0;
static _Atomic bool progress_on;

void crc_progress_start(unsigned op, uint64_t total)
{
	progress_t0 = crc_now_s();
	atomic_store(&status->progress.done, 0);
	atomic_store(&status->progress.ns, 0);
	atomic_store(&status->progress.total, total);
	atomic_store(&status->progress.op, op);
	atomic_store(&status->progress.active, 1);
	atomic_store(&progress_on, true);
}

void crc_progress_add(uint64_t bytes)
{
	atomic_fetch_add(&status->progress.done, bytes);
	if (atomic_load(&progress_on))
		atomic_store(&status->progress.ns, (uint64_t)((crc_now_s() - progress_t0) * 1e9));
}

void crc_progress_end(void)
{
	if (atomic_exchange(&progress_on, false))
		atomic_store(&status->progress.ns, (uint64_t)((crc_now_s() - progress_t0) * 1e9));
	atomic_store(&status->progress.active, 0);
}

void crc_test_delay(const char *env)
{
	const char *ms = getenv(env);

	if (ms && atoi(ms) > 0)
		usleep((useconds_t)atoi(ms) * 1000);
}

void crc_worker_restoring(int delta)
{
	atomic_fetch_add(&status->restores, (uint32_t)delta);
}

/* Called by the session thread the moment its session is over, before it frees anything: the front
 * stops listing it at once. */
void crc_worker_session_ended(void)
{
	atomic_store(&status->phase, CRC_WORKER_ENDED);
}

static void refuse(int fd, int rc)
{
	struct crc_hello_reply r = {.magic = CRC_PROTO_MAGIC, .version = CRC_PROTO_VERSION, .status = rc};

	crc_sock_write_all(fd, &r, sizeof(r));
	crc_tls_drop(fd);
	close(fd);
}

/* One message of the front, with its descriptor. 1: it gave this worker its job; 0: served; -1: the
 * link is gone (the front died). */
static int serve_link(uint8_t *buf, size_t cap)
{
	const struct crc_link_msg *m = (const void *)buf;
	union {
		char b[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct iovec iov = {.iov_base = buf, .iov_len = cap};
	struct msghdr msg = {
	    .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.b, .msg_controllen = sizeof(u.b)};
	struct cmsghdr *c;
	ssize_t n = recvmsg(CRC_LINK_FD, &msg, MSG_CMSG_CLOEXEC);
	int fd = -1, rc;

	if (n <= 0)
		return n < 0 && errno == EINTR ? 0 : -1;
	c = CMSG_FIRSTHDR(&msg);
	if (c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
		memcpy(&fd, CMSG_DATA(c), sizeof(fd));
	if ((size_t)n < sizeof(*m) || fd < 0 || (size_t)n != sizeof(*m) + m->req_len) {
		pr_err("malformed message from the front (%zd bytes)", n);
		if (fd >= 0)
			close(fd);
		return 0;
	}
	if (m->tls) {
		/* The front forgot its TLS session with this client: a new one here, with the key it gave
		 * both of us. */
		char why[256];

		rc = crc_tls_server(fd, CRC_TLS_ID_HANDOFF, m->key, sizeof(m->key), 10000, why, sizeof(why));
		if (rc) {
			pr_warn("no TLS session with the client pid %d handed over by the front: %s",
				(int)m->peer.pid, why);
			close(fd);
			return m->kind == CRC_LINK_CLIENT || m->kind == CRC_LINK_RESTORE;
		}
	}
	switch (m->kind) {
	case CRC_LINK_CLIENT:
		atomic_store(&status->phase, CRC_WORKER_SERVING);
		crcd.next_session_id = m->session_id;
		crc_upload_staging_release_async();
		rc = crc_session_start(fd, m->tcp, &m->peer, &m->hello);
		if (rc) {
			pr_warn("cannot start a session for pid %d: %s", (int)m->peer.pid, crc_strerror(rc));
			refuse(fd, rc);
		}
		return 1;
	case CRC_LINK_RESTORE:
		atomic_store(&status->phase, CRC_WORKER_SERVING);
		crcd.next_session_id = m->session_id;
		crc_control_start(fd, m->tcp, &m->peer, buf + sizeof(*m), m->req_len);
		return 1;
	case CRC_LINK_CONTROL:
		crc_control_start(fd, m->tcp, &m->peer, NULL, 0);
		return 0;
	case CRC_LINK_RECLAIM:
		rc = crc_tcp_reclaim(fd, &m->hello);
		if (rc)
			refuse(fd, rc);
		return 0;
	case CRC_LINK_BULK:
		rc = crc_bulk_attach(fd, &m->hello);
		if (rc)
			refuse(fd, rc);
		return 0;
	default:
		pr_err("unknown message %u from the front", m->kind);
		close(fd);
		return 0;
	}
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"backend-lib", required_argument, NULL, 'l'},
	    {"va-base", required_argument, NULL, 'B'},
	    {"va-session", required_argument, NULL, 'S'},
	    {"ring-size", required_argument, NULL, 'r'},
	    {"probe", no_argument, NULL, 'p'},
	    {"log-level", required_argument, NULL, 'L'},
	    {NULL, 0, NULL, 0},
	};
	const char *lib = NULL;
	uint64_t va_base = CRC_DEFAULT_VA_BASE, va_size = CRC_DEFAULT_VA_SESSION;
	bool probe = false, assigned = false, front_gone = false;
	size_t cap = sizeof(struct crc_link_msg) + CRC_LINK_MAX_REQ;
	uint8_t *buf = malloc(cap);
	char why[256] = "";
	double t[4] = {crc_now_s()};
	int c;

	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'l':
			lib = optarg;
			break;
		case 'B':
			va_base = strtoull(optarg, NULL, 0);
			break;
		case 'S':
			va_size = strtoull(optarg, NULL, 0);
			break;
		case 'r':
			crcd.ring_size = strtoull(optarg, NULL, 0);
			break;
		case 'p':
			probe = true;
			break;
		case 'L':
			crc_log_set_level(atoi(optarg));
			break;
		default:
			return 2;
		}
	}
	status = mmap(NULL, sizeof(*status), PROT_READ | PROT_WRITE, MAP_SHARED, CRC_LINK_STATUS_FD, 0);
	if (!lib || !buf || status == MAP_FAILED) {
		pr_err("crcudad-worker is started by crcudad, not by hand");
		return 2;
	}
	close(CRC_LINK_STATUS_FD);
	signal(SIGPIPE, SIG_IGN);
	/* The front's SIGINT (a terminal's ^C) is the front's to handle. */
	signal(SIGINT, SIG_IGN);
	if (crc_backend_load(lib)) {
		snprintf(status->error, sizeof(status->error), "cannot load the backend %s", lib);
		atomic_store(&status->phase, CRC_WORKER_FAILED);
		return 1;
	}
	t[1] = crc_now_s();
	collect_devices(&status->proto);
	t[2] = crc_now_s();
	if (crcd.dev_count && crc_va_window(va_base, va_size, why, sizeof(why))) {
		pr_err("%s", why);
		snprintf(status->error, sizeof(status->error), "%s", why);
		atomic_store(&status->phase, CRC_WORKER_FAILED);
		return 1;
	}
	status->proto = crcd.proto;
	crc_worker_publish();
	atomic_store(&status->phase, CRC_WORKER_READY);
	t[3] = crc_now_s();
	pr_info("ready in %.1f ms (backend %.1f, cuInit and devices %.1f, context and VA range %.1f)",
		(t[3] - t[0]) * 1e3, (t[1] - t[0]) * 1e3, (t[2] - t[1]) * 1e3, (t[3] - t[2]) * 1e3);
	if (probe)
		return 0;
	crc_upload_staging_prepare();
	for (;;) {
		struct pollfd p = {.fd = CRC_LINK_FD, .events = POLLIN};
		bool idle;

		if (poll(&p, 1, 100) > 0) {
			int r = serve_link(buf, cap);

			if (r < 0) {
				front_gone = true;
				break;
			}
			assigned |= r > 0;
		}
		crc_worker_publish();
		pthread_mutex_lock(&crcd.lock);
		idle = !crcd.session && !crcd.restoring;
		pthread_mutex_unlock(&crcd.lock);
		/* Its one session is over (or never came to be): the process, and its contexts, go. */
		if (assigned && idle)
			break;
	}
	/* Without its front the worker ends at once, its session with it (the client must hear of it
	 * within a second): freeing the staging could wait for the session's thread, which may hold the
	 * driver in a long synchronise. The process's end frees it. */
	if (!front_gone)
		crc_upload_staging_release();
	atomic_store(&status->phase, CRC_WORKER_ENDED);
	free(buf);
	return 0;
}
