/* XXH3-128 through the run-time dispatch of Debian's libxxhash (AVX2 or AVX-512 where the CPU has
 * them: twice its SSE2 build's speed, which checkpoints and restores hash every byte with); the
 * digests are the same whichever code computes them. */
#ifndef CRCUDA_XXH3_H
#define CRCUDA_XXH3_H

#include <xxhash.h>
#if defined(__x86_64__) || defined(__i386__)
#include <xxh_x86dispatch.h>
#define crc_xxh3_128	    XXH3_128bits_dispatch
#define crc_xxh3_128_update XXH3_128bits_update_dispatch
#else
#define crc_xxh3_128	    XXH3_128bits
#define crc_xxh3_128_update XXH3_128bits_update
#endif

#endif
