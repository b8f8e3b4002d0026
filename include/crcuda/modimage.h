/* CUDA module images: identify and size them from a bare pointer (as cuModuleLoadData /
 * cuLibraryLoadData must), walk fatbin containers (decompressing LZ4/zstd entries), and list the
 * kernels (with their parameter layout) and device globals of a cubin, or the kernels of PTX text.
 *
 * Formats (learned from nvcc 13.0 output, NVIDIA's fatbinary_section.h and public reimplementations):
 *  - __fatBinC_Wrapper_t { u32 magic 0x466243B1; u32 version; const void *data; void *fatbins }:
 *    what __cudaRegisterFatBinary and cudart's cuLibraryLoadData pass. version 1: data is one fatbin.
 *    version 2 (-rdc, "prelinked"): data is the device-linked fatbin and fatbins a NULL-terminated
 *    array of further fatbins (filled in at run time by __cudaRegisterLinkedBinary).
 *  - fatbin container: { u32 magic 0xBA55ED50; u16 version 1; u16 headerSize; u64 fatSize } then
 *    entries, each a header (>= 64 bytes) followed by its payload. Image size = headerSize + fatSize.
 *  - cubin: a 64-bit little-endian ELF (e_machine EM_CUDA); size = end of the furthest of the
 *    section header table, program header table and section contents.
 *  - PTX: NUL-terminated text; size = strlen + 1.
 *
 * Every function that takes (buf, len) reads only inside [buf, buf + len) and returns CRC_ECORRUPT
 * (with a pr_err saying what was wrong) for a truncated or inconsistent image. All functions return
 * 0 or a negative CRC_E* code. */
#ifndef CRCUDA_MODIMAGE_H
#define CRCUDA_MODIMAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CRC_FATBINC_MAGIC 0x466243B1u
#define CRC_FATBIN_MAGIC  0xBA55ED50u

enum crc_modimage_type {
	CRC_MODIMAGE_UNKNOWN = 0,
	CRC_MODIMAGE_WRAPPER = 1, /* __fatBinC_Wrapper_t */
	CRC_MODIMAGE_FATBIN = 2,  /* fatbin container, magic 0xBA55ED50 */
	CRC_MODIMAGE_ELF = 3,	  /* cubin */
	CRC_MODIMAGE_PTX = 4,	  /* NUL-terminated PTX text */
};

/* What crc_modimage_identify found. For a wrapper, data/size describe the fatbin it points to (the
 * bytes a caller copies and hashes); for every other type data is the image pointer itself. */
struct crc_modimage_kind {
	enum crc_modimage_type type;
	const void *data;
	size_t size;
	/* Wrappers only (type == CRC_MODIMAGE_WRAPPER); 0/NULL otherwise. */
	const void *wrapper;	      /* the wrapper itself */
	uint32_t wrapper_version;     /* 1, or 2 for prelinked (-rdc) wrappers */
	const void *const *prelinked; /* version 2: the NULL-terminated array of further fatbins */
	size_t nprelinked;	      /* entries before the NULL (each sized by crc_modimage_identify) */
	enum crc_modimage_type inner; /* type of what data points at: CRC_MODIMAGE_FATBIN */
};

/* Identifies and sizes the image at `image` with no length known, trusting the image as the driver
 * does (a corrupt image may make it read out of bounds). CRC_ENOTSUP for an unrecognised image,
 * CRC_ECORRUPT for a recognised one with impossible header values. */
int crc_modimage_identify(const void *image, struct crc_modimage_kind *out);
/* The same, bounded: the image must lie within [buf, buf + len). A wrapper's data pointer (and a v2
 * wrapper's array and fatbins) must point inside the buffer too. PTX must be NUL-terminated inside it. */
int crc_modimage_identify_buf(const void *buf, size_t len, struct crc_modimage_kind *out);

/* A module file (cuModuleLoad, cuLinkAddFile) read whole into a malloc'd buffer with a NUL after it
 * (PTX files need not end in one); *len counts the NUL. 0, CRC_ENOTFOUND (cannot open) or CRC_EIO. */
int crc_modimage_read_file(const char *path, void **buf, size_t *len);

/* ---- fatbin containers ---- */
enum {
	CRC_FATBIN_KIND_PTX = 1,
	CRC_FATBIN_KIND_ELF = 2,
};
/* Entry flags (u64). Seen from nvcc 13.0: 0x11 on every entry (64-bit, Linux host); 0x8000 (zstd) on
 * compressed entries, 0x2000 (LZ4) with --compress-mode=speed; 0x100000 on sm_90a (arch-specific)
 * entries; 0x1200000 on sm_100f (family-specific) entries. */
#define CRC_FATBIN_FLAG_64BIT	      0x1ull
#define CRC_FATBIN_FLAG_DEBUG	      0x2ull
#define CRC_FATBIN_FLAG_HOST_LINUX    0x10ull
#define CRC_FATBIN_FLAG_COMPRESS_LZ4  0x2000ull
#define CRC_FATBIN_FLAG_COMPRESS_ZSTD 0x8000ull
#define CRC_FATBIN_FLAG_ARCH_SPECIFIC 0x100000ull  /* sm_XYa: runs only on exactly sm_XY */
#define CRC_FATBIN_FLAG_FAMILY	      0x1000000ull /* sm_XYf */
#define CRC_FATBIN_FLAG_COMPRESSED    (CRC_FATBIN_FLAG_COMPRESS_LZ4 | CRC_FATBIN_FLAG_COMPRESS_ZSTD)

struct crc_fatbin_entry {
	uint16_t kind;		    /* CRC_FATBIN_KIND_PTX / _ELF (others are reported, not interpreted) */
	uint16_t version;	    /* entry header version, 0x0101 */
	uint32_t sm;		    /* 90 for sm_90 / compute_90 */
	uint16_t major, minor;	    /* PTX ISA version (PTX) or ELF ABI version (ELF) */
	uint64_t flags;		    /* CRC_FATBIN_FLAG_* */
	size_t offset;		    /* of the entry header, from the container start */
	uint32_t header_size;	    /* entry header size (64, 80 for PTX, more with options) */
	size_t payload_offset;	    /* offset of the payload from the container start */
	uint64_t payload_size;	    /* padded payload size in the container */
	uint64_t data_size;	    /* bytes of (possibly compressed) data at payload */
	uint64_t uncompressed_size; /* size once decompressed (== data_size when not compressed) */
	const uint8_t *payload;	    /* into the caller's buffer */
};

/* Calls cb for each entry in order; a non-zero return from cb stops the walk and is returned.
 * `fatbin` must start with the container header; len bounds it (the container may be shorter). */
int crc_fatbin_walk(const void *fatbin, size_t len, int (*cb)(const struct crc_fatbin_entry *e, void *arg),
		    void *arg);
/* All entries in a malloc'd array (free() it). */
int crc_fatbin_entries(const void *fatbin, size_t len, struct crc_fatbin_entry **out, size_t *n);
/* A malloc'd copy of an entry's content, decompressed when the entry is compressed (LZ4 or zstd).
 * *len is the content size (for PTX it includes the trailing NUL padding nvcc writes). */
int crc_fatbin_entry_data(const struct crc_fatbin_entry *e, void **out, size_t *len);

/* ---- kernels and globals ---- */
struct crc_kparam {
	uint16_t ordinal; /* position in the argument list */
	uint16_t offset;  /* byte offset in the parameter buffer */
	uint16_t size;	  /* bytes */
	uint32_t raw;	  /* the EIATTR_KPARAM_INFO flags word (size in bits 18..31); 0 from PTX */
};

struct crc_kernel {
	char *name;		  /* mangled, as cuModuleGetFunction / cuLibraryGetKernel want it */
	uint32_t param_total;	  /* EIATTR_CBANK_PARAM_SIZE, else the end of the last parameter */
	uint32_t param_cbank_off; /* where the parameters start in constant bank 0 (EIATTR_PARAM_CBANK); 0 if
				     absent */
	size_t nparams;
	struct crc_kparam *params; /* sorted by ordinal */
};

enum crc_global_space {
	CRC_GLOBAL_ZEROINIT = 1, /* .nv.global (NOBITS): zero-initialised __device__ data */
	CRC_GLOBAL_INIT = 2,	 /* .nv.global.init: initialised __device__ (and __managed__) data */
	CRC_GLOBAL_CONST = 3,	 /* .nv.constantN: __constant__ data, bank N */
};

struct crc_global {
	char *name;
	uint64_t size;
	uint64_t offset; /* st_value: offset within its section */
	char *section;	 /* ".nv.global", ".nv.global.init", ".nv.constant3", ... ("" from PTX) */
	enum crc_global_space space;
	int bank;      /* constant bank number for CRC_GLOBAL_CONST, else -1 */
	bool managed;  /* __managed__ (st_other bit 0x4 in cubins, .attribute(.managed) in PTX) */
	bool local;    /* STB_LOCAL binding (whole-program builds) */
	uint8_t *init; /* malloc'd copy of the initial bytes when the file holds them, else NULL */
};

struct crc_modinfo {
	enum crc_modimage_type source; /* CRC_MODIMAGE_ELF or CRC_MODIMAGE_PTX: what the lists came from */
	uint32_t sm;		       /* SASS arch of the cubin / PTX entry chosen (0 if unknown) */
	uint32_t elf_flags;	       /* e_flags of the cubin, 0 for PTX */
	size_t nkernels;
	struct crc_kernel *kernels; /* symbol table order (cubin), text order (PTX) */
	size_t nglobals;
	struct crc_global *globals;
};

/* Kernels: STT_FUNC symbols bound GLOBAL or WEAK, defined in a section named .text.<name>, with a
 * .nv.info.<name> section. Globals: defined STT_OBJECT symbols in .nv.global, .nv.global.init or
 * .nv.constantN. */
int crc_modinfo_from_cubin(const void *elf, size_t len, struct crc_modinfo *out);
/* Kernels (.entry) with parameter offsets/sizes laid out by PTX's rules, and module-scope
 * .global/.const variables (names, sizes; no initial bytes). The text need not be NUL-terminated. */
int crc_modinfo_from_ptx(const char *ptx, size_t len, struct crc_modinfo *out);
/* Any image (wrapper, fatbin, cubin, PTX) given as (buf, len); len == CRC_MODIMAGE_UNBOUNDED means
 * "unknown": it is sized with crc_modimage_identify, trusting the image. For a fatbin, the entry is chosen by
 * crc_fatbin_select(target_sm) and decompressed as needed. A v2 wrapper's prelinked fatbins are not
 * searched (data holds the device-linked program). */
#define CRC_MODIMAGE_UNBOUNDED SIZE_MAX
int crc_modinfo_from_image(const void *image, size_t len, uint32_t target_sm, struct crc_modinfo *out);
void crc_modinfo_free(struct crc_modinfo *mi);
const struct crc_kernel *crc_modinfo_kernel(const struct crc_modinfo *mi, const char *name);
const struct crc_global *crc_modinfo_global(const struct crc_modinfo *mi, const char *name);

/* Picks the entry to load on a device of compute capability target_sm (e.g. 90), as the driver
 * would, into *idx:
 *  1. an ELF for exactly target_sm (an arch-specific sm_XYa one only on this exact match);
 *  2. else the ELF with the highest sm below target_sm of the same major (SASS is binary compatible
 *     within a major version, towards higher minors), arch-specific entries excluded;
 *  3. else the PTX with the highest sm <= target_sm (to be JIT-compiled), arch-specific excluded;
 *  4. else CRC_ENOTFOUND.
 * target_sm == 0 means "any": the ELF with the highest sm, else the PTX with the highest sm.
 * Among equal candidates the first in the container wins. */
int crc_fatbin_select(const struct crc_fatbin_entry *e, size_t n, uint32_t target_sm, size_t *idx);

#endif
