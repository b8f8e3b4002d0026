/* libFuzzer harness for the module image parsers. Build with clang:
 *   cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DCRCUDA_FUZZ=ON -DCRCUDA_SANITIZE=ON
 *   cmake --build build-fuzz --target fuzz_modimage
 *   build-fuzz/tests/modimage/fuzz/fuzz_modimage build/tests/modimage/  (the nvcc-built images as seeds) */
#include <stdint.h>
#include <stdlib.h>

#include "crcuda/log.h"
#include "crcuda/modimage.h"

static int entry(const struct crc_fatbin_entry *e, void *arg)
{
	(void)arg;
	void *d;
	size_t n;
	if (!crc_fatbin_entry_data(e, &d, &n))
		free(d);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int quiet;
	if (!quiet)
		quiet = !crc_log_set_file("/dev/null");
	struct crc_modimage_kind k;
	struct crc_modinfo mi;
	crc_modimage_identify_buf(data, size, &k);
	if (!crc_modinfo_from_image(data, size, 90, &mi))
		crc_modinfo_free(&mi);
	if (!crc_modinfo_from_cubin(data, size, &mi))
		crc_modinfo_free(&mi);
	if (!crc_modinfo_from_ptx((const char *)data, size, &mi))
		crc_modinfo_free(&mi);
	crc_fatbin_walk(data, size, entry, NULL);
	return 0;
}
