/* What crcudactl and the CRIU plugin read from the daemon (common/ctl.c): the hello reply of the
 * handshake (crc_ctl_open), then the replies to control requests (sessions, checkpoint statistics,
 * commit ids, restore). A thread plays the daemon on a unix socket: it accepts, reads the hello and
 * answers with the input.
 *
 * Input: byte 0 picks the calls made after the handshake (three bits each) and, with bit 7, that the
 * input holds the hello reply too; else a valid one comes first (then only replies are fuzzed). */
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "crcuda/ctl.h"
#include "crcuda/errno.h"
#include "crcuda/proto.h"
#include "crcuda/sock.h"
#include "fuzz.h"

static char sock_path[108];
static int listen_fd = -1;
static sem_t go, done;
static const uint8_t *in_data;
static size_t in_size;
static int in_raw;

/* libFuzzer's timers interrupt waits. */
static void wait_sem(sem_t *s)
{
	while (sem_wait(s) && errno == EINTR)
		;
}

static void *daemon_thread(void *arg)
{
	(void)arg;
	for (;;) {
		struct crc_hello hello;
		char sink[4096];
		int fd;

		wait_sem(&go);
		fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
		if (fd >= 0) {
			if (!crc_sock_read_all(fd, &hello, sizeof(hello))) {
				if (!in_raw) {
					static struct crc_hello_reply r;

					r.magic = CRC_PROTO_MAGIC;
					r.version = CRC_PROTO_VERSION;
					crc_sock_write_all(fd, &r, sizeof(r));
				}
				crc_sock_write_all(fd, in_data, in_size);
			}
			shutdown(fd, SHUT_WR);
			while (read(fd, sink, sizeof(sink)) > 0)
				;
			close(fd);
		}
		sem_post(&done);
	}
	return NULL;
}

static void cleanup(void)
{
	char *slash;

	unlink(sock_path);
	slash = strrchr(sock_path, '/');
	if (slash) {
		*slash = 0;
		rmdir(sock_path);
	}
}

static void setup(void)
{
	static int ready;
	pthread_t t;

	if (ready)
		return;
	ready = 1;
	/* In a private directory: a socket straight in /tmp is refused (crc_unix_listen). */
	static char dir[] = "/tmp/crcuda-fuzz-ctl.XXXXXX";

	FUZZ_CHECK(mkdtemp(dir) != NULL);
	snprintf(sock_path, sizeof(sock_path), "%s/ctl.sock", dir);
	listen_fd = crc_unix_listen(sock_path);
	FUZZ_CHECK(listen_fd >= 0);
	atexit(cleanup);
	signal(SIGPIPE, SIG_IGN);
	sem_init(&go, 0, 0);
	sem_init(&done, 0, 0);
	FUZZ_CHECK(!pthread_create(&t, NULL, daemon_thread, NULL));
	pthread_detach(t);
}

static void calls(struct crc_ctl *c, unsigned sel)
{
	for (int i = 0; i < 2; i++, sel >>= 3) {
		struct crc_ctl_session *list = NULL;
		struct crc_ctl_ckpt_stats st;
		struct crc_ctl_restore_opts ro = {.store_dir = "/nonexistent", .gpu = -1};
		const char *meta[] = {"k=v", NULL};
		uint64_t id;
		unsigned n = 0;
		int rc = 0, cfd;

		switch (sel & 7) {
		case 0:
			rc = crc_ctl_sessions(c, &list, &n);
			if (!rc)
				fuzz_touch(list, n * sizeof(*list));
			free(list);
			break;
		case 1:
			rc = crc_ctl_checkpoint(c, 1, "/nonexistent", &st);
			break;
		case 2:
			rc = crc_ctl_commit(c, 1, "images", meta, &id);
			break;
		case 3:
			rc = crc_ctl_commit_wait(c, 1, 10, &id);
			break;
		case 4:
			rc = crc_ctl_quiesce_park(c, 1, 10, "/tmp/park");
			break;
		case 5:
			rc = crc_ctl_resume(c, 1);
			break;
		default:
			/* Consumes c on success. */
			rc = crc_ctl_restore(c, &ro, &cfd);
			if (!rc) {
				close(cfd);
				return;
			}
			break;
		}
		fuzz_touch(crc_ctl_error(c), strlen(crc_ctl_error(c)));
		if (rc)
			break;
	}
	crc_ctl_close(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct crc_ctl *c = NULL;
	unsigned sel;

	fuzz_quiet();
	setup();
	if (!size || size > 65536)
		return 0;
	sel = data[0];
	in_raw = sel >> 7;
	in_data = data + 1;
	in_size = size - 1;
	sem_post(&go);
	if (!crc_ctl_open(sock_path, NULL, &c))
		calls(c, sel);
	wait_sem(&done);
	return 0;
}
