/* The simulated device must find a host implementation for every kernel the cudart programs launch.
 * For each program, the kernels are read from the fatbin that nvcc embedded in it (its .nv_fatbin
 * section, as cudart registers it) with crc_modinfo_from_image; each name is escaped as the sim does
 * (bytes outside [A-Za-z0-9_] as _xHH) and looked up as crcuda_sim_kernel_<name> in the kernel library.
 *
 * usage: unit_cudart_sim_kernels KERNEL_LIBRARY PROGRAM... */
#include <ctype.h>
#include <dlfcn.h>
#include <elf.h>
#include <stdint.h>

#include "check.h"
#include "crcuda/modimage.h"

static void *read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	void *buf;
	long n;

	CHECK(f);
	CHECK(fseek(f, 0, SEEK_END) == 0);
	n = ftell(f);
	CHECK(n > 0);
	rewind(f);
	buf = malloc((size_t)n);
	CHECK(buf);
	CHECK(fread(buf, 1, (size_t)n, f) == (size_t)n);
	fclose(f);
	*len = (size_t)n;
	return buf;
}

/* The bytes of the section `name` of a 64-bit ELF file. */
static const uint8_t *elf_section(const uint8_t *elf, size_t len, const char *name, size_t *size)
{
	const Elf64_Ehdr *eh = (const Elf64_Ehdr *)elf;
	const Elf64_Shdr *sh, *strtab;

	CHECK(len >= sizeof(*eh) && memcmp(eh->e_ident, ELFMAG, SELFMAG) == 0);
	CHECK(eh->e_ident[EI_CLASS] == ELFCLASS64 && eh->e_shentsize == sizeof(Elf64_Shdr));
	CHECK(eh->e_shoff + (uint64_t)eh->e_shnum * sizeof(*sh) <= len && eh->e_shstrndx < eh->e_shnum);
	sh = (const Elf64_Shdr *)(elf + eh->e_shoff);
	strtab = &sh[eh->e_shstrndx];
	for (unsigned i = 0; i < eh->e_shnum; i++) {
		const char *sname = (const char *)elf + strtab->sh_offset + sh[i].sh_name;

		if (strcmp(sname, name) == 0) {
			CHECK(sh[i].sh_offset + sh[i].sh_size <= len);
			*size = sh[i].sh_size;
			return elf + sh[i].sh_offset;
		}
	}
	return NULL;
}

/* dlsyms the sim's name for every kernel of one fatbin container; returns the kernel count. */
static size_t check_fatbin(void *lib, const char *program, const uint8_t *fatbin, size_t len)
{
	struct crc_modinfo mi;

	CHECK_EQ_INT(crc_modinfo_from_image(fatbin, len, 90, &mi), 0);
	for (size_t k = 0; k < mi.nkernels; k++) {
		const char *name = mi.kernels[k].name;
		char symbol[512], *p = symbol + sprintf(symbol, "crcuda_sim_kernel_");

		for (const char *c = name; *c; c++) {
			CHECK(p < symbol + sizeof(symbol) - 5);
			if (isalnum((unsigned char)*c) || *c == '_')
				*p++ = *c;
			else
				p += sprintf(p, "_x%02x", (unsigned char)*c);
		}
		*p = '\0';
		if (!dlsym(lib, symbol)) {
			fprintf(stderr, "%s: kernel %s: no %s in the kernel library\n", program, name,
				symbol);
			exit(1);
		}
		printf("%s: %s -> %s\n", program, name, symbol);
	}
	size_t n = mi.nkernels;
	crc_modinfo_free(&mi);
	return n;
}

int main(int argc, char **argv)
{
	void *lib;

	if (argc < 3) {
		fprintf(stderr, "usage: %s KERNEL_LIBRARY PROGRAM...\n", argv[0]);
		return 2;
	}
	lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		fprintf(stderr, "dlopen %s: %s\n", argv[1], dlerror());
		return 1;
	}
	for (int a = 2; a < argc; a++) {
		size_t len, size, kernels = 0, containers = 0;
		uint8_t *elf = read_file(argv[a], &len);
		const uint8_t *sec = elf_section(elf, len, ".nv_fatbin", &size);

		CHECK(sec);
		/* One container per translation unit, each padded to 8 bytes. */
		for (size_t off = 0; off + 16 <= size;) {
			uint32_t magic;
			uint16_t header;
			uint64_t body;

			memcpy(&magic, sec + off, 4);
			if (magic != CRC_FATBIN_MAGIC) {
				off += 8;
				continue;
			}
			memcpy(&header, sec + off + 6, 2);
			memcpy(&body, sec + off + 8, 8);
			CHECK(off + header + body <= size);
			kernels += check_fatbin(lib, argv[a], sec + off, header + body);
			containers++;
			off += header + body;
		}
		CHECK(containers >= 1);
		CHECK(kernels >= 1);
		free(elf);
	}
	dlclose(lib);
	printf("unit_cudart_sim_kernels: PASS\n");
	return 0;
}
