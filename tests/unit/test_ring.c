/* The shared-memory ring: ordered, intact delivery across wraps, between threads and between
 * processes; a dead peer ends a wait with an error instead of a hang; a peer that scribbles on the
 * ring gets a protocol error, never a read outside it or a spin. */
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "crcuda/errno.h"
#include "crcuda/ring.h"

#define N_MSGS	  200000
#define DATA_SIZE 8192 /* small, so records wrap often */

static void fill(uint8_t *p, size_t n, uint64_t seq)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(seq * 31 + i);
}

static size_t len_for(uint64_t seq)
{
	return (seq * 2654435761u) % 700; /* 0..699 bytes: many distinct alignments */
}

static void produce(struct crc_ring *r, int n)
{
	for (uint64_t s = 0; s < (uint64_t)n; s++) {
		void *p;
		size_t len = len_for(s);
		CHECK_EQ_INT(crc_ring_reserve(r, (uint16_t)(s & 0x7fff), 0, s, len, &p), 0);
		fill(p, len, s);
		crc_ring_commit(r);
	}
}

static void consume(struct crc_ring *r, int n)
{
	uint8_t expect[1024];
	for (uint64_t s = 0; s < (uint64_t)n; s++) {
		const struct crc_msg_hdr *m;
		CHECK_EQ_INT(crc_ring_next(r, 5000, &m), 0);
		CHECK_EQ_INT(m->seq, s);
		CHECK_EQ_INT(m->op, s & 0x7fff);
		size_t len = len_for(s);
		CHECK_EQ_INT(crc_msg_payload_len(m), len);
		fill(expect, len, s);
		CHECK(memcmp(crc_msg_payload(m), expect, len) == 0);
		crc_ring_release(r);
	}
}

static void *producer_thread(void *arg)
{
	produce(arg, N_MSGS);
	return NULL;
}

static void *map_ring(void)
{
	size_t sz = crc_ring_footprint(DATA_SIZE);
	void *mem = mmap(NULL, sz, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	CHECK(mem != MAP_FAILED);
	CHECK_EQ_INT(crc_ring_format(mem, DATA_SIZE), 0);
	return mem;
}

static pid_t peer_pid;
static int peer_alive(void *arg)
{
	(void)arg;
	return kill(peer_pid, 0) == 0 && waitpid(peer_pid, NULL, WNOHANG) == 0 ? 0 : CRC_EDAEMON;
}

int main(void)
{
	size_t sz = crc_ring_footprint(DATA_SIZE);
	struct crc_ring prod, cons;

	/* Argument checks. */
	CHECK_EQ_INT(crc_ring_format(map_ring(), 3000), CRC_EINVAL);
	void *mem = map_ring();
	CHECK_EQ_INT(crc_ring_attach(&prod, mem, 100), CRC_EPROTO);
	CHECK_EQ_INT(crc_ring_attach(&prod, mem, sz), 0);
	void *p;
	CHECK_EQ_INT(crc_ring_reserve(&prod, 1, 0, 0, crc_ring_max_payload(&prod) + 1, &p), CRC_EINVAL);
	CHECK_EQ_INT(crc_ring_attach(&cons, mem, sz), 0);
	const struct crc_msg_hdr *m;
	CHECK_EQ_INT(crc_ring_next(&cons, 0, &m), CRC_EAGAIN);
	CHECK_EQ_INT(crc_ring_next(&cons, 20, &m), CRC_ETIMEDOUT);

	/* Threads. */
	pthread_t t;
	CHECK_EQ_INT(pthread_create(&t, NULL, producer_thread, &prod), 0);
	consume(&cons, N_MSGS);
	pthread_join(t, NULL);
	CHECK_EQ_INT(crc_ring_next(&cons, 0, &m), CRC_EAGAIN);

	/* Processes: the producer is a forked child writing into the same shared mapping. */
	mem = map_ring();
	CHECK_EQ_INT(crc_ring_attach(&cons, mem, sz), 0);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		CHECK_EQ_INT(crc_ring_attach(&prod, mem, sz), 0);
		produce(&prod, N_MSGS);
		_exit(0);
	}
	consume(&cons, N_MSGS);
	int status;
	CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);

	/* A peer killed while the consumer waits: the wait ends with the liveness error. */
	mem = map_ring();
	CHECK_EQ_INT(crc_ring_attach(&cons, mem, sz), 0);
	peer_pid = fork();
	CHECK(peer_pid >= 0);
	if (peer_pid == 0) {
		pause();
		_exit(0);
	}
	crc_ring_set_liveness(&cons, peer_alive, NULL, 20);
	usleep(50000);
	kill(peer_pid, SIGKILL);
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	CHECK_EQ_INT(crc_ring_next(&cons, -1, &m), CRC_EDAEMON);
	clock_gettime(CLOCK_MONOTONIC, &b);
	CHECK(b.tv_sec - a.tv_sec < 3);

	/* Orderly close wakes a waiting consumer. */
	mem = map_ring();
	CHECK_EQ_INT(crc_ring_attach(&cons, mem, sz), 0);
	CHECK_EQ_INT(crc_ring_attach(&prod, mem, sz), 0);
	crc_ring_close(&prod);
	CHECK_EQ_INT(crc_ring_next(&cons, -1, &m), CRC_EDAEMON);
	CHECK_EQ_INT(crc_ring_reserve(&prod, 1, 0, 0, 8, &p), CRC_EDAEMON);

	/* Corrupt rings (found by fuzz/fuzz_ring.c). The tail is in shared memory too: one the peer
	 * left misaligned made the consumer read a header across the ring's end (and misaligned). */
	struct crc_ring_ctl *ctl;
	struct crc_msg_hdr *h;
	mem = map_ring();
	ctl = mem;
	CHECK_EQ_INT(crc_ring_attach(&cons, mem, sz), 0);
	atomic_store(&ctl->tail, DATA_SIZE - 4);
	atomic_store(&ctl->head, DATA_SIZE + 64);
	CHECK_EQ_INT(crc_ring_pending(&cons), 0);
	CHECK_EQ_INT(crc_ring_next(&cons, 0, &m), CRC_EPROTO);
	/* A pad of any length but to the end put the next record out of alignment. */
	atomic_store(&ctl->tail, 0);
	h = (struct crc_msg_hdr *)((uint8_t *)mem + CRC_RING_DATA_OFFSET);
	*h = (struct crc_msg_hdr){.len = 20, .op = 0xffff};
	CHECK_EQ_INT(crc_ring_next(&cons, 0, &m), CRC_EPROTO);
	/* Pads of the whole ring at its start, the head far ahead: crc_ring_pending went round and round. */
	*h = (struct crc_msg_hdr){.len = DATA_SIZE, .op = 0xffff};
	atomic_store(&ctl->head, 1ull << 62);
	CHECK_EQ_INT(crc_ring_pending(&cons), 0);
	CHECK_EQ_INT(crc_ring_next(&cons, 0, &m), CRC_EPROTO);
	/* A pad to the end is what a producer writes: the record after it, at the start, comes. */
	h = (struct crc_msg_hdr *)((uint8_t *)mem + CRC_RING_DATA_OFFSET + DATA_SIZE - 32);
	*h = (struct crc_msg_hdr){.len = 32, .op = 0xffff};
	*(struct crc_msg_hdr *)((uint8_t *)mem + CRC_RING_DATA_OFFSET) =
	    (struct crc_msg_hdr){.len = 24, .op = 3, .seq = 9};
	atomic_store(&ctl->tail, DATA_SIZE - 32);
	atomic_store(&ctl->head, DATA_SIZE + 32);
	CHECK_EQ_INT(crc_ring_pending(&cons), 0);
	CHECK_EQ_INT(crc_ring_next(&cons, 0, &m), 0);
	CHECK_EQ_INT(m->seq, 9);
	crc_ring_release(&cons);
	CHECK_EQ_INT(crc_ring_pending(&cons), CRC_EAGAIN);
	return 0;
}
