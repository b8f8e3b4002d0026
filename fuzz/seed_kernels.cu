// Module-image seeds of the fuzz targets (fuzz/make_corpus.py --nvcc), small enough for the corpus'
// 4 KiB: a kernel with parameters of three sizes, a __device__ global with initial bytes and a
// __constant__ one.
__device__ int g_counter = 7;
__constant__ short c_scale = 3;

extern "C" __global__ void add(int *out, char c, long long n)
{
	*out = (int)n + c * c_scale + g_counter;
}
