/* One direction pair of protocol records between libcrcuda and crcudad, over either transport:
 * two shared-memory rings (unix socket session) or framed records on a TCP socket. Both ends use the
 * same calls: reserve a record, fill its payload, commit; take the next record, read it, release.
 * Records larger than crc_chan_max_payload must be split by the caller. Not thread-safe: each end
 * serialises its own use. */
#ifndef CRCUDA_CHAN_H
#define CRCUDA_CHAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "crcuda/ring.h"

struct crc_chan {
	int fd;	  /* the session's socket (liveness, descriptor passing, TCP records) */
	bool tcp; /* records on fd instead of rings */
	struct crc_ring tx, rx;
	void *shm;
	size_t shm_size;
	struct crc_session_ctl *sctl; /* the control page after the rings (crcuda/proto.h); NULL over TCP */
	/* TCP: the record being built, the record last received. */
	struct crc_msg_hdr *txmsg;
	size_t txcap;
	struct crc_msg_hdr *rxmsg;
	size_t rxcap;
	bool rx_held;
};

/* Largest payload of a TCP record (the rings' own limit is crc_ring_max_payload). */
#define CRC_TCP_MAX_PAYLOAD (8u << 20)

/* Maps a memfd of two rings of ring_size data bytes each, requests first, responses second, then the
 * session control page. The client transmits on the first, the daemon on the second. format: write
 * fresh ring headers and a fresh control page. */
int crc_chan_open_shm(struct crc_chan *c, int fd, int memfd, size_t ring_size, bool is_daemon, bool format);
void crc_chan_open_tcp(struct crc_chan *c, int fd);
/* Unmaps and frees; does not close fd. */
void crc_chan_close(struct crc_chan *c);
/* Bytes of shared memory crc_chan_open_shm maps for ring_size. */
size_t crc_chan_shm_size(size_t ring_size);

size_t crc_chan_max_payload(const struct crc_chan *c);
int crc_chan_reserve(struct crc_chan *c, uint16_t op, uint16_t flags, uint64_t seq, size_t len,
		     void **payload);
int crc_chan_commit(struct crc_chan *c);
/* Waits for the next record (timeout_ms < 0: until it comes or the peer is gone). */
int crc_chan_next(struct crc_chan *c, int timeout_ms, const struct crc_msg_hdr **msg);
void crc_chan_release(struct crc_chan *c);
/* 0 when a record waits, without taking it; CRC_EAGAIN when none does; CRC_EDAEMON when the peer
 * is gone. */
int crc_chan_pending(struct crc_chan *c);
/* Tells the peer this end is going away (rings: closed flag); the socket stays open. */
void crc_chan_shutdown(struct crc_chan *c);

/* 0 while the other end of the socket is connected, CRC_EDAEMON once it hung up. */
int crc_sock_alive(int fd);

/* Compares two byte strings in time that depends on the lengths only. */
bool crc_const_time_equal(const void *a, size_t alen, const void *b, size_t blen);

#endif
