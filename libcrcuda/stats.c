/* Counts of what the application's calls cost: round trips (requests that waited for the daemon) and
 * posted requests. CRCUDA_STATS_FILE=path appends "roundtrips N posted M pid P" there at exit, so a
 * benchmark can tell how many calls of a training step needed the daemon. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "client.h"

atomic_ullong crc_stat_roundtrips, crc_stat_posted;

__attribute__((destructor)) static void stats_write(void)
{
	const char *path = getenv("CRCUDA_STATS_FILE");
	FILE *f;

	if (!path || !*path || !(f = fopen(path, "a")))
		return;
	fprintf(f, "roundtrips %llu posted %llu pid %d\n",
		(unsigned long long)atomic_load(&crc_stat_roundtrips),
		(unsigned long long)atomic_load(&crc_stat_posted), (int)getpid());
	fclose(f);
}
