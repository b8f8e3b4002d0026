/* crcudactl store ls | inspect ID | verify | gc | demo-record [--store DIR] [--json] */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "crc_store.h"
#include "crcuda/errno.h"
#include "crcudactl.h"

/* Version of the JSON documents below; bump when a field changes meaning or goes away. */
#define STORE_JSON_VERSION 1

struct store_args {
	const char *dir;
	int argc; /* operands after the subcommand name */
	char **argv;
	struct ctl_opts *opts;
	long keep; /* prune --keep N; -1 when not given */
	bool dry;  /* prune --dry-run */
};

typedef int (*store_cmd_fn)(struct store_args *a);

static void store_usage(FILE *f)
{
	fprintf(f,
		"Usage: crcudactl store SUBCOMMAND [--store DIR] [--json]\n"
		"\n"
		"Subcommands:\n"
		"  ls           list checkpoints\n"
		"  inspect ID   show a checkpoint's manifest: regions, chunks, metadata\n"
		"  verify       read every chunk and check its hash, and that every checkpoint is whole\n"
		"               (exit 1 when anything is damaged or missing)\n"
		"  gc           remove chunks and pack files no checkpoint needs, and the CRIU images\n"
		"               (with their link remaps) of checkpoints that failed or were killed\n"
		"  prune --keep N [-n|--dry-run]\n"
		"               keep the newest N checkpoints of each program (its CRCUDA_LINEAGE, which\n"
		"               `crcudactl run` sets and a restore keeps) and remove the others, as rm does\n"
		"  demo-record  (developer) record a demo checkpoint, creating the store if needed\n"
		"\n"
		"Options:\n"
		"  -s, --store DIR  the store (default $CRCUDA_STORE, else ~/.local/share/crcuda/store)\n"
		"      --keep N     prune: checkpoints kept of each program\n"
		"  -n, --dry-run    prune: only say what would go\n"
		"      --json       machine-readable output\n"
		"  -h, --help       this help\n");
}

static void format_time(int64_t ns, char *buf, size_t len)
{
	time_t t = (time_t)(ns / 1000000000);
	struct tm tm;
	gmtime_r(&t, &tm);
	strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static json_t *doc_new(struct store_args *a)
{
	return json_pack("{s:i, s:s}", "version", STORE_JSON_VERSION, "store", a->dir);
}

static int open_store(struct store_args *a, unsigned flags, struct crc_store **st)
{
	int rc = crc_store_open(a->dir, flags, st);
	if (rc)
		ctl_error("cannot open the store %s: %s", a->dir, crc_strerror(rc));
	return rc;
}

static uint64_t manifest_bytes(const struct crc_manifest *m, uint64_t *nchunks)
{
	uint64_t bytes = 0;
	*nchunks = 0;
	for (uint32_t i = 0; i < m->nregions; i++) {
		bytes += m->regions[i].size;
		*nchunks += m->regions[i].nchunks;
	}
	return bytes;
}

static int store_ls(struct store_args *a)
{
	struct crc_store *st;
	uint64_t *ids = NULL;
	size_t n = 0;
	int ret = CTL_EXIT_FAILURE;
	json_t *doc = NULL, *list = NULL;
	if (a->argc) {
		ctl_error("store ls takes no operands");
		return CTL_EXIT_USAGE;
	}
	if (open_store(a, 0, &st))
		return CTL_EXIT_FAILURE;
	int rc = crc_store_manifest_list(st, &ids, &n);
	if (rc) {
		ctl_error("listing checkpoints: %s", crc_strerror(rc));
		goto out;
	}
	if (a->opts->json) {
		doc = doc_new(a);
		list = json_array();
		json_object_set_new(doc, "checkpoints", list);
	} else {
		printf("%-6s %-8s %-20s %7s %7s %14s\n", "ID", "SESSION", "CREATED", "REGIONS", "CHUNKS",
		       "BYTES");
	}
	for (size_t i = 0; i < n; i++) {
		struct crc_manifest *m;
		rc = crc_store_manifest_get(st, ids[i], &m);
		if (rc) {
			ctl_error("checkpoint %" PRIu64 ": %s", ids[i], crc_strerror(rc));
			goto out;
		}
		char when[32];
		uint64_t nchunks, bytes = manifest_bytes(m, &nchunks);
		format_time(m->created_ns, when, sizeof(when));
		if (a->opts->json)
			json_array_append_new(
			    list,
			    json_pack("{s:I, s:I, s:s, s:I, s:i, s:I, s:I}", "id", (json_int_t)m->ckpt_id,
				      "session", (json_int_t)m->session_id, "created", when, "created_ns",
				      (json_int_t)m->created_ns, "regions", (int)m->nregions, "chunks",
				      (json_int_t)nchunks, "bytes", (json_int_t)bytes));
		else
			printf("%-6" PRIu64 " %-8" PRIu64 " %-20s %7u %7" PRIu64 " %14" PRIu64 "\n",
			       m->ckpt_id, m->session_id, when, m->nregions, nchunks, bytes);
		crc_manifest_free(m);
	}
	if (a->opts->json) {
		ctl_json_print(doc);
		doc = NULL;
	}
	ret = CTL_EXIT_OK;
out:
	json_decref(doc);
	free(ids);
	crc_store_close(st);
	return ret;
}

static int store_inspect(struct store_args *a)
{
	struct crc_store *st;
	struct crc_manifest *m = NULL;
	char *end;
	if (a->argc != 1) {
		ctl_error("store inspect takes one checkpoint ID");
		return CTL_EXIT_USAGE;
	}
	errno = 0;
	uint64_t id = strtoull(a->argv[0], &end, 10);
	if (errno || *end || end == a->argv[0]) {
		ctl_error("'%s' is not a checkpoint ID", a->argv[0]);
		return CTL_EXIT_USAGE;
	}
	if (open_store(a, 0, &st))
		return CTL_EXIT_FAILURE;
	int rc = crc_store_manifest_get(st, id, &m);
	crc_store_close(st);
	if (rc) {
		ctl_error("checkpoint %" PRIu64 ": %s", id, crc_strerror(rc));
		return CTL_EXIT_FAILURE;
	}
	char when[32], hex[CRC_HASH_HEX_LEN + 1];
	uint64_t nchunks, bytes = manifest_bytes(m, &nchunks);
	format_time(m->created_ns, when, sizeof(when));
	if (a->opts->json) {
		json_t *doc = doc_new(a), *regions = json_array(), *meta = json_object();
		json_object_set_new(doc, "id", json_integer((json_int_t)m->ckpt_id));
		json_object_set_new(doc, "session", json_integer((json_int_t)m->session_id));
		json_object_set_new(doc, "created", json_string(when));
		json_object_set_new(doc, "created_ns", json_integer(m->created_ns));
		json_object_set_new(doc, "bytes", json_integer((json_int_t)bytes));
		for (uint32_t i = 0; i < m->nregions; i++) {
			const struct crc_region *r = &m->regions[i];
			json_t *chunks = json_array();
			for (uint32_t c = 0; c < r->nchunks; c++) {
				crc_hash_to_hex(&r->chunks[c].hash, hex);
				json_array_append_new(chunks, json_pack("{s:s, s:I}", "hash", hex, "length",
									(json_int_t)r->chunks[c].length));
			}
			crc_hash_to_hex(&r->module, hex);
			json_array_append_new(regions,
					      json_pack("{s:s, s:I, s:I, s:s?, s:s, s:o}", "kind",
							crc_region_kind_name(r->kind), "addr",
							(json_int_t)r->addr, "size", (json_int_t)r->size,
							"name", r->name, "module", hex, "chunks", chunks));
		}
		json_object_set_new(doc, "regions", regions);
		for (uint32_t i = 0; i < m->nmeta; i++)
			json_object_set_new(meta, m->meta[i].key, json_string(m->meta[i].value));
		json_object_set_new(doc, "meta", meta);
		ctl_json_print(doc);
	} else {
		printf("checkpoint %" PRIu64 "\n  session  %" PRIu64 "\n  created  %s\n  bytes    %" PRIu64
		       " in %" PRIu64 " chunks\n",
		       m->ckpt_id, m->session_id, when, bytes, nchunks);
		for (uint32_t i = 0; i < m->nregions; i++) {
			const struct crc_region *r = &m->regions[i];
			printf("  region %u: %s", i, crc_region_kind_name(r->kind));
			if (r->name)
				printf(" \"%s\"", r->name);
			printf(" addr 0x%" PRIx64 " size %" PRIu64 "\n", r->addr, r->size);
			for (uint32_t c = 0; c < r->nchunks; c++) {
				crc_hash_to_hex(&r->chunks[c].hash, hex);
				printf("    chunk %s %" PRIu64 "\n", hex, r->chunks[c].length);
			}
		}
		for (uint32_t i = 0; i < m->nmeta; i++)
			printf("  meta %s = %s\n", m->meta[i].key, m->meta[i].value);
	}
	crc_manifest_free(m);
	return CTL_EXIT_OK;
}

static void verify_problem(void *arg, int err, const char *id, const char *what)
{
	json_t *problems = arg;
	if (problems)
		json_array_append_new(problems, json_pack("{s:s, s:s, s:s}", "error", crc_err_name(err), "id",
							  id, "what", what));
	else
		printf("PROBLEM %s: %s (%s)\n", id, what, crc_err_name(err));
}

static int store_verify(struct store_args *a)
{
	struct crc_store *st;
	struct crc_verify_report rep = {0};
	json_t *problems = a->opts->json ? json_array() : NULL;
	if (a->argc) {
		ctl_error("store verify takes no operands");
		json_decref(problems);
		return CTL_EXIT_USAGE;
	}
	if (open_store(a, 0, &st)) {
		json_decref(problems);
		return CTL_EXIT_FAILURE;
	}
	int rc = crc_store_verify(st, verify_problem, problems, &rep);
	crc_store_close(st);
	if (rc && rc != CRC_ECORRUPT) {
		ctl_error("verify could not run: %s", crc_strerror(rc));
		json_decref(problems);
		return CTL_EXIT_FAILURE;
	}
	if (a->opts->json) {
		json_t *doc = doc_new(a);
		json_object_set_new(doc, "ok", json_boolean(rc == 0));
		json_object_set_new(doc, "manifests", json_integer((json_int_t)rep.manifests));
		json_object_set_new(doc, "bad_manifests", json_integer((json_int_t)rep.bad_manifests));
		json_object_set_new(doc, "chunks", json_integer((json_int_t)rep.chunks));
		json_object_set_new(doc, "bytes", json_integer((json_int_t)rep.bytes));
		json_object_set_new(doc, "stored_bytes", json_integer((json_int_t)rep.stored_bytes));
		json_object_set_new(doc, "packs", json_integer((json_int_t)rep.packs));
		json_object_set_new(doc, "orphan_packs", json_integer((json_int_t)rep.orphan_packs));
		json_object_set_new(doc, "problems", problems);
		ctl_json_print(doc);
	} else {
		printf("%s: %" PRIu64 " checkpoints (%" PRIu64 " damaged), %" PRIu64 " chunks (%" PRIu64
		       " bytes, %" PRIu64 " stored) in %" PRIu64 " packs, %" PRIu64 " problems, %" PRIu64
		       " orphan packs (gc removes them)\n",
		       rc ? "DAMAGED" : "OK", rep.manifests, rep.bad_manifests, rep.chunks, rep.bytes,
		       rep.stored_bytes, rep.packs, rep.problems, rep.orphan_packs);
	}
	return rc ? CTL_EXIT_FAILURE : CTL_EXIT_OK;
}

/* A failed or killed checkpoint's dump may have kept CRIU link remaps for a restore that never comes. */
static void discard_link_remaps(const char *dir)
{
	ctl_link_remaps_remove(dir);
}

static int store_gc(struct store_args *a)
{
	struct crc_store *st;
	struct crc_gc_report rep = {0};
	if (a->argc) {
		ctl_error("store gc takes no operands");
		return CTL_EXIT_USAGE;
	}
	if (open_store(a, 0, &st))
		return CTL_EXIT_FAILURE;
	uint64_t criu_dirs = 0, criu_bytes = 0;
	int rc = crc_store_gc(st, &rep);
	/* And the CRIU image directories of checkpoints that never committed. */
	if (!rc)
		rc = crc_store_gc_criu(st, discard_link_remaps, &criu_dirs, &criu_bytes);
	crc_store_close(st);
	if (rc) {
		ctl_error("gc failed: %s", crc_strerror(rc));
		return CTL_EXIT_FAILURE;
	}
	if (a->opts->json) {
		ctl_json_print(json_pack(
		    "{s:i, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "version", STORE_JSON_VERSION, "store",
		    a->dir, "chunks_removed", (json_int_t)rep.chunks_removed, "packs_removed",
		    (json_int_t)rep.packs_removed, "orphan_packs_removed",
		    (json_int_t)rep.orphan_packs_removed, "bytes_freed", (json_int_t)rep.bytes_freed,
		    "bytes_dead_retained", (json_int_t)rep.bytes_dead_retained, "criu_dirs_removed",
		    (json_int_t)criu_dirs, "criu_bytes_freed", (json_int_t)criu_bytes));
	} else {
		if (criu_dirs)
			printf("gc: removed %" PRIu64 " CRIU image directories no checkpoint names (%" PRIu64
			       " bytes)\n",
			       criu_dirs, criu_bytes);
		printf("gc: removed %" PRIu64 " chunks, %" PRIu64 " pack files and %" PRIu64
		       " orphan pack files, %" PRIu64 " bytes freed; %" PRIu64
		       " dead bytes stay in packs that hold live chunks\n",
		       rep.chunks_removed, rep.packs_removed, rep.orphan_packs_removed, rep.bytes_freed,
		       rep.bytes_dead_retained);
	}
	return CTL_EXIT_OK;
}

static int store_prune(struct store_args *a)
{
	if (a->argc) {
		ctl_error("store prune takes no operands (store prune --keep N [--dry-run])");
		return CTL_EXIT_USAGE;
	}
	if (a->keep < 0) {
		ctl_error("store prune: say how many to keep of each program: --keep N");
		return CTL_EXIT_USAGE;
	}
	return ctl_prune(a->dir, NULL, (unsigned)a->keep, a->dry, stdout) ? CTL_EXIT_FAILURE : CTL_EXIT_OK;
}

/* Deterministic bytes, different for each (seed, position). */
static void demo_fill(uint8_t *buf, size_t len, uint64_t seed)
{
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
	for (size_t i = 0; i < len; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		buf[i] = (uint8_t)x;
	}
}

/* Records what a small CUDA program's checkpoint would hold: a 12 MiB device allocation in 4 MiB
 * chunks (the last one equal to the first, so it is stored once), a device global of a module whose
 * image is a journal blob, journal records, and CRIU metadata. */
static int store_demo_record(struct store_args *a)
{
	enum { CHUNK = 4 << 20, NCHUNKS = 3, GLOBAL = 256 };
	static const char image[] = "demo module image (a fatbin in real use)";
	struct crc_store *st = NULL;
	struct crc_ckpt *ck = NULL;
	uint8_t *buf = malloc(CHUNK);
	uint64_t session, ckpt, seq;
	uint32_t alloc_region, global_region;
	struct crc_hash module;
	char uid[16];
	int rc = CRC_ENOMEM;
	const char *step = "allocating";
	if (a->argc) {
		ctl_error("store demo-record takes no operands");
		free(buf);
		return CTL_EXIT_USAGE;
	}
	if (!buf)
		goto fail;
	if (open_store(a, CRC_STORE_CREATE, &st)) {
		free(buf);
		return CTL_EXIT_FAILURE;
	}
	step = "recording the session and its journal";
	if ((rc = crc_store_session_create(st, "demo", &session)) ||
	    (rc = crc_store_blob_put(st, session, image, sizeof(image), &module)) ||
	    (rc = crc_store_journal_append(st, session, CRC_JREC_CONTEXT_CREATE, "\0\0\0\0", 4, &seq)) ||
	    (rc = crc_store_journal_append(st, session, CRC_JREC_MODULE_LOAD, module.bytes, 16, &seq)) ||
	    (rc = crc_store_journal_append(st, session, CRC_JREC_MEM_ALLOC, "demo", 4, &seq)))
		goto fail;
	step = "writing the checkpoint";
	struct crc_region_desc alloc = {
	    .kind = CRC_REGION_DEVICE_ALLOC, .addr = 0x600000000000ull, .size = (uint64_t)CHUNK * NCHUNKS};
	struct crc_region_desc global = {
	    .kind = CRC_REGION_DEVICE_GLOBAL, .size = GLOBAL, .name = "counter", .module = module};
	if ((rc = crc_ckpt_begin(st, session, &ck)) ||
	    (rc = crc_ckpt_region_add(ck, &alloc, &alloc_region)) ||
	    (rc = crc_ckpt_region_add(ck, &global, &global_region)))
		goto fail;
	for (int i = 0; i < NCHUNKS; i++) {
		demo_fill(buf, CHUNK, i == NCHUNKS - 1 ? 0 : (uint64_t)i);
		if ((rc = crc_ckpt_put_chunk(ck, alloc_region, buf, CHUNK, NULL)))
			goto fail;
	}
	demo_fill(buf, GLOBAL, 1000);
	/* The caller's checkpoint (only it, or root, may restore it). */
	snprintf(uid, sizeof(uid), "%u", (unsigned)geteuid());
	if ((rc = crc_ckpt_put_chunk(ck, global_region, buf, GLOBAL, NULL)) ||
	    (rc = crc_ckpt_meta_set(ck, "criu.images_dir", "/var/lib/crcuda/demo/criu")) ||
	    (rc = crc_ckpt_meta_set(ck, "demo", "true")) || (rc = crc_ckpt_meta_set(ck, "crcuda.uid", uid)))
		goto fail;
	rc = crc_ckpt_commit(ck, &ckpt);
	ck = NULL;
	if (rc)
		goto fail;
	if (a->opts->json)
		ctl_json_print(json_pack("{s:i, s:s, s:I, s:I}", "version", STORE_JSON_VERSION, "store",
					 a->dir, "id", (json_int_t)ckpt, "session", (json_int_t)session));
	else
		printf("recorded checkpoint %" PRIu64 " of session %" PRIu64 " in %s\n", ckpt, session,
		       a->dir);
	crc_store_close(st);
	free(buf);
	return CTL_EXIT_OK;
fail:
	ctl_error("demo-record: %s: %s", step, crc_strerror(rc));
	crc_ckpt_abort(ck);
	crc_store_close(st);
	free(buf);
	return CTL_EXIT_FAILURE;
}

static const struct {
	const char *name;
	store_cmd_fn fn;
} store_cmds[] = {
    {"ls", store_ls}, {"inspect", store_inspect}, {"verify", store_verify},
    {"gc", store_gc}, {"prune", store_prune},	  {"demo-record", store_demo_record},
};

int cmd_store(int argc, char **argv, struct ctl_opts *opts)
{
	enum { OPT_JSON = 256, OPT_KEEP, OPT_DRY };
	static const struct option longopts[] = {
	    {"store", required_argument, NULL, 's'},
	    {"json", no_argument, NULL, OPT_JSON},
	    {"keep", required_argument, NULL, OPT_KEEP},
	    {"dry-run", no_argument, NULL, OPT_DRY},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	struct store_args a = {.opts = opts, .keep = -1};
	char *def = NULL;
	int c, ret;
	while ((c = getopt_long(argc, argv, "s:nh", longopts, NULL)) != -1) {
		switch (c) {
		case 's':
			a.dir = optarg;
			break;
		case OPT_JSON:
			opts->json = true;
			break;
		case OPT_KEEP: {
			char *end;

			errno = 0;
			a.keep = strtol(optarg, &end, 10);
			if (errno || *end || !*optarg || a.keep < 0 || a.keep > 1000000) {
				ctl_error("store prune: --keep wants a number of checkpoints, got '%s'",
					  optarg);
				return CTL_EXIT_USAGE;
			}
			break;
		}
		case OPT_DRY:
		case 'n':
			a.dry = true;
			break;
		case 'h':
			store_usage(stdout);
			return CTL_EXIT_OK;
		default:
			store_usage(stderr);
			return CTL_EXIT_USAGE;
		}
	}
	if (optind >= argc) {
		ctl_error("store: no subcommand given");
		store_usage(stderr);
		return CTL_EXIT_USAGE;
	}
	if (!a.dir)
		a.dir = getenv("CRCUDA_STORE");
	if (!a.dir || !*a.dir) {
		const char *home = getenv("HOME");
		if (!home || asprintf(&def, "%s/.local/share/crcuda/store", home) < 0) {
			ctl_error("no store given: use --store DIR or set CRCUDA_STORE (HOME is not set)");
			return CTL_EXIT_USAGE;
		}
		a.dir = def;
	}
	a.argc = argc - optind - 1;
	a.argv = argv + optind + 1;
	if ((a.keep >= 0 || a.dry) && strcmp(argv[optind], "prune")) {
		ctl_error("store: --keep and --dry-run are prune's");
		free(def);
		return CTL_EXIT_USAGE;
	}
	for (size_t i = 0; i < sizeof(store_cmds) / sizeof(store_cmds[0]); i++) {
		if (!strcmp(argv[optind], store_cmds[i].name)) {
			ret = store_cmds[i].fn(&a);
			free(def);
			return ret;
		}
	}
	ctl_error("store: unknown subcommand '%s'", argv[optind]);
	store_usage(stderr);
	free(def);
	return CTL_EXIT_USAGE;
}
