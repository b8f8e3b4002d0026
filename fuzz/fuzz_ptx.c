/* PTX text (common/modimage.c, crc_modinfo_from_ptx): the lexer, .entry parameter lists laid out by
 * PTX's rules and module-scope variables. The text need not end in a NUL: it is given exactly sized. */
#include <string.h>

#include "crcuda/modimage.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct crc_modinfo mi;
	char *txt;

	fuzz_quiet();
	txt = malloc(size ? size : 1);
	memcpy(txt, data, size);
	if (!crc_modinfo_from_ptx(txt, size, &mi)) {
		for (size_t i = 0; i < mi.nkernels; i++) {
			const struct crc_kernel *k = &mi.kernels[i];

			fuzz_touch(k->name, strlen(k->name));
			fuzz_touch(k->params, k->nparams * sizeof(*k->params));
		}
		for (size_t i = 0; i < mi.nglobals; i++)
			fuzz_touch(mi.globals[i].name, strlen(mi.globals[i].name));
		crc_modinfo_free(&mi);
	}
	free(txt);
	return 0;
}
