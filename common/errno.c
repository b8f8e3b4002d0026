#include <limits.h>
#include <string.h>

#include "crcuda/errno.h"

const char *crc_strerror(int err)
{
	switch (err) {
	case 0:
		return "CRC_OK: success";
#define CRC__ERR_STR(name, value, msg)                                                                       \
	case name:                                                                                           \
		return #name ": " msg;
		CRC_ERRNO_MAP(CRC__ERR_STR)
#undef CRC__ERR_STR
	default:
		/* Codes come from peers too (a daemon's reply status): INT_MIN has no -errno. */
		return err < 0 && err != INT_MIN ? strerror(-err) : "unknown error";
	}
}

const char *crc_err_name(int err)
{
	switch (err) {
	case 0:
		return "CRC_OK";
#define CRC__ERR_NAME(name, value, msg)                                                                      \
	case name:                                                                                           \
		return #name;
		CRC_ERRNO_MAP(CRC__ERR_NAME)
#undef CRC__ERR_NAME
	default:
		return "CRC_E?";
	}
}
