/* Robustness: truncations, header byte flips and random mutations of real images must give errors
 * (or, for harmless changes, consistent results), never a crash or an out-of-bounds read (run it
 * under the ASan build). Each trial copies the bytes into an exactly sized heap buffer.
 * CRC_MUTATE_ITERS (default 3000) random mutations per image; CRC_MUTATE_SEED picks the sequence. */
#include <stdint.h>

#include "crcuda/errno.h"
#include "crcuda/log.h"
#include "crcuda/modimage.h"
#include "util.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
	uint64_t x = rng_state;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return rng_state = x;
}

static int collect(const struct crc_fatbin_entry *e, void *arg)
{
	(void)arg;
	void *d;
	size_t n;
	if (!crc_fatbin_entry_data(e, &d, &n)) {
		CHECK(n == e->uncompressed_size || !(e->flags & CRC_FATBIN_FLAG_COMPRESSED));
		struct crc_modinfo mi;
		if (e->kind == CRC_FATBIN_KIND_ELF && !crc_modinfo_from_cubin(d, n, &mi))
			crc_modinfo_free(&mi);
		if (e->kind == CRC_FATBIN_KIND_PTX && !crc_modinfo_from_ptx(d, n, &mi))
			crc_modinfo_free(&mi);
		free(d);
	}
	return 0;
}

/* Runs every parser over (b, len); returns identify's result. */
static int exercise(const unsigned char *b, size_t len)
{
	struct crc_modimage_kind k;
	struct crc_modinfo mi;
	int ret = crc_modimage_identify_buf(b, len, &k);
	if (!ret) {
		CHECK(k.size <= len);
		CHECK(k.type != CRC_MODIMAGE_UNKNOWN);
	}
	if (!crc_modinfo_from_image(b, len, 90, &mi)) {
		for (size_t i = 0; i < mi.nkernels; i++)
			CHECK(mi.kernels[i].name);
		crc_modinfo_free(&mi);
	}
	if (!crc_modinfo_from_image(b, len, 0, &mi))
		crc_modinfo_free(&mi);
	if (!crc_modinfo_from_cubin(b, len, &mi))
		crc_modinfo_free(&mi);
	if (!crc_modinfo_from_ptx((const char *)b, len, &mi))
		crc_modinfo_free(&mi);
	crc_fatbin_walk(b, len, collect, NULL);
	return ret;
}

static int trial(const unsigned char *src, size_t len)
{
	unsigned char *b = malloc(len ? len : 1);
	CHECK(b);
	memcpy(b, src, len);
	int ret = exercise(b, len);
	free(b);
	return ret;
}

static void mutate_image(const char *name, const unsigned char *img, size_t len, bool must_fail_truncated,
			 long iters)
{
	size_t step = len > 20000 ? len / 20000 + 1 : 1;
	long runs = 0;
	/* Every (or every step-th) truncation. */
	for (size_t l = 0; l < len; l += step, runs++) {
		int ret = trial(img, l);
		if (must_fail_truncated && ret == 0) {
			fprintf(stderr, "%s truncated to %zu bytes was accepted\n", name, l);
			exit(1);
		}
	}
	/* Each of the first 512 bytes (the headers) with several flips. */
	unsigned char *m = malloc(len);
	CHECK(m);
	static const unsigned char flips[] = {0x01, 0x80, 0xff, 0x10};
	for (size_t i = 0; i < len && i < 512; i++)
		for (size_t f = 0; f < sizeof(flips); f++, runs++) {
			memcpy(m, img, len);
			m[i] ^= flips[f];
			trial(m, len);
		}
	/* Random mutations: 1..8 bytes set to random or boundary values, anywhere. */
	static const unsigned char special[] = {0x00, 0xff, 0x7f, 0x80, 0x01, 0x40};
	for (long it = 0; it < iters; it++, runs++) {
		memcpy(m, img, len);
		int nmut = 1 + (int)(rnd() % 8);
		for (int j = 0; j < nmut; j++) {
			size_t pos = rnd() % len;
			if (rnd() % 3 == 0 && len > 1024)
				pos = rnd() % 1024; /* favour the headers */
			m[pos] = rnd() % 2 ? (unsigned char)rnd() : special[rnd() % sizeof(special)];
		}
		size_t l = rnd() % 8 == 0 ? rnd() % (len + 1) : len;
		trial(m, l);
	}
	free(m);
	fprintf(stderr, "%s: %ld trials\n", name, runs);
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s IMAGE_DIR\n", argv[0]);
		return 2;
	}
	const char *e = getenv("CRC_MUTATE_ITERS");
	long iters = e ? atol(e) : 3000;
	e = getenv("CRC_MUTATE_SEED");
	if (e && atoll(e))
		rng_state = (uint64_t)atoll(e);
	/* Thousands of expected pr_err lines: keep them out of the test log. */
	CHECK_EQ_INT(crc_log_set_file("/dev/null"), 0);

	static const struct {
		const char *file;
		bool must_fail_truncated;
	} imgs[] = {
	    {"plain.fatbin", true}, {"default.fatbin", true}, {"speed.fatbin", true}, {"all.fatbin", true},
	    {"multi.fatbin", true}, {"kernels.cubin", true},  {"kernels.ptx", false},
	};
	for (size_t i = 0; i < sizeof(imgs) / sizeof(imgs[0]); i++) {
		size_t len;
		unsigned char *img = mi_read(argv[1], imgs[i].file, &len);
		if (strstr(imgs[i].file, ".ptx"))
			len++; /* keep the NUL */
		CHECK_EQ_INT(trial(img, len), 0);
		mutate_image(imgs[i].file, img, len, imgs[i].must_fail_truncated, iters);
		free(img);
	}
	crc_log_set_file(NULL);
	fprintf(stderr, "unit_modimage_mutate: ok\n");
	return 0;
}
