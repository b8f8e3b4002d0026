/* Records framed on a socket, read as they come from the peer:
 *  - TCP sessions (libcrcuda/chan.c, crc_chan_next over TCP): the daemon's worker reads the client's
 *    requests and the client reads the daemon's replies with the same code;
 *  - control connections (common/ctl.c, crc_ctl_record_read): the daemon's front reads crcudactl's and
 *    the CRIU plugin's requests (no minimum), and the replies a worker sends it to relay (at least a
 *    struct crc_ctl_reply).
 * Byte 0 picks the reader; the rest goes into a pipe, which then reaches its end, and the reader takes
 * records until it stops. */
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "crcuda/chan.h"
#include "crcuda/ctl.h"
#include "crcuda/errno.h"
#include "crcuda/proto.h"
#include "fuzz.h"

#define MAX_RECS 64

static void chan_records(int fd)
{
	struct crc_chan c;
	const struct crc_msg_hdr *m;

	crc_chan_open_tcp(&c, fd);
	for (int i = 0; i < MAX_RECS && !crc_chan_next(&c, -1, &m); i++) {
		FUZZ_CHECK(m->len >= sizeof(*m) && m->len - sizeof(*m) <= CRC_TCP_MAX_PAYLOAD);
		fuzz_touch(crc_msg_payload(m), crc_msg_payload_len(m));
		crc_chan_release(&c);
	}
	crc_chan_close(&c);
}

static void ctl_records(int fd, size_t min_len)
{
	struct crc_msg_hdr h;
	uint8_t *body;
	size_t len;

	for (int i = 0; i < MAX_RECS && !crc_ctl_record_read(fd, &h, &body, &len, min_len, 1u << 20); i++) {
		FUZZ_CHECK(len >= min_len && len <= 1u << 20 && body[len] == 0);
		fuzz_touch(body, len + 1);
		free(body);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int p[2];

	fuzz_quiet();
	if (!size || size > 65536 || pipe2(p, O_CLOEXEC))
		return 0;
	/* A pipe holds 64 KiB: all of it goes in before the reader starts. */
	FUZZ_CHECK(write(p[1], data + 1, size - 1) == (ssize_t)(size - 1));
	close(p[1]);
	switch (data[0] % 3) {
	case 0:
		chan_records(p[0]);
		break;
	case 1:
		ctl_records(p[0], 0);
		break;
	default:
		ctl_records(p[0], sizeof(struct crc_ctl_reply));
		break;
	}
	close(p[0]);
	return 0;
}
