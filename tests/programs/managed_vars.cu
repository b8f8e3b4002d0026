// Kernels of managed_vars.c: __managed__ variables the host reads and writes in place.
__managed__ int mv_count = 5;
__managed__ unsigned mv_table[300]; // spans a page boundary of the variables' block
__device__ int mv_plain = 11;

// <<<1, 300>>>: count += n; table[i] = table[i] * 3 + i + plain.
__global__ void mv_bump(int n)
{
	if (threadIdx.x == 0)
		mv_count += n;
	mv_table[threadIdx.x] = mv_table[threadIdx.x] * 3 + threadIdx.x + mv_plain;
}

// <<<1, 1>>>: out[0] = count, out[1] = table[299], through a pointer to the table too.
__global__ void mv_read(int *out, const unsigned *table)
{
	out[0] = mv_count;
	out[1] = (int)table[299];
}
