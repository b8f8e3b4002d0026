/* TLS 1.3 on crcuda's TCP connections (GnuTLS, loaded at first use; see common/tls.c for why it is
 * loaded that way). Authentication is a pre-shared key: the daemon's token on a connection's first
 * handshake (identity CRC_TLS_ID_TOKEN), or a one-time key when a connection changes hands
 * (CRC_TLS_ID_HANDOFF): a TLS session lives in one process, so when the front gives a connection to a
 * worker, a restore's worker gives it to the restored process, the old owner forgets its session and
 * the new owners make a fresh handshake on the same socket with a key the old session carried.
 *
 * A session is attached to its descriptor: crc_sock_read_all / crc_sock_write_all on that descriptor
 * go through it, so the protocol code is the same with and without TLS. */
#ifndef CRCUDA_TLS_H
#define CRCUDA_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define CRC_TLS_KEY_LEN	      32
#define CRC_TLS_ID_TOKEN      "crcuda-token"
#define CRC_TLS_ID_HANDOFF    "crcuda-handoff"
#define CRC_TLS_AUTH_DELAY_MS 2000 /* what a wrong token costs its peer at the daemon */

/* False when this process was told to use plaintext TCP: CRCUDA_INSECURE set (not "" or "0"). */
bool crc_tls_wanted(void);

/* A handshake on the connected socket fd, as client or server, with key as the pre-shared key named
 * identity; the session is attached to fd on success. timeout_ms bounds the wait for the peer. 0, or:
 * CRC_EAUTH (the peer has another key: a wrong token), CRC_ETLS (the peer speaks plaintext: one side
 * has --insecure), CRC_ETIMEDOUT, CRC_EDAEMON (the peer went away), CRC_ENOTSUP (no GnuTLS here),
 * CRC_EPROTO; why says it in words. */
int crc_tls_client(int fd, const char *identity, const void *key, size_t key_len, int timeout_ms, char *why,
		   size_t why_len);
int crc_tls_server(int fd, const char *identity, const void *key, size_t key_len, int timeout_ms, char *why,
		   size_t why_len);

/* Forgets fd's session (no close_notify: the connection goes on under another owner, or ends). */
void crc_tls_drop(int fd);
/* fd's session now lives on descriptor to (after dup3(from, to)). */
void crc_tls_move(int from, int to);
bool crc_tls_on(int fd);
/* Bytes already decrypted and waiting on fd (poll cannot see them). */
bool crc_tls_pending(int fd);
/* The cipher of fd's session, for logs ("" when none). */
const char *crc_tls_cipher(int fd);
/* Random bytes for keys: 0 or CRC_E*. */
int crc_tls_random(void *buf, size_t len);

/* Certificates instead of the token on a connection's first handshake: each side proves itself with its
 * certificate and key (PEM files) and accepts the other's if the CA file signed it. The daemon's side
 * (crcudad --tls-cert/--tls-key/--tls-ca): */
int crc_tls_check_x509(const char *cert, const char *key, const char *ca, char *why, size_t why_len);
int crc_tls_server_x509(int fd, const char *cert, const char *key, const char *ca, int timeout_ms, char *why,
			size_t why_len);
/* A client's first step on a new TCP connection to crcudad at server ("HOST:PORT"): unless
 * crc_tls_wanted() says plaintext, a handshake with certificates where CRCUDA_TLS_CERT, CRCUDA_TLS_KEY and
 * CRCUDA_TLS_CA are set (the daemon's certificate must name HOST), else with the token as the key. 0,
 * or CRC_E* with a sentence in why. */
int crc_tls_connect(int fd, const char *server, const void *token, size_t token_len, char *why,
		    size_t why_len);
/* The same handshake with certificates given by path (server: "HOST:PORT", whose certificate must
 * name HOST): crcudactl migrate to a `receive --tls-*`. */
int crc_tls_client_x509(int fd, const char *server, const char *cert, const char *key, const char *ca,
			char *why, size_t why_len);
/* After a client's hello on a TLS connection (nothing to do on another): reads the front's struct
 * crc_tls_handoff and makes the handshake with the worker it names. 0; the daemon's refusal (*refused
 * set); or CRC_E* with a sentence in why. */
int crc_tls_take_handoff(int fd, bool *refused, char *why, size_t why_len);

/* For crc_sock_read_all / crc_sock_write_all: 1 when fd has a session (the transfer was done, *rc its
 * result), 0 when it has none. */
int crc_tls_write_all(int fd, const void *buf, size_t len, int *rc);
int crc_tls_read_all(int fd, void *buf, size_t len, int *rc);
/* As read(2) for a stream on fd's session: 1 with *got the bytes read (at most len; 0 when the peer
 * ended the session; a negative CRC_E* on an error, CRC_EAGAIN on the socket's timeout), 0 when fd
 * has no session. */
int crc_tls_read_some(int fd, void *buf, size_t len, ssize_t *got);
/* Ends what this side sends on fd (a TLS close_notify where fd has a session, shutdown(SHUT_WR)
 * otherwise); the peer may still answer. */
void crc_tls_end_writes(int fd);

/* Large transfers (1 MiB and more) have their socket I/O on a thread of their own, beside the caller's
 * encryption: by default with 4 CPUs or more, or as CRCUDA_TLS_IO_THREAD says (0: never, 1: always).
 * This sets it for the process (1 or 0; -1: the default again), for benchmarks. */
void crc_tls_set_io_threads(int on);

/* First bytes of a TLS ClientHello: a record of type handshake (0x16), version 3.x. */
static inline bool crc_tls_looks_like_hello(const uint8_t *b, size_t n)
{
	return n >= 2 && b[0] == 0x16 && b[1] == 0x03;
}

#endif
