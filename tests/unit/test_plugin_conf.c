/* The CRIU plugin's plugin.conf (criu-plugin/conf.c): values, comments and spacing, the environment
 * winning over the file, the library's variables put into the environment, and each malformed line
 * refused with one line naming the file and the line, nothing of the file kept. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "conf.h"

static char path[64];

static void write_conf(const char *text)
{
	FILE *f = fopen(path, "w");

	CHECK(f != NULL);
	CHECK(fputs(text, f) >= 0);
	CHECK(fclose(f) == 0);
}

/* A file that must be refused: why is "PATH:LINE: want". */
static void refused(const char *text, const char *want)
{
	char why[512] = "", expect[512];

	write_conf(text);
	CHECK_EQ_INT(crc_plugin_conf_load(why, sizeof(why)), -1);
	snprintf(expect, sizeof(expect), "%s:%s", path, want);
	CHECK_EQ_STR(why, expect);
	CHECK(!strchr(why, '\n'));
	CHECK(crc_plugin_cfg_file("CRCUDA_STORE") == NULL); /* nothing of it is kept */
}

int main(void)
{
	char why[512] = "", big[9000];
	int fd;

	snprintf(path, sizeof(path), "/tmp/crcuda-conf-test.XXXXXX");
	fd = mkstemp(path);
	CHECK(fd >= 0);
	close(fd);
	setenv("CRCUDA_PLUGIN_CONF", path, 1);
	unsetenv("CRCUDA_STORE");
	unsetenv("CRCUDA_DAEMON");
	unsetenv("CRCUDA_STATE");
	unsetenv("CRCUDA_TLS_CA");
	unsetenv("CRCUDA_TIMEOUT_MS");

	write_conf("# crcuda\n\n  store =  /var/lib/crcuda/store  \nstate=images\ndaemon = /run/a.sock\n"
		   "daemon = /run/b.sock\n\t# indented comment\ntls_ca = /etc/ca.pem\ntimeout_ms = 5000");
	CHECK_EQ_INT(crc_plugin_conf_load(why, sizeof(why)), 0);
	CHECK_EQ_STR(crc_plugin_cfg("CRCUDA_STORE"), "/var/lib/crcuda/store");
	CHECK_EQ_STR(crc_plugin_cfg("CRCUDA_STATE"), "images");
	CHECK_EQ_STR(crc_plugin_cfg("CRCUDA_DAEMON"), "/run/b.sock"); /* the later line wins */
	CHECK_EQ_STR(crc_plugin_cfg("CRCUDA_TIMEOUT_MS"), "5000");    /* no newline at the end */
	CHECK(crc_plugin_cfg("CRCUDA_GPU") == NULL);
	CHECK(crc_plugin_cfg("CRCUDA_NOT_A_KEY") == NULL);
	/* The library reads TLS settings from the environment: put there. */
	CHECK_EQ_STR(getenv("CRCUDA_TLS_CA"), "/etc/ca.pem");
	/* The environment wins; an empty variable counts as unset. */
	setenv("CRCUDA_STORE", "/env/store", 1);
	setenv("CRCUDA_DAEMON", "", 1);
	CHECK_EQ_STR(crc_plugin_cfg("CRCUDA_STORE"), "/env/store");
	CHECK_EQ_STR(crc_plugin_cfg_file("CRCUDA_STORE"), "/var/lib/crcuda/store");
	CHECK_EQ_STR(crc_plugin_cfg("CRCUDA_DAEMON"), "/run/b.sock");
	/* A variable already set is left as it is. */
	setenv("CRCUDA_TLS_CA", "/env/ca.pem", 1);
	CHECK_EQ_INT(crc_plugin_conf_load(why, sizeof(why)), 0);
	CHECK_EQ_STR(getenv("CRCUDA_TLS_CA"), "/env/ca.pem");
	unsetenv("CRCUDA_STORE");

	refused("store = /s\nstor = /x\n",
		"2: unknown key 'stor' (known: store, daemon, token_file, timeout_ms, "
		"state, store_sync, gpu, report, plugin, insecure, tls_ca, tls_cert, "
		"tls_key)");
	refused("store = /s\n# ok\njust words\n", "3: expected key = value, found 'just words'");
	refused("store =\n", "1: store has no value");
	refused("state = imgs\n", "1: state = 'imgs': expected store or images");
	refused("timeout_ms = 10s\n", "1: timeout_ms = '10s': expected a positive number of milliseconds");
	refused("timeout_ms = -1\n", "1: timeout_ms = '-1': expected a positive number of milliseconds");
	refused("plugin = no\n", "1: plugin = 'no': expected on or off");
	refused("store_sync = yes\n", "1: store_sync = 'yes': expected 0 or 1");
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = 0;
	memcpy(big, "store = ", 8);
	refused(big, "1: line too long");

	/* No file: nothing set, no error. */
	unlink(path);
	CHECK_EQ_INT(crc_plugin_conf_load(why, sizeof(why)), 0);
	CHECK(crc_plugin_cfg("CRCUDA_STATE") == NULL);
	/* A directory: one line saying so. */
	setenv("CRCUDA_PLUGIN_CONF", "/tmp", 1);
	CHECK_EQ_INT(crc_plugin_conf_load(why, sizeof(why)), -1);
	CHECK_EQ_STR(why, "/tmp: Is a directory");
	crc_plugin_conf_clear();
	CHECK(crc_plugin_valid_state("store") && crc_plugin_valid_state("images") &&
	      !crc_plugin_valid_state(""));
	return 0;
}
