/* A single-producer single-consumer message ring in shared memory, the fast path between an
 * application's libcrcuda and crcudad. Both sides map the same memfd; each direction has its own
 * ring. Records are 8-byte aligned {len, op, flags, seq} + payload and never split: a record that
 * does not fit before the end is preceded by a pad record. Waiting spins briefly, then sleeps on a
 * futex in the shared page, waking every wait_ms to ask the caller whether the peer is still alive,
 * so a dead peer gives an error, never a hang. */
#ifndef CRCUDA_RING_H
#define CRCUDA_RING_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

struct crc_msg_hdr {
	uint32_t len; /* header + payload bytes, before alignment */
	uint16_t op;
	uint16_t flags;
	uint64_t seq;
};

/* Shared control block; the data area follows at CRC_RING_DATA_OFFSET. */
struct crc_ring_ctl {
	_Alignas(64) _Atomic uint64_t head;	/* bytes published by the producer, ever */
	_Alignas(64) _Atomic uint64_t tail;	/* bytes released by the consumer, ever */
	_Alignas(64) _Atomic uint32_t data_seq; /* futex: bumped when data arrives and someone waits */
	_Atomic uint32_t data_waiters;
	_Alignas(64) _Atomic uint32_t space_seq; /* futex: bumped when space frees and someone waits */
	_Atomic uint32_t space_waiters;
	_Alignas(64) uint64_t size; /* data bytes, a power of two */
	uint32_t magic;
	_Atomic uint32_t closed; /* set by either side on orderly shutdown */
};

#define CRC_RING_MAGIC	     0x43524e47u /* "CRNG" */
#define CRC_RING_DATA_OFFSET 512u

/* Returns 0 if the peer is alive, else a negative error that ends the wait. */
typedef int (*crc_ring_alive_fn)(void *arg);

struct crc_ring {
	struct crc_ring_ctl *ctl;
	uint8_t *data;
	uint64_t mask;
	uint64_t reserved; /* producer: bytes reserved but not yet published; consumer: bytes held */
	crc_ring_alive_fn alive;
	void *alive_arg;
	int wait_ms;
};

/* Bytes of shared memory a ring of data_size (power of two, >= 4096) needs. */
size_t crc_ring_footprint(size_t data_size);
/* Formats a ring in mem (footprint bytes, zeroed or not). */
int crc_ring_format(void *mem, size_t data_size);
/* Attaches to a formatted ring; checks magic and size against mem_size. */
int crc_ring_attach(struct crc_ring *r, void *mem, size_t mem_size);
void crc_ring_set_liveness(struct crc_ring *r, crc_ring_alive_fn fn, void *arg, int wait_ms);
/* Largest payload one record may carry. */
size_t crc_ring_max_payload(const struct crc_ring *r);

/* Producer: reserves a record of payload_len bytes, waiting for space; returns a pointer to the
 * payload in *payload. Publish with crc_ring_commit. CRC_EINVAL if payload_len is too big. */
int crc_ring_reserve(struct crc_ring *r, uint16_t op, uint16_t flags, uint64_t seq, size_t payload_len,
		     void **payload);
void crc_ring_commit(struct crc_ring *r);

/* Consumer: waits for the next record; it stays valid until crc_ring_release. timeout_ms < 0 waits
 * forever (still asking the liveness callback); 0 polls (CRC_EAGAIN if empty). */
int crc_ring_next(struct crc_ring *r, int timeout_ms, const struct crc_msg_hdr **msg);
/* Consumer: 0 when a record waits, without taking it (crc_ring_next takes one each call); CRC_EAGAIN
 * when none does, CRC_EDAEMON when none does and the producer closed the ring. */
int crc_ring_pending(struct crc_ring *r);
void crc_ring_release(struct crc_ring *r);

/* Marks the ring closed and wakes both sides: waits then end with CRC_EDAEMON. */
void crc_ring_close(struct crc_ring *r);

/* Futexes on a word in memory two processes map (shared, not private): wait while *word == expected,
 * at most ms; wake every waiter. */
void crc_futex_wait(_Atomic uint32_t *word, uint32_t expected, int ms);
void crc_futex_wake(_Atomic uint32_t *word);

static inline const void *crc_msg_payload(const struct crc_msg_hdr *m)
{
	return m + 1;
}
static inline size_t crc_msg_payload_len(const struct crc_msg_hdr *m)
{
	return m->len - sizeof(*m);
}

#endif
