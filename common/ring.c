#define LOG_PREFIX "ring: "
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "crcuda/errno.h"
#include "crcuda/log.h"
#include "crcuda/ring.h"

#define RING_ALIGN 16u /* header size: a pad record always fits in what is left before the end */
#define OP_PAD	   0xffffu

_Static_assert(sizeof(struct crc_msg_hdr) == RING_ALIGN, "header is one alignment unit");
_Static_assert(sizeof(struct crc_ring_ctl) <= CRC_RING_DATA_OFFSET, "control block fits");

static uint64_t align_up(uint64_t v)
{
	return (v + RING_ALIGN - 1) & ~(uint64_t)(RING_ALIGN - 1);
}

static uint64_t now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ volatile("yield");
#endif
}

/* Shared (not private) futexes: the word lives in memory mapped by two processes. */
void crc_futex_wait(_Atomic uint32_t *word, uint32_t expected, int ms)
{
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
	syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT, expected, &ts, NULL, 0);
}

void crc_futex_wake(_Atomic uint32_t *word)
{
	syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* How long a waiter spins before it sleeps: a round trip under this stays off the futex path. Where
 * cores are plenty (as the driver's own scheduling spins where contexts are fewer than cores), long
 * enough for a short kernel or a replayed graph to finish: a futex wake-up costs tens of microseconds
 * on a VM, which a 0.3 ms captured PyTorch step pays twice (H200: 0.87x native spinning 50 us, 1.0x
 * spinning 300 us). CRCUDA_RING_SPIN_US sets it. */
static uint64_t spin_us(void)
{
	static int cached = -1;
	if (cached < 0) {
		const char *env = getenv("CRCUDA_RING_SPIN_US");
		cached = env && *env ? atoi(env) : sysconf(_SC_NPROCESSORS_ONLN) >= 8 ? 300 : 50;
	}
	return (uint64_t)cached;
}

size_t crc_ring_footprint(size_t data_size)
{
	return CRC_RING_DATA_OFFSET + data_size;
}

int crc_ring_format(void *mem, size_t data_size)
{
	if (data_size < 4096 || (data_size & (data_size - 1)))
		return CRC_EINVAL;
	struct crc_ring_ctl *ctl = mem;
	memset(ctl, 0, CRC_RING_DATA_OFFSET);
	ctl->size = data_size;
	ctl->magic = CRC_RING_MAGIC;
	return 0;
}

int crc_ring_attach(struct crc_ring *r, void *mem, size_t mem_size)
{
	struct crc_ring_ctl *ctl = mem;
	if (mem_size < CRC_RING_DATA_OFFSET || ctl->magic != CRC_RING_MAGIC ||
	    crc_ring_footprint(ctl->size) > mem_size || (ctl->size & (ctl->size - 1))) {
		pr_err("bad ring header (magic %#x, size %llu, mapping %zu)", ctl->magic,
		       (unsigned long long)ctl->size, mem_size);
		return CRC_EPROTO;
	}
	memset(r, 0, sizeof(*r));
	r->ctl = ctl;
	r->data = (uint8_t *)mem + CRC_RING_DATA_OFFSET;
	r->mask = ctl->size - 1;
	r->wait_ms = 100;
	return 0;
}

void crc_ring_set_liveness(struct crc_ring *r, crc_ring_alive_fn fn, void *arg, int wait_ms)
{
	r->alive = fn;
	r->alive_arg = arg;
	r->wait_ms = wait_ms > 0 ? wait_ms : 100;
}

size_t crc_ring_max_payload(const struct crc_ring *r)
{
	return r->ctl->size / 2 - sizeof(struct crc_msg_hdr);
}

/* Waits until ready(r, need) holds. Spins first, then sleeps on seq, asking the liveness callback
 * every wait_ms. timeout_ms < 0: no timeout. */
static int ring_wait(struct crc_ring *r, _Atomic uint32_t *seq, _Atomic uint32_t *waiters,
		     bool (*ready)(struct crc_ring *, uint64_t), uint64_t need, int timeout_ms)
{
	uint64_t start = now_us();
	uint64_t spin_end = start + spin_us();
	do {
		if (ready(r, need))
			return 0;
		cpu_relax();
	} while (now_us() < spin_end);

	for (;;) {
		uint32_t s = atomic_load(seq);
		atomic_store(waiters, 1);
		atomic_thread_fence(memory_order_seq_cst);
		if (ready(r, need)) {
			atomic_store(waiters, 0);
			return 0;
		}
		if (atomic_load(&r->ctl->closed)) {
			atomic_store(waiters, 0);
			return CRC_EDAEMON;
		}
		int ms = r->wait_ms;
		if (timeout_ms >= 0) {
			uint64_t spent_ms = (now_us() - start) / 1000u;
			if (spent_ms >= (uint64_t)timeout_ms) {
				atomic_store(waiters, 0);
				return CRC_ETIMEDOUT;
			}
			if ((uint64_t)ms > timeout_ms - spent_ms)
				ms = (int)(timeout_ms - spent_ms);
		}
		crc_futex_wait(seq, s, ms > 0 ? ms : 1);
		atomic_store(waiters, 0);
		if (ready(r, need))
			return 0;
		if (r->alive) {
			int rc = r->alive(r->alive_arg);
			if (rc)
				return rc;
		}
	}
}

static bool has_space(struct crc_ring *r, uint64_t need)
{
	uint64_t head = atomic_load_explicit(&r->ctl->head, memory_order_relaxed);
	uint64_t tail = atomic_load_explicit(&r->ctl->tail, memory_order_acquire);
	return head + need - tail <= r->ctl->size;
}

static bool has_data(struct crc_ring *r, uint64_t unused)
{
	(void)unused;
	uint64_t tail = atomic_load_explicit(&r->ctl->tail, memory_order_relaxed) + r->reserved;
	return atomic_load_explicit(&r->ctl->head, memory_order_acquire) != tail;
}

int crc_ring_reserve(struct crc_ring *r, uint16_t op, uint16_t flags, uint64_t seq, size_t payload_len,
		     void **payload)
{
	if (payload_len > crc_ring_max_payload(r))
		return CRC_EINVAL;
	uint64_t rec = align_up(sizeof(struct crc_msg_hdr) + payload_len);
	uint64_t head = atomic_load_explicit(&r->ctl->head, memory_order_relaxed);
	uint64_t pos = head & r->mask;
	uint64_t to_end = r->ctl->size - pos;
	uint64_t total = to_end < rec ? to_end + rec : rec;
	if (atomic_load(&r->ctl->closed))
		return CRC_EDAEMON;
	if (!has_space(r, total)) {
		int rc = ring_wait(r, &r->ctl->space_seq, &r->ctl->space_waiters, has_space, total, -1);
		if (rc)
			return rc;
	}
	if (to_end < rec) {
		struct crc_msg_hdr *pad = (struct crc_msg_hdr *)(r->data + pos);
		pad->len = (uint32_t)to_end;
		pad->op = OP_PAD;
		pos = 0;
	}
	struct crc_msg_hdr *h = (struct crc_msg_hdr *)(r->data + pos);
	h->len = (uint32_t)(sizeof(*h) + payload_len);
	h->op = op;
	h->flags = flags;
	h->seq = seq;
	r->reserved = total;
	*payload = h + 1;
	return 0;
}

void crc_ring_commit(struct crc_ring *r)
{
	uint64_t head = atomic_load_explicit(&r->ctl->head, memory_order_relaxed);
	atomic_store_explicit(&r->ctl->head, head + r->reserved, memory_order_release);
	r->reserved = 0;
	atomic_thread_fence(memory_order_seq_cst);
	/* Taking the flag makes one wake per sleep: a producer that keeps publishing while the consumer
	 * is being scheduled does not make a futex call per record. The waiter sets it again before it
	 * sleeps again. */
	if (atomic_exchange(&r->ctl->data_waiters, 0)) {
		atomic_fetch_add(&r->ctl->data_seq, 1);
		crc_futex_wake(&r->ctl->data_seq);
	}
}

int crc_ring_next(struct crc_ring *r, int timeout_ms, const struct crc_msg_hdr **msg)
{
	for (;;) {
		if (!has_data(r, 0)) {
			if (timeout_ms == 0)
				return atomic_load(&r->ctl->closed) ? CRC_EDAEMON : CRC_EAGAIN;
			int rc =
			    ring_wait(r, &r->ctl->data_seq, &r->ctl->data_waiters, has_data, 0, timeout_ms);
			if (rc)
				return rc;
		}
		uint64_t tail = atomic_load_explicit(&r->ctl->tail, memory_order_relaxed) + r->reserved;
		uint64_t pos = tail & r->mask;
		const struct crc_msg_hdr *h = (const struct crc_msg_hdr *)(r->data + pos);
		uint64_t len;
		/* The peer can write the whole ring, the tail included: records start aligned, and a pad
		 * runs from where it starts (never the start) to the end, as crc_ring_reserve writes them. */
		if (pos % RING_ALIGN || (len = h->len) < sizeof(*h) || len > r->ctl->size - pos ||
		    (h->op == OP_PAD && (!pos || len != r->ctl->size - pos))) {
			pr_err("corrupt record at %llu (len %llu)", (unsigned long long)tail,
			       pos % RING_ALIGN ? 0ull : (unsigned long long)h->len);
			return CRC_EPROTO;
		}
		if (h->op == OP_PAD) {
			r->reserved += len;
			continue;
		}
		r->reserved += align_up(len);
		*msg = h;
		return 0;
	}
}

int crc_ring_pending(struct crc_ring *r)
{
	uint64_t head = atomic_load_explicit(&r->ctl->head, memory_order_acquire);
	uint64_t tail = atomic_load_explicit(&r->ctl->tail, memory_order_relaxed) + r->reserved;

	while (tail != head) {
		uint64_t pos = tail & r->mask;
		const struct crc_msg_hdr *h = (const struct crc_msg_hdr *)(r->data + pos);

		/* A record, or a corrupt one (crc_ring_next's to report): a misaligned position, a pad
		 * that does not run from after the start to the end. At most one pad comes before a
		 * record. */
		if (pos % RING_ALIGN || h->op != OP_PAD || !pos || h->len != r->ctl->size - pos)
			return 0;
		tail += h->len;
	}
	return atomic_load(&r->ctl->closed) ? CRC_EDAEMON : CRC_EAGAIN;
}

void crc_ring_release(struct crc_ring *r)
{
	uint64_t tail = atomic_load_explicit(&r->ctl->tail, memory_order_relaxed);
	atomic_store_explicit(&r->ctl->tail, tail + r->reserved, memory_order_release);
	r->reserved = 0;
	atomic_thread_fence(memory_order_seq_cst);
	if (atomic_exchange(&r->ctl->space_waiters, 0)) {
		atomic_fetch_add(&r->ctl->space_seq, 1);
		crc_futex_wake(&r->ctl->space_seq);
	}
}

void crc_ring_close(struct crc_ring *r)
{
	atomic_store(&r->ctl->closed, 1);
	atomic_fetch_add(&r->ctl->data_seq, 1);
	atomic_fetch_add(&r->ctl->space_seq, 1);
	crc_futex_wake(&r->ctl->data_seq);
	crc_futex_wake(&r->ctl->space_seq);
}
