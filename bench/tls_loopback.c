/* bench/tls_loopback: the ceiling TLS sets for a remote GPU's copies on this machine, without CUDA or
 * crcuda's protocol in the way. Prints "name value unit" lines:
 *   aead_<cipher>_gbs  encryption and decryption of 16 KiB records (TLS's largest) on one core
 *   tcp_plain_gbs      one sender and one receiver process, TCP over loopback, 2 MiB writes and reads
 *   tcp_tls_gbs        the same through crcuda's TLS (common/tls.c), the socket I/O on the thread
 *                      that encrypts or decrypts (CRCUDA_TLS_IO_THREAD=0)
 *   tcp_tls_io_thread_gbs  the same with each side's socket I/O on a thread of its own, beside the
 *                      cipher's (CRCUDA_TLS_IO_THREAD=1; the default with 4 CPUs or more)
 *   tcp_tls_xN_gbs     split over N TLS connections (a thread per connection on each side; I/O threads
 *                      as by default)
 *   tls_ratio          tcp_tls_gbs / tcp_plain_gbs (and the other two TLS figures over plain)
 * Each transfer line also says the CPU time per byte of the sender and of the receiver and how many
 * cores each kept busy: one TLS connection's bandwidth cannot exceed one core's AES-GCM rate. Options:
 * --mb N (bytes per transfer, default 2048), --streams N (the striped run's connections, default 4;
 * 0 or 1 for none), --reps N (each transfer figure the best of N, default 3). */
#include <errno.h>
#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "crcuda/sock.h"
#include "crcuda/tls.h"

#define MSG	    (2u << 20)	/* as CRC_COPY_CHUNK: a copy's record */
#define SPAN	    (64u << 20) /* source and destination larger than the caches */
#define MAX_STREAMS 16

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double cpu_seconds(void)
{
	struct rusage r;

	getrusage(RUSAGE_SELF, &r);
	return (double)(r.ru_utime.tv_sec + r.ru_stime.tv_sec) +
	       (double)(r.ru_utime.tv_usec + r.ru_stime.tv_usec) * 1e-6;
}

/* ---- one core's AEAD -------------------------------------------------------------------------- */
static void aead(gnutls_cipher_algorithm_t alg, const char *name)
{
	enum { REC = 16384, TAG = 16 };
	static uint8_t in[REC], out[REC + TAG], back[REC];
	uint8_t key[32] = {1}, nonce[12] = {2};
	gnutls_datum_t k = {key, (unsigned)gnutls_cipher_get_key_size(alg)};
	gnutls_aead_cipher_hd_t h;
	double t, enc, dec;
	long n;

	if (gnutls_aead_cipher_init(&h, alg, &k)) {
		printf("aead_%s_gbs 0 GB/s (not in this GnuTLS)\n", name);
		return;
	}
	memset(in, 7, sizeof(in));
	for (n = 0, t = now(); now() - t < 0.5; n += 64)
		for (int i = 0; i < 64; i++) {
			size_t len = sizeof(out);

			gnutls_aead_cipher_encrypt(h, nonce, sizeof(nonce), NULL, 0, TAG, in, REC, out, &len);
		}
	enc = (double)n * REC / (now() - t) / 1e9;
	for (n = 0, t = now(); now() - t < 0.5; n += 64)
		for (int i = 0; i < 64; i++) {
			size_t len = sizeof(back);

			if (gnutls_aead_cipher_decrypt(h, nonce, sizeof(nonce), NULL, 0, TAG, out,
						       sizeof(out), back, &len)) {
				fprintf(stderr, "tls_loopback: %s does not decrypt what it encrypted\n",
					name);
				exit(1);
			}
		}
	dec = (double)n * REC / (now() - t) / 1e9;
	printf("aead_%s_gbs %.3f GB/s (decrypt %.3f GB/s; one core, 16 KiB records)\n", name, enc, dec);
	gnutls_aead_cipher_deinit(h);
}

/* ---- transfers over loopback ------------------------------------------------------------------ */
struct stream {
	int fd;
	uint8_t *span;
	size_t slice; /* of span, this stream's (a multiple of MSG) */
	size_t bytes;
	bool send;
	int rc;
};

static void *stream_run(void *arg)
{
	struct stream *s = arg;

	for (size_t off = 0; off < s->bytes && !s->rc; off += MSG) {
		size_t n = s->bytes - off < MSG ? s->bytes - off : MSG;
		uint8_t *p = s->span + off % s->slice;

		s->rc = s->send ? crc_sock_write_all(s->fd, p, n) : crc_sock_read_all(s->fd, p, n);
	}
	return NULL;
}

/* Each side's streams, a thread each; the bytes split evenly. */
static int run_streams(const int *fds, int n, uint8_t *span, size_t bytes, bool send)
{
	pthread_t th[MAX_STREAMS];
	struct stream st[MAX_STREAMS];
	size_t slice = SPAN / (size_t)n / MSG * MSG;
	int rc = 0;

	for (int i = 0; i < n; i++) {
		st[i] = (struct stream){fds[i], span + (size_t)i * slice, slice, bytes / (size_t)n, send, 0};
		if (n == 1)
			stream_run(&st[i]);
		else if (pthread_create(&th[i], NULL, stream_run, &st[i]))
			return -1;
	}
	for (int i = 0; i < n; i++) {
		if (n > 1)
			pthread_join(th[i], NULL);
		rc = rc ? rc : st[i].rc;
	}
	return rc;
}

/* What the sender's span holds, and what the receiver's must hold after a transfer. */
static void fill(uint8_t *span)
{
	uint64_t *w = (uint64_t *)span;

	for (size_t i = 0; i < SPAN / 8; i++)
		w[i] = i * 0x9e3779b97f4a7c15ull;
}

/* The receiver's slices got the sender's bytes: each stream's first min(its bytes, its slice). */
static bool received(const uint8_t *span, const uint8_t *ref, int n, size_t bytes)
{
	size_t slice = SPAN / (size_t)n / MSG * MSG, each = bytes / (size_t)n;

	for (int i = 0; i < n; i++)
		if (memcmp(span + (size_t)i * slice, ref + (size_t)i * slice, each < slice ? each : slice))
			return false;
	return true;
}

struct result {
	double gbs, send_ns, recv_ns, send_cores, recv_cores;
};

/* A receiver process and this one as the sender, over n connections; tls: each one a TLS session of
 * common/tls.c (large transfers' socket I/O on threads of their own as crc_tls_set_io_threads said). */
static int transfer(int n, bool tls, size_t bytes, uint8_t *span, struct result *res)
{
	static bool cipher_said;
	static const uint8_t key[CRC_TLS_KEY_LEN] = "tls_loopback's pre-shared key..";
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t alen = sizeof(a);
	int lfd = socket(AF_INET, SOCK_STREAM, 0), report[2], fds[MAX_STREAMS], one = 1;
	double t0, c0, child[2] = {0, 0};
	char why[256];
	pid_t pid;
	int rc = 0, status;

	if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof(a)) || listen(lfd, n) ||
	    getsockname(lfd, (struct sockaddr *)&a, &alen) || pipe(report))
		return -errno;
	pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) { /* the receiver */
		uint8_t *got = malloc(SPAN);
		double c, t;

		if (!got)
			_exit(1);
		memset(got, 0, SPAN);
		for (int i = 0; i < n; i++) {
			fds[i] = accept(lfd, NULL, NULL);
			if (fds[i] < 0 || (tls && crc_tls_server(fds[i], CRC_TLS_ID_TOKEN, key, sizeof(key),
								 10000, why, sizeof(why)))) {
				fprintf(stderr, "tls_loopback: receiver: %s\n", tls ? why : strerror(errno));
				_exit(1);
			}
		}
		c = cpu_seconds();
		t = now();
		if (run_streams(fds, n, got, bytes, false))
			_exit(1);
		child[0] = cpu_seconds() - c;
		child[1] = now() - t;
		if (!received(got, span, n, bytes)) {
			fprintf(stderr, "tls_loopback: the bytes received differ from those sent\n");
			_exit(1);
		}
		/* The end of the transfer, as the sender sees it: one byte back. */
		if (crc_sock_write_all(fds[0], "", 1) ||
		    write(report[1], child, sizeof(child)) != sizeof(child))
			_exit(1);
		_exit(0);
	}
	close(lfd);
	close(report[1]);
	for (int i = 0; i < n && !rc; i++) {
		fds[i] = socket(AF_INET, SOCK_STREAM, 0);
		if (fds[i] < 0 || connect(fds[i], (struct sockaddr *)&a, sizeof(a)))
			rc = -errno;
		else
			setsockopt(fds[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		if (!rc && tls &&
		    crc_tls_client(fds[i], CRC_TLS_ID_TOKEN, key, sizeof(key), 10000, why, sizeof(why))) {
			fprintf(stderr, "tls_loopback: sender: %s\n", why);
			rc = -1;
		}
	}
	if (!rc && tls && !cipher_said) {
		printf("# TLS cipher: %s\n", crc_tls_cipher(fds[0]));
		cipher_said = true;
	}
	c0 = cpu_seconds();
	t0 = now();
	if (!rc)
		rc = run_streams(fds, n, span, bytes, true);
	if (!rc) {
		uint8_t b;

		rc = crc_sock_read_all(fds[0], &b, 1);
	}
	res->gbs = (double)bytes / (now() - t0) / 1e9;
	res->send_ns = (cpu_seconds() - c0) / (double)bytes * 1e9;
	res->send_cores = (cpu_seconds() - c0) / (now() - t0);
	if (!rc && read(report[0], child, sizeof(child)) != sizeof(child))
		rc = -1;
	res->recv_ns = child[0] / (double)bytes * 1e9;
	res->recv_cores = child[1] > 0 ? child[0] / child[1] : 0;
	for (int i = 0; i < n; i++) {
		crc_tls_drop(fds[i]);
		close(fds[i]);
	}
	close(report[0]);
	waitpid(pid, &status, 0);
	return rc ? rc : WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

static double best_of(const char *name, int n, bool tls, size_t bytes, uint8_t *span, int reps)
{
	struct result best = {0}, r;

	for (int i = 0; i < reps; i++) {
		if (transfer(n, tls, bytes, span, &r)) {
			fprintf(stderr, "tls_loopback: the %s transfer failed\n", name);
			exit(1);
		}
		if (r.gbs > best.gbs)
			best = r;
	}
	printf("%s %.3f GB/s (sender %.2f ns/B on %.2f cores, receiver %.2f ns/B on %.2f cores)\n", name,
	       best.gbs, best.send_ns, best.send_cores, best.recv_ns, best.recv_cores);
	return best.gbs;
}

int main(int argc, char **argv)
{
	size_t mb = 2048;
	int streams = 4, reps = 3;
	double plain, tls, piped, striped = 0;
	uint8_t *span;
	char name[64];

	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--mb"))
			mb = strtoul(argv[i + 1], NULL, 0);
		else if (!strcmp(argv[i], "--streams"))
			streams = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--reps"))
			reps = atoi(argv[i + 1]);
		else
			break;
	}
	if (argc % 2 == 0 || !mb || streams < 0 || streams > MAX_STREAMS || reps <= 0) {
		fprintf(stderr, "usage: tls_loopback [--mb N] [--streams 0..%d] [--reps N]\n", MAX_STREAMS);
		return 2;
	}
	span = malloc(SPAN);
	if (!span)
		return 1;
	fill(span);
	printf("# %ld CPUs online\n", sysconf(_SC_NPROCESSORS_ONLN));
	aead(GNUTLS_CIPHER_AES_128_GCM, "aes128gcm");
	aead(GNUTLS_CIPHER_AES_256_GCM, "aes256gcm");
	aead(GNUTLS_CIPHER_CHACHA20_POLY1305, "chacha20poly1305");
	plain = best_of("tcp_plain_gbs", 1, false, mb << 20, span, reps);
	crc_tls_set_io_threads(0);
	tls = best_of("tcp_tls_gbs", 1, true, mb << 20, span, reps);
	crc_tls_set_io_threads(1);
	piped = best_of("tcp_tls_io_thread_gbs", 1, true, mb << 20, span, reps);
	crc_tls_set_io_threads(-1);
	if (streams > 1) {
		snprintf(name, sizeof(name), "tcp_tls_x%d_gbs", streams);
		striped = best_of(name, streams, true, mb << 20, span, reps);
	}
	printf("tls_ratio %.2f x (with I/O threads: %.2f x", tls / plain, piped / plain);
	if (striped > 0)
		printf("; striped over %d: %.2f x", streams, striped / plain);
	printf(")\n");
	free(span);
	return 0;
}
