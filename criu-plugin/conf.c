/* The CRIU plugin's configuration file (conf.h). Apart from the plugin, so that a unit test reads it. */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf.h"

static bool valid_number(const char *v)
{
	char *end;

	errno = 0;
	return strtol(v, &end, 10) > 0 && !*end && !errno;
}
bool crc_plugin_valid_state(const char *v)
{
	return !strcmp(v, "store") || !strcmp(v, "images");
}
static bool valid_01(const char *v)
{
	return !strcmp(v, "0") || !strcmp(v, "1");
}
static bool valid_onoff(const char *v)
{
	return !strcmp(v, "on") || !strcmp(v, "off");
}

/* plugin.conf's keys: each one the default of an environment variable, which wins where it is set.
 * Container runtimes run CRIU with their own environment; the file is how they configure us. */
static const struct conf_key {
	const char *key, *env;
	bool (*valid)(const char *v);
	const char *expect;
	bool to_env; /* read by the library (common/tls.c) from the environment: put there where unset */
} conf_keys[] = {
    {"store", "CRCUDA_STORE", NULL, NULL, false},
    {"daemon", "CRCUDA_DAEMON", NULL, NULL, false},
    {"token_file", "CRCUDA_TOKEN_FILE", NULL, NULL, false},
    {"timeout_ms", "CRCUDA_TIMEOUT_MS", valid_number, "a positive number of milliseconds", false},
    {"state", "CRCUDA_STATE", crc_plugin_valid_state, "store or images", false},
    {"store_sync", "CRCUDA_STORE_SYNC", valid_01, "0 or 1", false},
    {"gpu", "CRCUDA_GPU", NULL, NULL, false},
    {"report", "CRCUDA_PLUGIN_REPORT", NULL, NULL, false},
    {"plugin", "CRCUDA_PLUGIN", valid_onoff, "on or off", false},
    {"insecure", "CRCUDA_INSECURE", valid_01, "0 or 1", true},
    {"tls_ca", "CRCUDA_TLS_CA", NULL, NULL, true},
    {"tls_cert", "CRCUDA_TLS_CERT", NULL, NULL, true},
    {"tls_key", "CRCUDA_TLS_KEY", NULL, NULL, true},
};
#define NCONF (sizeof(conf_keys) / sizeof(conf_keys[0]))
static char *conf_values[NCONF]; /* what the file says, or NULL */
static char conf_path[PATH_MAX];

const char *crc_plugin_cfg(const char *env)
{
	const char *v = getenv(env);

	if (v && *v)
		return v;
	for (size_t i = 0; i < NCONF; i++)
		if (!strcmp(conf_keys[i].env, env))
			return conf_values[i];
	return NULL;
}

const char *crc_plugin_cfg_file(const char *env)
{
	for (size_t i = 0; i < NCONF; i++)
		if (!strcmp(conf_keys[i].env, env))
			return conf_values[i];
	return NULL;
}

static char *trim(char *p)
{
	char *end;

	while (isspace((unsigned char)*p))
		p++;
	end = p + strlen(p);
	while (end > p && isspace((unsigned char)end[-1]))
		*--end = 0;
	return p;
}

void crc_plugin_conf_clear(void)
{
	for (size_t i = 0; i < NCONF; i++) {
		free(conf_values[i]);
		conf_values[i] = NULL;
	}
}

int crc_plugin_conf_load(char *why, size_t len)
{
	const char *env = getenv("CRCUDA_PLUGIN_CONF");
	char line[PATH_MAX + 64];
	unsigned lineno = 0;
	int rc = 0;
	FILE *f;

	crc_plugin_conf_clear();
	snprintf(conf_path, sizeof(conf_path), "%s", env && *env ? env : CRC_PLUGIN_CONF);
	f = fopen(conf_path, "re");
	if (!f) {
		if (errno == ENOENT)
			return 0;
		snprintf(why, len, "%s: %s", conf_path, strerror(errno));
		return -1;
	}
	while (!rc && fgets(line, sizeof(line), f)) {
		size_t n = strlen(line);
		const struct conf_key *k = NULL;
		char *key, *val, *eq;

		lineno++;
		if (n && line[n - 1] == '\n')
			line[--n] = 0;
		else if (!feof(f)) {
			snprintf(why, len, "%s:%u: line too long", conf_path, lineno);
			rc = -1;
			break;
		}
		key = trim(line);
		if (!*key || *key == '#')
			continue;
		if (!(eq = strchr(key, '='))) {
			snprintf(why, len, "%s:%u: expected key = value, found '%.80s'", conf_path, lineno,
				 key);
			rc = -1;
			break;
		}
		*eq = 0;
		val = trim(eq + 1);
		key = trim(key);
		for (size_t i = 0; i < NCONF && !k; i++)
			if (!strcmp(conf_keys[i].key, key))
				k = &conf_keys[i];
		if (!k) {
			char known[256] = "";

			for (size_t i = 0, n = 0; i < NCONF && n < sizeof(known); i++)
				n += (size_t)snprintf(known + n, sizeof(known) - n, "%s%s", i ? ", " : "",
						      conf_keys[i].key);
			snprintf(why, len, "%s:%u: unknown key '%.80s' (known: %s)", conf_path, lineno, key,
				 known);
			rc = -1;
		} else if (!*val) {
			snprintf(why, len, "%s:%u: %s has no value", conf_path, lineno, key);
			rc = -1;
		} else if (k->valid && !k->valid(val)) {
			snprintf(why, len, "%s:%u: %s = '%.80s': expected %s", conf_path, lineno, key, val,
				 k->expect);
			rc = -1;
		} else {
			char **slot = &conf_values[k - conf_keys];

			free(*slot);
			if (!(*slot = strdup(val))) {
				snprintf(why, len, "%s: out of memory", conf_path);
				rc = -1;
			}
		}
	}
	if (!rc && ferror(f)) {
		snprintf(why, len, "%s: %s", conf_path, strerror(errno));
		rc = -1;
	}
	fclose(f);
	if (rc) {
		crc_plugin_conf_clear();
		return rc;
	}
	for (size_t i = 0; i < NCONF; i++) {
		const char *v = getenv(conf_keys[i].env);

		if (conf_keys[i].to_env && conf_values[i] && (!v || !*v) &&
		    setenv(conf_keys[i].env, conf_values[i], 1)) {
			snprintf(why, len, "%s: %s", conf_path, strerror(errno));
			return -1;
		}
	}
	return 0;
}
