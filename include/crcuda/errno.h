/* crcuda error codes: 0 on success, a negative errno, or a negative code from crcuda's own range.
 * One X-macro table generates the enum, crc_strerror() and crc_err_name(). */
#ifndef CRCUDA_ERRNO_H
#define CRCUDA_ERRNO_H

/* Private range below the errno values and away from LMDB's (-30799..-30779). */
#define CRC_ERRBASE (-40000)

/* XX(name, value, message) */
#define CRC_ERRNO_MAP(XX)                                                                                    \
	XX(CRC_EINVAL, -22, "invalid argument")                                                              \
	XX(CRC_ENOMEM, -12, "out of memory")                                                                 \
	XX(CRC_ENOENT, -2, "no such object")                                                                 \
	XX(CRC_EEXIST, -17, "object already exists")                                                         \
	XX(CRC_EIO, -5, "input/output error")                                                                \
	XX(CRC_EPERM, -1, "operation not permitted")                                                         \
	XX(CRC_EAGAIN, -11, "resource temporarily unavailable")                                              \
	XX(CRC_ENOSPC, -28, "no space left on device")                                                       \
	XX(CRC_ECANCELED, -125, "operation canceled")                                                        \
	XX(CRC_ECORRUPT, CRC_ERRBASE - 1, "store data is corrupt")                                           \
	XX(CRC_ESCHEMA, CRC_ERRBASE - 2, "store schema version not supported")                               \
	XX(CRC_ETRUNC, CRC_ERRBASE - 3, "file is truncated")                                                 \
	XX(CRC_ENOTFOUND, CRC_ERRBASE - 4, "not found")                                                      \
	XX(CRC_EDB, CRC_ERRBASE - 5, "database error")                                                       \
	XX(CRC_EPROTO, CRC_ERRBASE - 6, "protocol error")                                                    \
	XX(CRC_EDAEMON, CRC_ERRBASE - 7, "daemon unreachable")                                               \
	XX(CRC_ENODEV, CRC_ERRBASE - 8, "no CUDA device")                                                    \
	XX(CRC_ECUDA, CRC_ERRBASE - 9, "CUDA driver error")                                                  \
	XX(CRC_EBUSY, CRC_ERRBASE - 10, "resource busy")                                                     \
	XX(CRC_ENOTSUP, CRC_ERRBASE - 11, "operation not supported")                                         \
	XX(CRC_EAUTH, CRC_ERRBASE - 12, "authentication failed")                                             \
	XX(CRC_ETIMEDOUT, CRC_ERRBASE - 13, "timed out")                                                     \
	XX(CRC_ETLS, CRC_ERRBASE - 14, "TLS on one side only: both need TLS, or both --insecure")

enum crc_errno {
#define CRC__ERR_ENUM(name, value, msg) name = (value),
	CRC_OK = 0,
	CRC_ERRNO_MAP(CRC__ERR_ENUM)
#undef CRC__ERR_ENUM
};

/* "CRC_ECORRUPT: store data is corrupt"; for other negative values, strerror(-err). */
const char *crc_strerror(int err);
/* "CRC_ECORRUPT"; "CRC_OK" for 0; "CRC_E?" for unknown values. */
const char *crc_err_name(int err);

#endif
