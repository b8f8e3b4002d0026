/* Cubins (64-bit ELF, EM_CUDA) as a fatbin entry or cuModuleLoadData brings them
 * (common/modimage.c, crc_modinfo_from_cubin): sections, the symbol table, .nv.info attributes
 * (kernel parameter layouts), globals and their initial bytes. */
#include <string.h>

#include "crcuda/modimage.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct crc_modinfo mi;
	uint8_t *img;

	fuzz_quiet();
	img = malloc(size ? size : 1);
	memcpy(img, data, size);
	if (!crc_modinfo_from_cubin(img, size, &mi)) {
		for (size_t i = 0; i < mi.nkernels; i++) {
			const struct crc_kernel *k = &mi.kernels[i];

			fuzz_touch(k->name, strlen(k->name));
			for (size_t j = 0; j < k->nparams; j++)
				FUZZ_CHECK(j == 0 || k->params[j - 1].ordinal <= k->params[j].ordinal);
		}
		for (size_t i = 0; i < mi.nglobals; i++)
			if (mi.globals[i].init)
				fuzz_touch(mi.globals[i].init, mi.globals[i].size);
		crc_modinfo_free(&mi);
	}
	free(img);
	return 0;
}
