#include "crcuda/proctree.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void crc_signal_tree(pid_t root, int sig)
{
	struct proc_link {
		pid_t pid, ppid;
	} *procs = NULL;
	pid_t *todo;
	size_t n = 0, cap = 0, ntodo = 0;
	DIR *proc = opendir("/proc");
	struct dirent *de;

	while (proc && (de = readdir(proc))) {
		char path[64], buf[512], *close_paren;
		long pid = strtol(de->d_name, NULL, 10);
		int fd, ppid;
		ssize_t len;

		if (pid <= 0)
			continue;
		snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		len = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
		if (fd >= 0)
			close(fd);
		if (len <= 0)
			continue;
		buf[len] = 0;
		/* "pid (comm) state ppid ...": comm may hold spaces and parentheses. */
		close_paren = strrchr(buf, ')');
		if (!close_paren || sscanf(close_paren + 1, " %*c %d", &ppid) != 1)
			continue;
		if (n == cap) {
			struct proc_link *more = realloc(procs, (cap ? cap * 2 : 256) * sizeof(*more));

			if (!more)
				break;
			procs = more;
			cap = cap ? cap * 2 : 256;
		}
		procs[n++] = (struct proc_link){(pid_t)pid, (pid_t)ppid};
	}
	if (proc)
		closedir(proc);
	todo = malloc((n + 1) * sizeof(*todo));
	if (!todo) {
		kill(root, sig);
		free(procs);
		return;
	}
	todo[ntodo++] = root;
	for (size_t i = 0; i < ntodo; i++)
		for (size_t k = 0; k < n; k++)
			if (procs[k].ppid == todo[i] && procs[k].pid != root)
				todo[ntodo++] = procs[k].pid;
	for (size_t i = 0; i < ntodo; i++)
		kill(todo[i], sig);
	free(todo);
	free(procs);
}
