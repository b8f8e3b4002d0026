/* Module image parser against real nvcc 13 output: fatbins (plain, zstd, LZ4, compress-all,
 * multi-arch), a cubin, PTX, and hand-made wrappers (version 1 and 2). */
#include <stdint.h>

#include "crcuda/errno.h"
#include "crcuda/modimage.h"
#include "util.h"

static const char *dir;

#define K_VECADD "_Z6vecaddPKfS0_Pfi"
#define K_K1	 "_Z2k1iPf1Ss"
#define K_NOARGS "noargs"

static void check_params(const struct crc_kernel *k, size_t n, const uint16_t *off, const uint16_t *size,
			 uint32_t total)
{
	CHECK(k);
	CHECK_EQ_INT(k->nparams, n);
	for (size_t i = 0; i < n; i++) {
		CHECK_EQ_INT(k->params[i].ordinal, i);
		CHECK_EQ_INT(k->params[i].offset, off[i]);
		CHECK_EQ_INT(k->params[i].size, size[i]);
	}
	CHECK_EQ_INT(k->param_total, total);
}

static void check_kernels(const struct crc_modinfo *mi)
{
	CHECK_EQ_INT(mi->nkernels, 3);
	static const uint16_t va_off[] = {0, 8, 16, 24}, va_size[] = {8, 8, 8, 4};
	static const uint16_t k1_off[] = {0, 8, 16, 40}, k1_size[] = {4, 8, 24, 2};
	check_params(crc_modinfo_kernel(mi, K_VECADD), 4, va_off, va_size, 28);
	check_params(crc_modinfo_kernel(mi, K_K1), 4, k1_off, k1_size, 42);
	check_params(crc_modinfo_kernel(mi, K_NOARGS), 0, NULL, NULL, 0);
	CHECK(!crc_modinfo_kernel(mi, "_Z6vecadd"));
}

static void check_globals(const struct crc_modinfo *mi, bool from_elf)
{
	CHECK_EQ_INT(mi->nglobals, 4);
	const struct crc_global *counter = crc_modinfo_global(mi, "counter");
	const struct crc_global *coeffs = crc_modinfo_global(mi, "coeffs");
	const struct crc_global *big = crc_modinfo_global(mi, "big");
	const struct crc_global *mval = crc_modinfo_global(mi, "mval");
	CHECK(counter && coeffs && big && mval);
	CHECK_EQ_INT(counter->size, 4);
	CHECK_EQ_INT(coeffs->size, 64);
	CHECK_EQ_INT(big->size, 8192);
	CHECK_EQ_INT(mval->size, 4);
	CHECK(mval->managed && !counter->managed && !coeffs->managed && !big->managed);
	CHECK_EQ_INT(coeffs->space, CRC_GLOBAL_CONST);
	CHECK_EQ_INT(coeffs->bank, 3);
	if (!from_elf) {
		CHECK_EQ_INT(counter->space, CRC_GLOBAL_INIT);
		return;
	}
	CHECK_EQ_INT(counter->space, CRC_GLOBAL_INIT);
	CHECK_EQ_STR(counter->section, ".nv.global.init");
	CHECK_EQ_INT(mval->space, CRC_GLOBAL_INIT);
	CHECK_EQ_INT(big->space, CRC_GLOBAL_ZEROINIT);
	CHECK_EQ_STR(big->section, ".nv.global");
	CHECK_EQ_STR(coeffs->section, ".nv.constant3");
	CHECK(!big->init);
	CHECK(counter->init && mval->init && coeffs->init);
	int iv;
	memcpy(&iv, counter->init, 4);
	CHECK_EQ_INT(iv, 5);
	memcpy(&iv, mval->init, 4);
	CHECK_EQ_INT(iv, 7);
	for (int i = 0; i < 16; i++) {
		float f;
		memcpy(&f, coeffs->init + 4 * i, 4);
		CHECK(f == (float)(i + 1));
	}
}

static void check_cubin_info(const struct crc_modinfo *mi)
{
	CHECK_EQ_INT(mi->source, CRC_MODIMAGE_ELF);
	CHECK_EQ_INT(mi->sm, 90);
	check_kernels(mi);
	check_globals(mi, true);
}

static void check_ptx_info(const struct crc_modinfo *mi)
{
	CHECK_EQ_INT(mi->source, CRC_MODIMAGE_PTX);
	CHECK_EQ_INT(mi->sm, 90);
	check_kernels(mi);
	check_globals(mi, false);
}

static void test_cubin(void)
{
	size_t len;
	unsigned char *b = mi_read(dir, "kernels.cubin", &len);
	struct crc_modimage_kind k;
	CHECK_EQ_INT(crc_modimage_identify_buf(b, len, &k), 0);
	CHECK_EQ_INT(k.type, CRC_MODIMAGE_ELF);
	CHECK_EQ_INT(k.size, len);
	CHECK(k.data == b);
	CHECK_EQ_INT(crc_modimage_identify(b, &k), 0);
	CHECK_EQ_INT(k.size, len);
	struct crc_modinfo mi;
	CHECK_EQ_INT(crc_modinfo_from_cubin(b, len, &mi), 0);
	check_cubin_info(&mi);
	/* EIATTR_PARAM_CBANK: the parameters start at 0x210 in bank 0 on sm_90. */
	CHECK_EQ_INT(crc_modinfo_kernel(&mi, K_K1)->param_cbank_off, 0x210);
	crc_modinfo_free(&mi);
	CHECK_EQ_INT(crc_modinfo_from_image(b, CRC_MODIMAGE_UNBOUNDED, 90, &mi), 0);
	check_cubin_info(&mi);
	crc_modinfo_free(&mi);
	free(b);
}

static void test_ptx(void)
{
	size_t len;
	unsigned char *b = mi_read(dir, "kernels.ptx", &len); /* mi_read appends a NUL */
	struct crc_modimage_kind k;
	CHECK_EQ_INT(crc_modimage_identify_buf(b, len + 1, &k), 0);
	CHECK_EQ_INT(k.type, CRC_MODIMAGE_PTX);
	CHECK_EQ_INT(k.size, len + 1);
	CHECK_EQ_INT(crc_modimage_identify_buf(b, len, &k), CRC_ECORRUPT); /* no NUL inside */
	CHECK_EQ_INT(crc_modimage_identify(b, &k), 0);
	CHECK_EQ_INT(k.size, strlen((char *)b) + 1);
	struct crc_modinfo mi;
	CHECK_EQ_INT(crc_modinfo_from_ptx((char *)b, len, &mi), 0);
	check_ptx_info(&mi);
	crc_modinfo_free(&mi);
	CHECK_EQ_INT(crc_modinfo_from_image(b, CRC_MODIMAGE_UNBOUNDED, 90, &mi), 0);
	check_ptx_info(&mi);
	crc_modinfo_free(&mi);

	/* Hand-written PTX: comments, vectors, .ptr, explicit alignment, no parameter list. */
	static const char txt[] =
	    "// c\n.version 9.0\n.target sm_80\n.address_size 64\n"
	    "/* .entry fake( */\n"
	    ".visible .entry a(.param .u8 x, .param .v2 .f32 v, .param .u64 .ptr .global .align 16 p,\n"
	    "  .param .align 4 .b8 s[6], .param .b16 h[3])\n.maxntid 128, 1, 1\n{ ret; }\n"
	    ".entry b { ret; }\n"
	    ".extern .global .align 4 .b8 ext[];\n"
	    ".func (.param .b32 r) f(.param .b32 q) { ret; }\n"
	    ".visible .const .align 8 .u64 tab[3] = {1, 2, 3};\n";
	CHECK_EQ_INT(crc_modinfo_from_ptx(txt, sizeof(txt) - 1, &mi), 0);
	CHECK_EQ_INT(mi.sm, 80);
	CHECK_EQ_INT(mi.nkernels, 2);
	static const uint16_t a_off[] = {0, 8, 16, 24, 30}, a_size[] = {1, 8, 8, 6, 6};
	check_params(crc_modinfo_kernel(&mi, "a"), 5, a_off, a_size, 36);
	check_params(crc_modinfo_kernel(&mi, "b"), 0, NULL, NULL, 0);
	CHECK_EQ_INT(mi.nglobals, 2);
	CHECK_EQ_INT(crc_modinfo_global(&mi, "tab")->size, 24);
	CHECK_EQ_INT(crc_modinfo_global(&mi, "ext")->size, 0);
	crc_modinfo_free(&mi);
	free(b);
}

struct fatbin_expect {
	const char *file;
	uint64_t ptx_comp, elf_comp; /* expected compression flag of each entry */
};

/* Content of the entry of `kind` in a fatbin, decompressed. */
static void *entry_content(const unsigned char *b, size_t len, int kind, size_t *n, uint64_t *flags)
{
	struct crc_fatbin_entry *e;
	size_t ne;
	void *out = NULL;
	CHECK_EQ_INT(crc_fatbin_entries(b, len, &e, &ne), 0);
	for (size_t i = 0; i < ne; i++) {
		if (e[i].kind != kind)
			continue;
		CHECK_EQ_INT(crc_fatbin_entry_data(&e[i], &out, n), 0);
		*flags = e[i].flags;
		break;
	}
	free(e);
	CHECK(out);
	return out;
}

static void test_fatbins(void)
{
	static const struct fatbin_expect ex[] = {
	    {"plain.fatbin", 0, 0},
	    {"default.fatbin", CRC_FATBIN_FLAG_COMPRESS_ZSTD, 0},
	    {"size.fatbin", CRC_FATBIN_FLAG_COMPRESS_ZSTD, CRC_FATBIN_FLAG_COMPRESS_ZSTD},
	    {"speed.fatbin", CRC_FATBIN_FLAG_COMPRESS_LZ4, 0},
	    {"all.fatbin", CRC_FATBIN_FLAG_COMPRESS_ZSTD, CRC_FATBIN_FLAG_COMPRESS_ZSTD},
	};
	size_t plen;
	unsigned char *plain = mi_read(dir, "plain.fatbin", &plen);
	size_t ref_ptx_n, ref_elf_n;
	uint64_t fl;
	char *ref_ptx = entry_content(plain, plen, CRC_FATBIN_KIND_PTX, &ref_ptx_n, &fl);
	unsigned char *ref_elf = entry_content(plain, plen, CRC_FATBIN_KIND_ELF, &ref_elf_n, &fl);

	for (size_t t = 0; t < sizeof(ex) / sizeof(ex[0]); t++) {
		size_t len;
		unsigned char *b = mi_read(dir, ex[t].file, &len);
		fprintf(stderr, "%s: %zu bytes\n", ex[t].file, len);
		struct crc_modimage_kind k;
		CHECK_EQ_INT(crc_modimage_identify_buf(b, len, &k), 0);
		CHECK_EQ_INT(k.type, CRC_MODIMAGE_FATBIN);
		CHECK_EQ_INT(k.size, len);
		CHECK_EQ_INT(crc_modimage_identify(b, &k), 0);
		CHECK_EQ_INT(k.size, len);

		struct crc_fatbin_entry *e;
		size_t ne;
		CHECK_EQ_INT(crc_fatbin_entries(b, len, &e, &ne), 0);
		CHECK_EQ_INT(ne, 2);
		for (size_t i = 0; i < ne; i++) {
			CHECK_EQ_INT(e[i].sm, 90);
			CHECK(e[i].flags & CRC_FATBIN_FLAG_64BIT);
			uint64_t comp = e[i].flags & CRC_FATBIN_FLAG_COMPRESSED;
			CHECK_EQ_INT(comp,
				     e[i].kind == CRC_FATBIN_KIND_PTX ? ex[t].ptx_comp : ex[t].elf_comp);
			CHECK(e[i].payload_offset + e[i].payload_size <= len);
			if (comp)
				CHECK(e[i].data_size < e[i].uncompressed_size);
		}
		free(e);
		size_t n;
		char *ptx = entry_content(b, len, CRC_FATBIN_KIND_PTX, &n, &fl);
		/* Uncompressed entries carry nvcc's padding (NULs) after the text. */
		CHECK(n <= ref_ptx_n && n >= ref_ptx_n - 16);
		CHECK_EQ_INT(strnlen(ptx, n), strnlen(ref_ptx, ref_ptx_n));
		CHECK(!memcmp(ptx, ref_ptx, strnlen(ptx, n)));
		CHECK(strstr(ptx, ".entry " K_VECADD "("));
		free(ptx);
		unsigned char *elf = entry_content(b, len, CRC_FATBIN_KIND_ELF, &n, &fl);
		CHECK(n >= ref_elf_n - 8 && n <= ref_elf_n);
		CHECK(!memcmp(elf, ref_elf, n));
		free(elf);

		struct crc_modinfo mi;
		CHECK_EQ_INT(crc_modinfo_from_image(b, len, 90, &mi), 0);
		check_cubin_info(&mi);
		crc_modinfo_free(&mi);
		CHECK_EQ_INT(crc_modinfo_from_image(b, CRC_MODIMAGE_UNBOUNDED, 0, &mi), 0);
		check_cubin_info(&mi);
		crc_modinfo_free(&mi);
		/* sm_100: no compatible SASS (other major), so the compute_90 PTX */
		CHECK_EQ_INT(crc_modinfo_from_image(b, len, 100, &mi), 0);
		check_ptx_info(&mi);
		crc_modinfo_free(&mi);
		CHECK_EQ_INT(crc_modinfo_from_image(b, len, 80, &mi), CRC_ENOTFOUND);
		free(b);
	}
	free(ref_ptx);
	free(ref_elf);
	free(plain);
}

static void test_select(void)
{
	size_t len, n, idx;
	unsigned char *b = mi_read(dir, "multi.fatbin", &len);
	struct crc_fatbin_entry *e;
	CHECK_EQ_INT(crc_fatbin_entries(b, len, &e, &n), 0);
	CHECK_EQ_INT(n, 4);
	int sm_of[4];
	for (size_t i = 0; i < n; i++) {
		sm_of[i] = (int)e[i].sm * (e[i].kind == CRC_FATBIN_KIND_PTX ? -1 : 1);
		if (e[i].sm == 90)
			CHECK(e[i].flags & CRC_FATBIN_FLAG_ARCH_SPECIFIC);
	}
	static const struct {
		uint32_t target;
		int want; /* SASS sm, or -PTX sm, or 0 for none */
	} cases[] = {
	    {90, 90}, {80, 80},	  {86, 86},   {89, 86},	 {87, 86}, {81, 80},
	    {0, 86},  {120, -75}, {100, -75}, {75, -75}, {70, 0},
	};
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		int ret = crc_fatbin_select(e, n, cases[c].target, &idx);
		if (!cases[c].want) {
			CHECK_EQ_INT(ret, CRC_ENOTFOUND);
			continue;
		}
		CHECK_EQ_INT(ret, 0);
		if (sm_of[idx] != cases[c].want)
			fprintf(stderr, "target %u: got %d\n", cases[c].target, sm_of[idx]);
		CHECK_EQ_INT(sm_of[idx], cases[c].want);
	}
	struct crc_modinfo mi;
	CHECK_EQ_INT(crc_modinfo_from_image(b, len, 89, &mi), 0);
	CHECK_EQ_INT(mi.source, CRC_MODIMAGE_ELF);
	CHECK_EQ_INT(mi.sm, 86);
	check_kernels(&mi);
	crc_modinfo_free(&mi);
	CHECK_EQ_INT(crc_modinfo_from_image(b, len, 120, &mi), 0);
	CHECK_EQ_INT(mi.source, CRC_MODIMAGE_PTX);
	CHECK_EQ_INT(mi.sm, 75);
	check_kernels(&mi);
	crc_modinfo_free(&mi);
	free(e);
	free(b);
}

struct wrapper {
	uint32_t magic, version;
	const void *data;
	const void *fatbins;
};

static void test_wrappers(void)
{
	size_t la, lb;
	unsigned char *a = mi_read(dir, "plain.fatbin", &la);
	unsigned char *b = mi_read(dir, "size.fatbin", &lb);
	struct crc_modimage_kind k;

	/* Version 1, unbounded (as the driver gets it): data may lie anywhere. */
	struct wrapper w1 = {CRC_FATBINC_MAGIC, 1, a, NULL};
	CHECK_EQ_INT(crc_modimage_identify(&w1, &k), 0);
	CHECK_EQ_INT(k.type, CRC_MODIMAGE_WRAPPER);
	CHECK_EQ_INT(k.inner, CRC_MODIMAGE_FATBIN);
	CHECK_EQ_INT(k.wrapper_version, 1);
	CHECK(k.data == a && k.wrapper == &w1);
	CHECK_EQ_INT(k.size, la);
	CHECK_EQ_INT(k.nprelinked, 0);
	/* Bounded: the data must be inside the buffer. */
	CHECK_EQ_INT(crc_modimage_identify_buf(&w1, sizeof(w1), &k), CRC_ECORRUPT);
	struct crc_modinfo mi;
	CHECK_EQ_INT(crc_modinfo_from_image(&w1, CRC_MODIMAGE_UNBOUNDED, 90, &mi), 0);
	check_cubin_info(&mi);
	crc_modinfo_free(&mi);

	/* Version 2 in one buffer: wrapper, array {b, a, NULL}, fatbin a, fatbin b. */
	size_t off_arr = sizeof(struct wrapper), off_a = off_arr + 3 * sizeof(void *), off_b = off_a + la;
	size_t total = off_b + lb;
	unsigned char *buf = malloc(total);
	CHECK(buf);
	memcpy(buf + off_a, a, la);
	memcpy(buf + off_b, b, lb);
	const void *arr[3] = {buf + off_b, buf + off_a, NULL};
	memcpy(buf + off_arr, arr, sizeof(arr));
	struct wrapper w2 = {CRC_FATBINC_MAGIC, 2, buf + off_a, buf + off_arr};
	memcpy(buf, &w2, sizeof(w2));
	CHECK_EQ_INT(crc_modimage_identify_buf(buf, total, &k), 0);
	CHECK_EQ_INT(k.wrapper_version, 2);
	CHECK(k.data == buf + off_a);
	CHECK_EQ_INT(k.size, la);
	CHECK_EQ_INT(k.nprelinked, 2);
	struct crc_modimage_kind k2;
	CHECK_EQ_INT(crc_modimage_identify_buf(buf + off_b, lb, &k2), 0);
	CHECK(k.prelinked[0] == buf + off_b);
	CHECK_EQ_INT(k2.size, lb);
	CHECK_EQ_INT(crc_modimage_identify(buf, &k), 0);
	CHECK_EQ_INT(k.nprelinked, 2);
	CHECK_EQ_INT(crc_modinfo_from_image(buf, total, 90, &mi), 0);
	check_cubin_info(&mi);
	crc_modinfo_free(&mi);
	/* The array runs off the buffer: no NULL inside. */
	CHECK_EQ_INT(crc_modimage_identify_buf(buf, off_arr + 2 * sizeof(void *), &k), CRC_ECORRUPT);
	/* Bad versions and pointers. */
	w2.version = 3;
	memcpy(buf, &w2, sizeof(w2));
	CHECK_EQ_INT(crc_modimage_identify_buf(buf, total, &k), CRC_ECORRUPT);
	w2.version = 1;
	w2.data = buf + off_a + 8;
	memcpy(buf, &w2, sizeof(w2));
	CHECK_EQ_INT(crc_modimage_identify_buf(buf, total, &k), CRC_ECORRUPT);
	free(buf);
	free(a);
	free(b);
}

static void test_misc(void)
{
	struct crc_modimage_kind k;
	static const unsigned char junk[64] = {1, 2, 3, 4, 5, 6, 7, 8};
	CHECK_EQ_INT(crc_modimage_identify_buf(junk, sizeof(junk), &k), CRC_ENOTSUP);
	CHECK_EQ_INT(crc_modimage_identify(junk, &k), CRC_ENOTSUP);
	CHECK_EQ_INT(crc_modimage_identify(NULL, &k), CRC_EINVAL);
	CHECK_EQ_INT(crc_modimage_identify_buf(junk, 3, &k), CRC_ECORRUPT);
	static const char notptx[] = "hello world, no version directive";
	CHECK_EQ_INT(crc_modimage_identify_buf(notptx, sizeof(notptx), &k), CRC_ENOTSUP);
	struct crc_modinfo mi;
	CHECK_EQ_INT(crc_modinfo_from_image(junk, sizeof(junk), 90, &mi), CRC_ENOTSUP);
	crc_modinfo_free(&mi);
	crc_modinfo_free(NULL);
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s IMAGE_DIR\n", argv[0]);
		return 2;
	}
	dir = argv[1];
	test_cubin();
	test_ptx();
	test_fatbins();
	test_select();
	test_wrappers();
	test_misc();
	fprintf(stderr, "unit_modimage: ok\n");
	return 0;
}
