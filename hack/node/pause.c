/* The pod sandbox's process: it holds the pod's namespaces and does nothing else.
 *
 * A node made by `make node` pulls no image, so its sandbox ("pause") image is built here
 * from this file: the first process of every pod (not PID 1 in a pod sharing the host's
 * PID namespace), it sleeps until told to stop, exits 0 on SIGINT or SIGTERM, and reaps
 * the zombies a shared PID namespace leaves it.
 */
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) { (void)sig; _exit(0); }

static void reap(int sig) {
	(void)sig;
	while (waitpid(-1, NULL, WNOHANG) > 0) {
	}
}

int main(void) {
	struct sigaction on_stop = {.sa_handler = stop};
	struct sigaction on_child = {.sa_handler = reap, .sa_flags = SA_NOCLDSTOP};
	sigaction(SIGINT, &on_stop, NULL);
	sigaction(SIGTERM, &on_stop, NULL);
	sigaction(SIGCHLD, &on_child, NULL);
	for (;;) {
		pause();
	}
}
