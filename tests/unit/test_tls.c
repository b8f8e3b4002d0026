/* TLS on a socket pair (common/tls.c): handshakes with the right and a wrong key (the refusal comes
 * after the delay), a plaintext peer told apart, messages of every size exact through
 * crc_sock_read_all / crc_sock_write_all, both directions at once, a session moved to another
 * descriptor (dup3) and dropped, and a new handshake on the same socket with another key (a handoff).
 * Large transfers (1 MiB and more) have their socket I/O on a thread of their own: a large message
 * and a small one sent together arrive apart and exact, a large read does not take the bytes of the
 * next handshake, and a large read whose peer stops (close_notify with the socket still open, a stall
 * past the socket's timeout, the socket closed) fails at once, the reader still able to answer. Run
 * again with CRCUDA_TLS_IO_THREAD=0 (unit_tls_no_io_thread). */
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "crcuda/errno.h"
#include "crcuda/proto.h"
#include "crcuda/sock.h"
#include "crcuda/tls.h"

struct side {
	int fd;
	const char *id;
	const void *key;
	size_t key_len;
	int rc;
	char why[256];
};

static void *serve(void *arg)
{
	struct side *s = arg;

	s->rc = crc_tls_server(s->fd, s->id, s->key, s->key_len, 5000, s->why, sizeof(s->why));
	return NULL;
}

/* Handshake of a client with key ckey against a server with skey: both results. */
static void pair(int sv[2], const char *cid, const void *ckey, size_t clen, const char *sid, const void *skey,
		 size_t slen, int *crc, int *src, char *cwhy)
{
	struct side srv = {.fd = sv[1], .id = sid, .key = skey, .key_len = slen};
	pthread_t t;

	CHECK(!pthread_create(&t, NULL, serve, &srv));
	*crc = crc_tls_client(sv[0], cid, ckey, clen, 5000, cwhy, 256);
	pthread_join(t, NULL);
	*src = srv.rc;
}

/* A fresh socket pair with a TLS session on each end, both keyed with the token. */
static void token_pair(int sv[2], const char *token)
{
	char why[256];
	int crc, src;

	CHECK(!socketpair(AF_UNIX, SOCK_STREAM, 0, sv));
	pair(sv, CRC_TLS_ID_TOKEN, token, strlen(token), CRC_TLS_ID_TOKEN, token, strlen(token), &crc, &src,
	     why);
	CHECK_EQ_INT(crc, 0);
	CHECK_EQ_INT(src, 0);
}

struct pump {
	int fd;
	uint8_t *buf;
	size_t len;
	size_t then; /* a second message of this many bytes (from buf + 7) */
	int rc;
};

static void *writer(void *arg)
{
	struct pump *p = arg;

	p->rc = crc_sock_write_all(p->fd, p->buf, p->len);
	if (!p->rc && p->then)
		p->rc = crc_sock_write_all(p->fd, p->buf + 7, p->then);
	return NULL;
}

/* Writes len bytes of buf, then stops: a close_notify (the socket left open), a stall, a hang-up. */
struct cut {
	int fd;
	uint8_t *buf;
	size_t len;
	bool close_notify;
	int stall_ms; /* then */
	bool hang_up; /* then: the session dropped, the socket closed */
};

static void *cut_writer(void *arg)
{
	struct cut *c = arg;

	CHECK_EQ_INT(crc_sock_write_all(c->fd, c->buf, c->len), 0);
	if (c->close_notify)
		crc_tls_end_writes(c->fd);
	usleep((useconds_t)c->stall_ms * 1000);
	if (c->hang_up) {
		crc_tls_drop(c->fd);
		close(c->fd);
	}
	return NULL;
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(void)
{
	static const char token[] = "unit-token-0123456789", wrong[] = "unit-token-0123456780";
	static const size_t sizes[] = {1, 24, 16383, 16384, 16385, 262144, 262145, 3u << 20};
	int sv[2], crc, src, dupfd;
	char why[256];
	uint8_t *a, *b;
	double t0;

	if (crc_tls_random(why, 1) == CRC_ENOTSUP) {
		fprintf(stderr, "no GnuTLS here: skipped\n");
		return CHECK_SKIP;
	}
	a = malloc(3u << 20);
	b = malloc(3u << 20);
	CHECK(a && b);
	CHECK(!crc_tls_random(a, 3u << 20));

	/* A wrong key: refused on both sides as an authentication failure, after the delay. */
	CHECK(!socketpair(AF_UNIX, SOCK_STREAM, 0, sv));
	t0 = now();
	pair(sv, CRC_TLS_ID_TOKEN, wrong, strlen(wrong), CRC_TLS_ID_TOKEN, token, strlen(token), &crc, &src,
	     why);
	CHECK_EQ_INT(crc, CRC_EAUTH);
	CHECK_EQ_INT(src, CRC_EAUTH);
	CHECK(now() - t0 >= CRC_TLS_AUTH_DELAY_MS / 1000.0 * 0.95);
	CHECK(!crc_tls_on(sv[0]) && !crc_tls_on(sv[1]));
	close(sv[0]);
	close(sv[1]);
	/* Another identity is refused the same way. */
	CHECK(!socketpair(AF_UNIX, SOCK_STREAM, 0, sv));
	pair(sv, CRC_TLS_ID_HANDOFF, token, strlen(token), CRC_TLS_ID_TOKEN, token, strlen(token), &crc, &src,
	     why);
	CHECK_EQ_INT(crc, CRC_EAUTH);
	close(sv[0]);
	close(sv[1]);

	/* A plaintext daemon answers a ClientHello with a refusal of its own protocol: told apart. */
	CHECK(!socketpair(AF_UNIX, SOCK_STREAM, 0, sv));
	{
		struct crc_hello_reply *r = calloc(1, sizeof(*r));
		uint8_t first[2];

		CHECK(r);
		*r = (struct crc_hello_reply){
		    .magic = CRC_PROTO_MAGIC, .version = CRC_PROTO_VERSION, .status = CRC_ETLS};
		CHECK_EQ_INT(crc_sock_write_all(sv[1], r, sizeof(*r)), 0);
		crc = crc_tls_client(sv[0], CRC_TLS_ID_TOKEN, token, strlen(token), 5000, why, sizeof(why));
		CHECK_EQ_INT(crc, CRC_ETLS);
		CHECK(strstr(why, "plaintext"));
		CHECK_EQ_INT((int)read(sv[1], first, 2), 2);
		CHECK(crc_tls_looks_like_hello(first, 2));
		free(r);
	}
	close(sv[0]);
	close(sv[1]);

	/* The right key: every size exact, both directions at once. */
	token_pair(sv, token);
	CHECK(crc_tls_on(sv[0]) && crc_tls_on(sv[1]));
	CHECK(strstr(crc_tls_cipher(sv[0]), "GCM") || strstr(crc_tls_cipher(sv[0]), "CHACHA"));
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		struct pump w = {.fd = sv[0], .buf = a, .len = sizes[i]},
			    back = {.fd = sv[1], .buf = a, .len = sizes[i]};
		pthread_t t1, t2;
		uint8_t *c = malloc(sizes[i]);

		CHECK(c);
		memset(b, 0, sizes[i]);
		CHECK(!pthread_create(&t1, NULL, writer, &w));
		CHECK(!pthread_create(&t2, NULL, writer, &back));
		CHECK_EQ_INT(crc_sock_read_all(sv[1], b, sizes[i]), 0);
		CHECK_EQ_INT(crc_sock_read_all(sv[0], c, sizes[i]), 0);
		pthread_join(t1, NULL);
		pthread_join(t2, NULL);
		CHECK_EQ_INT(w.rc, 0);
		CHECK_EQ_INT(back.rc, 0);
		CHECK(!memcmp(a, b, sizes[i]));
		CHECK(!memcmp(a, c, sizes[i]));
		CHECK(!crc_tls_pending(sv[0]) && !crc_tls_pending(sv[1]));
		free(c);
	}
	/* Two messages in one go: the second waits decrypted or read ahead, which pending says. */
	CHECK_EQ_INT(crc_sock_write_all(sv[0], a, 100), 0);
	CHECK_EQ_INT(crc_sock_write_all(sv[0], a + 100, 100), 0);
	usleep(20000);
	CHECK_EQ_INT(crc_sock_read_all(sv[1], b, 100), 0);
	CHECK(crc_tls_pending(sv[1]));
	CHECK_EQ_INT(crc_sock_read_all(sv[1], b + 100, 100), 0);
	CHECK(!memcmp(a, b, 200));
	CHECK(!crc_tls_pending(sv[1]));

	/* A large message and a small one sent together: the large read leaves the small one whole. */
	{
		struct pump w = {.fd = sv[0], .buf = a, .len = 3u << 20, .then = 100};
		pthread_t t;

		memset(b, 0, 3u << 20);
		CHECK(!pthread_create(&t, NULL, writer, &w));
		CHECK_EQ_INT(crc_sock_read_all(sv[1], b, (3u << 20) - 5), 0);
		pthread_join(t, NULL);
		CHECK_EQ_INT(w.rc, 0);
		CHECK_EQ_INT(crc_sock_read_all(sv[1], b + (3u << 20) - 5, 5), 0);
		CHECK(!memcmp(a, b, 3u << 20));
		/* The small one is read ahead (pending) or still on the socket, as the threads' timing
		 * had it (a loaded machine: the latter). */
		{
			struct pollfd pf = {.fd = sv[1], .events = POLLIN};

			CHECK(crc_tls_pending(sv[1]) || poll(&pf, 1, 2000) == 1);
		}
		CHECK_EQ_INT(crc_sock_read_all(sv[1], b, 100), 0);
		CHECK(!memcmp(a + 7, b, 100));
		CHECK(!crc_tls_pending(sv[1]));
	}

	/* Moved with its descriptor (dup3), as a reclaimed connection is. */
	dupfd = dup(sv[0]);
	CHECK(dupfd >= 0);
	crc_tls_move(sv[0], dupfd);
	CHECK(crc_tls_on(dupfd) && !crc_tls_on(sv[0]));
	CHECK_EQ_INT(crc_sock_write_all(dupfd, a, 4096), 0);
	CHECK_EQ_INT(crc_sock_read_all(sv[1], b, 4096), 0);
	CHECK(!memcmp(a, b, 4096));

	/* A handoff: both forget the session and make a new one on the same socket with a new key. */
	{
		uint8_t key[CRC_TLS_KEY_LEN];

		CHECK(!crc_tls_random(key, sizeof(key)));
		crc_tls_drop(dupfd);
		crc_tls_drop(sv[1]);
		CHECK(!crc_tls_on(dupfd) && !crc_tls_on(sv[1]));
		sv[0] = dupfd;
		pair(sv, CRC_TLS_ID_HANDOFF, key, sizeof(key), CRC_TLS_ID_HANDOFF, key, sizeof(key), &crc,
		     &src, why);
		CHECK_EQ_INT(crc, 0);
		CHECK_EQ_INT(src, 0);
		struct pump w = {.fd = sv[1], .buf = a, .len = 1u << 20};
		pthread_t t;

		CHECK(!pthread_create(&t, NULL, writer, &w));
		CHECK_EQ_INT(crc_sock_read_all(sv[0], b, 1u << 20), 0);
		pthread_join(t, NULL);
		CHECK_EQ_INT(w.rc, 0);
		CHECK(!memcmp(a, b, 1u << 20));
		/* A large message right before another handoff: its read leaves the handshake's bytes. */
		w = (struct pump){.fd = sv[1], .buf = a, .len = 2u << 20};
		CHECK(!pthread_create(&t, NULL, writer, &w));
		CHECK_EQ_INT(crc_sock_read_all(sv[0], b, 2u << 20), 0);
		pthread_join(t, NULL);
		CHECK(!memcmp(a, b, 2u << 20));
		CHECK(!crc_tls_random(key, sizeof(key)));
		crc_tls_drop(sv[0]);
		crc_tls_drop(sv[1]);
		pair(sv, CRC_TLS_ID_HANDOFF, key, sizeof(key), CRC_TLS_ID_HANDOFF, key, sizeof(key), &crc,
		     &src, why);
		CHECK_EQ_INT(crc, 0);
		CHECK_EQ_INT(src, 0);
		CHECK_EQ_INT(crc_sock_write_all(sv[0], a, 1000), 0);
		CHECK_EQ_INT(crc_sock_read_all(sv[1], b, 1000), 0);
		CHECK(!memcmp(a, b, 1000));
	}
	/* A large read cut short by a close_notify (the socket still open): it fails at once, and this
	 * side can still answer. */
	{
		struct cut w = {.fd = sv[1], .buf = a, .len = 1500000, .close_notify = true, .stall_ms = 0};
		pthread_t t;

		CHECK(!pthread_create(&t, NULL, cut_writer, &w));
		t0 = now();
		CHECK_EQ_INT(crc_sock_read_all(sv[0], b, 3u << 20), CRC_EDAEMON);
		CHECK(now() - t0 < 2);
		CHECK(!memcmp(a, b, 1500000));
		pthread_join(t, NULL);
		CHECK_EQ_INT(crc_sock_write_all(sv[0], a, 3000), 0);
		CHECK_EQ_INT(crc_sock_read_all(sv[1], b, 3000), 0);
		CHECK(!memcmp(a, b, 3000));
	}
	close(sv[0]);
	close(sv[1]);
	/* A large read whose peer stalls past the socket's receive timeout: CRC_EAGAIN in that time. */
	token_pair(sv, token);
	{
		struct timeval tv = {.tv_sec = 0, .tv_usec = 300000};
		struct cut w = {
		    .fd = sv[1], .buf = a, .len = 1500000, .close_notify = false, .stall_ms = 1500};
		pthread_t t;

		CHECK(!setsockopt(sv[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)));
		CHECK(!pthread_create(&t, NULL, cut_writer, &w));
		t0 = now();
		CHECK_EQ_INT(crc_sock_read_all(sv[0], b, 3u << 20), CRC_EAGAIN);
		CHECK(now() - t0 < 1.2);
		pthread_join(t, NULL);
	}
	/* The peer gone in the middle of a large read: CRC_EDAEMON, no hang. */
	{
		struct timeval tv = {0};
		struct cut w = {.buf = a, .len = 1500000, .hang_up = true};
		pthread_t t;

		CHECK(!setsockopt(sv[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)));
		crc_tls_drop(sv[0]);
		crc_tls_drop(sv[1]);
		close(sv[0]);
		close(sv[1]);
		token_pair(sv, token);
		w.fd = sv[1];
		CHECK(!pthread_create(&t, NULL, cut_writer, &w));
		CHECK_EQ_INT(crc_sock_read_all(sv[0], b, 3u << 20), CRC_EDAEMON);
		pthread_join(t, NULL);
		CHECK(!memcmp(a, b, 1500000));
		crc_tls_drop(sv[0]);
		close(sv[0]);
	}
	token_pair(sv, token);
	/* The peer gone: a read says so (no hang). */
	crc_tls_drop(sv[1]);
	close(sv[1]);
	CHECK_EQ_INT(crc_sock_read_all(sv[0], b, 1), CRC_EDAEMON);
	/* A descriptor closed without a drop and reused for another socket is not taken for the old one. */
	close(sv[0]);
	CHECK(!socketpair(AF_UNIX, SOCK_STREAM, 0, sv));
	CHECK(!crc_tls_on(sv[0]) && !crc_tls_on(sv[1]));
	CHECK_EQ_INT(crc_sock_write_all(sv[0], "plain", 5), 0);
	CHECK_EQ_INT(crc_sock_read_all(sv[1], b, 5), 0);
	CHECK(!memcmp(b, "plain", 5));
	close(sv[0]);
	close(sv[1]);
	free(a);
	free(b);
	printf("tls: ok\n");
	return 0;
}
