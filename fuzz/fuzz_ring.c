/* The shared-memory rings of a unix session (common/ring.c), both directions: the consumer reads
 * records whose headers, and the ring's head and tail, live in memory the other process can write.
 *
 * Input: byte 0 picks the mode.
 *  even: raw. Bytes 1..16 are the control block's head and tail, the rest the ring's data; the
 *        consumer takes records (crc_ring_pending, crc_ring_next, crc_ring_release) until it stops.
 *        Whatever it hands out must lie inside the data area.
 *  odd:  round trip. Each following pair of bytes is a record's payload length (in 8-byte units, so
 *        that records of every padding come); a producer writes them and the consumer must read
 *        the same back, in order, across the ring's end. */
#include <string.h>

#include "crcuda/errno.h"
#include "crcuda/ring.h"
#include "fuzz.h"

#define RING_DATA 4096u
#define MAX_RECS  256

static void raw(const uint8_t *data, size_t size)
{
	size_t fp = crc_ring_footprint(RING_DATA);
	uint8_t *mem = calloc(1, fp);
	struct crc_ring_ctl *ctl = (struct crc_ring_ctl *)mem;
	const struct crc_msg_hdr *m;
	struct crc_ring r;
	uint64_t head = 0, tail = 0;

	FUZZ_CHECK(!crc_ring_format(mem, RING_DATA));
	if (size >= 16) {
		memcpy(&head, data, 8);
		memcpy(&tail, data + 8, 8);
		data += 16;
		size -= 16;
	}
	atomic_store(&ctl->head, head);
	atomic_store(&ctl->tail, tail);
	memcpy(mem + CRC_RING_DATA_OFFSET, data, size < RING_DATA ? size : RING_DATA);
	FUZZ_CHECK(!crc_ring_attach(&r, mem, fp));
	for (int i = 0; i < MAX_RECS; i++) {
		int pend = crc_ring_pending(&r), rc = crc_ring_next(&r, 0, &m);

		if (rc) {
			FUZZ_CHECK(rc == CRC_EAGAIN || rc == CRC_EPROTO);
			if (rc == CRC_EAGAIN)
				FUZZ_CHECK(pend == CRC_EAGAIN);
			break;
		}
		FUZZ_CHECK((const uint8_t *)m >= mem + CRC_RING_DATA_OFFSET);
		FUZZ_CHECK((const uint8_t *)m + m->len <= mem + fp);
		fuzz_touch(crc_msg_payload(m), crc_msg_payload_len(m));
		crc_ring_release(&r);
	}
	free(mem);
}

static void round_trip(const uint8_t *data, size_t size)
{
	size_t fp = crc_ring_footprint(RING_DATA);
	uint8_t *mem = calloc(1, fp);
	struct crc_ring tx, rx;
	uint64_t seq = 0, got = 0;

	FUZZ_CHECK(!crc_ring_format(mem, RING_DATA));
	FUZZ_CHECK(!crc_ring_attach(&tx, mem, fp));
	FUZZ_CHECK(!crc_ring_attach(&rx, mem, fp));
	for (size_t i = 0; i + 1 < size && seq < MAX_RECS; i += 2) {
		size_t len = (size_t)(data[i] | data[i + 1] << 8) % (crc_ring_max_payload(&tx) / 8 + 1) * 8;
		const struct crc_msg_hdr *m;
		void *p;

		/* The ring holds one record at a time here: it is read before the next is written. */
		FUZZ_CHECK(!crc_ring_reserve(&tx, (uint16_t)(seq & 0x7fff), 0, seq, len, &p));
		memset(p, (int)(seq & 0xff), len);
		crc_ring_commit(&tx);
		FUZZ_CHECK(!crc_ring_pending(&rx));
		FUZZ_CHECK(!crc_ring_next(&rx, 0, &m));
		FUZZ_CHECK(m->seq == seq && m->op == (seq & 0x7fff) && crc_msg_payload_len(m) == len);
		for (size_t b = 0; b < len; b++)
			FUZZ_CHECK(((const uint8_t *)crc_msg_payload(m))[b] == (seq & 0xff));
		crc_ring_release(&rx);
		got++;
		seq++;
		FUZZ_CHECK(crc_ring_pending(&rx) == CRC_EAGAIN);
	}
	FUZZ_CHECK(got == seq);
	free(mem);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_quiet();
	if (!size)
		return 0;
	if (data[0] & 1)
		round_trip(data + 1, size - 1);
	else
		raw(data + 1, size - 1);
	return 0;
}
