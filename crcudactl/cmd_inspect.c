/* crcudactl inspect ID [--store DIR] [--chunks] [--json]: a checkpoint as a whole: its manifest
 * (regions, metadata), its CRIU images and its session's journal. (`store inspect` shows only the
 * manifest, chunk by chunk.) */
#include <dirent.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "crc_store.h"
#include "crcuda/errno.h"
#include "crcuda/journal.h"
#include "crcudactl.h"

#define INSPECT_JSON_VERSION 1

/* "key = value", a value of several lines (lists: IPC exports, imports) continued under its first. */
static void print_meta(const char *key, const char *value)
{
	int n = (int)strcspn(value, "\n"), indent = (int)strlen(key) + 3;

	printf("    %s = %.*s\n", key, n, value);
	for (value += n; *value == '\n' && value[1]; value += n) {
		value++;
		n = (int)strcspn(value, "\n");
		printf("    %*s%.*s\n", indent, "", n, value);
	}
}

static void inspect_usage(FILE *f)
{
	fprintf(f, "Usage: crcudactl inspect [--store DIR] [--chunks] [--json] ID\n"
		   "\n"
		   "Shows checkpoint ID: its regions (device allocations and globals), metadata, CRIU\n"
		   "images, and the journal of its session (the records a restore replays).\n"
		   "\n"
		   "Options:\n"
		   "  -s, --store DIR  the store (default $CRCUDA_STORE, else ~/.local/share/crcuda/store)\n"
		   "      --chunks     list each region's chunks too\n"
		   "      --json       machine-readable output\n"
		   "  -h, --help       this help\n");
}

struct jctx {
	json_t *list; /* NULL: print */
	uint64_t n, bytes;
};

/* One journal record, formatted by crcuda/journal.h (the daemon's record layout). */
static int journal_rec(void *arg, uint64_t seq, uint32_t type, const void *payload, uint32_t len)
{
	struct jctx *j = arg;
	char buf[4096];

	j->n++;
	j->bytes += len;
	if (j->list) {
		json_error_t err;
		json_t *rec;

		crc_jrec_format_json(buf, sizeof(buf), seq, type, payload, len);
		rec = json_loads(buf, 0, &err);
		/* A record too long for the buffer, or not decodable: its header at least. */
		json_array_append_new(j->list,
				      rec ? rec
					  : json_pack("{s:I, s:s, s:i}", "seq", (json_int_t)seq, "type",
						      crc_jrec_type_name(type), "length", (int)len));
	} else {
		crc_jrec_format_text(buf, sizeof(buf), seq, type, payload, len);
		printf("  %s\n", buf);
	}
	return 0;
}

/* Size of the files in dir (not recursive), and their count. */
static uint64_t dir_bytes(const char *dir, unsigned *files)
{
	char path[PATH_MAX * 2 + 260];
	uint64_t total = 0;
	struct dirent *de;
	struct stat sb;
	DIR *d = opendir(dir);

	*files = 0;
	while (d && (de = readdir(d))) {
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		if (!stat(path, &sb) && S_ISREG(sb.st_mode)) {
			total += (uint64_t)sb.st_size;
			(*files)++;
		}
	}
	if (d)
		closedir(d);
	return total;
}

int cmd_inspect(int argc, char **argv, struct ctl_opts *opts)
{
	enum { OPT_JSON = 256, OPT_CHUNKS };
	static const struct option longopts[] = {
	    {"store", required_argument, NULL, 's'},
	    {"chunks", no_argument, NULL, OPT_CHUNKS},
	    {"json", no_argument, NULL, OPT_JSON},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	const char *store_arg = NULL;
	bool chunks = false;
	char store[PATH_MAX], img[PATH_MAX * 2], when[32], hex[CRC_HASH_HEX_LEN + 1], *end;
	struct crc_store *st = NULL;
	struct crc_manifest *m = NULL;
	int c, rc, ret = CTL_EXIT_FAILURE;

	while ((c = getopt_long(argc, argv, "s:h", longopts, NULL)) != -1) {
		switch (c) {
		case 's':
			store_arg = optarg;
			break;
		case OPT_CHUNKS:
			chunks = true;
			break;
		case OPT_JSON:
			opts->json = true;
			break;
		case 'h':
			inspect_usage(stdout);
			return CTL_EXIT_OK;
		default:
			inspect_usage(stderr);
			return CTL_EXIT_USAGE;
		}
	}
	if (optind != argc - 1) {
		ctl_error("inspect: give exactly one checkpoint ID");
		return CTL_EXIT_USAGE;
	}
	uint64_t id = strtoull(argv[optind], &end, 10);
	if (*end || !id) {
		ctl_error("inspect: '%s' is not a checkpoint id", argv[optind]);
		return CTL_EXIT_USAGE;
	}
	if (ctl_store_dir(store_arg, store, sizeof(store)))
		return CTL_EXIT_USAGE;
	if ((rc = crc_store_open(store, 0, &st)) || (rc = crc_store_manifest_get(st, id, &m))) {
		ctl_error("inspect: checkpoint %" PRIu64 " in %s: %s", id, store, crc_strerror(rc));
		goto out;
	}
	time_t t = (time_t)(m->created_ns / 1000000000);
	struct tm tm;
	gmtime_r(&t, &tm);
	strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
	uint64_t bytes = 0, nchunks = 0, allocs = 0, globals = 0;
	for (uint32_t i = 0; i < m->nregions; i++) {
		bytes += m->regions[i].size;
		nchunks += m->regions[i].nchunks;
		allocs += m->regions[i].kind == CRC_REGION_DEVICE_ALLOC;
		globals += m->regions[i].kind == CRC_REGION_DEVICE_GLOBAL;
	}
	/* Distinct chunks' bytes, and what they take in the pack files (compressed where it paid). */
	uint64_t unique = 0, stored = 0, compressed = 0;
	if ((rc = crc_store_manifest_stored(st, m, &unique, &stored, &compressed))) {
		ctl_error("inspect: checkpoint %" PRIu64 ": its chunks: %s (run `crcudactl store verify`)",
			  id, crc_strerror(rc));
		goto out;
	}
	const char *rel = crc_manifest_meta_get(m, "criu.images_dir");
	unsigned nfiles = 0;
	uint64_t img_bytes = 0;
	bool have_img = false;
	if (rel) {
		snprintf(img, sizeof(img), "%s%s%s", rel[0] == '/' ? "" : store, rel[0] == '/' ? "" : "/",
			 rel);
		img_bytes = dir_bytes(img, &nfiles);
		char inv[PATH_MAX * 2 + 32];
		snprintf(inv, sizeof(inv), "%s/inventory.img", img);
		have_img = access(inv, R_OK) == 0;
	}

	json_t *doc = NULL, *regions = NULL, *meta = NULL, *journal = NULL;
	if (opts->json) {
		doc = json_pack("{s:i, s:s, s:I, s:I, s:s, s:I, s:I, s:I, s:I, s:I}", "version",
				INSPECT_JSON_VERSION, "store", store, "id", (json_int_t)m->ckpt_id, "session",
				(json_int_t)m->session_id, "created", when, "created_ns",
				(json_int_t)m->created_ns, "device_bytes", (json_int_t)bytes, "chunks",
				(json_int_t)nchunks, "allocations", (json_int_t)allocs, "globals",
				(json_int_t)globals);
		json_object_set_new(doc, "unique_bytes", json_integer((json_int_t)unique));
		json_object_set_new(doc, "stored_bytes", json_integer((json_int_t)stored));
		json_object_set_new(doc, "compressed_chunks", json_integer((json_int_t)compressed));
		json_object_set_new(doc, "criu",
				    json_pack("{s:s?, s:b, s:i, s:I}", "images_dir", rel, "present", have_img,
					      "files", (int)nfiles, "bytes", (json_int_t)img_bytes));
		regions = json_array();
		meta = json_object();
		journal = json_array();
		json_object_set_new(doc, "regions", regions);
		json_object_set_new(doc, "meta", meta);
	} else {
		printf("checkpoint %" PRIu64 " (session %" PRIu64 "), created %s\n", m->ckpt_id,
		       m->session_id, when);
		printf("  device state: %.1f MiB in %" PRIu64 " chunks; %" PRIu64 " allocations, %" PRIu64
		       " globals\n",
		       bytes / 1048576.0, nchunks, allocs, globals);
		printf("  stored:       %.1f MiB of %.1f MiB of distinct chunks (ratio %.3f; %" PRIu64
		       " chunks compressed)\n",
		       stored / 1048576.0, unique / 1048576.0, unique ? (double)stored / unique : 1.0,
		       compressed);
		if (rel)
			printf("  CRIU images:  %s (%s, %u files, %.1f MiB)\n", rel,
			       have_img ? "present" : "MISSING", nfiles, img_bytes / 1048576.0);
		else
			printf("  CRIU images:  none named\n");
		printf("  regions:\n");
	}
	for (uint32_t i = 0; i < m->nregions; i++) {
		const struct crc_region *r = &m->regions[i];
		json_t *cl = regions && chunks ? json_array() : NULL;

		crc_hash_to_hex(&r->module, hex);
		if (regions)
			json_array_append_new(
			    regions, json_pack("{s:s, s:I, s:I, s:s?, s:s, s:i, s:o*}", "kind",
					       crc_region_kind_name(r->kind), "addr", (json_int_t)r->addr,
					       "size", (json_int_t)r->size, "name", r->name, "module", hex,
					       "nchunks", (int)r->nchunks, "chunks", cl));
		else
			printf("    %-13s 0x%012" PRIx64 " %12" PRIu64 " bytes %4u chunks%s%s\n",
			       crc_region_kind_name(r->kind), r->addr, r->size, r->nchunks,
			       r->name ? "  " : "", r->name ? r->name : "");
		for (uint32_t k = 0; chunks && k < r->nchunks; k++) {
			crc_hash_to_hex(&r->chunks[k].hash, hex);
			if (cl)
				json_array_append_new(cl, json_pack("{s:s, s:I}", "hash", hex, "length",
								    (json_int_t)r->chunks[k].length));
			else
				printf("      %s %" PRIu64 "\n", hex, r->chunks[k].length);
		}
	}
	if (!doc)
		printf("  metadata:\n");
	for (uint32_t i = 0; i < m->nmeta; i++) {
		if (meta)
			json_object_set_new(meta, m->meta[i].key, json_string(m->meta[i].value));
		else
			print_meta(m->meta[i].key, m->meta[i].value);
	}
	struct jctx j = {.list = journal};
	if (!doc)
		printf("  journal of session %" PRIu64 ":\n", m->session_id);
	rc = crc_store_journal_iterate(st, m->session_id, journal_rec, &j);
	if (doc) {
		json_object_set_new(doc, "journal", journal);
		if (rc)
			json_object_set_new(doc, "journal_error", json_string(crc_strerror(rc)));
		ctl_json_print(doc);
	} else {
		if (rc)
			printf("  (journal: %s)\n", crc_strerror(rc));
		printf("  %" PRIu64 " journal records, %" PRIu64 " payload bytes\n", j.n, j.bytes);
	}
	ret = CTL_EXIT_OK;
out:
	crc_manifest_free(m);
	crc_store_close(st);
	return ret;
}
