/*
 * The bench's C floor (variant rawecho/c): the raw echo of bench/roles.go
 * written in C, with the same batch shape as udpgate's loops. One
 * SO_REUSEPORT UDP socket per thread on 127.0.0.1 (port 0: the kernel's
 * choice for the whole group), each thread a blocking
 * recvmmsg(MSG_WAITFORONE) of up to BATCH datagrams followed by one
 * sendmmsg of the same batch back to its senders. Buffers and the
 * don't-fragment setting are batchio's defaults.
 *
 * It speaks the harness's child protocol (bench/roles.go, childMain):
 * "READY <port>" once bound, then it serves until stdin closes (or
 * MAXSECONDS pass) and prints "STATS ...". The harness compiles it with
 * the system's C compiler into a temporary directory at bench time; no
 * binary is kept.
 *
 * Usage: echo SOCKETS BATCH MSGSIZE BUFFER FRAG MAXSECONDS
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

struct worker {
	int fd;
	int batch, msgsize;
	unsigned long long rx, tx, rxcalls, txcalls;
	char pad[64];
};

static void die(const char *what) {
	printf("ERROR %s: %s\n", what, strerror(errno));
	fflush(stdout);
	exit(1);
}

static void setbuf_(int fd, int force, int opt, int want) {
	if (setsockopt(fd, SOL_SOCKET, force, &want, sizeof want) != 0)
		setsockopt(fd, SOL_SOCKET, opt, &want, sizeof want);
}

static int open_socket(int port, int buffer, int frag) {
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, IPPROTO_UDP);
	if (fd < 0)
		die("socket");
	int one = 1;
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) != 0)
		die("setsockopt SO_REUSEPORT");
	setbuf_(fd, SO_RCVBUFFORCE, SO_RCVBUF, buffer);
	setbuf_(fd, SO_SNDBUFFORCE, SO_SNDBUF, buffer);
	if (!frag) {
		int v = IP_PMTUDISC_PROBE;
		if (setsockopt(fd, IPPROTO_IP, IP_MTU_DISCOVER, &v, sizeof v) != 0)
			die("setsockopt IP_MTU_DISCOVER");
	}
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port),
	                         .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0)
		die("bind");
	return fd;
}

static void *serve(void *arg) {
	struct worker *w = arg;
	int n = w->batch;
	struct mmsghdr *msgs = calloc(n, sizeof *msgs);
	struct iovec *iov = calloc(n, sizeof *iov);
	struct sockaddr_in *names = calloc(n, sizeof *names);
	char *bufs = malloc((size_t)n * w->msgsize);
	if (!msgs || !iov || !names || !bufs)
		die("malloc");
	for (;;) {
		for (int i = 0; i < n; i++) {
			iov[i].iov_base = bufs + (size_t)i * w->msgsize;
			iov[i].iov_len = w->msgsize;
			msgs[i].msg_hdr = (struct msghdr){.msg_name = &names[i], .msg_namelen = sizeof names[i],
			                                  .msg_iov = &iov[i], .msg_iovlen = 1};
		}
		int got = recvmmsg(w->fd, msgs, n, MSG_WAITFORONE, NULL);
		if (got < 0) {
			if (errno == EINTR)
				continue;
			return NULL;
		}
		w->rxcalls++;
		w->rx += got;
		for (int i = 0; i < got; i++)
			iov[i].iov_len = msgs[i].msg_len;
		for (int off = 0; off < got;) {
			int sent = sendmmsg(w->fd, msgs + off, got - off, 0);
			w->txcalls++;
			if (sent < 0) {
				if (errno == EINTR || errno == EAGAIN || errno == ENOBUFS)
					continue;
				off++; /* the kernel refused this one: skip it, as batchio does */
				continue;
			}
			off += sent;
			w->tx += sent;
		}
	}
}

int main(int argc, char **argv) {
	if (argc != 7) {
		printf("ERROR usage: %s SOCKETS BATCH MSGSIZE BUFFER FRAG MAXSECONDS\n", argv[0]);
		return 2;
	}
	int sockets = atoi(argv[1]), batch = atoi(argv[2]), msgsize = atoi(argv[3]);
	int buffer = atoi(argv[4]), frag = atoi(argv[5]), maxsec = atoi(argv[6]);
	if (sockets < 1 || batch < 1 || msgsize < 1) {
		printf("ERROR bad arguments\n");
		return 2;
	}
	struct worker *ws = calloc(sockets, sizeof *ws);
	int port = 0;
	for (int i = 0; i < sockets; i++) {
		ws[i] = (struct worker){.fd = open_socket(port, buffer, frag), .batch = batch, .msgsize = msgsize};
		if (i == 0) {
			struct sockaddr_in sa;
			socklen_t len = sizeof sa;
			if (getsockname(ws[0].fd, (struct sockaddr *)&sa, &len) != 0)
				die("getsockname");
			port = ntohs(sa.sin_port);
		}
	}
	for (int i = 0; i < sockets; i++) {
		pthread_t t;
		if (pthread_create(&t, NULL, serve, &ws[i]) != 0)
			die("pthread_create");
		pthread_detach(t);
	}
	alarm(maxsec > 0 ? maxsec : 600);
	printf("READY %d\n", port);
	fflush(stdout);
	char line[256];
	while (fgets(line, sizeof line, stdin)) {
		printf("ERROR unknown request\n");
		fflush(stdout);
	}
	unsigned long long rx = 0, tx = 0, rc = 0, tc = 0;
	for (int i = 0; i < sockets; i++) {
		rx += __atomic_load_n(&ws[i].rx, __ATOMIC_RELAXED);
		tx += __atomic_load_n(&ws[i].tx, __ATOMIC_RELAXED);
		rc += __atomic_load_n(&ws[i].rxcalls, __ATOMIC_RELAXED);
		tc += __atomic_load_n(&ws[i].txcalls, __ATOMIC_RELAXED);
	}
	printf("STATS rx=%llu fill=%.1f tx=%llu tx_calls=%llu sockets=%d\n", rx, rc ? (double)rx / rc : 0.0, tx, tc, sockets);
	fflush(stdout);
	return 0;
}
