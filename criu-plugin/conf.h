/* The CRIU plugin's configuration file, /etc/crcuda/plugin.conf (criu-plugin/README.md): each key the
 * default of an environment variable, which wins where it is set. Container runtimes run CRIU with
 * an environment of their own; the file is how they configure the plugin. */
#ifndef CRCUDA_PLUGIN_CONF_H
#define CRCUDA_PLUGIN_CONF_H

#include <stdbool.h>
#include <stddef.h>

#define CRC_PLUGIN_CONF "/etc/crcuda/plugin.conf"

/* Reads CRCUDA_PLUGIN_CONF, else CRC_PLUGIN_CONF: "key = value" lines, '#' comments and blank lines;
 * a later line wins over an earlier one. No file: 0, nothing set. A line that is none of these, an
 * unknown key, an empty or invalid value: -1 with one line in why naming the file and the line, and
 * nothing of the file is used. The TLS keys and insecure are put into the environment where it
 * lacks them (the library reads them there). */
int crc_plugin_conf_load(char *why, size_t len);
/* The environment's value of a configured variable (env: its name, CRCUDA_...), else the file's;
 * NULL: neither. An empty variable counts as unset. */
const char *crc_plugin_cfg(const char *env);
/* The file's value for env, or NULL. */
const char *crc_plugin_cfg_file(const char *env);
/* Forgets what the file said. */
void crc_plugin_conf_clear(void);
/* "store" or "images" (CRCUDA_STATE). */
bool crc_plugin_valid_state(const char *v);

#endif
