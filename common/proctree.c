#include "crcuda/proctree.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

pid_t crc_proc_parent(pid_t pid)
{
	char path[64], buf[512], *close_paren;
	int fd, ppid;
	ssize_t len;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	len = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
	if (fd >= 0)
		close(fd);
	if (len <= 0)
		return 0;
	buf[len] = 0;
	/* "pid (comm) state ppid ...": comm may hold spaces and parentheses. */
	close_paren = strrchr(buf, ')');
	if (!close_paren || sscanf(close_paren + 1, " %*c %d", &ppid) != 1)
		return 0;
	return (pid_t)ppid;
}

size_t crc_proc_tree(pid_t root, pid_t **out)
{
	struct proc_link {
		pid_t pid, ppid;
	} *procs = NULL;
	pid_t *todo;
	size_t n = 0, cap = 0, ntodo = 0;
	DIR *proc = opendir("/proc");
	struct dirent *de;

	/* One snapshot of every process's parent, then the tree from root down. */
	while (proc && (de = readdir(proc))) {
		long pid = strtol(de->d_name, NULL, 10);
		pid_t ppid;

		if (pid <= 0 || !(ppid = crc_proc_parent((pid_t)pid)))
			continue;
		if (n == cap) {
			struct proc_link *more = realloc(procs, (cap ? cap * 2 : 256) * sizeof(*more));

			if (!more)
				break;
			procs = more;
			cap = cap ? cap * 2 : 256;
		}
		procs[n++] = (struct proc_link){(pid_t)pid, ppid};
	}
	if (proc)
		closedir(proc);
	todo = malloc((n + 1) * sizeof(*todo));
	if (todo) {
		todo[ntodo++] = root;
		for (size_t i = 0; i < ntodo; i++)
			for (size_t k = 0; k < n; k++)
				if (procs[k].ppid == todo[i] && procs[k].pid != root)
					todo[ntodo++] = procs[k].pid;
	}
	free(procs);
	*out = todo;
	return ntodo;
}

void crc_signal_tree(pid_t root, int sig)
{
	pid_t *tree;
	size_t n = crc_proc_tree(root, &tree);

	if (!tree) {
		kill(root, sig);
		return;
	}
	for (size_t i = 0; i < n; i++)
		kill(tree[i], sig);
	free(tree);
}
