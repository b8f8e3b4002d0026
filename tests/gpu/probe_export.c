/* probe_export: on the GPU machine, natively: where the real driver's export-table slots live, so
 * their code can be read (objdump) when crcuda must learn what an unserved slot does. Prints, for the
 * table and slots asked, "slot N addr LIB+OFFSET". Usage: probe_export UUID-HEX SLOT... */
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
	CUuuid id;
	const void **table = NULL;

	if (argc < 3 || strlen(argv[1]) != 32) {
		fprintf(stderr, "usage: probe_export UUID(32 hex) SLOT...\n");
		return 2;
	}
	for (int i = 0; i < 16; i++) {
		unsigned v;
		sscanf(argv[1] + 2 * i, "%2x", &v);
		id.bytes[i] = (char)v;
	}
	if (cuInit(0) || cuGetExportTable((const void **)&table, &id) || !table) {
		fprintf(stderr, "probe_export: no such table\n");
		return 1;
	}
	printf("table %p size-word %zu\n", (void *)table, (size_t)(uintptr_t)table[0]);
	for (int a = 2; a < argc; a++) {
		int slot = atoi(argv[a]);
		Dl_info info;
		const void *fn = table[slot];
		if (dladdr(fn, &info) && info.dli_fname)
			printf("slot %d addr %p %s+0x%lx\n", slot, fn, info.dli_fname,
			       (unsigned long)((const char *)fn - (const char *)info.dli_fbase));
		else
			printf("slot %d addr %p (no library)\n", slot, fn);
	}
	return 0;
}
