/* CUDA module images: identification, fatbin walking and decompression, cubin and PTX listing.
 * See include/crcuda/modimage.h for the formats. Every read of an image goes through the bounds
 * checks below; multi-byte fields are read with memcpy (images need not be aligned). */
#define LOG_PREFIX "modimage: "
#include "crcuda/modimage.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <lz4.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include "crcuda/errno.h"
#include "crcuda/log.h"

#ifndef EM_CUDA
#define EM_CUDA 190
#endif

/* Sanity limits for values read from an image. */
#define MAX_FATBIN_ENTRIES 65536
#define MAX_PRELINKED	   65536
#define MAX_UNCOMPRESSED   (1ull << 32)
#define MAX_ELF_SECTIONS   (1u << 20)
#define MAX_PTX_PARAMS	   4096

/* nv.info attribute formats and the attributes used here. */
#define EIFMT_NVAL		1
#define EIFMT_BVAL		2
#define EIFMT_HVAL		3
#define EIFMT_SVAL		4
#define EIATTR_PARAM_CBANK	0x0a
#define EIATTR_KPARAM_INFO	0x17
#define EIATTR_CBANK_PARAM_SIZE 0x19
/* st_other bit nvcc sets on __managed__ variables (observed with nvcc 13.0). */
#define STO_CUDA_MANAGED 0x4

/* ---- bounds-checked reads ---- */

/* True when [off, off + n) lies within len, without overflow. */
static bool in_bounds(uint64_t off, uint64_t n, uint64_t len)
{
	return off <= len && n <= len - off;
}

static uint16_t get16(const uint8_t *p)
{
	uint16_t v;
	memcpy(&v, p, sizeof(v));
	return v;
}

static uint32_t get32(const uint8_t *p)
{
	uint32_t v;
	memcpy(&v, p, sizeof(v));
	return v;
}

static uint64_t get64(const uint8_t *p)
{
	uint64_t v;
	memcpy(&v, p, sizeof(v));
	return v;
}

static const void *getptr(const uint8_t *p)
{
	const void *v;
	memcpy(&v, p, sizeof(v));
	return v;
}

/* A bounded region of memory: [lo, lo + len). For the unbounded identify, len runs to the top of
 * the address space. */
struct region {
	uintptr_t lo;
	size_t len;
};

/* Offset of p within r, or false when p (with n bytes) is not inside r. */
static bool region_off(const struct region *r, const void *p, uint64_t n, size_t *off)
{
	uintptr_t a = (uintptr_t)p;
	if (!p || a < r->lo || !in_bounds(a - r->lo, n, r->len))
		return false;
	*off = a - r->lo;
	return true;
}

static const uint8_t *region_at(const struct region *r, size_t off)
{
	return (const uint8_t *)(r->lo + off);
}

/* ---- identification ---- */

/* Size of a fatbin container at b (avail bytes readable). */
static int fatbin_size(const uint8_t *b, size_t avail, size_t *size)
{
	if (avail < 16) {
		pr_err("fatbin header truncated (%zu of 16 bytes)", avail);
		return CRC_ECORRUPT;
	}
	uint32_t magic = get32(b);
	uint16_t version = get16(b + 4), hsize = get16(b + 6);
	uint64_t fsize = get64(b + 8);
	if (magic != CRC_FATBIN_MAGIC) {
		pr_err("fatbin magic is 0x%08x, not 0x%08x", magic, CRC_FATBIN_MAGIC);
		return CRC_ECORRUPT;
	}
	if (version != 1) {
		pr_err("fatbin version %u not supported", version);
		return CRC_ECORRUPT;
	}
	if (hsize < 16) {
		pr_err("fatbin headerSize %u is smaller than the header", hsize);
		return CRC_ECORRUPT;
	}
	if (!in_bounds(hsize, fsize, avail)) {
		pr_err("fatbin of %u + %llu bytes exceeds the %zu bytes available", hsize,
		       (unsigned long long)fsize, avail);
		return CRC_ECORRUPT;
	}
	*size = hsize + (size_t)fsize;
	return 0;
}

/* Size of a 64-bit ELF at b: the end of the furthest of the headers, the section header table, the
 * program header table and every section's contents. */
static int elf_size(const uint8_t *b, size_t avail, size_t *size)
{
	Elf64_Ehdr eh;
	if (avail < sizeof(eh)) {
		pr_err("ELF header truncated (%zu of %zu bytes)", avail, sizeof(eh));
		return CRC_ECORRUPT;
	}
	memcpy(&eh, b, sizeof(eh));
	if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_ident[EI_DATA] != ELFDATA2LSB) {
		pr_err("ELF class %u / data %u: only 64-bit little-endian cubins are supported",
		       eh.e_ident[EI_CLASS], eh.e_ident[EI_DATA]);
		return CRC_ECORRUPT;
	}
	uint64_t end = sizeof(eh);
	uint64_t shnum = eh.e_shnum;
	if (eh.e_shoff) {
		if (eh.e_shentsize != sizeof(Elf64_Shdr)) {
			pr_err("ELF e_shentsize %u, expected %zu", eh.e_shentsize, sizeof(Elf64_Shdr));
			return CRC_ECORRUPT;
		}
		if (!in_bounds(eh.e_shoff, sizeof(Elf64_Shdr), avail)) {
			pr_err("ELF section header table at %llu is outside the image",
			       (unsigned long long)eh.e_shoff);
			return CRC_ECORRUPT;
		}
		if (shnum == 0) { /* extended numbering: the count is in section 0's sh_size */
			Elf64_Shdr sh0;
			memcpy(&sh0, b + eh.e_shoff, sizeof(sh0));
			shnum = sh0.sh_size;
		}
		if (shnum > MAX_ELF_SECTIONS || !in_bounds(eh.e_shoff, shnum * sizeof(Elf64_Shdr), avail)) {
			pr_err("ELF section header table (%llu entries at %llu) is outside the image",
			       (unsigned long long)shnum, (unsigned long long)eh.e_shoff);
			return CRC_ECORRUPT;
		}
		if (eh.e_shoff + shnum * sizeof(Elf64_Shdr) > end)
			end = eh.e_shoff + shnum * sizeof(Elf64_Shdr);
		for (uint64_t i = 0; i < shnum; i++) {
			Elf64_Shdr sh;
			memcpy(&sh, b + eh.e_shoff + i * sizeof(sh), sizeof(sh));
			if (sh.sh_type == SHT_NOBITS || sh.sh_type == SHT_NULL)
				continue;
			if (!in_bounds(sh.sh_offset, sh.sh_size, avail)) {
				pr_err("ELF section %llu (%llu bytes at %llu) is outside the image",
				       (unsigned long long)i, (unsigned long long)sh.sh_size,
				       (unsigned long long)sh.sh_offset);
				return CRC_ECORRUPT;
			}
			if (sh.sh_offset + sh.sh_size > end)
				end = sh.sh_offset + sh.sh_size;
		}
	}
	if (eh.e_phoff && eh.e_phnum) {
		if (eh.e_phentsize != sizeof(Elf64_Phdr)) {
			pr_err("ELF e_phentsize %u, expected %zu", eh.e_phentsize, sizeof(Elf64_Phdr));
			return CRC_ECORRUPT;
		}
		uint64_t n = eh.e_phnum;
		if (!in_bounds(eh.e_phoff, n * sizeof(Elf64_Phdr), avail)) {
			pr_err("ELF program header table at %llu is outside the image",
			       (unsigned long long)eh.e_phoff);
			return CRC_ECORRUPT;
		}
		if (eh.e_phoff + n * sizeof(Elf64_Phdr) > end)
			end = eh.e_phoff + n * sizeof(Elf64_Phdr);
		for (uint64_t i = 0; i < n; i++) {
			Elf64_Phdr ph;
			memcpy(&ph, b + eh.e_phoff + i * sizeof(ph), sizeof(ph));
			if (!in_bounds(ph.p_offset, ph.p_filesz, avail)) {
				pr_err("ELF segment %llu is outside the image", (unsigned long long)i);
				return CRC_ECORRUPT;
			}
			if (ph.p_offset + ph.p_filesz > end)
				end = ph.p_offset + ph.p_filesz;
		}
	}
	*size = end;
	return 0;
}

static bool looks_like_text(uint8_t c)
{
	return c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v' || (c >= 0x20 && c < 0x7f);
}

static int ptx_size(const uint8_t *b, size_t avail, size_t *size)
{
	const uint8_t *nul = memchr(b, 0, avail);
	if (!nul) {
		pr_err("PTX text is not NUL-terminated within %zu bytes", avail);
		return CRC_ECORRUPT;
	}
	*size = (size_t)(nul - b) + 1;
	return 0;
}

static bool is_ptx(const uint8_t *b, size_t avail)
{
	/* PTX starts with text; look for the mandatory .version directive in the first 64 KiB. */
	size_t n = avail < 65536 ? avail : 65536;
	if (!n || !looks_like_text(b[0]))
		return false;
	for (size_t i = 0; i < n && b[i]; i++) {
		if (!looks_like_text(b[i]))
			return false;
		if (b[i] == '.' && n - i >= 8 && !memcmp(b + i, ".version", 8))
			return true;
	}
	return false;
}

/* Identifies the image at p inside region r (r->len is what may be read from r->lo). */
static int identify_in(const struct region *r, const void *p, struct crc_modimage_kind *out)
{
	size_t off;
	memset(out, 0, sizeof(*out));
	if (!region_off(r, p, 4, &off)) {
		pr_err("image of fewer than 4 bytes");
		return CRC_ECORRUPT;
	}
	const uint8_t *b = region_at(r, off);
	size_t avail = r->len - off;
	uint32_t magic = get32(b);
	int ret;

	if (magic == CRC_FATBINC_MAGIC) {
		/* { u32 magic; u32 version; const void *data; void *filename_or_fatbins; } */
		if (avail < 8 + 2 * sizeof(void *)) {
			pr_err("fatbin wrapper truncated (%zu bytes)", avail);
			return CRC_ECORRUPT;
		}
		uint32_t version = get32(b + 4);
		const void *data = getptr(b + 8), *aux = getptr(b + 8 + sizeof(void *));
		if (version != 1 && version != 2) {
			pr_err("fatbin wrapper version %u not supported", version);
			return CRC_ECORRUPT;
		}
		size_t doff;
		if (!region_off(r, data, 16, &doff)) {
			pr_err("fatbin wrapper data pointer %p is %s", data,
			       data ? "outside the image" : "NULL");
			return CRC_ECORRUPT;
		}
		if (get32(region_at(r, doff)) != CRC_FATBIN_MAGIC) {
			pr_err("fatbin wrapper data does not start with the fatbin magic (0x%08x)",
			       get32(region_at(r, doff)));
			return CRC_ECORRUPT;
		}
		ret = fatbin_size(region_at(r, doff), r->len - doff, &out->size);
		if (ret)
			return ret;
		out->type = CRC_MODIMAGE_WRAPPER;
		out->inner = CRC_MODIMAGE_FATBIN;
		out->data = data;
		out->wrapper = p;
		out->wrapper_version = version;
		if (version == 2 && aux) {
			size_t aoff, n = 0;
			for (;; n++) {
				if (n >= MAX_PRELINKED) {
					pr_err("prelinked fatbin array has no NULL within %d entries",
					       MAX_PRELINKED);
					return CRC_ECORRUPT;
				}
				if (!region_off(r, (const uint8_t *)aux + n * sizeof(void *), sizeof(void *),
						&aoff)) {
					pr_err("prelinked fatbin array entry %zu is outside the image", n);
					return CRC_ECORRUPT;
				}
				const void *fb = getptr(region_at(r, aoff));
				if (!fb)
					break;
				size_t foff, fsz;
				if (!region_off(r, fb, 16, &foff)) {
					pr_err("prelinked fatbin %zu at %p is outside the image", n, fb);
					return CRC_ECORRUPT;
				}
				ret = fatbin_size(region_at(r, foff), r->len - foff, &fsz);
				if (ret) {
					pr_err("prelinked fatbin %zu is not a fatbin", n);
					return ret;
				}
			}
			out->prelinked = aux;
			out->nprelinked = n;
		}
		return 0;
	}
	out->data = p;
	if (magic == CRC_FATBIN_MAGIC) {
		out->type = CRC_MODIMAGE_FATBIN;
		return fatbin_size(b, avail, &out->size);
	}
	if (!memcmp(b, ELFMAG, SELFMAG)) {
		out->type = CRC_MODIMAGE_ELF;
		return elf_size(b, avail, &out->size);
	}
	if (is_ptx(b, avail)) {
		out->type = CRC_MODIMAGE_PTX;
		return ptx_size(b, avail, &out->size);
	}
	out->data = NULL;
	pr_err("unrecognised module image (first word 0x%08x)", magic);
	return CRC_ENOTSUP;
}

int crc_modimage_identify(const void *image, struct crc_modimage_kind *out)
{
	if (!image || !out)
		return CRC_EINVAL;
	/* No length: the whole address space may be read (a wrapper's data usually lies below it). */
	struct region r = {.lo = 0, .len = UINTPTR_MAX};
	return identify_in(&r, image, out);
}

int crc_modimage_identify_buf(const void *buf, size_t len, struct crc_modimage_kind *out)
{
	if (!buf || !out)
		return CRC_EINVAL;
	struct region r = {.lo = (uintptr_t)buf, .len = len};
	return identify_in(&r, buf, out);
}

/* ---- fatbin containers ---- */

int crc_fatbin_walk(const void *fatbin, size_t len, int (*cb)(const struct crc_fatbin_entry *e, void *arg),
		    void *arg)
{
	if (!fatbin || !cb)
		return CRC_EINVAL;
	const uint8_t *b = fatbin;
	size_t total;
	int ret = fatbin_size(b, len, &total);
	if (ret)
		return ret;
	size_t off = get16(b + 6), n = 0;
	while (off < total) {
		if (++n > MAX_FATBIN_ENTRIES) {
			pr_err("fatbin has more than %d entries", MAX_FATBIN_ENTRIES);
			return CRC_ECORRUPT;
		}
		if (!in_bounds(off, 64, total)) {
			pr_err("fatbin entry header at %zu truncated (%zu bytes left)", off, total - off);
			return CRC_ECORRUPT;
		}
		const uint8_t *h = b + off;
		struct crc_fatbin_entry e = {
		    .kind = get16(h),
		    .version = get16(h + 2),
		    .header_size = get32(h + 4),
		    .payload_size = get64(h + 8),
		    .minor = get16(h + 24),
		    .major = get16(h + 26),
		    .sm = get32(h + 28),
		    .flags = get64(h + 40),
		    .offset = off,
		};
		uint32_t csize = get32(h + 16);
		uint64_t usize = get64(h + 56);
		if (e.header_size < 64 || !in_bounds(off, e.header_size, total)) {
			pr_err("fatbin entry at %zu: header size %u invalid", off, e.header_size);
			return CRC_ECORRUPT;
		}
		e.payload_offset = off + e.header_size;
		if (!in_bounds(e.payload_offset, e.payload_size, total)) {
			pr_err("fatbin entry at %zu: payload of %llu bytes runs past the container end (%zu)",
			       off, (unsigned long long)e.payload_size, total);
			return CRC_ECORRUPT;
		}
		e.payload = b + e.payload_offset;
		uint64_t comp = e.flags & CRC_FATBIN_FLAG_COMPRESSED;
		if (comp == CRC_FATBIN_FLAG_COMPRESSED) {
			pr_err("fatbin entry at %zu: flags 0x%llx claim both LZ4 and zstd", off,
			       (unsigned long long)e.flags);
			return CRC_ECORRUPT;
		}
		if (comp) {
			if (!csize || csize > e.payload_size) {
				pr_err("fatbin entry at %zu: compressed size %u invalid (payload %llu)", off,
				       csize, (unsigned long long)e.payload_size);
				return CRC_ECORRUPT;
			}
			if (!usize || usize > MAX_UNCOMPRESSED) {
				pr_err("fatbin entry at %zu: uncompressed size %llu invalid", off,
				       (unsigned long long)usize);
				return CRC_ECORRUPT;
			}
			e.data_size = csize;
			e.uncompressed_size = usize;
		} else {
			e.data_size = e.payload_size;
			e.uncompressed_size = e.payload_size;
		}
		ret = cb(&e, arg);
		if (ret)
			return ret;
		off = e.payload_offset + e.payload_size;
	}
	return 0;
}

struct entry_vec {
	struct crc_fatbin_entry *v;
	size_t n, cap;
};

static int collect_entry(const struct crc_fatbin_entry *e, void *arg)
{
	struct entry_vec *ev = arg;
	if (ev->n == ev->cap) {
		size_t cap = ev->cap ? ev->cap * 2 : 8;
		void *nv = realloc(ev->v, cap * sizeof(*ev->v));
		if (!nv)
			return CRC_ENOMEM;
		ev->v = nv;
		ev->cap = cap;
	}
	ev->v[ev->n++] = *e;
	return 0;
}

int crc_fatbin_entries(const void *fatbin, size_t len, struct crc_fatbin_entry **out, size_t *n)
{
	if (!out || !n)
		return CRC_EINVAL;
	struct entry_vec ev = {0};
	int ret = crc_fatbin_walk(fatbin, len, collect_entry, &ev);
	if (ret) {
		free(ev.v);
		return ret;
	}
	*out = ev.v;
	*n = ev.n;
	return 0;
}

int crc_fatbin_entry_data(const struct crc_fatbin_entry *e, void **out, size_t *len)
{
	if (!e || !out || !len || (!e->payload && e->data_size))
		return CRC_EINVAL;
	uint64_t comp = e->flags & CRC_FATBIN_FLAG_COMPRESSED;
	size_t n = comp ? e->uncompressed_size : e->data_size;
	if (comp && (e->uncompressed_size > MAX_UNCOMPRESSED || e->data_size > INT_MAX)) {
		pr_err("fatbin entry at %zu: sizes out of range", e->offset);
		return CRC_ECORRUPT;
	}
	/* Check the claimed size against the compressed data before allocating it. */
	if (comp == CRC_FATBIN_FLAG_COMPRESS_LZ4 && (n > INT_MAX || n / 255 > e->data_size + 16)) {
		pr_err("fatbin entry at %zu: %llu LZ4 bytes cannot expand to %zu", e->offset,
		       (unsigned long long)e->data_size, n);
		return CRC_ECORRUPT;
	}
	if (comp == CRC_FATBIN_FLAG_COMPRESS_ZSTD) {
		unsigned long long fcs = ZSTD_getFrameContentSize(e->payload, e->data_size);
		if (fcs == ZSTD_CONTENTSIZE_ERROR || (fcs != ZSTD_CONTENTSIZE_UNKNOWN && fcs != n) ||
		    (fcs == ZSTD_CONTENTSIZE_UNKNOWN && n / 1024 > e->data_size)) {
			pr_err("fatbin entry at %zu: zstd frame header invalid or its size (%llu) is not %zu",
			       e->offset, fcs, n);
			return CRC_ECORRUPT;
		}
	}
	uint8_t *buf = malloc(n ? n : 1);
	if (!buf)
		return CRC_ENOMEM;
	if (comp == CRC_FATBIN_FLAG_COMPRESS_LZ4) {
		if (LZ4_decompress_safe((const char *)e->payload, (char *)buf, (int)e->data_size, (int)n) !=
		    (int)n) {
			pr_err("fatbin entry at %zu: LZ4 data (%llu bytes) does not decompress to %zu bytes",
			       e->offset, (unsigned long long)e->data_size, n);
			free(buf);
			return CRC_ECORRUPT;
		}
	} else if (comp == CRC_FATBIN_FLAG_COMPRESS_ZSTD) {
		size_t got = ZSTD_decompress(buf, n, e->payload, e->data_size);
		if (ZSTD_isError(got) || got != n) {
			pr_err("fatbin entry at %zu: zstd data does not decompress to %zu bytes (%s)",
			       e->offset, n, ZSTD_isError(got) ? ZSTD_getErrorName(got) : "short");
			free(buf);
			return CRC_ECORRUPT;
		}
	} else if (comp) {
		free(buf);
		return CRC_ECORRUPT;
	} else if (n) {
		memcpy(buf, e->payload, n);
	}
	*out = buf;
	*len = n;
	return 0;
}

int crc_fatbin_select(const struct crc_fatbin_entry *e, size_t n, uint32_t target_sm, size_t *idx)
{
	if ((!e && n) || !idx)
		return CRC_EINVAL;
	size_t best = SIZE_MAX;
	uint32_t tmaj = target_sm / 10;
	/* Pass 1: ELF. */
	for (size_t i = 0; i < n; i++) {
		if (e[i].kind != CRC_FATBIN_KIND_ELF)
			continue;
		bool specific = e[i].flags & CRC_FATBIN_FLAG_ARCH_SPECIFIC;
		uint32_t maj = e[i].sm / 10;
		if (target_sm) {
			if (e[i].sm == target_sm) {
				*idx = i;
				return 0;
			}
			if (specific || maj != tmaj || e[i].sm > target_sm)
				continue;
		} else if (specific) {
			continue;
		}
		if (best == SIZE_MAX || e[i].sm > e[best].sm)
			best = i;
	}
	if (best == SIZE_MAX) {
		/* Pass 2: PTX to JIT. */
		for (size_t i = 0; i < n; i++) {
			if (e[i].kind != CRC_FATBIN_KIND_PTX)
				continue;
			if ((e[i].flags & CRC_FATBIN_FLAG_ARCH_SPECIFIC) && e[i].sm != target_sm)
				continue;
			if (target_sm && e[i].sm > target_sm)
				continue;
			if (best == SIZE_MAX || e[i].sm > e[best].sm)
				best = i;
		}
	}
	if (best == SIZE_MAX)
		return CRC_ENOTFOUND;
	*idx = best;
	return 0;
}

/* ---- cubin ---- */

struct elf {
	const uint8_t *b;
	size_t len;
	Elf64_Ehdr eh;
	Elf64_Shdr *sh;
	size_t shnum;
	const Elf64_Shdr *shstr;
};

/* Name of section i, or NULL if its name is not a NUL-terminated string inside .shstrtab. */
static const char *sec_name(const struct elf *f, size_t i)
{
	if (!f->shstr || i >= f->shnum)
		return NULL;
	uint64_t off = f->sh[i].sh_name, size = f->shstr->sh_size;
	if (off >= size)
		return NULL;
	const char *s = (const char *)f->b + f->shstr->sh_offset + off;
	if (!memchr(s, 0, size - off))
		return NULL;
	return s;
}

static int find_section(const struct elf *f, const char *name, size_t *idx)
{
	for (size_t i = 1; i < f->shnum; i++) {
		const char *n = sec_name(f, i);
		if (n && !strcmp(n, name)) {
			*idx = i;
			return 0;
		}
	}
	return CRC_ENOTFOUND;
}

static int elf_open(struct elf *f, const void *buf, size_t len)
{
	memset(f, 0, sizeof(*f));
	size_t size;
	if (len < SELFMAG || memcmp(buf, ELFMAG, SELFMAG)) {
		pr_err("cubin does not start with the ELF magic");
		return CRC_ECORRUPT;
	}
	int ret = elf_size(buf, len, &size); /* validates the header and every section's bounds */
	if (ret)
		return ret;
	f->b = buf;
	f->len = len;
	memcpy(&f->eh, buf, sizeof(f->eh));
	if (f->eh.e_machine != EM_CUDA) {
		pr_err("ELF e_machine %u is not EM_CUDA (%u)", f->eh.e_machine, EM_CUDA);
		return CRC_ECORRUPT;
	}
	if (!f->eh.e_shoff) {
		pr_err("cubin has no section header table");
		return CRC_ECORRUPT;
	}
	f->shnum = f->eh.e_shnum;
	if (!f->shnum) {
		Elf64_Shdr sh0;
		memcpy(&sh0, f->b + f->eh.e_shoff, sizeof(sh0));
		f->shnum = sh0.sh_size;
	}
	if (!f->shnum) {
		pr_err("cubin has no sections");
		return CRC_ECORRUPT;
	}
	f->sh = malloc(f->shnum * sizeof(*f->sh));
	if (!f->sh)
		return CRC_ENOMEM;
	memcpy(f->sh, f->b + f->eh.e_shoff, f->shnum * sizeof(*f->sh));
	size_t stri = f->eh.e_shstrndx;
	if (stri == SHN_XINDEX)
		stri = f->sh[0].sh_link;
	if (stri == SHN_UNDEF || stri >= f->shnum || f->sh[stri].sh_type != SHT_STRTAB) {
		pr_err("cubin section name table index %zu invalid", stri);
		free(f->sh);
		f->sh = NULL;
		return CRC_ECORRUPT;
	}
	f->shstr = &f->sh[stri];
	return 0;
}

struct sym_table {
	const uint8_t *syms; /* Elf64_Sym array in the image */
	size_t nsyms;
	const char *str;
	uint64_t strsize;
};

static int elf_symtab(const struct elf *f, struct sym_table *st)
{
	memset(st, 0, sizeof(*st));
	for (size_t i = 1; i < f->shnum; i++) {
		const Elf64_Shdr *s = &f->sh[i];
		if (s->sh_type != SHT_SYMTAB)
			continue;
		if (s->sh_entsize != sizeof(Elf64_Sym) || s->sh_size % sizeof(Elf64_Sym)) {
			pr_err("cubin .symtab entry size %llu / size %llu invalid",
			       (unsigned long long)s->sh_entsize, (unsigned long long)s->sh_size);
			return CRC_ECORRUPT;
		}
		if (s->sh_link == 0 || s->sh_link >= f->shnum || f->sh[s->sh_link].sh_type != SHT_STRTAB) {
			pr_err("cubin .symtab string table index %u invalid", s->sh_link);
			return CRC_ECORRUPT;
		}
		st->syms = f->b + s->sh_offset;
		st->nsyms = s->sh_size / sizeof(Elf64_Sym);
		st->str = (const char *)f->b + f->sh[s->sh_link].sh_offset;
		st->strsize = f->sh[s->sh_link].sh_size;
		return 0;
	}
	return 0; /* no symbol table: no kernels, no globals */
}

static const char *sym_name(const struct sym_table *st, const Elf64_Sym *s)
{
	if (s->st_name >= st->strsize)
		return NULL;
	const char *n = st->str + s->st_name;
	if (!memchr(n, 0, st->strsize - s->st_name))
		return NULL;
	return n;
}

static int cmp_param(const void *a, const void *b)
{
	const struct crc_kparam *x = a, *y = b;
	return (x->ordinal > y->ordinal) - (x->ordinal < y->ordinal);
}

/* Fills k's parameter layout from section idx (.nv.info.<kernel>). */
static int parse_nv_info(const struct elf *f, size_t idx, struct crc_kernel *k)
{
	const Elf64_Shdr *s = &f->sh[idx];
	if (s->sh_type == SHT_NOBITS || s->sh_type == SHT_NULL) {
		pr_err("%s: .nv.info section has no contents (type %u)", k->name, s->sh_type);
		return CRC_ECORRUPT;
	}
	const uint8_t *p = f->b + s->sh_offset;
	uint64_t size = s->sh_size, i = 0, cap = 0;
	bool have_total = false;
	while (i < size) {
		if (size - i < 4) {
			pr_err("%s: attribute at %llu truncated", k->name, (unsigned long long)i);
			return CRC_ECORRUPT;
		}
		uint8_t fmt = p[i], attr = p[i + 1];
		uint16_t val = get16(p + i + 2);
		const uint8_t *v = p + i + 4;
		uint64_t vlen = 0;
		if (fmt == EIFMT_SVAL) {
			vlen = val;
			if (vlen > size - i - 4) {
				pr_err("%s: attribute 0x%02x at %llu: %llu value bytes run past the section",
				       k->name, attr, (unsigned long long)i, (unsigned long long)vlen);
				return CRC_ECORRUPT;
			}
		} else if (fmt != EIFMT_NVAL && fmt != EIFMT_BVAL && fmt != EIFMT_HVAL) {
			pr_err("%s: attribute 0x%02x at %llu has unknown format %u", k->name, attr,
			       (unsigned long long)i, fmt);
			return CRC_ECORRUPT;
		}
		if (attr == EIATTR_KPARAM_INFO) {
			if (fmt != EIFMT_SVAL || vlen < 12) {
				pr_err("%s: EIATTR_KPARAM_INFO with format %u / %llu bytes", k->name, fmt,
				       (unsigned long long)vlen);
				return CRC_ECORRUPT;
			}
			if (k->nparams == cap) {
				cap = cap ? cap * 2 : 8;
				void *np = realloc(k->params, cap * sizeof(*k->params));
				if (!np)
					return CRC_ENOMEM;
				k->params = np;
			}
			uint32_t word = get32(v + 8);
			k->params[k->nparams++] = (struct crc_kparam){
			    .ordinal = get16(v + 4),
			    .offset = get16(v + 6),
			    .size = (word >> 18) & 0x3fff,
			    .raw = word,
			};
		} else if (attr == EIATTR_CBANK_PARAM_SIZE) {
			if (fmt == EIFMT_HVAL) {
				k->param_total = val;
			} else if (fmt == EIFMT_SVAL && vlen >= 4) {
				k->param_total = get32(v);
			} else {
				pr_err("%s: EIATTR_CBANK_PARAM_SIZE with format %u", k->name, fmt);
				return CRC_ECORRUPT;
			}
			have_total = true;
		} else if (attr == EIATTR_PARAM_CBANK) {
			if (fmt != EIFMT_SVAL || vlen < 8) {
				pr_err("%s: EIATTR_PARAM_CBANK with format %u / %llu bytes", k->name, fmt,
				       (unsigned long long)vlen);
				return CRC_ECORRUPT;
			}
			k->param_cbank_off = get16(v + 4);
		}
		i += 4 + vlen;
	}
	if (k->nparams)
		qsort(k->params, k->nparams, sizeof(*k->params), cmp_param);
	uint32_t end = 0;
	for (size_t j = 0; j < k->nparams; j++) {
		const struct crc_kparam *q = &k->params[j];
		if (j && q->ordinal == k->params[j - 1].ordinal) {
			pr_err("%s: two EIATTR_KPARAM_INFO entries for parameter %u", k->name, q->ordinal);
			return CRC_ECORRUPT;
		}
		if ((uint32_t)q->offset + q->size > end)
			end = (uint32_t)q->offset + q->size;
	}
	if (!have_total)
		k->param_total = end;
	else if (end > k->param_total) {
		pr_err("%s: parameters end at %u, past EIATTR_CBANK_PARAM_SIZE %u", k->name, end,
		       k->param_total);
		return CRC_ECORRUPT;
	}
	return 0;
}

static int grow(void **v, size_t *cap, size_t n, size_t elem)
{
	if (n < *cap)
		return 0;
	size_t nc = *cap ? *cap * 2 : 8;
	void *nv = realloc(*v, nc * elem);
	if (!nv)
		return CRC_ENOMEM;
	memset((char *)nv + *cap * elem, 0, (nc - *cap) * elem);
	*v = nv;
	*cap = nc;
	return 0;
}

/* Bank number of a ".nv.constantN" section name, or -1. */
static int const_bank(const char *sec)
{
	static const char pfx[] = ".nv.constant";
	if (strncmp(sec, pfx, sizeof(pfx) - 1))
		return -1;
	const char *d = sec + sizeof(pfx) - 1;
	if (*d < '0' || *d > '9')
		return -1;
	int bank = 0;
	while (*d >= '0' && *d <= '9' && bank < 1000)
		bank = bank * 10 + (*d++ - '0');
	if (*d && *d != '.')
		return -1;
	return bank;
}

void crc_modinfo_free(struct crc_modinfo *mi)
{
	if (!mi)
		return;
	for (size_t i = 0; i < mi->nkernels; i++) {
		free(mi->kernels[i].name);
		free(mi->kernels[i].params);
	}
	free(mi->kernels);
	for (size_t i = 0; i < mi->nglobals; i++) {
		free(mi->globals[i].name);
		free(mi->globals[i].section);
		free(mi->globals[i].init);
	}
	free(mi->globals);
	memset(mi, 0, sizeof(*mi));
}

static int cubin_symbols(const struct elf *f, struct crc_modinfo *mi)
{
	struct sym_table st;
	size_t kcap = 0, gcap = 0;
	char *buf = NULL;
	size_t bufcap = 0;
	int ret = elf_symtab(f, &st);
	if (ret)
		return ret;
	for (size_t i = 1; i < st.nsyms; i++) {
		Elf64_Sym s;
		memcpy(&s, st.syms + i * sizeof(s), sizeof(s));
		int type = ELF64_ST_TYPE(s.st_info), bind = ELF64_ST_BIND(s.st_info);
		if (type != STT_FUNC && type != STT_OBJECT)
			continue;
		if (s.st_shndx == SHN_UNDEF || s.st_shndx >= SHN_LORESERVE)
			continue;
		const char *name = sym_name(&st, &s);
		if (!name) {
			pr_err("cubin symbol %zu has a name outside the string table", i);
			ret = CRC_ECORRUPT;
			goto out;
		}
		if (s.st_shndx >= f->shnum) {
			pr_err("cubin symbol %s: section index %u out of range", name, s.st_shndx);
			ret = CRC_ECORRUPT;
			goto out;
		}
		const char *sec = sec_name(f, s.st_shndx);
		if (!sec) {
			pr_err("cubin symbol %s: section %u has no valid name", name, s.st_shndx);
			ret = CRC_ECORRUPT;
			goto out;
		}
		size_t need = strlen(name) + 16;
		if (need > bufcap) {
			char *nb = realloc(buf, need);
			if (!nb) {
				ret = CRC_ENOMEM;
				goto out;
			}
			buf = nb;
			bufcap = need;
		}
		if (type == STT_FUNC) {
			size_t info;
			if (bind != STB_GLOBAL && bind != STB_WEAK)
				continue;
			snprintf(buf, bufcap, ".text.%s", name);
			if (strcmp(sec, buf))
				continue;
			snprintf(buf, bufcap, ".nv.info.%s", name);
			if (find_section(f, buf, &info))
				continue;
			ret = grow((void **)&mi->kernels, &kcap, mi->nkernels, sizeof(*mi->kernels));
			if (ret)
				goto out;
			struct crc_kernel *k = &mi->kernels[mi->nkernels++];
			k->name = strdup(name);
			if (!k->name) {
				ret = CRC_ENOMEM;
				goto out;
			}
			ret = parse_nv_info(f, info, k);
			if (ret)
				goto out;
			continue;
		}
		/* STT_OBJECT: a device global if it lives in a global or constant section. */
		enum crc_global_space space;
		int bank = -1;
		if (!strcmp(sec, ".nv.global"))
			space = CRC_GLOBAL_ZEROINIT;
		else if (!strcmp(sec, ".nv.global.init"))
			space = CRC_GLOBAL_INIT;
		else if ((bank = const_bank(sec)) >= 0)
			space = CRC_GLOBAL_CONST;
		else
			continue;
		const Elf64_Shdr *sh = &f->sh[s.st_shndx];
		if (!in_bounds(s.st_value, s.st_size, sh->sh_size)) {
			pr_err("cubin global %s: %llu bytes at %llu lie outside its section %s (%llu bytes)",
			       name, (unsigned long long)s.st_size, (unsigned long long)s.st_value, sec,
			       (unsigned long long)sh->sh_size);
			ret = CRC_ECORRUPT;
			goto out;
		}
		ret = grow((void **)&mi->globals, &gcap, mi->nglobals, sizeof(*mi->globals));
		if (ret)
			goto out;
		struct crc_global *g = &mi->globals[mi->nglobals++];
		g->name = strdup(name);
		g->section = strdup(sec);
		if (!g->name || !g->section) {
			ret = CRC_ENOMEM;
			goto out;
		}
		g->size = s.st_size;
		g->offset = s.st_value;
		g->space = space;
		g->bank = bank;
		g->managed = s.st_other & STO_CUDA_MANAGED;
		g->local = bind == STB_LOCAL;
		if (sh->sh_type != SHT_NOBITS && sh->sh_type != SHT_NULL && s.st_size) {
			g->init = malloc(s.st_size);
			if (!g->init) {
				ret = CRC_ENOMEM;
				goto out;
			}
			memcpy(g->init, f->b + sh->sh_offset + s.st_value, s.st_size);
		}
	}
out:
	free(buf);
	return ret;
}

int crc_modinfo_from_cubin(const void *elf, size_t len, struct crc_modinfo *out)
{
	if (!elf || !out)
		return CRC_EINVAL;
	memset(out, 0, sizeof(*out));
	struct elf f;
	int ret = elf_open(&f, elf, len);
	if (ret)
		return ret;
	out->source = CRC_MODIMAGE_ELF;
	out->elf_flags = f.eh.e_flags;
	/* ELF ABI version 8 (CUDA 12.8+) keeps the SM in e_flags bits 8..15, older ones in bits 0..7. */
	out->sm = f.eh.e_ident[EI_ABIVERSION] >= 8 ? (f.eh.e_flags >> 8) & 0xff : f.eh.e_flags & 0xff;
	ret = cubin_symbols(&f, out);
	free(f.sh);
	if (ret)
		crc_modinfo_free(out);
	return ret;
}

/* ---- PTX ---- */

enum tok_kind { TOK_END, TOK_WORD, TOK_NUM, TOK_PUNCT };

struct ptx_lexer {
	const char *s;
	size_t len, pos;
	/* current token */
	enum tok_kind kind;
	const char *t;
	size_t tlen;
	int depth, pdepth; /* brace and parenthesis depth before the current token */
	int brace, paren;
};

static bool word_start(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == '$' || c == '%' ||
	       c == '.';
}

static bool word_char(char c)
{
	return word_start(c) || (c >= '0' && c <= '9');
}

/* Advances to the next token, skipping whitespace, comments and string literals. */
static void ptx_next(struct ptx_lexer *lx)
{
	const char *s = lx->s;
	size_t n = lx->len, i = lx->pos;
	lx->depth = lx->brace;
	lx->pdepth = lx->paren;
	for (;;) {
		while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r' ||
				 s[i] == '\f' || s[i] == '\v'))
			i++;
		if (i + 1 < n && s[i] == '/' && s[i + 1] == '/') {
			while (i < n && s[i] != '\n')
				i++;
			continue;
		}
		if (i + 1 < n && s[i] == '/' && s[i + 1] == '*') {
			i += 2;
			while (i + 1 < n && !(s[i] == '*' && s[i + 1] == '/'))
				i++;
			i = i + 2 < n ? i + 2 : n;
			continue;
		}
		if (i < n && s[i] == '"') {
			i++;
			while (i < n && s[i] != '"' && s[i] != '\n')
				i++;
			if (i < n)
				i++;
			continue;
		}
		break;
	}
	if (i >= n || !s[i]) {
		lx->kind = TOK_END;
		lx->t = s + i;
		lx->tlen = 0;
		lx->pos = n;
		return;
	}
	size_t st = i;
	if (word_start(s[i])) {
		while (i < n && word_char(s[i]))
			i++;
		lx->kind = TOK_WORD;
	} else if (s[i] >= '0' && s[i] <= '9') {
		while (i < n && (word_char(s[i])))
			i++;
		lx->kind = TOK_NUM;
	} else {
		if (s[i] == '{')
			lx->brace++;
		else if (s[i] == '}' && lx->brace > 0)
			lx->brace--;
		else if (s[i] == '(')
			lx->paren++;
		else if (s[i] == ')' && lx->paren > 0)
			lx->paren--;
		i++;
		lx->kind = TOK_PUNCT;
	}
	lx->t = s + st;
	lx->tlen = i - st;
	lx->pos = i;
}

static bool tok_is(const struct ptx_lexer *lx, const char *w)
{
	size_t n = strlen(w);
	return lx->tlen == n && !memcmp(lx->t, w, n);
}

static bool tok_num(const struct ptx_lexer *lx, uint64_t *v)
{
	if (lx->kind != TOK_NUM)
		return false;
	char tmp[32];
	if (lx->tlen >= sizeof(tmp))
		return false;
	memcpy(tmp, lx->t, lx->tlen);
	tmp[lx->tlen] = 0;
	char *end;
	unsigned long long x = strtoull(tmp, &end, 0);
	if (*end && *end != 'U' && *end != 'u')
		return false;
	*v = x;
	return true;
}

/* Size in bytes of a PTX fundamental type directive (.u32 ...), 0 if not one. */
static unsigned ptx_type_size(const struct ptx_lexer *lx)
{
	static const struct {
		const char *n;
		unsigned size;
	} types[] = {
	    {".u8", 1},	   {".s8", 1},	   {".b8", 1},	       {".u16", 2},	{".s16", 2},	{".b16", 2},
	    {".f16", 2},   {".bf16", 2},   {".u32", 4},	       {".s32", 4},	{".b32", 4},	{".f32", 4},
	    {".u64", 8},   {".s64", 8},	   {".b64", 8},	       {".f64", 8},	{".pred", 1},	{".f16x2", 4},
	    {".b128", 16}, {".texref", 8}, {".samplerref", 8}, {".surfref", 8}, {".bf16x2", 4},
	};
	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
		if (tok_is(lx, types[i].n))
			return types[i].size;
	return 0;
}

/* A declaration: [directives] name [N]...; reads up to (not including) the token that ends it
 * (',', ')', ';', '=' or '{'). */
struct ptx_decl {
	unsigned elem, vec, align;
	uint64_t count;
	const char *name;
	size_t nlen;
	bool managed;
};

static int ptx_decl(struct ptx_lexer *lx, struct ptx_decl *d)
{
	memset(d, 0, sizeof(*d));
	d->vec = 1;
	d->count = 1;
	for (;;) {
		if (lx->kind == TOK_END) {
			pr_err("PTX declaration truncated");
			return CRC_ECORRUPT;
		}
		if (lx->kind == TOK_PUNCT &&
		    (*lx->t == ',' || *lx->t == ')' || *lx->t == ';' || *lx->t == '=' || *lx->t == '{'))
			break;
		if (lx->kind == TOK_WORD && *lx->t == '.') {
			unsigned ts = ptx_type_size(lx);
			uint64_t v;
			if (ts) {
				d->elem = ts;
			} else if (tok_is(lx, ".v2") || tok_is(lx, ".v4") || tok_is(lx, ".v8")) {
				d->vec = lx->t[2] - '0';
			} else if (tok_is(lx, ".align")) {
				ptx_next(lx);
				if (!tok_num(lx, &v) || !v || v > 4096 || (v & (v - 1))) {
					pr_err("PTX .align without a valid power of two");
					return CRC_ECORRUPT;
				}
				d->align = v;
			} else if (tok_is(lx, ".attribute")) {
				/* .attribute( .managed ) */
				ptx_next(lx);
				if (lx->kind == TOK_PUNCT && *lx->t == '(') {
					for (ptx_next(lx);
					     lx->kind != TOK_END && !(lx->kind == TOK_PUNCT && *lx->t == ')');
					     ptx_next(lx))
						if (tok_is(lx, ".managed"))
							d->managed = true;
				}
			}
			/* other directives (.ptr, .global, .visible, ...) do not change the layout */
		} else if (lx->kind == TOK_WORD) {
			d->name = lx->t;
			d->nlen = lx->tlen;
		} else if (lx->kind == TOK_PUNCT && *lx->t == '[') {
			uint64_t v = 0;
			ptx_next(lx);
			if (lx->kind == TOK_PUNCT && *lx->t == ']') {
				v = 0; /* unsized (extern) array */
			} else {
				if (!tok_num(lx, &v) || v > (1ull << 40)) {
					pr_err("PTX array size is not a number");
					return CRC_ECORRUPT;
				}
				ptx_next(lx);
				if (!(lx->kind == TOK_PUNCT && *lx->t == ']')) {
					pr_err("PTX array size without ']'");
					return CRC_ECORRUPT;
				}
			}
			d->count *= v;
			if (d->count > (1ull << 40)) {
				pr_err("PTX array too large");
				return CRC_ECORRUPT;
			}
		}
		ptx_next(lx);
	}
	if (!d->name || !d->elem) {
		pr_err("PTX declaration without a %s", d->name ? "type" : "name");
		return CRC_ECORRUPT;
	}
	if (!d->align)
		d->align = d->elem * d->vec;
	return 0;
}

static char *strndup_checked(const char *s, size_t n)
{
	char *r = malloc(n + 1);
	if (r) {
		memcpy(r, s, n);
		r[n] = 0;
	}
	return r;
}

/* After ".entry": name ( params ) */
static int ptx_entry(struct ptx_lexer *lx, struct crc_kernel *k)
{
	ptx_next(lx);
	if (lx->kind != TOK_WORD || *lx->t == '.') {
		pr_err("PTX .entry without a name");
		return CRC_ECORRUPT;
	}
	k->name = strndup_checked(lx->t, lx->tlen);
	if (!k->name)
		return CRC_ENOMEM;
	ptx_next(lx);
	if (!(lx->kind == TOK_PUNCT && *lx->t == '('))
		return 0; /* no parameter list */
	ptx_next(lx);
	size_t cap = 0;
	uint64_t off = 0;
	while (!(lx->kind == TOK_PUNCT && *lx->t == ')')) {
		if (!tok_is(lx, ".param")) {
			pr_err("PTX .entry %s: expected .param", k->name);
			return CRC_ECORRUPT;
		}
		struct ptx_decl d;
		int ret = ptx_decl(lx, &d);
		if (ret)
			return ret;
		uint64_t size = (uint64_t)d.elem * d.vec * d.count;
		off = (off + d.align - 1) & ~((uint64_t)d.align - 1);
		if (off + size > 0xffff || k->nparams >= MAX_PTX_PARAMS) {
			pr_err("PTX .entry %s: parameters exceed 64 KiB", k->name);
			return CRC_ECORRUPT;
		}
		ret = grow((void **)&k->params, &cap, k->nparams, sizeof(*k->params));
		if (ret)
			return ret;
		k->params[k->nparams] = (struct crc_kparam){
		    .ordinal = k->nparams, .offset = (uint16_t)off, .size = (uint16_t)size};
		k->nparams++;
		off += size;
		if (lx->kind == TOK_PUNCT && *lx->t == ',')
			ptx_next(lx);
		else if (!(lx->kind == TOK_PUNCT && *lx->t == ')')) {
			pr_err("PTX .entry %s: parameter list not closed", k->name);
			return CRC_ECORRUPT;
		}
	}
	k->param_total = (uint32_t)off;
	return 0;
}

int crc_modinfo_from_ptx(const char *ptx, size_t len, struct crc_modinfo *out)
{
	if (!ptx || !out)
		return CRC_EINVAL;
	memset(out, 0, sizeof(*out));
	out->source = CRC_MODIMAGE_PTX;
	struct ptx_lexer lx = {.s = ptx, .len = len};
	size_t kcap = 0, gcap = 0;
	int ret = 0;
	/* Module-scope directives are recognised anywhere outside braces and parentheses. */
	for (ptx_next(&lx); lx.kind != TOK_END;) {
		if (lx.depth > 0 || lx.pdepth > 0 || lx.kind != TOK_WORD) {
			ptx_next(&lx);
			continue;
		}
		if (tok_is(&lx, ".target")) {
			ptx_next(&lx);
			if (lx.kind == TOK_WORD && lx.tlen > 3 && !memcmp(lx.t, "sm_", 3) && !out->sm) {
				unsigned v = 0;
				for (size_t i = 3;
				     i < lx.tlen && lx.t[i] >= '0' && lx.t[i] <= '9' && v < 100000; i++)
					v = v * 10 + (lx.t[i] - '0');
				out->sm = v;
			}
			continue;
		}
		if (tok_is(&lx, ".entry")) {
			ret = grow((void **)&out->kernels, &kcap, out->nkernels, sizeof(*out->kernels));
			if (ret)
				goto fail;
			ret = ptx_entry(&lx, &out->kernels[out->nkernels++]);
			if (ret)
				goto fail;
			continue;
		}
		if (tok_is(&lx, ".global") || tok_is(&lx, ".const")) {
			bool is_const = tok_is(&lx, ".const");
			struct ptx_decl d;
			ptx_next(&lx);
			ret = ptx_decl(&lx, &d);
			if (ret)
				goto fail;
			ret = grow((void **)&out->globals, &gcap, out->nglobals, sizeof(*out->globals));
			if (ret)
				goto fail;
			struct crc_global *g = &out->globals[out->nglobals++];
			g->name = strndup_checked(d.name, d.nlen);
			g->section = strdup("");
			if (!g->name || !g->section) {
				ret = CRC_ENOMEM;
				goto fail;
			}
			g->size = (uint64_t)d.elem * d.vec * d.count;
			g->space = is_const ? CRC_GLOBAL_CONST : CRC_GLOBAL_INIT;
			g->bank = is_const ? 3 : -1; /* nvcc places __constant__ data in bank 3 */
			g->managed = d.managed;
			continue;
		}
		ptx_next(&lx);
	}
	return 0;
fail:
	crc_modinfo_free(out);
	return ret;
}

/* ---- any image ---- */

static int modinfo_from_fatbin(const uint8_t *fb, size_t len, uint32_t target_sm, struct crc_modinfo *out)
{
	struct crc_fatbin_entry *ents;
	size_t n, idx;
	int ret = crc_fatbin_entries(fb, len, &ents, &n);
	if (ret)
		return ret;
	ret = crc_fatbin_select(ents, n, target_sm, &idx);
	if (ret) {
		pr_err("fatbin has no entry usable on sm_%u (%zu entries)", target_sm, n);
		free(ents);
		return ret;
	}
	void *data;
	size_t dlen;
	ret = crc_fatbin_entry_data(&ents[idx], &data, &dlen);
	if (!ret) {
		if (ents[idx].kind == CRC_FATBIN_KIND_ELF) {
			ret = crc_modinfo_from_cubin(data, dlen, out);
		} else {
			size_t tl = strnlen(data, dlen);
			ret = crc_modinfo_from_ptx(data, tl, out);
			if (!ret)
				out->sm = ents[idx].sm;
		}
		free(data);
	}
	free(ents);
	return ret;
}

int crc_modinfo_from_image(const void *image, size_t len, uint32_t target_sm, struct crc_modinfo *out)
{
	if (!image || !out)
		return CRC_EINVAL;
	memset(out, 0, sizeof(*out));
	struct crc_modimage_kind k;
	int ret = len == CRC_MODIMAGE_UNBOUNDED ? crc_modimage_identify(image, &k)
						: crc_modimage_identify_buf(image, len, &k);
	if (ret)
		return ret;
	switch (k.type) {
	case CRC_MODIMAGE_WRAPPER:
	case CRC_MODIMAGE_FATBIN:
		return modinfo_from_fatbin(k.data, k.size, target_sm, out);
	case CRC_MODIMAGE_ELF:
		return crc_modinfo_from_cubin(k.data, k.size, out);
	case CRC_MODIMAGE_PTX:
		return crc_modinfo_from_ptx(k.data, k.size - 1, out);
	default:
		return CRC_ENOTSUP;
	}
}

const struct crc_kernel *crc_modinfo_kernel(const struct crc_modinfo *mi, const char *name)
{
	for (size_t i = 0; mi && name && i < mi->nkernels; i++)
		if (!strcmp(mi->kernels[i].name, name))
			return &mi->kernels[i];
	return NULL;
}

const struct crc_global *crc_modinfo_global(const struct crc_modinfo *mi, const char *name)
{
	for (size_t i = 0; mi && name && i < mi->nglobals; i++)
		if (!strcmp(mi->globals[i].name, name))
			return &mi->globals[i];
	return NULL;
}

int crc_modimage_read_file(const char *path, void **out, size_t *len)
{
	struct stat st;
	uint8_t *buf = NULL;
	size_t done = 0;
	int fd = path ? open(path, O_RDONLY | O_CLOEXEC) : -1;

	if (fd < 0)
		return CRC_ENOTFOUND;
	if (fstat(fd, &st) || st.st_size <= 0 || !(buf = malloc((size_t)st.st_size + 1)))
		goto fail;
	while (done < (size_t)st.st_size) {
		ssize_t got = read(fd, buf + done, (size_t)st.st_size - done);

		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			goto fail;
		done += (size_t)got;
	}
	buf[done] = '\0';
	close(fd);
	*out = buf;
	*len = done + 1;
	return 0;
fail:
	free(buf);
	close(fd);
	return CRC_EIO;
}
