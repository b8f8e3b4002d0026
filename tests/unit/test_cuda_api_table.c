/* The driver API table against the stub libcuda.so of the CUDA toolkit (argv[1]): every function it
 * exports has exactly one entry and nothing else does (but the graphics-interop rows, which some stubs lack);
 * the table is sorted and unique; every entry has a signature and a consistent parent, base and variant;
 * every unsupported row, and no other, has a reason. The stub's ELF .dynsym is read directly. */
#include <elf.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "crcuda/cuda_api.h"

static const char *const sigs[CRC_CU_COUNT] = {
#define CRC_CU_API(sym, parent, base, version, policy, pt, ret, params, args)                                \
	[CRC_CU_##sym] = #ret " " #params " " #args,
#include "crcuda/cuda_api.def"
#undef CRC_CU_API
};

/* The reasons of the unsupported rows (libcrcuda's warning quotes them). */
static const char *const why[CRC_CU_COUNT] = {
#define CRC_CU_WHY(sym, text) [CRC_CU_##sym] = text,
#include "crcuda/cuda_api_why.def"
#undef CRC_CU_WHY
};

/* Defined global/weak functions of the ELF64 file's .dynsym, as `nm -D --defined-only` lists them. */
static char **elf_exports(const char *path, int *count)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct stat st;
	const unsigned char *map;
	const Elf64_Ehdr *eh;
	const Elf64_Shdr *sh;
	char **names = NULL;
	int n = 0;

	if (fd < 0) {
		perror(path);
		exit(1);
	}
	CHECK(fstat(fd, &st) == 0 && st.st_size > (off_t)sizeof(Elf64_Ehdr));
	map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	CHECK(map != MAP_FAILED);
	close(fd);
	eh = (const Elf64_Ehdr *)map;
	CHECK(!memcmp(eh->e_ident, ELFMAG, SELFMAG) && eh->e_ident[EI_CLASS] == ELFCLASS64);
	CHECK(eh->e_shoff + (Elf64_Off)eh->e_shnum * sizeof(Elf64_Shdr) <= (Elf64_Off)st.st_size);
	sh = (const Elf64_Shdr *)(map + eh->e_shoff);
	for (int i = 0; i < eh->e_shnum; i++) {
		const Elf64_Shdr *strsh;
		const Elf64_Sym *syms;
		const char *strs;

		if (sh[i].sh_type != SHT_DYNSYM)
			continue;
		CHECK(sh[i].sh_link < eh->e_shnum && sh[i].sh_entsize == sizeof(Elf64_Sym));
		strsh = &sh[sh[i].sh_link];
		CHECK(sh[i].sh_offset + sh[i].sh_size <= (Elf64_Off)st.st_size);
		CHECK(strsh->sh_offset + strsh->sh_size <= (Elf64_Off)st.st_size);
		syms = (const Elf64_Sym *)(map + sh[i].sh_offset);
		strs = (const char *)(map + strsh->sh_offset);
		for (size_t j = 0; j < sh[i].sh_size / sizeof(Elf64_Sym); j++) {
			int bind = ELF64_ST_BIND(syms[j].st_info);

			if (ELF64_ST_TYPE(syms[j].st_info) != STT_FUNC || syms[j].st_shndx == SHN_UNDEF ||
			    (bind != STB_GLOBAL && bind != STB_WEAK))
				continue;
			CHECK(syms[j].st_name < strsh->sh_size);
			names = realloc(names, (size_t)(n + 1) * sizeof(*names));
			CHECK(names);
			names[n] = strdup(strs + syms[j].st_name);
			CHECK(names[n]);
			n++;
		}
	}
	*count = n;
	return names;
}

static int ends_with(const char *s, const char *suffix)
{
	size_t a = strlen(s), b = strlen(suffix);

	return a >= b && !strcmp(s + a - b, suffix);
}

static void check_table(void)
{
	int normal = 0, variants = 0;

	for (int i = 0; i < CRC_CU_COUNT; i++) {
		const struct crc_cu_entry *e = &crc_cu_table[i];
		const struct crc_cu_entry *p;
		size_t bn = strlen(e->base);

		CHECK(e->sym && e->base && e->version >= 2000);
		if (i > 0 && strcmp(crc_cu_table[i - 1].sym, e->sym) >= 0) {
			fprintf(stderr, "table not sorted/unique at %s after %s\n", e->sym,
				crc_cu_table[i - 1].sym);
			exit(1);
		}
		CHECK_EQ_INT(crc_cu_find(e->sym), i);
		/* every row has a signature: ret (params) (args) */
		CHECK(sigs[i] && !strncmp(sigs[i], "CUresult (", 10) && ends_with(sigs[i], ")"));
		CHECK(e->parent >= 0 && e->parent < CRC_CU_COUNT);
		p = &crc_cu_table[e->parent];
		CHECK(!strncmp(e->sym, e->base, bn) && (e->sym[bn] == '\0' || e->sym[bn] == '_'));
		CHECK(e->policy >= CRC_CU_POLICY_FORWARD && e->policy <= CRC_CU_POLICY_UNSUPPORTED);
		if (e->pt == CRC_CU_PT_NONE) {
			normal++;
			/* an unsupported row, and only one, says why */
			CHECK((e->policy == CRC_CU_POLICY_UNSUPPORTED) == (why[i] && why[i][0]));
			CHECK_EQ_INT(e->parent, i);
			CHECK(!ends_with(e->sym, "_ptds") && !ends_with(e->sym, "_ptsz"));
		} else {
			variants++;
			CHECK(e->parent != i && p->pt == CRC_CU_PT_NONE);
			CHECK(!strcmp(e->base, p->base) && e->policy == p->policy);
			CHECK(strlen(e->sym) == strlen(p->sym) + 5 &&
			      !strncmp(e->sym, p->sym, strlen(p->sym)));
			CHECK_EQ_STR(e->sym + strlen(p->sym), e->pt == CRC_CU_PT_PTDS ? "_ptds" : "_ptsz");
		}
		/* (base, version, pt) picks one symbol */
		for (int j = 0; j < i; j++)
			CHECK(strcmp(crc_cu_table[j].base, e->base) ||
			      crc_cu_table[j].version != e->version || crc_cu_table[j].pt != e->pt);
	}
	printf("%d entries: %d rows, %d per-thread variants\n", CRC_CU_COUNT, normal, variants);
}

int main(int argc, char **argv)
{
	char **exports;
	int n, missing = 0;
	unsigned char seen[CRC_CU_COUNT] = {0};

	if (argc != 2) {
		fprintf(stderr, "usage: %s path/to/stubs/libcuda.so\n", argv[0]);
		return 2;
	}
	check_table();
	exports = elf_exports(argv[1], &n);
	CHECK(n > 0);
	for (int i = 0; i < n; i++) {
		int id = crc_cu_find(exports[i]);

		if (id < 0) {
			fprintf(stderr, "%s exports %s, which common/cuda-api/cuda_driver.api lacks\n",
				argv[1], exports[i]);
			missing++;
			continue;
		}
		CHECK(!seen[id]);
		seen[id] = 1;
	}
	for (int i = 0; i < CRC_CU_COUNT; i++) {
		/* The driver exports the graphics-interop functions of cudaGL.h, cudaEGL.h and
		 * cudaVDPAU.h, which libraries look up (libnvcuvid waits forever when cuGLGetDevices_v2
		 * is missing), but some toolkits' stubs do not. */
		const char *reason = why[crc_cu_table[i].parent];

		if (!seen[i] && crc_cu_table[i].policy == CRC_CU_POLICY_UNSUPPORTED && reason &&
		    !strncmp(reason, "graphics interop (", 18))
			continue;
		if (!seen[i]) {
			fprintf(stderr, "the table has %s, which %s does not export\n", crc_cu_table[i].sym,
				argv[1]);
			missing++;
		}
	}
	CHECK_EQ_INT(missing, 0);
	CHECK(n <= CRC_CU_COUNT);
	printf("%s: %d exported functions, all in the table\n", argv[1], n);
	for (int i = 0; i < n; i++)
		free(exports[i]);
	free(exports);
	return 0;
}
