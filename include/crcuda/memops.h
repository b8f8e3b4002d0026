/* cuStreamBatchMemOp as its operations in order, over single-operation calls the caller supplies (the
 * daemon's forwards in libcrcuda, the simulated device's own). A barrier or a flush of remote writes
 * adds no order that the operations' sequence on one stream does not already give on one device. */
#ifndef CRCUDA_MEMOPS_H
#define CRCUDA_MEMOPS_H

#include <cuda.h>
#include <stdbool.h>

struct crc_memop_fns {
	CUresult (*wait)(void *ctx, bool wide, CUdeviceptr addr, cuuint64_t value, unsigned flags);
	CUresult (*write)(void *ctx, bool wide, CUdeviceptr addr, cuuint64_t value, unsigned flags);
};

static inline CUresult crc_batch_memops(unsigned count, const CUstreamBatchMemOpParams *ops, unsigned flags,
					const struct crc_memop_fns *fns, void *ctx)
{
	CUresult res = count && ops && !flags ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;

	for (unsigned i = 0; i < count && res == CUDA_SUCCESS; i++) {
		const CUstreamBatchMemOpParams *o = &ops[i];
		bool wide = o->operation == CU_STREAM_MEM_OP_WAIT_VALUE_64 ||
			    o->operation == CU_STREAM_MEM_OP_WRITE_VALUE_64;

		switch (o->operation) {
		case CU_STREAM_MEM_OP_WAIT_VALUE_32:
		case CU_STREAM_MEM_OP_WAIT_VALUE_64:
			res = fns->wait(ctx, wide, o->waitValue.address,
					wide ? o->waitValue.value64 : o->waitValue.value, o->waitValue.flags);
			break;
		case CU_STREAM_MEM_OP_WRITE_VALUE_32:
		case CU_STREAM_MEM_OP_WRITE_VALUE_64:
			res = fns->write(ctx, wide, o->writeValue.address,
					 wide ? o->writeValue.value64 : o->writeValue.value,
					 o->writeValue.flags);
			break;
		case CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES:
		case CU_STREAM_MEM_OP_BARRIER:
			break;
		default:
			res = CUDA_ERROR_INVALID_VALUE;
		}
	}
	return res;
}

#endif
