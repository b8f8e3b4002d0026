#define LOG_PREFIX "chan: "
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "crcuda/chan.h"
#include "crcuda/errno.h"
#include "crcuda/log.h"
#include "crcuda/proto.h"
#include "crcuda/sock.h"
#include "crcuda/tls.h"

size_t crc_chan_shm_size(size_t ring_size)
{
	return 2 * crc_ring_footprint(ring_size) + CRC_SESSION_CTL_SIZE;
}

int crc_sock_alive(int fd)
{
	struct pollfd p = {.fd = fd, .events = POLLRDHUP};

	if (poll(&p, 1, 0) < 0)
		return errno == EINTR ? 0 : CRC_EDAEMON;
	return p.revents & (POLLHUP | POLLRDHUP | POLLERR | POLLNVAL) ? CRC_EDAEMON : 0;
}

static int ring_peer_alive(void *arg)
{
	return crc_sock_alive(*(int *)arg);
}

int crc_chan_open_shm(struct crc_chan *c, int fd, int memfd, size_t ring_size, bool is_daemon, bool format)
{
	size_t one = crc_ring_footprint(ring_size), total = crc_chan_shm_size(ring_size);
	uint8_t *mem;
	int rc;

	memset(c, 0, sizeof(*c));
	c->fd = fd;
	mem = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
	if (mem == MAP_FAILED) {
		rc = -errno;
		pr_perror("map the session rings (%zu bytes)", total);
		return rc;
	}
	c->shm = mem;
	c->shm_size = total;
	if (format && (crc_ring_format(mem, ring_size) || crc_ring_format(mem + one, ring_size))) {
		rc = CRC_EINVAL;
		goto fail;
	}
	/* Requests flow in the first ring, responses in the second. */
	rc = crc_ring_attach(is_daemon ? &c->rx : &c->tx, mem, one);
	if (!rc)
		rc = crc_ring_attach(is_daemon ? &c->tx : &c->rx, mem + one, one);
	if (rc)
		goto fail;
	c->sctl = (struct crc_session_ctl *)(mem + 2 * one);
	if (format) {
		memset(c->sctl, 0, CRC_SESSION_CTL_SIZE);
		c->sctl->magic = CRC_SESSION_CTL_MAGIC;
	} else if (c->sctl->magic != CRC_SESSION_CTL_MAGIC) {
		rc = CRC_EPROTO;
		goto fail;
	}
	crc_ring_set_liveness(&c->tx, ring_peer_alive, &c->fd, 100);
	crc_ring_set_liveness(&c->rx, ring_peer_alive, &c->fd, 100);
	return 0;
fail:
	munmap(mem, total);
	c->shm = NULL;
	return rc;
}

void crc_chan_open_tcp(struct crc_chan *c, int fd)
{
	memset(c, 0, sizeof(*c));
	c->fd = fd;
	c->tcp = true;
}

void crc_chan_close(struct crc_chan *c)
{
	if (c->shm)
		munmap(c->shm, c->shm_size);
	free(c->txmsg);
	free(c->rxmsg);
	c->shm = NULL;
	c->sctl = NULL;
	c->txmsg = c->rxmsg = NULL;
}

size_t crc_chan_max_payload(const struct crc_chan *c)
{
	return c->tcp ? CRC_TCP_MAX_PAYLOAD : crc_ring_max_payload(&c->tx);
}

static int grow(struct crc_msg_hdr **buf, size_t *cap, size_t need)
{
	void *p;

	if (need <= *cap)
		return 0;
	p = realloc(*buf, need);
	if (!p)
		return CRC_ENOMEM;
	*buf = p;
	*cap = need;
	return 0;
}

int crc_chan_reserve(struct crc_chan *c, uint16_t op, uint16_t flags, uint64_t seq, size_t len,
		     void **payload)
{
	int rc;

	if (!c->tcp)
		return crc_ring_reserve(&c->tx, op, flags, seq, len, payload);
	if (len > CRC_TCP_MAX_PAYLOAD)
		return CRC_EINVAL;
	rc = grow(&c->txmsg, &c->txcap, sizeof(struct crc_msg_hdr) + len);
	if (rc)
		return rc;
	c->txmsg->len = (uint32_t)(sizeof(struct crc_msg_hdr) + len);
	c->txmsg->op = op;
	c->txmsg->flags = flags;
	c->txmsg->seq = seq;
	*payload = c->txmsg + 1;
	return 0;
}

int crc_chan_commit(struct crc_chan *c)
{
	if (!c->tcp) {
		crc_ring_commit(&c->tx);
		return 0;
	}
	return crc_sock_write_all(c->fd, c->txmsg, c->txmsg->len);
}

int crc_chan_next(struct crc_chan *c, int timeout_ms, const struct crc_msg_hdr **msg)
{
	struct crc_msg_hdr h;
	int rc;

	if (!c->tcp)
		return crc_ring_next(&c->rx, timeout_ms, msg);
	/* Over TLS, bytes may wait decrypted in the session where poll cannot see them. */
	if (timeout_ms >= 0 && !crc_tls_pending(c->fd)) {
		struct pollfd p = {.fd = c->fd, .events = POLLIN};

		rc = poll(&p, 1, timeout_ms);
		if (rc == 0)
			return CRC_ETIMEDOUT;
	}
	rc = crc_sock_read_all(c->fd, &h, sizeof(h));
	if (rc)
		return rc;
	if (h.len < sizeof(h) || h.len - sizeof(h) > CRC_TCP_MAX_PAYLOAD) {
		pr_err("bad record length %u on the socket", h.len);
		return CRC_EPROTO;
	}
	rc = grow(&c->rxmsg, &c->rxcap, h.len);
	if (rc)
		return rc;
	*c->rxmsg = h;
	rc = crc_sock_read_all(c->fd, c->rxmsg + 1, h.len - sizeof(h));
	if (rc)
		return rc;
	c->rx_held = true;
	*msg = c->rxmsg;
	return 0;
}

int crc_chan_pending(struct crc_chan *c)
{
	struct pollfd p = {.fd = c->fd, .events = POLLIN};

	if (!c->tcp)
		return crc_ring_pending(&c->rx);
	if (crc_tls_pending(c->fd))
		return 0;
	if (poll(&p, 1, 0) < 0)
		return CRC_EDAEMON;
	return p.revents & POLLIN ? 0 : p.revents & (POLLHUP | POLLERR | POLLNVAL) ? CRC_EDAEMON : CRC_EAGAIN;
}

void crc_chan_release(struct crc_chan *c)
{
	if (!c->tcp)
		crc_ring_release(&c->rx);
	c->rx_held = false;
}

void crc_chan_shutdown(struct crc_chan *c)
{
	if (!c->tcp && c->shm) {
		crc_ring_close(&c->tx);
		crc_ring_close(&c->rx);
	}
}

bool crc_const_time_equal(const void *a, size_t alen, const void *b, size_t blen)
{
	const volatile uint8_t *x = a, *y = b;
	size_t n = alen > blen ? alen : blen;
	uint8_t diff = alen != blen;

	for (size_t i = 0; i < n; i++)
		diff |= (uint8_t)((i < alen ? x[i] : 0) ^ (i < blen ? y[i] : 0));
	return diff == 0;
}
