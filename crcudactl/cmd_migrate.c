/* crcudactl migrate PID --to HOST[:PORT] and crcudactl receive --listen ADDR:PORT: live migration of a
 * program to another host, which holds a store of its own.
 *
 * migrate (the source) connects to receive (the destination) over TCP, proves the token and asks the
 * destination whether it has the files the process maps (same path, size and content) and opens.
 * Then pre-copy rounds: each is `crcudactl checkpoint --leave-running` into the local store (an
 * incremental one: only what changed is copied), whose chunks the destination lacks go over, with
 * the journal and module images but not the CRIU images, as an export stream (cmd_export.c) while the
 * program runs on; the destination stages each round on its daemon (stage_round: replayed and
 * uploaded ahead, then only the changed chunks), so that its restore at the stop uploads only the
 * last changes; rounds stop when what a round
 * sent stops shrinking, fits half of --max-downtime at the rate the link showed, or after --rounds.
 * The stop: `crcudactl checkpoint --leave-stopped` (the process stays stopped, its session kept),
 * the last changed chunks, the journal, module images and CRIU images go over as a whole export (less
 * the chunks the destination has), the process is killed, and the destination restores the program
 * from its own store. Up to the kill, any failure leaves the program on the source (SIGCONT where
 * it was stopped); a failed restore on the destination is followed by a restore on the source from
 * the local checkpoint.
 *
 * receive serves each connection in a child process of its own, and imports what comes into its
 * store; the pre-copy rounds' checkpoints a connection brought are removed when it ends.
 *
 * Streams (--streams N, N >= 2): besides the main connection, migrate opens N data connections
 * (each an ordinary one: TLS, HELLO with the token). In a round (the pre-copy ones and the last) whose
 * chunks the destination lacks come to MIG_STRIPE_MIN bytes or more, those chunks (distinct hashes)
 * are split in N parts of about equal bytes, and thread k sends part k over data connection k as a
 * PUT (pre-copy, stripe) whose stream is a chunks-only export of just those chunks (one region that
 * lists them, ctl_export_chunks_fd); the destination's child for that connection imports it (every
 * check of an import applies) as a pre-copy checkpoint, which holds the chunks there. Once every part
 * was answered OK, the main connection's PUT leaves them out as known (no second HAVE). A part that
 * fails fails the round, as a failing main PUT does. The data connections stay open until the end of
 * the migration (their children's checkpoints hold the chunks until the last checkpoint, committed
 * on the main connection, names them itself); closing them removes those checkpoints there, not the
 * chunks the last one needs (gc keeps what any checkpoint names). N = 1: the main connection alone.
 *
 * The connection: frames of u32 type, u32 0, u64 length (little-endian), then length bytes.
 *   HELLO    "CRCUDAMG", u32 version, the token           -> OK [u32 features], or ERR text (then
 *            closed); features: 1 (MIG_FEATURE_STREAMS) where --once keeps taking data connections
 *            (an older receiver answers OK with nothing: the source then keeps to one stream)
 *   FILES    entries: u64 size, i64 mtime_ns, u64 XXH3-64, u32 flags (1: mapped: size and content
 *            must match; 0: opened: must exist), u32 path length, path -> OK text: one line per file
 *            missing or different (empty: all there)
 *   HAVE     16-byte chunk hashes                         -> OK: one byte per hash, 1 where held
 *   PUT      u32 flags (1: a pre-copy round; 2: a stripe of a round, bits 8..15 its stream number,
 *            for the log only; 4: it carries the journal and module images, and the destination
 *            may stage it on its daemon), then an export stream (its trailer ends it)
 *                                                         -> OK u64 checkpoint id, or ERR text
 *   RESTORE  u64 checkpoint id                            -> OK or ERR: crcudactl restore's output
 *   SENDFILE u32 mode, u32 0, i64 mtime_ns, u64 size, path; then size bytes -> OK, or ERR text (a
 *            file is only created, never replaced: one that exists there is refused)
 * After an ERR to a PUT the stream cannot be found again: the destination closes the connection. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "crc_store.h"
#include "crcuda/errno.h"
#include "crcuda/proto.h"
#include "crcuda/sock.h"
#include "crcuda/tls.h"
#include "crcudactl.h"

#define MIG_MAGIC	    "CRCUDAMG"
#define MIG_VERSION	    1u
#define MIG_PORT	    "7071"
#define MIG_PAYLOAD_MAX	    (64u << 20)
#define MIG_TIMEOUT_DEFAULT 600
#define MIG_ROUNDS_DEFAULT  8
#define MIG_DOWNTIME_MS	    500
#define MIG_FILE_MAPPED	    1u
#define MIG_PUT_PRECOPY	    1u
#define MIG_PUT_STRIPE	    2u
#define MIG_FEATURE_STREAMS 1u
#define MIG_STREAMS_MAX	    16u
/* A round's missing chunks are striped over the data connections from this many bytes on. */
#define MIG_STRIPE_MIN (64ull << 20)
#define MIG_PUT_STAGE  4u /* with the journal and module images: the destination can stage it */

enum mig_msg {
	MIG_HELLO = 1,
	MIG_FILES = 2,
	MIG_HAVE = 3,
	MIG_PUT = 4,
	MIG_RESTORE = 5,
	MIG_SENDFILE = 6,
	MIG_OK = 100,
	MIG_ERR = 101,
};

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get64(const uint8_t *p)
{
	return get32(p) | (uint64_t)get32(p + 4) << 32;
}

static double mib(uint64_t b)
{
	return (double)b / (1 << 20);
}

/* A TLS transfer's result as the plain ones give theirs: 0, -EAGAIN on the timeout, -EPIPE. */
static int tls_errno(int rc)
{
	return !rc ? 0 : rc == CRC_EAGAIN ? -EAGAIN : -EPIPE;
}

/* 0, or -errno (-EPIPE: the peer closed). */
static int send_all(int fd, const void *p, size_t n)
{
	const uint8_t *b = p;
	int rc;

	if (crc_tls_write_all(fd, p, n, &rc))
		return tls_errno(rc);
	while (n) {
		ssize_t w = send(fd, b, n, MSG_NOSIGNAL);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return w < 0 ? -errno : -EPIPE;
		b += w;
		n -= (size_t)w;
	}
	return 0;
}

/* 0, -EPIPE where the peer closed first, -EAGAIN on the timeout, or -errno. */
static int recv_all(int fd, void *p, size_t n)
{
	uint8_t *b = p;
	int rc;

	if (crc_tls_read_all(fd, p, n, &rc))
		return tls_errno(rc);
	while (n) {
		ssize_t r = recv(fd, b, n, 0);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return r < 0 ? (errno == EWOULDBLOCK ? -EAGAIN : -errno) : -EPIPE;
		b += r;
		n -= (size_t)r;
	}
	return 0;
}

static int msg_send(int fd, uint32_t type, const void *p, uint64_t len)
{
	uint8_t h[16] = {0};
	int rc;

	put32(h, type);
	put64(h + 8, len);
	rc = send_all(fd, h, sizeof(h));
	return rc || !len ? rc : send_all(fd, p, (size_t)len);
}

static int msg_text(int fd, uint32_t type, const char *text)
{
	return msg_send(fd, type, text, strlen(text));
}

/* A frame: *p malloc'd with a NUL after its len bytes. 0, -EPROTO for a frame too large, or as
 * recv_all. */
static int msg_recv(int fd, uint32_t *type, uint8_t **p, uint64_t *len)
{
	uint8_t h[16];
	int rc = recv_all(fd, h, sizeof(h));

	*p = NULL;
	if (rc)
		return rc;
	*type = get32(h);
	*len = get64(h + 8);
	if (*len > MIG_PAYLOAD_MAX)
		return -EPROTO;
	if (!(*p = malloc(*len + 1)))
		return -ENOMEM;
	(*p)[*len] = 0;
	if ((rc = recv_all(fd, *p, (size_t)*len))) {
		free(*p);
		*p = NULL;
	}
	return rc;
}

static const char *io_why(int rc)
{
	return rc == -EPIPE	   ? "the connection was closed"
	       : rc == -EAGAIN	   ? "no answer before the timeout"
	       : rc == -EPROTO	   ? "a message too large (not a crcudactl on the other end?)"
	       : rc == -ECONNRESET ? "the connection was reset"
				   : strerror(-rc);
}

/* The connection's timeouts, and buffers of a few chunks: the sender reads the next chunks from its
 * store while the receiver hashes and writes the last ones. */
static void set_timeouts(int fd, unsigned secs)
{
	struct timeval tv = {.tv_sec = secs};
	int buf = 16 << 20;

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
}

static bool token_equal(const char *a, size_t alen, const char *b, size_t blen)
{
	unsigned char d = alen != blen;

	for (size_t i = 0; i < alen && i < blen; i++)
		d |= (unsigned char)(a[i] ^ b[i]);
	return !d;
}

/* XXH3-64 of a file's bytes: 0, or -errno. */
static int file_hash(const char *path, uint64_t *out)
{
	XXH3_state_t *xs = XXH3_createState();
	static uint8_t buf[1 << 20];
	int fd = open(path, O_RDONLY | O_CLOEXEC), rc = 0;
	ssize_t n;

	if (fd < 0 || !xs) {
		rc = fd < 0 ? -errno : -ENOMEM;
		goto out;
	}
	XXH3_64bits_reset(xs);
	while ((n = read(fd, buf, sizeof(buf))) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = -errno;
			break;
		}
		XXH3_64bits_update(xs, buf, (size_t)n);
	}
	*out = XXH3_64bits_digest(xs);
out:
	if (fd >= 0)
		close(fd);
	XXH3_freeState(xs);
	return rc;
}

static int64_t mtime_ns(const struct stat *sb)
{
	return (int64_t)sb->st_mtim.tv_sec * 1000000000 + sb->st_mtim.tv_nsec;
}

/* Runs this crcudactl with args (args[0] is the command name), stdout into out and stderr into err
 * (files; NULL: /dev/null). Its exit status, or -1. */
static int run_self(char *const args[], const char *out, const char *err)
{
	char self[PATH_MAX], *argv[32];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	int na = 0, status;
	pid_t pid;

	if (n <= 0)
		return -1;
	self[n] = 0;
	argv[na++] = "crcudactl";
	for (int i = 0; args[i] && na < 31; i++)
		argv[na++] = args[i];
	argv[na] = NULL;
	fflush(NULL);
	pid = fork();
	if (pid < 0)
		return -1;
	if (!pid) {
		sigset_t none;

		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL); /* migrate's stop blocks some */
		int in = open("/dev/null", O_RDONLY),
		    o = open(out ? out : "/dev/null", O_WRONLY | O_CREAT | O_TRUNC, 0600),
		    e = open(err ? err : "/dev/null", O_WRONLY | O_CREAT | O_TRUNC, 0600);

		if (in < 0 || o < 0 || e < 0 || dup2(in, 0) < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0)
			_exit(127);
		execv(self, argv);
		_exit(127);
	}
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return -1;
	return ctl_exit_status(status);
}

/* A file's contents (at most len - 1 bytes, trailing newlines dropped) into buf; "" when none. */
static void read_text(const char *path, char *buf, size_t len)
{
	FILE *f = fopen(path, "r");
	size_t n = f ? fread(buf, 1, len - 1, f) : 0;

	if (f)
		fclose(f);
	buf[n] = 0;
	while (n && buf[n - 1] == '\n')
		buf[--n] = 0;
}

/* The first line of a file (a failed checkpoint's reason), without "crcudactl: ". */
static void first_line(const char *path, char *buf, size_t len)
{
	char all[8192], *l = all;

	read_text(path, all, sizeof(all));
	all[strcspn(all, "\n")] = 0;
	if (!strncmp(l, "crcudactl: ", 11))
		l += 11;
	if (!*l)
		l = "no reason given";
	size_t k = strlen(l) < len ? strlen(l) : len - 1;
	memcpy(buf, l, k);
	buf[k] = 0;
}

/* The last line of a file (a failed command's reason), without "crcudactl: ". */
static void last_line(const char *path, char *buf, size_t len)
{
	char all[8192], *l;

	read_text(path, all, sizeof(all));
	l = strrchr(all, '\n');
	l = l ? l + 1 : all;
	if (!strncmp(l, "crcudactl: ", 11))
		l += 11;
	if (!*l)
		l = "no reason given";
	size_t k = strlen(l) < len ? strlen(l) : len - 1;
	memcpy(buf, l, k);
	buf[k] = 0;
}

/* ---- receive ------------------------------------------------------------------------------------- */

struct recv_cfg {
	char store[PATH_MAX];
	const char *daemon, *backend;
	char token[CRC_TOKEN_MAX + 1];
	size_t token_len;
	unsigned timeout;
	bool insecure; /* --insecure: plaintext, the token in the hello only */
	/* --tls-cert/--tls-key/--tls-ca: TLS with certificates instead of the token as the key */
	const char *tls_cert, *tls_key, *tls_ca;
};

/* FILES: one line per file that is missing or differs here. */
static char *check_files(const uint8_t *p, uint64_t len)
{
	size_t cap = 4096, used = 0;
	char *out = malloc(cap);

	if (!out)
		return NULL;
	out[0] = 0;
	while (len >= 32) {
		uint64_t size = get64(p), hash = get64(p + 16), here = 0;
		int64_t mt = (int64_t)get64(p + 8);
		uint32_t flags = get32(p + 24), pl = get32(p + 28);
		char path[PATH_MAX], line[PATH_MAX + 200] = "";
		struct stat sb;

		if (pl >= sizeof(path) || pl > len - 32)
			break;
		memcpy(path, p + 32, pl);
		path[pl] = 0;
		p += 32 + pl;
		len -= 32 + pl;
		if (stat(path, &sb))
			snprintf(line, sizeof(line), "%s: %s here\n", path,
				 errno == ENOENT ? "missing" : strerror(errno));
		else if (!S_ISREG(sb.st_mode))
			snprintf(line, sizeof(line), "%s: not a regular file here\n", path);
		else if (!(flags & MIG_FILE_MAPPED))
			continue;
		else if ((uint64_t)sb.st_size != size)
			snprintf(line, sizeof(line),
				 "%s: %" PRIu64 " bytes here, %" PRIu64 " on the source\n", path,
				 (uint64_t)sb.st_size, size);
		else if (mtime_ns(&sb) != mt && (file_hash(path, &here) || here != hash))
			snprintf(line, sizeof(line), "%s: other content here (same size)\n", path);
		if (used + strlen(line) + 1 > cap) {
			char *o = realloc(out, cap = (cap + strlen(line)) * 2);

			if (!o)
				break;
			out = o;
		}
		memcpy(out + used, line, strlen(line) + 1);
		used += strlen(line);
	}
	return out;
}

/* SENDFILE: a file the destination lacks, created at its path (with the directories above it) with
 * the source's mode and modification time; its bytes are read whatever happens, so that the
 * connection stays in step. */
static int take_file(int c, const uint8_t *p, uint64_t len)
{
	char path[PATH_MAX], tmp[PATH_MAX + 16], why[PATH_MAX + 200] = "";
	static uint8_t buf[1 << 20];
	uint64_t size, left;
	uint32_t mode;
	int fd = -1, rc = 0;

	if (len < 24 || len - 24 >= sizeof(path))
		return msg_text(c, MIG_ERR, "a bad file request");
	mode = get32(p) & 07777;
	size = get64(p + 16);
	memcpy(path, p + 24, len - 24);
	path[len - 24] = 0;
	struct timespec times[2] = {{.tv_nsec = UTIME_OMIT},
				    {.tv_sec = (time_t)((int64_t)get64(p + 8) / 1000000000),
				     .tv_nsec = (long)((int64_t)get64(p + 8) % 1000000000)}};

	if (path[0] != '/' || strstr(path, "/../") || strlen(path) != len - 24)
		snprintf(why, sizeof(why), "%s: not an absolute path", path);
	else if (!access(path, F_OK))
		snprintf(why, sizeof(why), "%s: exists here, not replaced", path);
	if (!why[0]) {
		/* The directories above it. */
		for (char *sl = strchr(path + 1, '/'); sl; sl = strchr(sl + 1, '/')) {
			*sl = 0;
			if (mkdir(path, 0755) && errno != EEXIST)
				snprintf(why, sizeof(why), "%s: %s", path, strerror(errno));
			*sl = '/';
		}
		snprintf(tmp, sizeof(tmp), "%s.XXXXXX", path);
		if (!why[0] && (fd = mkostemp(tmp, O_CLOEXEC)) < 0)
			snprintf(why, sizeof(why), "%s: %s", tmp, strerror(errno));
	}
	for (left = size; left && !rc;) {
		size_t n = left < sizeof(buf) ? (size_t)left : sizeof(buf);

		if ((rc = recv_all(c, buf, n)))
			break;
		if (fd >= 0 && write(fd, buf, n) != (ssize_t)n && !why[0])
			snprintf(why, sizeof(why), "writing %s: %s", path, strerror(errno));
		left -= n;
	}
	if (fd >= 0) {
		if (!rc && !why[0] &&
		    (fchmod(fd, mode) || futimens(fd, times) || fsync(fd) || link(tmp, path)))
			snprintf(why, sizeof(why), "%s: %s", path, strerror(errno));
		close(fd);
		unlink(tmp);
	}
	if (rc)
		return rc;
	fprintf(stderr, "crcudactl receive: %s %s (%" PRIu64 " bytes)\n", why[0] ? "not taken:" : "took",
		why[0] ? why : path, size);
	return why[0] ? msg_text(c, MIG_ERR, why) : msg_send(c, MIG_OK, NULL, 0);
}

/* HAVE: one byte per hash, 1 where the store holds that chunk. */
static int check_have(const struct recv_cfg *cfg, const uint8_t *p, uint64_t len, uint8_t **out)
{
	struct crc_store *st = NULL;
	size_t n = (size_t)(len / 16);
	int rc;

	if (!(*out = calloc(n ? n : 1, 1)))
		return CRC_ENOMEM;
	/* Opened for this question only: the import opens the store itself (LMDB: once per process). */
	if ((rc = crc_store_open(cfg->store, CRC_STORE_CREATE, &st)))
		return rc;
	for (size_t i = 0; i < n; i++) {
		struct crc_hash h;
		size_t clen = 0;

		memcpy(h.bytes, p + 16 * i, 16);
		/* No buffer: the store answers "too small" (CRC_EINVAL) for a chunk it holds. */
		(*out)[i] = crc_store_chunk_read(st, &h, NULL, 0, &clen) == CRC_EINVAL && clen;
	}
	crc_store_close(st);
	return 0;
}

/* The pre-copy rounds staged on the daemon here (crc_ctl_stage): its GPU worker replays the first
 * round's checkpoint and uploads its memory while the program still runs at the source, each later
 * round only the chunks that changed, and the final restore (sent to that worker under the key) only
 * the last changes: the downtime holds no replay and no full upload. Staging is an optimisation: where
 * it fails the restore does everything, as without it. */
struct stager {
	struct crc_ctl *c; /* the daemon connection that keeps what is staged; NULL: nothing staged */
	uint64_t key;
	bool off; /* failed once: not tried again */
};

static void stage_round(const struct recv_cfg *cfg, struct stager *sg, uint64_t id, const char *peer)
{
	struct crc_ctl_restore_opts o = {.store_dir = cfg->store,
					 .ckpt_id = id,
					 .gpu = -1,
					 .timeout_ms = (int)(cfg->timeout ? cfg->timeout : 600) * 1000,
					 .stage_key = sg->key};
	char addr[PATH_MAX];
	double t0 = ctl_now();

	if (sg->off || !sg->key)
		return;
	if (!sg->c &&
	    (ctl_daemon_addr(cfg->daemon, addr, sizeof(addr)) || crc_ctl_open(addr, NULL, &sg->c))) {
		sg->c = NULL;
		sg->off = true;
		fprintf(stderr,
			"crcudactl receive: %s: no daemon to stage the rounds on: the restore does it all\n",
			peer);
		return;
	}
	if (crc_ctl_stage(sg->c, &o)) {
		fprintf(stderr,
			"crcudactl receive: %s: staging checkpoint %" PRIu64
			" failed (%s): the restore does it all\n",
			peer, id, crc_ctl_error(sg->c));
		crc_ctl_close(sg->c);
		sg->c = NULL;
		sg->off = true;
		return;
	}
	fprintf(stderr, "crcudactl receive: %s: checkpoint %" PRIu64 " staged on the daemon in %.2f s\n",
		peer, id, ctl_now() - t0);
	const char *hold = getenv("CRCUDA_TEST_RECEIVE_STAGED_FILE");

	if (hold && access(hold, F_OK)) {
		/* Tests: once staged, FILE says so and the receiver waits (up to a minute) for FILE.go: the
		 * test kills the staged worker meanwhile. */
		char go[PATH_MAX + 8];

		close(open(hold, O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
		snprintf(go, sizeof(go), "%s.go", hold);
		for (int i = 0; i < 6000 && access(go, F_OK); i++)
			usleep(10000);
	}
}

/* Restores checkpoint id here and answers with what crcudactl restore said; *ok: whether it did. */
static int do_restore(const struct recv_cfg *cfg, const struct stager *sg, uint64_t id, int c, bool *ok)
{
	char dir[] = "/tmp/crcuda-receive-XXXXXX", out[sizeof(dir) + 8], text[8192], idbuf[32], tmo[16];
	char *args[16];
	int na = 0, rc;

	if (!mkdtemp(dir))
		return msg_text(c, MIG_ERR, "cannot make a temporary directory");
	snprintf(out, sizeof(out), "%s/out", dir);
	snprintf(idbuf, sizeof(idbuf), "%" PRIu64, id);
	snprintf(tmo, sizeof(tmo), "%u", cfg->timeout);
	args[na++] = "restore";
	args[na++] = "--store";
	args[na++] = (char *)cfg->store;
	args[na++] = "--timeout";
	args[na++] = tmo;
	if (cfg->daemon) {
		args[na++] = "--daemon";
		args[na++] = (char *)cfg->daemon;
	}
	if (cfg->backend) {
		args[na++] = "--backend";
		args[na++] = (char *)cfg->backend;
	}
	args[na++] = idbuf;
	args[na] = NULL;
	/* Its output and errors in one file: the restored program does not hold it (a pipe might
	 * stay open in a daemon the restore starts). A staged restore's key goes to the CRIU plugin. */
	if (sg->c) {
		char key[24];

		snprintf(key, sizeof(key), "%" PRIx64, sg->key);
		setenv("CRCUDA_RESTORE_STAGE_KEY", key, 1);
	}
	rc = run_self(args, out, out);
	unsetenv("CRCUDA_RESTORE_STAGE_KEY");
	read_text(out, text, sizeof(text));
	/* One line: its lines joined, without their "crcudactl: ". */
	for (char *l; (l = strstr(text, "crcudactl: "));)
		memmove(l, l + 11, strlen(l + 11) + 1);
	for (char *l; (l = strchr(text, '\n')) && strlen(text) + 2 < sizeof(text);) {
		memmove(l + 2, l + 1, strlen(l + 1) + 1);
		l[0] = ';', l[1] = ' ';
	}
	for (char *l; (l = strchr(text, '\n'));)
		*l = ' ';
	unlink(out);
	rmdir(dir);
	*ok = rc == 0;
	fprintf(stderr, "crcudactl receive: restore of checkpoint %s %s: %s\n", idbuf,
		rc == 0 ? "done" : "failed", text);
	return msg_text(c, rc == 0 ? MIG_OK : MIG_ERR, text[0] ? text : "crcudactl restore failed");
}

/* One migration's connection. Its exit status. */
static int serve(const struct recv_cfg *cfg, int c, const char *peer)
{
	uint64_t precopy[256], len, final_id = 0;
	size_t nprecopy = 0, rounds = 0;
	uint32_t type;
	uint8_t *p = NULL;
	int rc, ret = 1;
	struct stager sg = {0};

	if (getrandom(&sg.key, sizeof(sg.key), 0) != sizeof(sg.key) || getenv("CRCUDA_MIGRATE_NO_STAGE"))
		sg.key = 0;

	set_timeouts(c, cfg->timeout);
	/* TLS with the token as the key (common/tls.c): a wrong token fails the handshake, and costs
	 * its peer a delay, as at crcudad. */
	if (!cfg->insecure) {
		char why[256];

		int ms = (int)(cfg->timeout ? cfg->timeout : 60) * 1000;

		rc = cfg->tls_cert ? crc_tls_server_x509(c, cfg->tls_cert, cfg->tls_key, cfg->tls_ca, ms, why,
							 sizeof(why))
				   : crc_tls_server(c, CRC_TLS_ID_TOKEN, cfg->token, cfg->token_len, ms, why,
						    sizeof(why));
		if (rc) {
			fprintf(stderr, "crcudactl receive: %s: %s%s\n", peer, why,
				rc == CRC_EAUTH && cfg->tls_cert ? " (not a certificate of --tls-ca?)" : "");
			if (rc == CRC_EAUTH)
				usleep(CRC_TLS_AUTH_DELAY_MS * 1000);
			goto out;
		}
		fprintf(stderr, "crcudactl receive: %s: TLS (%s)\n", peer, crc_tls_cipher(c));
	}
	if ((rc = msg_recv(c, &type, &p, &len)) || type != MIG_HELLO || len < 12 || memcmp(p, MIG_MAGIC, 8)) {
		fprintf(stderr, "crcudactl receive: %s: not a crcudactl migrate (%s)\n", peer,
			rc ? io_why(rc) : "no hello");
		goto out;
	}
	if (get32(p + 8) != MIG_VERSION) {
		msg_text(c, MIG_ERR, "this receiver speaks another version of the migration protocol");
		goto out;
	}
	if (!token_equal((const char *)p + 12, len - 12, cfg->token, cfg->token_len)) {
		fprintf(stderr, "crcudactl receive: %s: wrong token\n", peer);
		msg_text(c, MIG_ERR, "the destination refused the token");
		goto out;
	}
	{
		uint8_t features[4];

		put32(features, MIG_FEATURE_STREAMS);
		if (msg_send(c, MIG_OK, features, sizeof(features)))
			goto out;
	}
	for (;;) {
		free(p);
		if ((rc = msg_recv(c, &type, &p, &len))) {
			if (rc != -EPIPE)
				fprintf(stderr, "crcudactl receive: %s: %s\n", peer, io_why(rc));
			ret = rc == -EPIPE ? 0 : 1;
			break;
		}
		if (type == MIG_FILES) {
			char *text = check_files(p, len);

			rc = msg_text(c, MIG_OK, text ? text : "");
			free(text);
		} else if (type == MIG_HAVE) {
			uint8_t *have = NULL;

			rc = check_have(cfg, p, len, &have);
			rc =
			    rc ? msg_text(c, MIG_ERR, crc_strerror(rc)) : msg_send(c, MIG_OK, have, len / 16);
			free(have);
		} else if (type == MIG_PUT && len == 4) {
			uint32_t put_flags = get32(p);
			uint64_t kept_images = 0;
			struct ctl_import_opts o = {.known_ok = true,
						    .more_follows = true,
						    .precopy = put_flags & MIG_PUT_PRECOPY,
						    .images_pinned = &kept_images};
			char round[64];
			const char *pause_file = getenv("CRCUDA_TEST_RECEIVE_PAUSE_FILE");
			char why[PATH_MAX + 600];
			uint64_t id = 0, bytes = 0;
			uint8_t idb[8];

			if (pause_file && !o.precopy) {
				/* Tests: the destination stops answering in the final round (then it is
				 * killed). */
				close(open(pause_file, O_WRONLY | O_CREAT, 0600));
				for (;;)
					pause();
			}
			rounds++;
			if (put_flags & MIG_PUT_STRIPE)
				snprintf(round, sizeof(round), "round %zu, stream %u", rounds,
					 (put_flags >> 8) & 0xff);
			else
				snprintf(round, sizeof(round), "round %zu", rounds);
			if (ctl_import_fd(cfg->store, c, &o, &id, &bytes, why, sizeof(why))) {
				fprintf(stderr, "crcudactl receive: %s: %s: %s\n", peer, round, why);
				msg_text(c, MIG_ERR, why);
				/* The rest of the stream cannot be told from a next request: it is read and
				 * dropped until the source, which has the answer, closes. */
				shutdown(c, SHUT_WR);
				while (recv(c, why, sizeof(why), 0) > 0)
					;
				break;
			}
			if (put_flags & MIG_PUT_STRIPE)
				fprintf(stderr,
					"crcudactl receive: %s: %s: checkpoint %" PRIu64
					" (%.1f MiB) (pre-copy, a stripe of the round's chunks)\n",
					peer, round, id, mib(bytes));
			else
				fprintf(
				    stderr,
				    "crcudactl receive: %s: %s: checkpoint %" PRIu64
				    " (%.1f MiB; module images kept from earlier rounds: %" PRIu64 ")%s\n",
				    peer, round, id, mib(bytes), kept_images, o.precopy ? " (pre-copy)" : "");
			if (o.precopy && nprecopy < sizeof(precopy) / sizeof(precopy[0]))
				precopy[nprecopy++] = id;
			if (!o.precopy)
				final_id = id;
			put64(idb, id);
			rc = msg_send(c, MIG_OK, idb, sizeof(idb));
			/* While the source takes its next round. */
			if (!rc && o.precopy && (put_flags & MIG_PUT_STAGE))
				stage_round(cfg, &sg, id, peer);
		} else if (type == MIG_SENDFILE) {
			rc = take_file(c, p, len);
		} else if (type == MIG_RESTORE && len == 8) {
			/* Only what this migration brought: the store's other checkpoints are not the
			 * source's to restore. */
			if (!final_id || get64(p) != final_id) {
				msg_text(c, MIG_ERR, "that checkpoint did not come with this migration");
				break;
			}
			bool restored = false;

			rc = do_restore(cfg, &sg, final_id, c, &restored);
			ret = restored ? 0 : 1;
		} else {
			msg_text(c, MIG_ERR, "an unknown request");
			break;
		}
		if (rc)
			break;
	}
out:
	free(p);
	close(c);
	if (sg.c)
		crc_ctl_close(sg.c); /* drops what is staged, if the restore did not take it */
	if (nprecopy) {
		/* The pre-copy rounds' checkpoints only carried chunks: the last one names them now. */
		char *args[8 + 256], ids[256][24];
		int na = 0;

		args[na++] = "rm";
		args[na++] = "--store";
		args[na++] = (char *)cfg->store;
		for (size_t i = 0; i < nprecopy; i++) {
			snprintf(ids[i], sizeof(ids[i]), "%" PRIu64, precopy[i]);
			args[na++] = ids[i];
		}
		args[na] = NULL;
		run_self(args, NULL, NULL);
	}
	return ret;
}

static void receive_usage(FILE *f)
{
	fprintf(
	    f,
	    "Usage: crcudactl receive --listen ADDR:PORT --token-file FILE [--store DIR]\n"
	    "                         [--daemon SOCKET] [--backend sim|cuda] [--once]\n"
	    "\n"
	    "The destination of `crcudactl migrate`: serves migrations over TCP (each connection must\n"
	    "present the token), checks that the files a process needs are here, imports what the\n"
	    "source sends into the store (only chunks the store lacks travel) and restores the program\n"
	    "here at the end, on the daemon at SOCKET (started, with --backend, where none answers).\n"
	    "Runs in the foreground until killed. Connections are TLS 1.3 with the token as the key\n"
	    "(docs/remote.md), or with certificates (--tls-*); a wrong token costs its peer 2 s.\n"
	    "\n"
	    "Options:\n"
	    "  -l, --listen ADDR:PORT  where to listen (\":PORT\" for every address)\n"
	    "      --token-file FILE   the token migrations present (else $CRCUDA_TOKEN or\n"
	    "                          $CRCUDA_TOKEN_FILE); required\n"
	    "  -s, --store DIR         the store (default $CRCUDA_STORE, else ~/.local/share/crcuda/store)\n"
	    "      --daemon SOCKET     the local crcudad restores go to (default $CRCUDA_SOCKET, else\n"
	    "                          /tmp/crcuda-UID/crcudad.sock)\n"
	    "      --backend sim|cuda  the backend of a daemon a restore starts\n"
	    "      --timeout SEC       a silent source is given up after SEC seconds (default %d)\n"
	    "      --once              serve one migration (its first connection, and the data\n"
	    "                          connections that come meanwhile), then exit with its status\n"
	    "      --insecure          plaintext TCP (sources must say --insecure too)\n"
	    "      --tls-cert FILE, --tls-key FILE, --tls-ca FILE\n"
	    "                          TLS with this certificate and key (PEM); sources must present a\n"
	    "                          certificate the CA signed (the token is still checked)\n"
	    "  -h, --help              this help\n",
	    MIG_TIMEOUT_DEFAULT);
}

int cmd_receive(int argc, char **argv, struct ctl_opts *opts)
{
	enum {
		OPT_TOKEN = 256,
		OPT_DAEMON,
		OPT_BACKEND,
		OPT_TIMEOUT,
		OPT_ONCE,
		OPT_INSECURE,
		OPT_CERT,
		OPT_KEY,
		OPT_CA
	};
	static const struct option longopts[] = {
	    {"listen", required_argument, NULL, 'l'},
	    {"tls-cert", required_argument, NULL, OPT_CERT},
	    {"tls-key", required_argument, NULL, OPT_KEY},
	    {"tls-ca", required_argument, NULL, OPT_CA},
	    {"token-file", required_argument, NULL, OPT_TOKEN},
	    {"store", required_argument, NULL, 's'},
	    {"daemon", required_argument, NULL, OPT_DAEMON},
	    {"backend", required_argument, NULL, OPT_BACKEND},
	    {"timeout", required_argument, NULL, OPT_TIMEOUT},
	    {"once", no_argument, NULL, OPT_ONCE},
	    {"insecure", no_argument, NULL, OPT_INSECURE},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	struct recv_cfg cfg = {.timeout = MIG_TIMEOUT_DEFAULT};
	const char *listen_arg = NULL, *token_file = NULL, *store_arg = NULL;
	struct crc_store *st = NULL;
	bool once = false;
	int c, lfd, rc;

	(void)opts;
	while ((c = getopt_long(argc, argv, "l:s:h", longopts, NULL)) != -1) {
		switch (c) {
		case 'l':
			listen_arg = optarg;
			break;
		case OPT_TOKEN:
			token_file = optarg;
			break;
		case 's':
			store_arg = optarg;
			break;
		case OPT_DAEMON:
			cfg.daemon = optarg;
			break;
		case OPT_BACKEND:
			if (strcmp(optarg, "sim") && strcmp(optarg, "cuda")) {
				ctl_error("receive: --backend is sim or cuda, not '%s'", optarg);
				return CTL_EXIT_USAGE;
			}
			cfg.backend = optarg;
			break;
		case OPT_TIMEOUT:
			if (ctl_parse_timeout("receive", optarg, &cfg.timeout))
				return CTL_EXIT_USAGE;
			break;
		case OPT_INSECURE:
			cfg.insecure = true;
			break;
		case OPT_CERT:
			cfg.tls_cert = optarg;
			break;
		case OPT_KEY:
			cfg.tls_key = optarg;
			break;
		case OPT_CA:
			cfg.tls_ca = optarg;
			break;
		case OPT_ONCE:
			once = true;
			break;
		case 'h':
			receive_usage(stdout);
			return CTL_EXIT_OK;
		default:
			receive_usage(stderr);
			return CTL_EXIT_USAGE;
		}
	}
	if (optind != argc || !listen_arg) {
		ctl_error("receive: %s", optind != argc ? "unexpected operand" : "give --listen ADDR:PORT");
		receive_usage(stderr);
		return CTL_EXIT_USAGE;
	}
	rc = ctl_read_token(ctl_token_file(token_file), cfg.token, sizeof(cfg.token));
	if (rc < 0)
		return CTL_EXIT_FAILURE;
	if (!rc) {
		ctl_error("receive: no token: --token-file FILE, or CRCUDA_TOKEN or CRCUDA_TOKEN_FILE (no "
			  "token, no service)");
		return CTL_EXIT_USAGE;
	}
	cfg.token_len = (size_t)rc;
	if (cfg.tls_cert || cfg.tls_key || cfg.tls_ca) {
		char why[512];

		if (!cfg.tls_cert || !cfg.tls_key || !cfg.tls_ca) {
			ctl_error("receive: certificates need --tls-cert, --tls-key and --tls-ca");
			return CTL_EXIT_USAGE;
		}
		if (cfg.insecure) {
			ctl_error("receive: --insecure or certificates, not both");
			return CTL_EXIT_USAGE;
		}
		if (crc_tls_check_x509(cfg.tls_cert, cfg.tls_key, cfg.tls_ca, why, sizeof(why))) {
			ctl_error("receive: %s", why);
			return CTL_EXIT_FAILURE;
		}
	}
	if (ctl_store_dir(store_arg, cfg.store, sizeof(cfg.store)))
		return CTL_EXIT_USAGE;
	if ((rc = crc_store_open(cfg.store, CRC_STORE_CREATE, &st))) {
		ctl_error("receive: cannot open the store %s: %s", cfg.store, crc_strerror(rc));
		return CTL_EXIT_FAILURE;
	}
	crc_store_close(st);
	{
		char real[PATH_MAX];

		if (realpath(cfg.store, real))
			snprintf(cfg.store, sizeof(cfg.store), "%s", real);
	}
	lfd = crc_tcp_listen(listen_arg);
	if (lfd < 0) {
		ctl_error("receive: cannot listen on %s: %s", listen_arg, crc_strerror(lfd));
		return CTL_EXIT_FAILURE;
	}
	signal(SIGPIPE, SIG_IGN);
	printf("crcudactl receive: listening on %s (store %s)\n", listen_arg, cfg.store);
	fflush(stdout);
	for (pid_t first = 0;;) {
		struct sockaddr_storage sa;
		socklen_t sl = sizeof(sa);
		char peer[64] = "?";
		int status = 0;
		pid_t pid;

		while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
			if (pid == first)
				return ctl_exit_status(status);
		if (first) {
			/* --once: the migration's data connections come while its main one is served. */
			struct pollfd pf = {.fd = lfd, .events = POLLIN};

			if (poll(&pf, 1, 100) <= 0)
				continue;
		}
		c = accept4(lfd, (struct sockaddr *)&sa, &sl, SOCK_CLOEXEC);
		if (c < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			ctl_error("receive: accept: %s", strerror(errno));
			return CTL_EXIT_FAILURE;
		}
		if (getnameinfo((struct sockaddr *)&sa, sl, peer, sizeof(peer), NULL, 0, NI_NUMERICHOST))
			snprintf(peer, sizeof(peer), "?");
		fflush(NULL);
		pid = fork();
		if (pid == 0) {
			close(lfd);
			_exit(serve(&cfg, c, peer));
		}
		close(c);
		if (pid < 0)
			ctl_error("receive: fork: %s", strerror(errno));
		if (once && pid > 0 && !first)
			first = pid;
	}
}

/* ---- migrate ------------------------------------------------------------------------------------- */

struct mig {
	pid_t pid;
	int fd;			      /* the connection */
	int data_fd[MIG_STREAMS_MAX]; /* --streams N >= 2: the data connections, else none */
	unsigned ndata;
	unsigned round_streams; /* how many connections carried the last mig_put's chunks */
	uint32_t features;	/* the destination's, from its HELLO answer */
	char to[300];
	char store[PATH_MAX];
	const char *daemon;
	unsigned timeout;
	char tmp[64];				 /* a directory for the checkpoints' output */
	const char *tls_cert, *tls_key, *tls_ca; /* --tls-*: certificates for the destination */
	uint64_t sent;
	char why[PATH_MAX + 1024];
};

static int mig_fail(struct mig *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int mig_fail(struct mig *m, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(m->why, sizeof(m->why), fmt, ap);
	va_end(ap);
	return -1;
}

/* A request on fd (none where type is 0) and its answer: OK (its payload in *p, to free) or -1 with
 * why ("what: " (none where NULL) and the reason; ERR: the destination's text). Any thread, one per
 * fd. */
static int ask_fd(int fd, uint32_t type, const void *q, uint64_t qlen, const char *what, uint8_t **p,
		  uint64_t *len, char *why, size_t wlen)
{
	const char *sep = what ? ": " : "";
	uint32_t t;
	int rc = type ? msg_send(fd, type, q, qlen) : 0; /* 0: only the answer */

	if (!what)
		what = "";
	if (!rc)
		rc = msg_recv(fd, &t, p, len);
	if (rc) {
		snprintf(why, wlen, "%s%s%s", what, sep, io_why(rc));
		return -1;
	}
	if (t == MIG_ERR)
		snprintf(why, wlen, "%s%sthe destination says: %s", what, sep, (char *)*p);
	else if (t != MIG_OK)
		snprintf(why, wlen, "%s%san answer of unknown type %u", what, sep, t);
	else
		return 0;
	free(*p);
	*p = NULL;
	return -1;
}

/* ask_fd on the main connection, the reason in m->why. */
static int mig_ask(struct mig *m, uint32_t type, const void *q, uint64_t qlen, const char *what, uint8_t **p,
		   uint64_t *len)
{
	return ask_fd(m->fd, type, q, qlen, what, p, len, m->why, sizeof(m->why));
}

/* One migration connection to the destination: TCP, TLS, HELLO. which: NULL for the main one, else a
 * name for messages ("data stream 2"). 0 with *fd, or -1 with m->why (*fd may be open then). */
static int mig_dial(struct mig *m, const char *token, const char *which, int *fd)
{
	uint8_t hello[12 + CRC_TOKEN_MAX], *p = NULL;
	uint64_t len;
	size_t tl = strlen(token);
	char for_what[64] = "";

	if (which)
		snprintf(for_what, sizeof(for_what), " (%s)", which);
	*fd = crc_tcp_connect(m->to);
	if (*fd < 0)
		return mig_fail(
		    m, "cannot reach the destination %s%s: %s (is `crcudactl receive` running there?)", m->to,
		    for_what, crc_strerror(*fd));
	set_timeouts(*fd, m->timeout);
	if (crc_tls_wanted()) {
		char why[256];
		bool certs = m->tls_cert || m->tls_key || m->tls_ca;
		/* With certificates (--tls-*: the destination's must name its HOST), else the token. */
		int rc = certs ? crc_tls_client_x509(*fd, m->to, m->tls_cert, m->tls_key, m->tls_ca, why,
						     sizeof(why))
			       : crc_tls_client(*fd, CRC_TLS_ID_TOKEN, token, tl,
						(int)(m->timeout ? m->timeout : 60) * 1000, why, sizeof(why));

		if (rc == CRC_EAUTH && !certs)
			return mig_fail(
			    m, "the destination refused the token (or it wants certificates: --tls-*)");
		if (rc)
			return mig_fail(m, "no TLS with the destination %s%s: %s", m->to, for_what, why);
	}
	memcpy(hello, MIG_MAGIC, 8);
	put32(hello + 8, MIG_VERSION);
	memcpy(hello + 12, token, tl);
	/* In TLS 1.3 the server judges our certificate after our side of the handshake is done: its
	 * refusal is the connection closing here. */
	if (ask_fd(*fd, MIG_HELLO, hello, 12 + tl,
		   which	 ? which
		   : m->tls_cert ? "the destination's greeting (did its --tls-ca sign our --tls-cert?)"
				 : "the destination's greeting",
		   &p, &len, m->why, sizeof(m->why)))
		return -1;
	if (!which)
		m->features = len >= 4 ? get32(p) : 0;
	free(p);
	return 0;
}

static int mig_connect(struct mig *m, const char *token)
{
	return mig_dial(m, token, NULL, &m->fd);
}

/* The data connections (--streams N >= 2), once the main one is greeted. */
static int mig_connect_data(struct mig *m, const char *token, unsigned n)
{
	for (unsigned k = 0; k < n; k++) {
		char which[64];

		snprintf(which, sizeof(which), "data stream %u of %u", k + 1, n);
		m->data_fd[k] = -1;
		if (mig_dial(m, token, which, &m->data_fd[k])) {
			if (m->data_fd[k] >= 0)
				close(m->data_fd[k]);
			return -1;
		}
		m->ndata = k + 1;
	}
	return 0;
}

/* Appends one FILES entry. */
static int add_file(uint8_t **buf, size_t *used, size_t *cap, const char *path, uint32_t flags)
{
	size_t pl = strlen(path);
	uint64_t hash = 0;
	struct stat sb;

	if (stat(path, &sb) || !S_ISREG(sb.st_mode))
		return 0; /* gone, or not a file another host could hold */
	if (*used + 32 + pl > *cap) {
		uint8_t *b = realloc(*buf, *cap = (*cap + pl + 32) * 2);

		if (!b)
			return -1;
		*buf = b;
	}
	if ((flags & MIG_FILE_MAPPED) && file_hash(path, &hash))
		return 0;
	put64(*buf + *used, (uint64_t)sb.st_size);
	put64(*buf + *used + 8, (uint64_t)mtime_ns(&sb));
	put64(*buf + *used + 16, hash);
	put32(*buf + *used + 24, flags);
	put32(*buf + *used + 28, (uint32_t)pl);
	memcpy(*buf + *used + 32, path, pl);
	*used += 32 + pl;
	return 0;
}

/* The files the process maps (its program, libraries) and has open, as FILES entries. */
static int collect_files(pid_t pid, uint8_t **buf, size_t *used)
{
	char path[PATH_MAX + 64], line[PATH_MAX + 256], seen[64][PATH_MAX];
	size_t cap = 0, nseen = 0;
	FILE *f;
	DIR *d;
	struct dirent *de;

	*buf = NULL;
	*used = 0;
	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	if (!(f = fopen(path, "r")))
		return -1;
	while (fgets(line, sizeof(line), f)) {
		char *p = strchr(line, '/');
		bool dup = false;

		if (!p || strstr(line, " (deleted)"))
			continue;
		p[strcspn(p, "\n")] = 0;
		if (!strncmp(p, "/dev/", 5) || !strncmp(p, "/proc/", 6) || !strncmp(p, "/sys/", 5) ||
		    !strncmp(p, "/memfd:", 7))
			continue;
		for (size_t i = 0; i < nseen && !dup; i++)
			dup = !strcmp(seen[i], p);
		if (dup)
			continue;
		if (nseen < sizeof(seen) / sizeof(seen[0]))
			snprintf(seen[nseen++], sizeof(seen[0]), "%s", p);
		if (add_file(buf, used, &cap, p, MIG_FILE_MAPPED)) {
			fclose(f);
			return -1;
		}
	}
	fclose(f);
	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	if (!(d = opendir(path)))
		return -1;
	while ((de = readdir(d))) {
		char link[PATH_MAX + 400], target[PATH_MAX];
		ssize_t n;

		if (de->d_name[0] == '.')
			continue;
		snprintf(link, sizeof(link), "%s/%s", path, de->d_name);
		n = readlink(link, target, sizeof(target) - 1);
		if (n <= 0)
			continue;
		target[n] = 0;
		if (target[0] != '/' || strstr(target, " (deleted)") || !strncmp(target, "/dev/", 5))
			continue;
		if (add_file(buf, used, &cap, target, 0)) {
			closedir(d);
			return -1;
		}
	}
	closedir(d);
	return 0;
}

/* Sends one file the destination lacks. */
static int send_file(struct mig *m, const char *path)
{
	static uint8_t buf[1 << 20];
	uint8_t hdr[24 + PATH_MAX], *p = NULL;
	size_t pl = strlen(path);
	uint64_t left, len;
	struct stat sb;
	int fd = open(path, O_RDONLY | O_CLOEXEC), rc;

	if (fd < 0 || fstat(fd, &sb) || pl >= PATH_MAX) {
		rc = mig_fail(m, "sending %s: %s", path, fd < 0 ? strerror(errno) : "cannot stat it");
		goto out;
	}
	put32(hdr, (uint32_t)sb.st_mode & 07777);
	put32(hdr + 4, 0);
	put64(hdr + 8, (uint64_t)mtime_ns(&sb));
	put64(hdr + 16, (uint64_t)sb.st_size);
	memcpy(hdr + 24, path, pl);
	if ((rc = msg_send(m->fd, MIG_SENDFILE, hdr, 24 + pl))) {
		rc = mig_fail(m, "sending %s: %s", path, io_why(rc));
		goto out;
	}
	for (left = (uint64_t)sb.st_size; left;) {
		ssize_t n = read(fd, buf, left < sizeof(buf) ? (size_t)left : sizeof(buf));

		if (n <= 0) {
			/* Its size is said already: the rest goes as zeros (a file that shrank meanwhile). */
			memset(buf, 0, sizeof(buf));
			n = left < sizeof(buf) ? (ssize_t)left : (ssize_t)sizeof(buf);
		}
		if ((rc = send_all(m->fd, buf, (size_t)n))) {
			rc = mig_fail(m, "sending %s: %s", path, io_why(rc));
			goto out;
		}
		left -= (uint64_t)n;
	}
	rc = mig_ask(m, 0, NULL, 0, "sending a file", &p, &len);
	free(p);
out:
	if (fd >= 0)
		close(fd);
	return rc ? -1 : 0;
}

static int check_files_there(struct mig *m, bool send_missing)
{
	uint8_t *q = NULL, *p = NULL;
	size_t qlen;
	uint64_t len;
	int rc;

	if (collect_files(m->pid, &q, &qlen)) {
		free(q);
		return mig_fail(m, "cannot list the files of process %d: %s", (int)m->pid, strerror(errno));
	}
	rc = mig_ask(m, MIG_FILES, q ? q : (uint8_t *)"", qlen, "checking the files", &p, &len);
	if (!rc && len && send_missing) {
		/* Those missing there go along (a file that differs is never replaced); then a second
		 * look. Every line ends in a newline. */
		bool only_missing = p[len - 1] == '\n';
		char *l, *e;

		for (l = (char *)p; only_missing && (e = strchr(l, '\n')); l = e + 1)
			only_missing = e - l > 14 && !strncmp(e - 14, ": missing here", 14);
		for (l = (char *)p; only_missing && !rc && (e = strchr(l, '\n')); l = e + 1) {
			*(e - 14) = 0;
			printf("migrate: sending %s\n", l);
			rc = send_file(m, l);
			*(e - 14) = ':';
		}
		if (only_missing && !rc) {
			free(p);
			p = NULL;
			rc = mig_ask(m, MIG_FILES, q ? q : (uint8_t *)"", qlen, "checking the files", &p,
				     &len);
		}
	}
	free(q);
	if (rc) {
		free(p);
		return -1;
	}
	if (len) {
		/* One line each; the message names them all. */
		for (uint64_t i = 0; i + 1 < len; i++)
			if (p[i] == '\n')
				p[i] = ';';
		if (p[len - 1] == '\n')
			p[len - 1] = 0;
		mig_fail(m, "the destination lacks files the process needs, or has others at their paths: %s",
			 (char *)p);
		free(p);
		return -1;
	}
	free(p);
	return 0;
}

/* Whether pid descends from root (its parents, up to init). */
static bool descends_from(pid_t pid, pid_t root)
{
	for (int depth = 0; pid > 1 && depth < 64; depth++) {
		char path[64], buf[512], *p;
		FILE *f;

		snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
		if (!(f = fopen(path, "r")))
			return false;
		p = fgets(buf, sizeof(buf), f) ? strrchr(buf, ')') : NULL;
		fclose(f);
		if (!p || sscanf(p + 1, " %*c %d", &pid) != 1)
			return false;
		if (pid == root)
			return true;
	}
	return false;
}

/* A pre-copy round of the device alone (quiesce, a checkpoint drained in the background, commit,
 * resume; as crcudactl suspend does): the process is neither frozen nor dumped, only its CUDA calls
 * wait, for the snapshot; its CRIU images go in the stop alone. A whole checkpoint each round dumped
 * all of the process's host memory (PyTorch's: 415 MiB, 0.7 s a round) only to leave it unsent. Its
 * id; 0 where the round takes a whole checkpoint instead: a process tree (its clients are checkpointed
 * together), a session this daemon does not hold (a remote GPU's), or any failure (the program runs
 * on, resumed). */
static uint64_t mig_device_round(struct mig *m, double *secs)
{
	int ms = (int)(m->timeout ? m->timeout : MIG_TIMEOUT_DEFAULT) * 1000;
	char addr[PATH_MAX], pidmeta[32];
	const char *meta[] = {"crcuda.migrate_round=1", pidmeta, NULL};
	struct crc_ctl_session *list = NULL;
	struct crc_ctl_ckpt_stats st;
	struct crc_ctl *c = NULL;
	struct crc_store *store = NULL;
	unsigned n = 0;
	uint64_t id = 0;
	double t0 = ctl_now();
	bool ours = false;

	*secs = 0;
	if (getenv("CRCUDA_MIGRATE_WHOLE_ROUNDS") || ctl_daemon_addr(m->daemon, addr, sizeof(addr)) ||
	    crc_ctl_open(addr, NULL, &c))
		return 0;
	if (crc_ctl_sessions(c, &list, &n))
		goto out;
	for (unsigned i = 0; i < n; i++) {
		if (list[i].pid == m->pid)
			ours = true;
		else if (descends_from(list[i].pid, m->pid))
			goto out; /* a tree */
	}
	if (!ours)
		goto out; /* its session is another daemon's */
	/* The daemon opens the store itself: made first, as checkpoint does. */
	if (crc_store_open(m->store, CRC_STORE_CREATE, &store))
		goto out;
	crc_store_close(store);
	snprintf(pidmeta, sizeof(pidmeta), "crcuda.pid=%d", (int)m->pid);
	if (crc_ctl_quiesce(c, m->pid, ms))
		goto resume;
	if (crc_ctl_checkpoint_flags(c, m->pid, m->store, CRC_CTL_CKPT_BACKGROUND, &st) ||
	    crc_ctl_commit(c, m->pid, "", meta, &id)) {
		crc_ctl_abort(c, m->pid);
		id = 0;
		goto resume;
	}
	crc_ctl_resume(c, m->pid);
	if (!id && crc_ctl_commit_wait(c, m->pid, ms, &id))
		id = 0;
	goto out;
resume:
	crc_ctl_resume(c, m->pid);
out:
	free(list);
	crc_ctl_close(c);
	*secs = ctl_now() - t0;
	return id;
}

/* A checkpoint of the process (mode: "--leave-running" or "--leave-stopped"): its id, or 0 with
 * m->why; *secs: how long it took. */
static uint64_t mig_checkpoint(struct mig *m, const char *mode, double *secs)
{
	char out[128], err[128], pidbuf[24], tmo[16], why[2048];
	char *args[16];
	json_error_t je;
	json_t *j;
	uint64_t id = 0;
	int na = 0, rc;
	double t0 = ctl_now();

	snprintf(out, sizeof(out), "%s/ckpt.json", m->tmp);
	snprintf(err, sizeof(err), "%s/ckpt.err", m->tmp);
	snprintf(pidbuf, sizeof(pidbuf), "%d", (int)m->pid);
	snprintf(tmo, sizeof(tmo), "%u", m->timeout);
	args[na++] = "checkpoint";
	args[na++] = "--json";
	args[na++] = (char *)mode;
	args[na++] = "--store";
	args[na++] = m->store;
	args[na++] = "--timeout";
	args[na++] = tmo;
	if (m->daemon) {
		args[na++] = "--daemon";
		args[na++] = (char *)m->daemon;
	}
	args[na++] = pidbuf;
	args[na] = NULL;
	rc = run_self(args, out, err);
	*secs = ctl_now() - t0;
	j = rc == 0 ? json_load_file(out, 0, &je) : NULL;
	if (j)
		id = (uint64_t)json_integer_value(json_object_get(j, "id"));
	json_decref(j);
	if (!id) {
		first_line(err, why, sizeof(why));
		mig_fail(m, "%s", why);
	}
	return id;
}

/* One stripe of a round: a part of the chunks the destination lacks, sent on one data connection by a
 * thread of its own. */
struct stripe {
	int fd;
	unsigned stream; /* 1-based, for messages */
	struct crc_store *st;
	const char *store;
	uint64_t id; /* the local checkpoint, named in the stream's INFO */
	const struct crc_hash *hashes;
	const uint64_t *lens;
	size_t n;
	struct ctl_export_opts o; /* its test hooks only */
	struct ctl_export_result res;
	uint64_t dest_id;
	int rc;
	char why[PATH_MAX + 1024];
};

static void *stripe_send(void *arg)
{
	struct stripe *s = arg;
	uint8_t flags[4], *p = NULL;
	uint64_t len;
	char why[PATH_MAX + 600];
	int rc;

	s->rc = -1;
	put32(flags, MIG_PUT_PRECOPY | MIG_PUT_STRIPE | (s->stream & 0xff) << 8);
	if ((rc = msg_send(s->fd, MIG_PUT, flags, sizeof(flags)))) {
		snprintf(s->why, sizeof(s->why), "%s", io_why(rc));
		return NULL;
	}
	if (ctl_export_chunks_fd(s->st, s->store, s->id, s->hashes, s->lens, s->n, s->fd, &s->o, &s->res, why,
				 sizeof(why))) {
		struct timeval brief = {.tv_sec = 2};
		uint32_t t;

		/* The destination may have said why it stopped reading (then its answer is here already;
		 * where the failure was ours, it waits for the rest of the stream and says nothing). */
		setsockopt(s->fd, SOL_SOCKET, SO_RCVTIMEO, &brief, sizeof(brief));
		if (!msg_recv(s->fd, &t, &p, &len) && t == MIG_ERR)
			snprintf(s->why, sizeof(s->why), "the destination says: %s", (char *)p);
		else
			snprintf(s->why, sizeof(s->why), "%s", why);
		free(p);
		return NULL;
	}
	if (ask_fd(s->fd, 0, NULL, 0, NULL, &p, &len, s->why, sizeof(s->why)))
		return NULL;
	if (len != 8) {
		snprintf(s->why, sizeof(s->why), "an answer of %" PRIu64 " bytes", len);
	} else {
		s->dest_id = get64(p);
		s->rc = 0;
	}
	free(p);
	return NULL;
}

/* A chunk the destination lacks, at its first place in the manifest. */
struct lack {
	struct crc_hash hash;
	uint64_t len;
	size_t pos;
};

static int lack_by_hash(const void *a, const void *b)
{
	const struct lack *x = a, *y = b;
	int c = memcmp(x->hash.bytes, y->hash.bytes, 16);

	return c ? c : x->pos < y->pos ? -1 : x->pos > y->pos;
}

static int lack_by_pos(const void *a, const void *b)
{
	const struct lack *x = a, *y = b;

	return x->pos < y->pos ? -1 : x->pos > y->pos;
}

/* Sends chunks lack[0..n) (distinct, in the manifest's order) over the data connections, about equal
 * bytes each, at once; appends them to known (room for them) once every stripe was answered OK.
 * *streams: how many carried some; *out: their sums. 0, or -1 with m->why. */
static int mig_stripe(struct mig *m, uint64_t id, const char *what, const struct lack *lack, size_t n,
		      struct crc_hash *known, size_t *nknown, unsigned *streams,
		      struct ctl_export_result *out)
{
	struct stripe s[MIG_STREAMS_MAX];
	pthread_t th[MIG_STREAMS_MAX];
	bool started[MIG_STREAMS_MAX] = {false};
	struct crc_hash *hashes = calloc(n ? n : 1, sizeof(*hashes));
	uint64_t *lens = calloc(n ? n : 1, sizeof(*lens)), total = 0, cum = 0;
	const char *env_stream = getenv("CRCUDA_TEST_MIGRATE_STREAM");
	unsigned test_stream = env_stream ? (unsigned)strtoul(env_stream, NULL, 0) : 0, nd = m->ndata;
	struct crc_store *st = NULL;
	size_t at = 0;
	int rc = 0;

	*streams = 0;
	*out = (struct ctl_export_result){0};
	if (!hashes || !lens) {
		free(hashes);
		free(lens);
		return mig_fail(m, "out of memory");
	}
	for (size_t i = 0; i < n; i++) {
		hashes[i] = lack[i].hash;
		lens[i] = lack[i].len;
		total += lack[i].len;
	}
	/* One handle for the threads, each with a reader of its own (LMDB: one environment a process). */
	if ((rc = crc_store_open(m->store, 0, &st))) {
		free(hashes);
		free(lens);
		return mig_fail(m, "%s: the store %s: %s", what, m->store, crc_strerror(rc));
	}
	for (unsigned k = 0; k < nd; k++) {
		size_t from = at;

		/* Contiguous parts (the order the pack files hold them), cut at k+1 n-ths of the bytes. */
		while (at < n && (k == nd - 1 || cum < total / nd * (k + 1))) {
			cum += lens[at];
			at++;
		}
		s[k] = (struct stripe){.fd = m->data_fd[k],
				       .stream = k + 1,
				       .st = st,
				       .store = m->store,
				       .id = id,
				       .hashes = hashes + from,
				       .lens = lens + from,
				       .n = at - from,
				       .o = {.flip_at = UINT64_MAX, .cut_at = UINT64_MAX}};
		if (!s[k].n)
			continue;
		if (test_stream == k + 1) {
			/* Tests: a damaged or cut stripe. */
			const char *f = getenv("CRCUDA_TEST_MIGRATE_FLIP"),
				   *c = getenv("CRCUDA_TEST_MIGRATE_CUT");

			if (f)
				s[k].o.flip_at = strtoull(f, NULL, 0);
			if (c)
				s[k].o.cut_at = strtoull(c, NULL, 0);
		}
		if ((rc = pthread_create(&th[k], NULL, stripe_send, &s[k]))) {
			s[k].rc = -1;
			snprintf(s[k].why, sizeof(s[k].why), "cannot start a thread: %s", strerror(rc));
			continue;
		}
		started[k] = true;
	}
	for (unsigned k = 0; k < nd; k++)
		if (started[k])
			pthread_join(th[k], NULL);
	crc_store_close(st);
	rc = 0;
	for (unsigned k = 0; k < nd && !rc; k++) {
		if (!s[k].n)
			continue;
		if (s[k].rc) {
			rc = mig_fail(m, "%s: stream %u of %u: %s", what, k + 1, nd, s[k].why);
			break;
		}
		(*streams)++;
		out->bytes += s[k].res.bytes;
		out->chunks += s[k].res.chunks;
		out->chunk_bytes += s[k].res.chunk_bytes;
	}
	if (!rc)
		for (size_t i = 0; i < n; i++)
			known[(*nknown)++] = hashes[i];
	free(hashes);
	free(lens);
	return rc ? -1 : 0;
}

/* MIG_STRIPE_MIN, or (tests: CRCUDA_TEST_MIGRATE_STRIPE_MIN bytes) less, so that a small program on the
 * simulated device stripes (its large steps are slow, and under load it ended before the stop). */
static uint64_t stripe_min(void)
{
	const char *v = getenv("CRCUDA_TEST_MIGRATE_STRIPE_MIN");

	return v && *v ? strtoull(v, NULL, 0) : MIG_STRIPE_MIN;
}

/* Sends checkpoint id: the destination's chunks are asked for first and left out; where those it
 * lacks are many and there are data connections, they go over those first (mig_stripe). 0 with
 * *dest_id, or -1 with m->why. */
static int mig_put(struct mig *m, uint64_t id, bool precopy, const char *what, struct ctl_export_result *res,
		   uint64_t *dest_id)
{
	/* Pre-copy rounds carry the journal and module images (not the CRIU images) too, so that the
	 * destination can stage them (stage_round). */
	struct ctl_export_opts o = {.no_images = precopy, .flip_at = UINT64_MAX, .cut_at = UINT64_MAX};
	struct ctl_export_result striped = {0};
	struct crc_manifest *man = NULL;
	struct crc_store *st = NULL;
	struct crc_hash *hashes = NULL, *known = NULL, *images = NULL;
	struct lack *lack = NULL;
	size_t n = 0, nknown = 0, nlack = 0, nimages = 0;
	uint64_t len, lack_bytes = 0;
	uint8_t *p = NULL, flags[4];
	char why[PATH_MAX + 600];
	int rc;

	m->round_streams = 1;
	/* The module images go in the question too: a round sends only those the destination lacks. */
	if ((rc = crc_store_open(m->store, 0, &st)) || (rc = crc_store_manifest_get(st, id, &man)) ||
	    (rc = ctl_ckpt_images(st, man, &images, &nimages))) {
		crc_store_close(st);
		crc_manifest_free(man);
		return mig_fail(m, "%s: checkpoint %" PRIu64 " in %s: %s", what, id, m->store,
				crc_strerror(rc));
	}
	crc_store_close(st);
	for (uint32_t r = 0; r < man->nregions; r++)
		n += man->regions[r].nchunks;
	hashes = calloc(n + nimages + 1, sizeof(*hashes));
	known = calloc(n + nimages + 1, sizeof(*known));
	lack = calloc(n ? n : 1, sizeof(*lack));
	if (!hashes || !known || !lack) {
		rc = mig_fail(m, "out of memory");
		goto out;
	}
	n = 0;
	for (uint32_t r = 0; r < man->nregions; r++)
		for (uint32_t c = 0; c < man->regions[r].nchunks; c++) {
			lack[n] = (struct lack){.hash = man->regions[r].chunks[c].hash,
						.len = man->regions[r].chunks[c].length,
						.pos = n};
			hashes[n++] = man->regions[r].chunks[c].hash;
		}
	if (nimages)
		memcpy(hashes + n, images, nimages * sizeof(*images));
	if ((rc = mig_ask(m, MIG_HAVE, hashes, 16ull * (n + nimages), what, &p, &len)))
		goto out;
	if (len != n + nimages) {
		rc = mig_fail(m, "%s: %" PRIu64 " answers to %zu chunks and module images", what, len,
			      n + nimages);
		goto out;
	}
	for (size_t i = n; i < n + nimages; i++)
		if (p[i])
			known[nknown++] = hashes[i];
	for (size_t i = 0; i < n; i++)
		if (p[i])
			known[nknown++] = hashes[i];
		else
			lack[nlack++] = lack[i]; /* i >= nlack: nothing is overwritten before it is read */
	free(p);
	p = NULL;
	if (m->ndata >= 2 && nlack) {
		/* Distinct (a chunk named twice goes once), in the manifest's order. */
		size_t d = 0;

		qsort(lack, nlack, sizeof(*lack), lack_by_hash);
		for (size_t i = 0; i < nlack; i++)
			if (!i || memcmp(lack[i].hash.bytes, lack[d - 1].hash.bytes, 16)) {
				lack[d++] = lack[i];
				lack_bytes += lack[i].len;
			}
		nlack = d;
		qsort(lack, nlack, sizeof(*lack), lack_by_pos);
	}
	if (m->ndata >= 2 && lack_bytes >= stripe_min()) {
		if (mig_stripe(m, id, what, lack, nlack, known, &nknown, &m->round_streams, &striped)) {
			rc = -1;
			goto out;
		}
		m->sent += striped.bytes;
	}
	ctl_hash_sort(known, nknown);
	o.known = known;
	o.nknown = nknown;
	if (!precopy && !getenv("CRCUDA_TEST_MIGRATE_STREAM")) {
		/* Tests: a damaged or cut final stream. */
		const char *f = getenv("CRCUDA_TEST_MIGRATE_FLIP"), *c = getenv("CRCUDA_TEST_MIGRATE_CUT");

		if (f)
			o.flip_at = strtoull(f, NULL, 0);
		if (c)
			o.cut_at = strtoull(c, NULL, 0);
	}
	put32(flags, precopy ? MIG_PUT_PRECOPY | MIG_PUT_STAGE : 0);
	if ((rc = msg_send(m->fd, MIG_PUT, flags, sizeof(flags)))) {
		rc = mig_fail(m, "%s: %s", what, io_why(rc));
		goto out;
	}
	if (ctl_export_fd(m->store, id, m->fd, &o, res, why, sizeof(why))) {
		/* The destination may have said why it stopped reading. */
		uint32_t t;

		if (!msg_recv(m->fd, &t, &p, &len) && t == MIG_ERR)
			rc = mig_fail(m, "%s: the destination says: %s", what, (char *)p);
		else
			rc = mig_fail(m, "%s: %s", what, why);
		goto out;
	}
	m->sent += res->bytes;
	/* The stripes' chunks count as sent, not as there already. */
	res->bytes += striped.bytes;
	res->chunks += striped.chunks;
	res->chunk_bytes += striped.chunk_bytes;
	res->skipped -= striped.chunks;
	res->skipped_bytes -= striped.chunk_bytes;
	if ((rc = mig_ask(m, 0, NULL, 0, what, &p, &len)))
		goto out;
	if (len != 8) {
		rc = mig_fail(m, "%s: an answer of %" PRIu64 " bytes", what, len);
		goto out;
	}
	*dest_id = get64(p);
out:
	free(p);
	free(hashes);
	free(known);
	free(lack);
	free(images);
	crc_manifest_free(man);
	return rc ? -1 : 0;
}

/* Removes the local pre-copy checkpoints (the last one names their chunks). */
static void drop_local(struct mig *m, const uint64_t *ids, size_t n)
{
	char *args[8 + 64], idb[64][24];
	int na = 0;

	if (!n)
		return;
	args[na++] = "rm";
	args[na++] = "--store";
	args[na++] = m->store;
	for (size_t i = 0; i < n && i < 64; i++) {
		snprintf(idb[i], sizeof(idb[i]), "%" PRIu64, ids[i]);
		args[na++] = idb[i];
	}
	args[na] = NULL;
	run_self(args, NULL, NULL);
}

static void migrate_usage(FILE *f)
{
	fprintf(
	    f,
	    "Usage: crcudactl migrate [OPTIONS] PID --to HOST[:PORT]\n"
	    "\n"
	    "Moves PID, a program running under `crcudactl run`, to another host while it runs: there,\n"
	    "`crcudactl receive` (port %s by default) takes it into a store of its own and restores it.\n"
	    "First the destination checks that it has the files the process maps and opens (same path,\n"
	    "size and content); then pre-copy rounds, each a --leave-running checkpoint here whose\n"
	    "changed chunks go over while the program runs on; then the program is stopped, the last\n"
	    "changes and its CRIU images go over, it is killed here and restored there. Prints, per\n"
	    "round, the bytes sent, the dirty rate and the seconds; then the downtime (stopped here to\n"
	    "running there) and the total time. Needs root (CRIU).\n"
	    "\n"
	    "Until the program is killed here, a failure (destination gone, a damaged transfer, a failed\n"
	    "checkpoint) leaves it running here, as it was, and says why. Where the restore there fails,\n"
	    "it is restored here from the last checkpoint, and the command says so (exit 1).\n"
	    "\n"
	    "Options:\n"
	    "  -t, --to HOST[:PORT]    the destination's `crcudactl receive`\n"
	    "      --token-file FILE   its token (else $CRCUDA_TOKEN or $CRCUDA_TOKEN_FILE)\n"
	    "  -n, --rounds N          at most N pre-copy rounds (default %d; 0: stop and copy)\n"
	    "      --max-downtime MS   rounds go on until the last changes would take at most half of\n"
	    "                          this to send, at the rate the link showed (default %d)\n"
	    "  -s, --store DIR         the local store (default $CRCUDA_STORE, else\n"
	    "                          ~/.local/share/crcuda/store)\n"
	    "      --daemon ADDR       the program's crcudad (as for checkpoint)\n"
	    "      --timeout SEC       each step's limit (default %d)\n"
	    "      --streams N         the chunks of a round go over N TLS connections at once, each\n"
	    "                          imported by a process of its own there (1..%u; default: a\n"
	    "                          quarter of the CPUs, 1 to 4); rounds of less than %llu MiB go over\n"
	    "                          the main connection alone\n"
	    "      --send-files        send the files the destination lacks (created there, with the\n"
	    "                          directories above them; a file that differs is never replaced)\n"
	    "      --insecure          plaintext TCP to a `receive --insecure` (else TLS 1.3, the token\n"
	    "                          as the key)\n"
	    "      --tls-cert FILE, --tls-key FILE, --tls-ca FILE\n"
	    "                          TLS with certificates (PEM) to a `receive --tls-*`: this side's\n"
	    "                          certificate and key, and the CA the destination's must come from\n"
	    "                          (it must name HOST)\n"
	    "  -h, --help              this help\n"
	    "\n"
	    "Exit status: 0 migrated; 1 failed (the program runs here: see the message); 2 usage error.\n",
	    MIG_PORT, MIG_ROUNDS_DEFAULT, MIG_DOWNTIME_MS, MIG_TIMEOUT_DEFAULT, MIG_STREAMS_MAX,
	    MIG_STRIPE_MIN >> 20);
}

int cmd_migrate(int argc, char **argv, struct ctl_opts *opts)
{
	enum {
		OPT_TOKEN = 256,
		OPT_DOWNTIME,
		OPT_DAEMON,
		OPT_TIMEOUT,
		OPT_SEND_FILES,
		OPT_INSECURE,
		OPT_CERT,
		OPT_KEY,
		OPT_CA,
		OPT_STREAMS
	};
	static const struct option longopts[] = {
	    {"to", required_argument, NULL, 't'},
	    {"streams", required_argument, NULL, OPT_STREAMS},
	    {"tls-cert", required_argument, NULL, OPT_CERT},
	    {"tls-key", required_argument, NULL, OPT_KEY},
	    {"tls-ca", required_argument, NULL, OPT_CA},
	    {"token-file", required_argument, NULL, OPT_TOKEN},
	    {"rounds", required_argument, NULL, 'n'},
	    {"max-downtime", required_argument, NULL, OPT_DOWNTIME},
	    {"store", required_argument, NULL, 's'},
	    {"daemon", required_argument, NULL, OPT_DAEMON},
	    {"timeout", required_argument, NULL, OPT_TIMEOUT},
	    {"send-files", no_argument, NULL, OPT_SEND_FILES},
	    {"insecure", no_argument, NULL, OPT_INSECURE},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	struct mig m = {.fd = -1, .timeout = MIG_TIMEOUT_DEFAULT};
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	/* Each stream costs a core on both sides (TLS, hashing): a quarter of them, up to 4. */
	unsigned streams = ncpu >= 16 ? 4 : ncpu >= 8 ? (unsigned)(ncpu / 4) : 1;
	const char *to = NULL, *token_file = NULL, *store_arg = NULL;
	unsigned rounds = MIG_ROUNDS_DEFAULT, max_down_ms = MIG_DOWNTIME_MS;
	char token[CRC_TOKEN_MAX + 1], *end;
	uint64_t local[64], prev_sent = UINT64_MAX, dest_id = 0, final_id;
	size_t nlocal = 0;
	double t_start = ctl_now(), prev_start = 0, link_bps = 0, ck_secs;
	int c, ret = CTL_EXIT_FAILURE;
	bool stopped = false, send_files = false;
	sigset_t stop_sigs;

	(void)opts;
	sigemptyset(&stop_sigs);
	sigaddset(&stop_sigs, SIGINT);
	sigaddset(&stop_sigs, SIGTERM);
	sigaddset(&stop_sigs, SIGHUP);
	sigaddset(&stop_sigs, SIGQUIT);
	while ((c = getopt_long(argc, argv, "t:n:s:h", longopts, NULL)) != -1) {
		switch (c) {
		case 't':
			to = optarg;
			break;
		case OPT_TOKEN:
			token_file = optarg;
			break;
		case 'n':
			rounds = (unsigned)strtoul(optarg, &end, 10);
			if (*end || optarg[0] == '-' || rounds > 64) {
				ctl_error("migrate: --rounds takes 0..64, not '%s'", optarg);
				return CTL_EXIT_USAGE;
			}
			break;
		case OPT_DOWNTIME:
			max_down_ms = (unsigned)strtoul(optarg, &end, 10);
			if (*end || optarg[0] == '-' || !max_down_ms) {
				ctl_error("migrate: --max-downtime takes milliseconds, not '%s'", optarg);
				return CTL_EXIT_USAGE;
			}
			break;
		case 's':
			store_arg = optarg;
			break;
		case OPT_DAEMON:
			m.daemon = optarg;
			break;
		case OPT_TIMEOUT:
			if (ctl_parse_timeout("migrate", optarg, &m.timeout))
				return CTL_EXIT_USAGE;
			break;
		case OPT_SEND_FILES:
			send_files = true;
			break;
		case OPT_INSECURE:
			setenv("CRCUDA_INSECURE", "1", 1);
			break;
		case OPT_CERT:
			m.tls_cert = optarg;
			break;
		case OPT_KEY:
			m.tls_key = optarg;
			break;
		case OPT_CA:
			m.tls_ca = optarg;
			break;
		case OPT_STREAMS:
			streams = (unsigned)strtoul(optarg, &end, 10);
			if (*end || optarg[0] == '-' || !streams || streams > MIG_STREAMS_MAX) {
				ctl_error("migrate: --streams takes 1..%u, not '%s'", MIG_STREAMS_MAX,
					  optarg);
				return CTL_EXIT_USAGE;
			}
			break;
		case 'h':
			migrate_usage(stdout);
			return CTL_EXIT_OK;
		default:
			migrate_usage(stderr);
			return CTL_EXIT_USAGE;
		}
	}
	if (optind != argc - 1 || !to) {
		ctl_error("migrate: give one PID and --to HOST[:PORT]");
		migrate_usage(stderr);
		return CTL_EXIT_USAGE;
	}
	m.pid = (pid_t)strtol(argv[optind], &end, 10);
	if (*end || m.pid <= 0) {
		ctl_error("migrate: '%s' is not a pid", argv[optind]);
		return CTL_EXIT_USAGE;
	}
	/* HOST, HOST:PORT, [V6], [V6]:PORT */
	{
		const char *colon = strrchr(to, ':'), *bracket = strrchr(to, ']');
		bool port =
		    colon && (!bracket || colon > bracket) && (to[0] == '[' || strchr(to, ':') == colon);

		snprintf(m.to, sizeof(m.to), "%s%s%s", to, port ? "" : ":", port ? "" : MIG_PORT);
	}
	{
		int n = ctl_read_token(ctl_token_file(token_file), token, sizeof(token));

		if (n < 0)
			return CTL_EXIT_FAILURE;
		if (!n) {
			ctl_error(
			    "migrate: the destination needs a token: --token-file FILE, or CRCUDA_TOKEN or "
			    "CRCUDA_TOKEN_FILE");
			return CTL_EXIT_USAGE;
		}
	}
	if (ctl_store_dir(store_arg, m.store, sizeof(m.store)))
		return CTL_EXIT_USAGE;
	if (kill(m.pid, 0) && errno == ESRCH) {
		ctl_error("migrate: no process %d", (int)m.pid);
		return CTL_EXIT_FAILURE;
	}
	snprintf(m.tmp, sizeof(m.tmp), "/tmp/crcuda-migrate-XXXXXX");
	if (!mkdtemp(m.tmp)) {
		ctl_error("migrate: cannot make a temporary directory: %s", strerror(errno));
		return CTL_EXIT_FAILURE;
	}
	signal(SIGPIPE, SIG_IGN);
	if (mig_connect(&m, token) || check_files_there(&m, send_files))
		goto out;
	if (streams >= 2 && !(m.features & MIG_FEATURE_STREAMS)) {
		printf("migrate: the destination's crcudactl takes one stream only (an older one)\n");
		streams = 1;
	}
	if (streams >= 2 && mig_connect_data(&m, token, streams))
		goto out;
	printf("migrate: pid %d to %s (%u stream%s)\n", (int)m.pid, m.to, streams, streams > 1 ? "s" : "");
	fflush(stdout);

	/* Pre-copy: the program runs on. */
	for (unsigned r = 1; r <= rounds; r++) {
		struct ctl_export_result res;
		double t0 = ctl_now(), t_send, secs;
		uint64_t id = mig_device_round(&m, &ck_secs);
		bool device_only = id != 0;
		char what[64];

		if (!id)
			id = mig_checkpoint(&m, "--leave-running", &ck_secs);

		if (!id) {
			char why[sizeof(m.why)];

			snprintf(why, sizeof(why), "%s", m.why);
			mig_fail(&m, "round %u: the checkpoint failed: %s", r, why);
			goto out;
		}
		if (nlocal < sizeof(local) / sizeof(local[0]))
			local[nlocal++] = id;
		snprintf(what, sizeof(what), "round %u", r);
		t_send = ctl_now();
		if (mig_put(&m, id, true, what, &res, &dest_id))
			goto out;
		secs = ctl_now() - t_send;
		if (secs > 0 && res.bytes > (1u << 20))
			link_bps = res.bytes / secs;
		printf("migrate: round %u: sent %.1f MiB (%" PRIu64 " chunks changed, %" PRIu64
		       " there already) over %u stream%s in %.2f s (checkpoint%s %.2f s, transfer %.2f s); "
		       "dirty rate ",
		       r, mib(res.bytes), res.chunks, res.skipped, m.round_streams,
		       m.round_streams > 1 ? "s" : "", ctl_now() - t0, device_only ? " of the device" : "",
		       ck_secs, secs);
		if (r > 1)
			printf("%.1f MiB/s\n", mib(res.chunk_bytes) / (t0 - prev_start));
		else
			printf("- (first round: all of it)\n");
		fflush(stdout);
		prev_start = t0;
		/* Small enough: at the link's rate, half of the allowed downtime. */
		if (link_bps > 0 && res.chunk_bytes / link_bps * 1000 <= max_down_ms / 2.0)
			break;
		if (r > 1 && res.chunk_bytes >= prev_sent)
			break; /* not shrinking: the program changes memory as fast as we send it */
		prev_sent = res.chunk_bytes;
	}

	/* The stop: from here the program stands still until it runs there (or here again); a ^C or a
	 * SIGTERM waits for that (they are blocked until the end), so that it is never left stopped. */
	sigprocmask(SIG_BLOCK, &stop_sigs, NULL);
	{
		struct ctl_export_result res;
		double t_stop = ctl_now(), t_send, t_restore;
		uint8_t idb[8], *p = NULL;
		uint64_t len;

		final_id = mig_checkpoint(&m, "--leave-stopped", &ck_secs);
		if (!final_id) {
			char why[sizeof(m.why)];

			snprintf(why, sizeof(why), "%s", m.why);
			mig_fail(&m, "the last checkpoint failed: %s", why);
			goto out;
		}
		stopped = true;
		t_send = ctl_now();
		if (mig_put(&m, final_id, false, "the last round", &res, &dest_id))
			goto out;
		/* The switch: the program ends here (its whole tree: the restore there needs their pids). */
		ctl_kill_tree(m.pid);
		for (int i = 0; i < 1000 && !ctl_pid_gone(m.pid); i++)
			usleep(10000);
		stopped = false;
		t_restore = ctl_now();
		put64(idb, dest_id);
		if (mig_ask(&m, MIG_RESTORE, idb, sizeof(idb), "the restore there", &p, &len)) {
			char why[sizeof(m.why)], out[128], err[128], text[2048], idbuf[24];
			char *args[12];
			int na = 0, rc;

			snprintf(why, sizeof(why), "%s", m.why);
			snprintf(out, sizeof(out), "%s/restore.out", m.tmp);
			snprintf(err, sizeof(err), "%s/restore.err", m.tmp);
			snprintf(idbuf, sizeof(idbuf), "%" PRIu64, final_id);
			args[na++] = "restore";
			args[na++] = "--store";
			args[na++] = m.store;
			if (m.daemon) {
				args[na++] = "--daemon";
				args[na++] = (char *)m.daemon;
			}
			args[na++] = idbuf;
			args[na] = NULL;
			rc = run_self(args, out, err);
			if (rc == 0) {
				read_text(out, text, sizeof(text));
				mig_fail(&m,
					 "%s; the program was restored here instead from checkpoint %s: %s",
					 why, idbuf, text);
			} else {
				last_line(err, text, sizeof(text));
				mig_fail(&m,
					 "%s; restoring it here from checkpoint %s failed too: %s (the "
					 "checkpoint is "
					 "in %s)",
					 why, idbuf, text, m.store);
			}
			goto out;
		}
		printf("migrate: stop: sent %.1f MiB (%" PRIu64 " chunks changed, %" PRIu64
		       " there already; CRIU images %.1f MiB) over %u stream%s in %.2f s (checkpoint %.2f s, "
		       "transfer %.2f s, restore there %.2f s)\n",
		       mib(res.bytes), res.chunks, res.skipped, mib(res.file_bytes), m.round_streams,
		       m.round_streams > 1 ? "s" : "", ctl_now() - t_stop, ck_secs, t_restore - t_send,
		       ctl_now() - t_restore);
		printf("migrate: pid %d runs on %s: downtime %.3f s, total %.2f s, %.1f MiB sent; %s\n",
		       (int)m.pid, m.to, ctl_now() - t_stop, ctl_now() - t_start, mib(m.sent), (char *)p);
		free(p);
		ret = CTL_EXIT_OK;
	}
out:
	if (stopped) {
		/* Not switched: the program goes on here. */
		ctl_continue_tree(m.pid);
		fprintf(stderr, "crcudactl: migrate: %s; the program runs on here (pid %d)\n", m.why,
			(int)m.pid);
	} else if (ret != CTL_EXIT_OK) {
		fprintf(stderr, "crcudactl: migrate: %s%s\n", m.why,
			strstr(m.why, "restored here") || strstr(m.why, "failed too") ? ""
			: ctl_pid_gone(m.pid)					      ? ""
					      : "; the program runs on here");
	}
	if (m.fd >= 0)
		close(m.fd);
	/* Only now: their checkpoints there held the chunks until the last one, committed, named them. */
	for (unsigned k = 0; k < m.ndata; k++)
		close(m.data_fd[k]);
	drop_local(&m, local, nlocal);
	fflush(NULL);
	sigprocmask(SIG_UNBLOCK, &stop_sigs, NULL); /* one that came meanwhile ends us now */
	{
		char path[128];

		snprintf(path, sizeof(path), "%s/ckpt.json", m.tmp);
		unlink(path);
		snprintf(path, sizeof(path), "%s/ckpt.err", m.tmp);
		unlink(path);
		snprintf(path, sizeof(path), "%s/restore.out", m.tmp);
		unlink(path);
		snprintf(path, sizeof(path), "%s/restore.err", m.tmp);
		unlink(path);
		rmdir(m.tmp);
	}
	return ret;
}
