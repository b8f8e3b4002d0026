/* crcudad: the front of the GPU daemon. Accepts connections on a unix socket (peer uid checked) and
 * optionally TCP (token required), and gives each application a GPU worker process of its own
 * (crcudad-worker: link.h), taken from a pool of initialised ones; lists sessions and routes control
 * commands to their workers (control.c). It never loads the driver itself.
 *
 * usage: crcudad --backend sim|cuda [--backend-lib PATH] [--socket PATH] [--listen ADDR:PORT
 *                --token-file F [--insecure | --tls-cert F --tls-key F --tls-ca F]] [--va-base ADDR]
 *                [--va-session BYTES] [--pool N] [--ring-size BYTES] [--idle-exit SECONDS] [--foreground]
 * [-v|-q] */
#define LOG_PREFIX "crcudad: "
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "crcuda/errno.h"
#include "crcuda/log.h"
#include "crcuda/tls.h"
#include "front.h"

/* Worker links watched by the accept loop at once (more workers are still reaped, a poll later). */
#define MAX_WATCHED 1024

struct front fr = {
    .va_base = CRC_DEFAULT_VA_BASE,
    .va_session = CRC_DEFAULT_VA_SESSION,
    .ring_size = CRC_DEFAULT_RING,
    .pool = 1,
};

static void usage(FILE *f)
{
	fprintf(f, "usage: crcudad --backend sim|cuda [--backend-lib PATH] [--socket PATH]\n"
		   "               [--listen ADDR:PORT --token-file FILE [--insecure | --tls-cert FILE\n"
		   "               --tls-key FILE --tls-ca FILE]] [--va-base ADDR]\n"
		   "               [--va-session BYTES]\n"
		   "               [--pool N] [--ring-size BYTES] [--idle-exit SECONDS] [--foreground]\n"
		   "               [-v] [-q]\n"
		   "       crcudad --version | --help\n");
}

/* The directory of this executable: 0 or -errno. */
static int self_dir(char *buf, size_t len)
{
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

	if (n < 0)
		return -errno;
	exe[n] = 0;
	snprintf(buf, len, "%s", dirname(exe));
	return 0;
}

/* The first of the candidates (relative to this executable's directory) where file exists, into buf:
 * 0, or CRC_ENOENT with buf the first candidate (for the message). */
static int find_beside(const char *const *cands, const char *file, char *buf, size_t len)
{
	char dir[PATH_MAX];
	int rc;

	buf[0] = 0;
	rc = self_dir(dir, sizeof(dir));
	if (rc)
		return rc;
	for (const char *const *c = cands; *c; c++) {
		if (snprintf(buf, len, "%s/%s/%s", dir, *c, file) >= (int)len)
			return CRC_EINVAL;
		if (!access(buf, F_OK)) {
			char real[PATH_MAX];

			/* <bindir>/../lib/crcuda/sim/libcuda.so.1 as /usr/lib/crcuda/sim/libcuda.so.1 */
			if (realpath(buf, real) && strlen(real) < len)
				snprintf(buf, len, "%s", real);
			return 0;
		}
	}
	if (snprintf(buf, len, "%s/%s/%s", dir, cands[0], file) >= (int)len)
		buf[0] = 0;
	return CRC_ENOENT;
}

/* The simulated device: <build>/crcudad/crcudad -> <build>/sim/lib/libcuda.so.1; installed,
 * <bindir>/crcudad -> <libdir>/crcuda/sim/libcuda.so.1. */
static int sim_path(char *buf, size_t len)
{
	static const char *const cands[] = {"../sim/lib", CRCUDA_REL_PKGLIBDIR "/sim", NULL};

	return find_beside(cands, "libcuda.so.1", buf, len);
}

/* The worker beside the front (build tree: <dir>/crcudad -> <dir>/crcudad-worker), else installed
 * (<bindir>/crcudad -> <libexecdir>/crcuda/crcudad-worker); CRCUDAD_WORKER overrides. */
static int worker_path(char *buf, size_t len)
{
	static const char *const cands[] = {".", CRCUDA_REL_PKGLIBEXECDIR, NULL};
	const char *env = getenv("CRCUDAD_WORKER");
	int rc;

	if (env && *env)
		snprintf(buf, len, "%s", env);
	else if ((rc = find_beside(cands, "crcudad-worker", buf, len)) && rc != CRC_ENOENT)
		return rc;
	if (access(buf, X_OK)) {
		pr_err("cannot run the GPU worker %s: %m (set CRCUDAD_WORKER)", buf);
		return CRC_ENOENT;
	}
	return 0;
}

/* The real driver, as the dynamic loader's cache names it. */
static int cuda_path(char *buf, size_t len)
{
	FILE *p = popen("/sbin/ldconfig -p 2>/dev/null || ldconfig -p", "r");
	char line[1024];
	int rc = CRC_ENOENT;

	if (!p)
		return -errno;
	while (fgets(line, sizeof(line), p)) {
		char *arrow = strstr(line, "=> ");

		if (!strstr(line, "libcuda.so.1 ") || !arrow || strstr(line, "stubs"))
			continue;
		arrow += 3;
		arrow[strcspn(arrow, "\n")] = 0;
		snprintf(buf, len, "%s", arrow);
		rc = 0;
		break;
	}
	pclose(p);
	return rc;
}

static int read_token_file(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct stat st;
	ssize_t n;

	if (fd < 0) {
		pr_perror("open token file %s", path);
		return -errno;
	}
	if (!fstat(fd, &st) && (st.st_mode & 077))
		pr_warn("token file %s is readable by others", path);
	n = read(fd, fr.token, sizeof(fr.token));
	close(fd);
	if (n < 0)
		return -errno;
	while (n && (fr.token[n - 1] == '\n' || fr.token[n - 1] == '\r'))
		n--;
	if (!n) {
		pr_err("token file %s is empty", path);
		return CRC_EINVAL;
	}
	fr.token_len = (size_t)n;
	fr.have_token = true;
	return 0;
}

static void refuse(int fd, int status)
{
	struct crc_hello_reply r = {.magic = CRC_PROTO_MAGIC, .version = CRC_PROTO_VERSION, .status = status};

	crc_sock_write_all(fd, &r, sizeof(r));
	crc_tls_drop(fd);
	close(fd);
}

/* The connection's hello, then what it asks for: a control connection served here, a session given to
 * a worker, a detached session taken back by its client. fd is ours (closed or handed over). */
static void greet(int fd, bool tcp, struct crc_peer peer, const char *from)
{
	struct crc_hello hello;
	struct timeval tv = {.tv_sec = 5};
	int rc;

	/* A client that connects and says nothing must not hold up the others for long. */
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	rc = crc_sock_read_all(fd, &hello, sizeof(hello));
	if (rc || hello.magic != CRC_PROTO_MAGIC || hello.version != CRC_PROTO_VERSION) {
		pr_warn("refusing a connection%s%s: no valid hello", from ? " from " : "", from ? from : "");
		refuse(fd, CRC_EPROTO);
		return;
	}
	if (tcp && hello.session_id && (hello.role == CRC_ROLE_CLIENT || hello.role == CRC_ROLE_BULK)) {
		/* A detached client taking its session back: its ticket is its token, which its worker
		 * checks (worker/tcp_park.c). A bulk connection of a session: its key, the same way
		 * (worker/stripe.c). */
		struct worker *w = crc_worker_find(0, hello.session_id);
		struct crc_link_msg m = {.kind =
					     hello.role == CRC_ROLE_BULK ? CRC_LINK_BULK : CRC_LINK_RECLAIM,
					 .tcp = 1,
					 .peer = peer,
					 .hello = hello};

		tv.tv_sec = 0;
		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		if (!w) {
			refuse(fd, CRC_ENOTFOUND);
			return;
		}
		m.session_id = w->session_id;
		if (crc_front_handoff(fd, &m, NULL))
			close(fd);
		else
			crc_worker_hand(w, &m, fd, NULL, 0);
		crc_worker_put(w);
		return;
	}
	if (hello.role == CRC_ROLE_BULK) {
		pr_warn("refusing a bulk connection%s%s: no session named", from ? " from " : "",
			from ? from : "");
		refuse(fd, CRC_EPROTO);
		return;
	}
	if (tcp) {
		peer.pid = hello.pid;
		peer.uid = hello.uid;
		if (!fr.have_token || hello.token_len > sizeof(hello.token) ||
		    !crc_const_time_equal(hello.token, hello.token_len, fr.token, fr.token_len)) {
			pr_warn("refusing TCP client pid %d from %s: %s token", (int)hello.pid, from,
				hello.token_len ? "wrong" : "missing");
			nanosleep(&(struct timespec){.tv_sec = CRC_TLS_AUTH_DELAY_MS / 1000,
						     .tv_nsec = CRC_TLS_AUTH_DELAY_MS % 1000 * 1000000L},
				  NULL);
			refuse(fd, CRC_EAUTH);
			return;
		}
	}
	tv.tv_sec = 0;
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (hello.role == CRC_ROLE_CONTROL) {
		crc_front_control(fd, tcp, &peer);
		return;
	}
	{
		char why[256];
		struct worker *w = crc_worker_take(&peer, tcp, false, why, sizeof(why));
		struct crc_link_msg m = {.kind = CRC_LINK_CLIENT, .tcp = tcp, .peer = peer, .hello = hello};

		if (!w) {
			pr_warn("cannot start a session for pid %d: %s", (int)peer.pid, why);
			refuse(fd, CRC_EDAEMON);
			return;
		}
		rc = crc_front_handoff(fd, &m, NULL);
		if (rc)
			close(fd);
		else
			rc = crc_worker_hand(w, &m, fd, NULL, 0);
		if (rc)
			pr_warn("cannot hand pid %d to worker %d: %s", (int)peer.pid, (int)w->pid,
				crc_strerror(rc));
		else
			pr_info("session %llu: pid %d uid %u -> worker %d%s",
				(unsigned long long)w->session_id, (int)peer.pid, (unsigned)peer.uid,
				(int)w->pid, m.tls ? " (TLS)" : "");
		crc_worker_put(w);
	}
}

static void accept_unix(int lfd)
{
	struct crc_peer peer = {0};
	int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);

	if (fd < 0)
		return;
	if (crc_unix_check_peer(fd, &peer)) {
		refuse(fd, CRC_EPERM);
		return;
	}
	greet(fd, false, peer, NULL);
}

/* The first bytes the peer sent (up to len, waiting up to timeout_ms for them): how many. */
static int peek_first(int fd, uint8_t *buf, size_t len, int timeout_ms)
{
	ssize_t n = 0;

	for (int waited = 0; waited <= timeout_ms; waited += 10) {
		struct pollfd p = {.fd = fd, .events = POLLIN};

		n = recv(fd, buf, len, MSG_PEEK | MSG_DONTWAIT);
		if (n == (ssize_t)len || n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
			break;
		poll(&p, 1, 10);
	}
	return n > 0 ? (int)n : 0;
}

/* Reads what the peer sent so far (a refused peer reads our answer before a reset could hide it). */
static void drain(int fd)
{
	char buf[4096];
	struct pollfd p = {.fd = fd, .events = POLLIN};

	while (poll(&p, 1, 50) > 0 && recv(fd, buf, sizeof(buf), MSG_DONTWAIT) > 0)
		;
}

struct tcp_greeting {
	int fd;
	int slot;
	char from[INET6_ADDRSTRLEN + 16];
};

/* Connections being greeted (peeked at, handshaken, delayed for a wrong token: up to ~12 s each), by
 * the peer's address: at most MAX_GREETINGS in all and MAX_GREETINGS_PER_HOST from one address, so one
 * host that opens connections and says nothing (or guesses tokens) cannot keep the others out. */
#define MAX_GREETINGS	       64
#define MAX_GREETINGS_PER_HOST 8
static struct {
	pthread_mutex_t lock;
	bool used[MAX_GREETINGS];
	char host[MAX_GREETINGS][INET6_ADDRSTRLEN];
} greetings = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* A slot for a connection from host; -1 when all are taken, -2 when host has its share. */
static int greeting_take(const char *host)
{
	int free_slot = -1, same = 0;

	pthread_mutex_lock(&greetings.lock);
	for (int i = 0; i < MAX_GREETINGS; i++) {
		if (!greetings.used[i])
			free_slot = free_slot < 0 ? i : free_slot;
		else if (!strcmp(greetings.host[i], host))
			same++;
	}
	if (same >= MAX_GREETINGS_PER_HOST) {
		free_slot = -2;
	} else if (free_slot >= 0) {
		greetings.used[free_slot] = true;
		snprintf(greetings.host[free_slot], sizeof(greetings.host[free_slot]), "%s", host);
	}
	pthread_mutex_unlock(&greetings.lock);
	return free_slot;
}

static void greeting_done(int slot)
{
	pthread_mutex_lock(&greetings.lock);
	greetings.used[slot] = false;
	pthread_mutex_unlock(&greetings.lock);
}

/* A TCP connection, on a thread of its own (a TLS handshake, a wrong token's delay, must not hold up
 * the others): TLS with the token as the pre-shared key unless --insecure; a client speaking the other
 * language gets an answer in its own (one line it can print), not a hang. */
static void *tcp_greet(void *arg)
{
	struct tcp_greeting *g = arg;
	uint8_t first[4] = {0};
	int n = peek_first(g->fd, first, sizeof(first), 5000), rc;
	uint32_t magic = CRC_PROTO_MAGIC;
	bool plain = n == 4 && !memcmp(first, &magic, 4), tls = crc_tls_looks_like_hello(first, (size_t)n);
	char why[256];

	if (!fr.insecure && !tls) {
		if (plain) {
			pr_warn(
			    "refusing TCP client %s: it speaks plaintext and this daemon requires TLS (give "
			    "neither side --insecure, or both)",
			    g->from);
			drain(g->fd);
			refuse(g->fd, CRC_ETLS);
		} else {
			pr_warn("refusing TCP client %s: %s", g->from,
				n ? "no TLS handshake" : "it said nothing");
			close(g->fd);
		}
	} else if (fr.insecure && tls) {
		pr_warn("refusing TCP client %s: it speaks TLS and this daemon was started with --insecure",
			g->from);
		drain(g->fd);
		refuse(g->fd, CRC_ETLS);
	} else if (!fr.insecure &&
		   (rc = fr.tls_cert ? crc_tls_server_x509(g->fd, fr.tls_cert, fr.tls_key, fr.tls_ca, 5000,
							   why, sizeof(why))
				     : crc_tls_server(g->fd, CRC_TLS_ID_TOKEN, fr.token, fr.token_len, 5000,
						      why, sizeof(why)))) {
		/* A wrong key's alert was held back CRC_TLS_AUTH_DELAY_MS (tls.c): guessing is slow. */
		if (rc == CRC_EAUTH)
			pr_warn("refusing TCP client %s: %s (%s)", g->from,
				fr.tls_cert ? "not a certificate of --tls-ca" : "wrong token", why);
		else
			pr_warn("refusing TCP client %s: %s", g->from, why);
		crc_tls_drop(g->fd);
		close(g->fd);
	} else {
		if (!fr.insecure)
			pr_debug("TCP client %s: TLS %s", g->from, crc_tls_cipher(g->fd));
		greet(g->fd, true, (struct crc_peer){0}, g->from);
	}
	greeting_done(g->slot);
	free(g);
	return NULL;
}

static void accept_tcp(int lfd)
{
	struct sockaddr_storage sa;
	socklen_t len = sizeof(sa);
	struct tcp_greeting *g;
	char host[INET6_ADDRSTRLEN], port[16] = "?";
	static atomic_bool refusing;
	pthread_t t;
	int slot, fd = accept4(lfd, (struct sockaddr *)&sa, &len, SOCK_CLOEXEC);

	if (fd < 0)
		return;
	if (getnameinfo((struct sockaddr *)&sa, len, host, sizeof(host), port, sizeof(port),
			NI_NUMERICHOST | NI_NUMERICSERV))
		snprintf(host, sizeof(host), "?");
	slot = greeting_take(host);
	if (slot < 0) {
		/* Logged once per burst: a flood would otherwise fill the log too. */
		if (!atomic_exchange(&refusing, true))
			pr_warn("refusing TCP connections from %s: %s %d others", host,
				slot == -2 ? "it has" : "the daemon is greeting",
				slot == -2 ? MAX_GREETINGS_PER_HOST : MAX_GREETINGS);
		close(fd);
		return;
	}
	atomic_store(&refusing, false);
	if (!(g = calloc(1, sizeof(*g)))) {
		greeting_done(slot);
		close(fd);
		return;
	}
	g->fd = fd;
	g->slot = slot;
	snprintf(g->from, sizeof(g->from), strchr(host, ':') ? "[%s]:%s" : "%s:%s", host, port);
	if (pthread_create(&t, NULL, tcp_greet, g)) {
		greeting_done(slot);
		free(g);
		close(fd);
		return;
	}
	pthread_detach(t);
}

/* --idle-exit: a program that `crcudactl run` started registers itself as <socket>.run/<pid> (content:
 * its start time, field 22 of /proc/PID/stat) before its first CUDA call, which may come long after
 * the start (imports, data loading); while one of them lives the daemon is not idle. Entries of dead
 * (or recycled) pids are removed. */
static bool run_programs_alive(const char *sock_path)
{
	char dir[PATH_MAX], path[PATH_MAX + 300], want[32], have[32];
	bool alive = false;
	struct dirent *e;
	DIR *d;

	snprintf(dir, sizeof(dir), "%s.run", sock_path);
	d = opendir(dir);
	if (!d)
		return false;
	while ((e = readdir(d))) {
		char *end, stat[1024], *p;
		long pid = strtol(e->d_name, &end, 10);
		ssize_t n = 0;
		int fd;

		if (pid <= 0 || *end)
			continue;
		want[0] = have[0] = 0;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd >= 0) {
			n = read(fd, want, sizeof(want) - 1);
			want[n > 0 ? n : 0] = 0;
			want[strcspn(want, " \n")] = 0;
			close(fd);
		}
		snprintf(stat, sizeof(stat), "/proc/%ld/stat", pid);
		fd = open(stat, O_RDONLY | O_CLOEXEC);
		n = fd >= 0 ? read(fd, stat, sizeof(stat) - 1) : -1;
		if (fd >= 0)
			close(fd);
		if (n > 0) {
			stat[n] = 0;
			/* After "pid (comm) ": state is field 3, start time field 22. */
			p = strrchr(stat, ')');
			for (int f = 2; p && f < 22; f++)
				p = strchr(p + 1, ' ');
			if (p)
				snprintf(have, sizeof(have), "%.*s", (int)strcspn(p + 1, " "), p + 1);
		}
		if (n > 0 && (!want[0] || !strcmp(want, have)))
			alive = true;
		else
			unlink(path);
	}
	closedir(d);
	return alive;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* True when the daemon has had no session, no control connection (a suspended program holds one) and
 * no registered program for idle_s. */
static bool idle_expired(const char *sock_path, unsigned idle_s, double *busy_at)
{
	unsigned sessions = 0;

	sessions = crc_workers_busy();
	if (sessions || atomic_load(&fr.controls) || run_programs_alive(sock_path))
		*busy_at = now_s();
	return now_s() - *busy_at >= idle_s;
}

static volatile sig_atomic_t stopping;

static void on_signal(int sig)
{
	(void)sig;
	stopping = 1;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"backend", required_argument, NULL, 'b'},	  {"backend-lib", required_argument, NULL, 'l'},
	    {"socket", required_argument, NULL, 's'},	  {"listen", required_argument, NULL, 'L'},
	    {"token-file", required_argument, NULL, 't'}, {"va-base", required_argument, NULL, 'B'},
	    {"va-session", required_argument, NULL, 'S'}, {"pool", required_argument, NULL, 'p'},
	    {"ring-size", required_argument, NULL, 'r'},  {"idle-exit", required_argument, NULL, 'i'},
	    {"foreground", no_argument, NULL, 'f'},	  {"help", no_argument, NULL, 'h'},
	    {"version", no_argument, NULL, 'V'},	  {"insecure", no_argument, NULL, 'I'},
	    {"tls-cert", required_argument, NULL, 'C'},	  {"tls-key", required_argument, NULL, 'K'},
	    {"tls-ca", required_argument, NULL, 'A'},	  {NULL, 0, NULL, 0},
	};
	const char *backend = NULL, *lib = NULL, *listen_addr = NULL, *token_file = NULL;
	char path[PATH_MAX], sock_path[PATH_MAX] = "";
	bool foreground = false;
	struct pollfd fds[2 + MAX_WATCHED];
	unsigned idle_exit = 0;
	double busy_at;
	int nfds = 0, c;

	while ((c = getopt_long(argc, argv, "vqh", opts, NULL)) != -1) {
		switch (c) {
		case 'b':
			backend = optarg;
			break;
		case 'l':
			lib = optarg;
			break;
		case 's':
			snprintf(sock_path, sizeof(sock_path), "%s", optarg);
			break;
		case 'L':
			listen_addr = optarg;
			break;
		case 't':
			token_file = optarg;
			break;
		case 'B':
			fr.va_base = strtoull(optarg, NULL, 0);
			break;
		case 'S':
			fr.va_session = strtoull(optarg, NULL, 0);
			break;
		case 'p':
			fr.pool = (unsigned)strtoul(optarg, NULL, 0);
			break;
		case 'r':
			fr.ring_size = strtoull(optarg, NULL, 0);
			break;
		case 'i':
			idle_exit = (unsigned)strtoul(optarg, NULL, 0);
			break;
		case 'f':
			foreground = true;
			break;
		case 'I':
			fr.insecure = true;
			break;
		case 'C':
			fr.tls_cert = optarg;
			break;
		case 'K':
			fr.tls_key = optarg;
			break;
		case 'A':
			fr.tls_ca = optarg;
			break;
		case 'v':
			crc_log_set_level(crc_log_level() + 1);
			break;
		case 'q':
			crc_log_set_level(CRC_LOG_ERROR);
			break;
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf("crcudad %s (protocol %u)\n", CRCUDA_VERSION, (unsigned)CRC_PROTO_VERSION);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (!backend || (strcmp(backend, "sim") && strcmp(backend, "cuda")) || optind != argc ||
	    fr.pool > 64 || !fr.va_session || fr.va_session % CRC_GRANULE || fr.va_base % CRC_GRANULE ||
	    (fr.ring_size & (fr.ring_size - 1)) || fr.ring_size < (1u << 20)) {
		usage(stderr);
		return 2;
	}
	if (listen_addr && !token_file) {
		pr_err("--listen needs --token-file: no token, no service");
		return 2;
	}
	if (token_file && read_token_file(token_file))
		return 1;
	if ((fr.tls_cert || fr.tls_key || fr.tls_ca) &&
	    (!fr.tls_cert || !fr.tls_key || !fr.tls_ca || fr.insecure || !listen_addr)) {
		pr_err(
		    "--tls-cert, --tls-key and --tls-ca go together, with --listen and without --insecure");
		return 2;
	}
	if (fr.tls_cert) {
		char why[512];

		if (crc_tls_check_x509(fr.tls_cert, fr.tls_key, fr.tls_ca, why, sizeof(why))) {
			pr_err("%s", why);
			return 1;
		}
	}
	if (listen_addr && fr.insecure)
		pr_warn("--insecure: TCP sessions on %s travel in plaintext (device memory and the token "
			"included); use it on a network you trust only",
			listen_addr);
	else if (listen_addr && crc_tls_random(path, 1)) {
		pr_err("no TLS here (cannot load GnuTLS, libgnutls30): give --insecure for plaintext TCP");
		return 1;
	}
	if (lib)
		snprintf(path, sizeof(path), "%s", lib);
	else if (!strcmp(backend, "sim") ? sim_path(path, sizeof(path)) : cuda_path(path, sizeof(path))) {
		if (!strcmp(backend, "sim"))
			pr_err(
			    "cannot find the simulated device (%s, or installed beside crcudad in %s/sim): "
			    "give --backend-lib",
			    path, CRCUDA_REL_PKGLIBDIR);
		else
			pr_err("cannot find the %s backend library: give --backend-lib", backend);
		return 1;
	}
	snprintf(fr.backend_lib, sizeof(fr.backend_lib), "%s", path);
	fr.log_level = crc_log_level();
	if (worker_path(fr.worker_exe, sizeof(fr.worker_exe)))
		return 1;
	if (!sock_path[0] && crc_sock_default_path(sock_path, sizeof(sock_path)))
		return 1;
	fds[nfds].fd = crc_unix_listen(sock_path);
	if (fds[nfds].fd < 0)
		return 1;
	fds[nfds++].events = POLLIN;
	if (listen_addr) {
		fds[nfds].fd = crc_tcp_listen(listen_addr);
		if (fds[nfds].fd < 0) {
			pr_err("cannot listen on %s: %s", listen_addr, crc_strerror(fds[nfds].fd));
			return 1;
		}
		fds[nfds++].events = POLLIN;
	}
	signal(SIGPIPE, SIG_IGN);
	signal(SIGTERM, on_signal);
	signal(SIGINT, on_signal);
	if (!foreground && daemon(0, 1)) {
		pr_perror("daemon");
		return 1;
	}
	/* After daemon(): workers are children of the process that reaps them. */
	if (crc_workers_start()) {
		unlink(sock_path);
		return 1;
	}
	pr_info("serving on %s%s%s (backend %s)", sock_path, listen_addr ? " and " : "",
		listen_addr ? listen_addr : "", path);
	/* Tests and crcudactl wait for this line on stdout. */
	printf("crcudad: ready\n");
	fflush(stdout);
	busy_at = now_s();
	while (!stopping) {
		int links[MAX_WATCHED];
		unsigned nl = crc_workers_pollfds(links, MAX_WATCHED);
		int ready;

		for (unsigned i = 0; i < nl; i++)
			fds[nfds + i] = (struct pollfd){.fd = links[i], .events = POLLIN};
		ready = poll(fds, (nfds_t)(nfds + (int)nl), 500);
		/* A worker that exited (its link hangs up) is reaped; the pool is topped up. */
		crc_workers_tend();
		if (idle_exit && ready == 0 && idle_expired(sock_path, idle_exit, &busy_at)) {
			pr_info("no session for %u s: exiting (--idle-exit)", idle_exit);
			break;
		}
		if (ready <= 0)
			continue;
		for (int i = 0; i < nfds; i++)
			if (fds[i].revents & POLLIN) {
				busy_at = now_s();
				if (i == 1)
					accept_tcp(fds[i].fd);
				else
					accept_unix(fds[i].fd);
			}
	}
	unlink(sock_path);
	pr_info("stopping");
	crc_workers_stop();
	return 0;
}
