#include <errno.h>
#include <limits.h>

#include "check.h"
#include "crcuda/errno.h"

int main(void)
{
	CHECK_EQ_STR(crc_err_name(CRC_ECORRUPT), "CRC_ECORRUPT");
	CHECK_EQ_STR(crc_strerror(CRC_ECORRUPT), "CRC_ECORRUPT: store data is corrupt");
	CHECK_EQ_STR(crc_err_name(0), "CRC_OK");
	CHECK_EQ_STR(crc_err_name(CRC_EINVAL), "CRC_EINVAL");
	CHECK_EQ_INT(CRC_EINVAL, -EINVAL);
	CHECK_EQ_STR(crc_err_name(-9999), "CRC_E?");
	/* An errno without a crcuda name still gets the libc message. */
	CHECK(strstr(crc_strerror(-ENOTDIR), "directory") != NULL);
	/* A peer's status of INT_MIN (found by fuzz/fuzz_ctl_client.c: -INT_MIN overflowed). */
	CHECK_EQ_STR(crc_strerror(INT_MIN), "unknown error");
	/* Codes of the private range are distinct and below every errno. */
	CHECK(CRC_ECORRUPT < -4096 && CRC_ESCHEMA != CRC_ECORRUPT);
	return 0;
}
