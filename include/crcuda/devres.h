/* Device resources (green contexts): how a CUdevResource travels and how the daemon names it.
 *
 * A CUdevResource is the driver's by-value struct, with bytes only the driver reads
 * (_internal_padding). The application keeps it in its own memory, across a checkpoint, and hands it
 * back to cuDevSmResourceSplitByCount and cuDevResourceGenerateDesc, possibly to a restored daemon's
 * driver that never made it. So the daemon hands out its own copy: the driver's type and sm fields,
 * and in the padding a marker and a virtual handle (tag CRC_HT_DEVRES) naming the driver's struct,
 * which a restore makes again by replaying the call that gave it. */
#ifndef CRCUDA_DEVRES_H
#define CRCUDA_DEVRES_H

#include <stdint.h>

#define CRC_DEVRES_MAGIC      0x5345524455435243ull /* "CRCUDRES" */
#define CRC_DEVRES_MAX_GROUPS 256		    /* groups one split answers (SMs / 2 on any GPU) */

/* Where the marker and the handle lie in a CUdevResource (inside _internal_padding). */
#define CRC_DEVRES_MAGIC_OFF  8
#define CRC_DEVRES_HANDLE_OFF 16

/* cuDevSmResourceSplitByCount: request = crc_call_hdr + this; reply = uint32 groups, uint32 pad, then
 * the groups (when result was given) and the remainder (when asked for), each a CUdevResource. */
enum crc_devres_split_flag {
	CRC_SPLIT_RESULT = 1u << 0,    /* result is an array (NULL: a query of the count) */
	CRC_SPLIT_REMAINING = 1u << 1, /* remaining was given */
	CRC_SPLIT_NBGROUPS = 1u << 2,  /* nbGroups was given */
	CRC_SPLIT_INPUT = 1u << 3,     /* input was given */
	CRC_SPLIT_RECORDED = 1u << 4,  /* a journal record: rec_* hold what the split gave */
};
struct crc_devres_split_req {
	uint8_t input[144]; /* CUdevResource */
	uint32_t flags;
	uint32_t nb_groups; /* *nbGroups: the room in result */
	uint32_t use_flags;
	uint32_t min_count;
	/* Journal records: the groups made and their SMs, then the remainder's. */
	uint32_t rec_groups;
	uint32_t rec_remaining;
	uint32_t rec_sm[CRC_DEVRES_MAX_GROUPS];
};

/* cuDevResourceGenerateDesc: request = crc_call_hdr + this + n CUdevResource; reply = uint64 handle. */
struct crc_devres_desc_req {
	uint32_t n;	  /* nbResources */
	uint32_t present; /* resources was not NULL (its n elements follow) */
};

#endif
