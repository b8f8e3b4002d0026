/* Logging in CRIU's manner: levels, a per-file LOG_PREFIX, "Error (file:line): " on errors and
 * warnings, a timestamp on each line. Output goes to stderr or to the file named by CRCUDA_LOG_FILE,
 * never to the application's stdout. CRCUDA_LOG_LEVEL = error|warn|info|debug or 1..4 (default warn). */
#ifndef CRCUDA_LOG_H
#define CRCUDA_LOG_H

enum crc_log_level {
	CRC_LOG_SILENT = -1, /* nothing (crcudactl's default: it says what failed itself) */
	CRC_LOG_ERROR = 1,
	CRC_LOG_WARN = 2,
	CRC_LOG_INFO = 3,
	CRC_LOG_DEBUG = 4,
};

#ifndef LOG_PREFIX
#define LOG_PREFIX ""
#endif

void crc_log(enum crc_log_level level, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Current threshold; read once from the environment on first use. */
int crc_log_level(void);
/* Overrides the environment (crcudactl -v / -q); CRC_LOG_SILENT prints nothing. */
void crc_log_set_level(int level);
/* The last error logged by this thread, printed or not ("" when none, or after the clear): what a
 * tool that prints its own one-line messages adds as the reason. */
const char *crc_log_last_error(void);
void crc_log_clear_last_error(void);
/* Redirects output to path (append); NULL means stderr. Returns 0 or -errno. */
int crc_log_set_file(const char *path);

#define crc__log(lvl, fmt, ...)                                                                              \
	do {                                                                                                 \
		if ((lvl) <= crc_log_level() || (lvl) == CRC_LOG_ERROR)                                      \
			crc_log((lvl), __FILE__, __LINE__, LOG_PREFIX fmt, ##__VA_ARGS__);                   \
	} while (0)

#define pr_err(fmt, ...)   crc__log(CRC_LOG_ERROR, fmt, ##__VA_ARGS__)
#define pr_warn(fmt, ...)  crc__log(CRC_LOG_WARN, fmt, ##__VA_ARGS__)
#define pr_info(fmt, ...)  crc__log(CRC_LOG_INFO, fmt, ##__VA_ARGS__)
#define pr_debug(fmt, ...) crc__log(CRC_LOG_DEBUG, fmt, ##__VA_ARGS__)
/* pr_err with ": strerror(errno)" appended. */
#define pr_perror(fmt, ...) crc__log(CRC_LOG_ERROR, fmt ": %m", ##__VA_ARGS__)

#endif
