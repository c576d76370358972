/* client.c: the C client against a udpgate server, driven by
 * clients/c/interop_test.go. Usage:
 *
 *   client [-token FILE] [-nv N] [-timeout S] [-connect-timeout S] [-callbacks 4|6]
 *          [-magic BITS] MODE ADDRESS [ARGS]
 *
 * Modes: connect (print the state reached), wait (connect, then print the
 * ending and when it came), reliable N (N numbered messages on channel 0, the
 * echoes checked once and in order), big BYTES (one message of BYTES, echo
 * byte-exact), sequenced N (sequenced channel 2: echoes strictly newer), data N
 * (N Data packets, echoes intact and at most once).
 * Every mode checks that the allocator hook is not called after create.
 * Prints "ok ..." and exits 0, or "FAIL ..." and exits 1. */
#define _POSIX_C_SOURCE 200112L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "udpgate.h"

/* -callbacks: the program owns the socket and hands the library send and
 * receive callbacks, as an engine does with its own sockets. */
static int own_fd = -1;

static int cb_send(void *ctx, const udpgate_address *to, const uint8_t *d, size_t n) {
    struct sockaddr_storage ss;
    socklen_t sl;
    (void)ctx;
    memset(&ss, 0, sizeof ss);
    if (to->family == 4) {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        a->sin_family = AF_INET;
        a->sin_port = htons(to->port);
        memcpy(&a->sin_addr, to->ip, 4);
        sl = sizeof *a;
    } else {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        a->sin6_family = AF_INET6;
        a->sin6_port = htons(to->port);
        memcpy(&a->sin6_addr, to->ip, 16);
        sl = sizeof *a;
    }
    sendto(own_fd, d, n, 0, (struct sockaddr *)&ss, sl);
    return (int)n; /* a lost datagram is not an error */
}

static int cb_recv(void *ctx, udpgate_address *from, uint8_t *buf, size_t cap) {
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    long n = (long)recvfrom(own_fd, buf, cap, 0, (struct sockaddr *)&ss, &sl);
    (void)ctx;
    if (n <= 0)
        return 0;
    memset(from, 0, sizeof *from);
    if (ss.ss_family == AF_INET) {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        from->family = 4;
        from->port = ntohs(a->sin_port);
        memcpy(from->ip, &a->sin_addr, 4);
    } else {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        from->family = 6;
        from->port = ntohs(a->sin6_port);
        memcpy(from->ip, &a->sin6_addr, 16);
    }
    return (int)n;
}

static long allocs, frees;
static void *count_alloc(void *ctx, size_t n) { (void)ctx; allocs++; return malloc(n); }
static void count_free(void *ctx, void *p) { (void)ctx; frees++; free(p); }

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void nap(void) {
    struct timespec ts = {0, 500000};
    nanosleep(&ts, NULL);
}

static int fail(const char *what, udpgate_client *c) {
    udpgate_stats st;
    int i;
    udpgate_client_stats(c, &st);
    printf("FAIL %s (state %s %d, reason %d; sent %llu recv %llu resends %llu", what,
           udpgate_state_name(udpgate_client_state(c)), udpgate_client_state(c), udpgate_client_end_reason(c),
           (unsigned long long)st.packets_sent, (unsigned long long)st.packets_received,
           (unsigned long long)st.resends);
    for (i = 0; i < UDPGATE_DROP_COUNT; i++)
        if (st.drops[i])
            printf(" %s=%llu", udpgate_drop_name(i), (unsigned long long)st.drops[i]);
    printf(")\n");
    return 1;
}

static void fill(uint8_t *b, int len, uint32_t n) {
    int i;
    for (i = 0; i < len; i++)
        b[i] = (uint8_t)(n * 7 + (uint32_t)i * 13 + (uint32_t)(i >> 8));
    if (len >= 4)
        memcpy(b, &n, 4);
}

static int size_of(uint32_t i) { return i % 100 == 50 ? 5000 : 20 + (int)(i % 200); }

int main(int argc, char **argv) {
    udpgate_config cfg;
    udpgate_client *c;
    const char *token_file = NULL, *mode, *addr;
    static uint8_t token[UDPGATE_CONNECT_TOKEN_BYTES];
    static uint8_t buf[1 << 20], want[1 << 20];
    double t0, deadline;
    int i = 1, r, state, n = 0, ch;
    long created_allocs;

    udpgate_default_config(&cfg);
    cfg.allocate = count_alloc;
    cfg.free = count_free;
    for (; i < argc && argv[i][0] == '-'; i += 2) {
        if (i + 1 >= argc)
            return 2;
        if (!strcmp(argv[i], "-token")) token_file = argv[i + 1];
        else if (!strcmp(argv[i], "-nv")) cfg.network_version = (uint32_t)atol(argv[i + 1]);
        else if (!strcmp(argv[i], "-timeout")) cfg.timeout = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "-magic")) cfg.magic = argv[i + 1];
        else if (!strcmp(argv[i], "-connect-timeout")) cfg.connect_timeout = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "-callbacks")) {
            own_fd = socket(atoi(argv[i + 1]) == 6 ? AF_INET6 : AF_INET, SOCK_DGRAM, 0);
            if (own_fd < 0 || fcntl(own_fd, F_SETFL, O_NONBLOCK) != 0)
                return 2;
            cfg.send = cb_send;
            cfg.receive = cb_recv;
        }
        else return 2;
    }
    if (i + 2 > argc)
        return 2;
    mode = argv[i];
    addr = argv[i + 1];
    if (i + 2 < argc)
        n = atoi(argv[i + 2]);
    if ((r = udpgate_client_create(&cfg, &c)) != UDPGATE_OK) {
        printf("FAIL create: %s\n", udpgate_result_name(r));
        return 1;
    }
    created_allocs = allocs;
    t0 = now();
    if (token_file) {
        FILE *f = fopen(token_file, "rb");
        size_t got;
        if (!f) {
            printf("FAIL token file\n");
            return 1;
        }
        got = fread(token, 1, sizeof token, f);
        fclose(f);
        r = udpgate_client_connect_token(c, token, got, t0);
    } else {
        r = udpgate_client_connect(c, addr, t0);
    }
    if (r != UDPGATE_OK) {
        printf("FAIL connect: %s\n", udpgate_result_name(r));
        return 1;
    }
    deadline = t0 + 30;
    while ((state = udpgate_client_state(c)) == UDPGATE_STATE_CONNECTING && now() < deadline) {
        udpgate_client_update(c, now());
        nap();
    }
    if (!strcmp(mode, "connect")) {
        printf("state %d %.3f %s\n", state, now() - t0, udpgate_state_name(state));
        if (state == UDPGATE_STATE_CONNECTED)
            udpgate_client_disconnect(c, now());
        goto done;
    }
    if (state != UDPGATE_STATE_CONNECTED)
        return fail("not connected", c);
    if (!strcmp(mode, "wait")) {
        double connected_at = now();
        printf("connected\n");
        fflush(stdout);
        deadline = connected_at + 60;
        while ((state = udpgate_client_state(c)) == UDPGATE_STATE_CONNECTED && now() < deadline) {
            udpgate_client_update(c, now());
            while (udpgate_client_receive(c, &ch, buf, sizeof buf) >= 0)
                ;
            nap();
        }
        printf("state %d %.3f %s\n", state, now() - connected_at, udpgate_state_name(state));
        goto done;
    } else if (!strcmp(mode, "reliable")) {
        uint32_t sent = 0, got = 0;
        deadline = now() + 120;
        while (got < (uint32_t)n) {
            int len;
            if (now() > deadline)
                return fail("reliable: deadline", c);
            while (sent < (uint32_t)n) {
                fill(want, size_of(sent), sent);
                if (udpgate_client_send(c, 0, want, (size_t)size_of(sent)) != UDPGATE_OK)
                    break;
                sent++;
            }
            udpgate_client_update(c, now());
            if (udpgate_client_state(c) != UDPGATE_STATE_CONNECTED)
                return fail("reliable: connection ended", c);
            while ((len = udpgate_client_receive(c, &ch, buf, sizeof buf)) >= 0) {
                if (ch != 0)
                    continue;
                fill(want, size_of(got), got);
                if (len != size_of(got) || memcmp(buf, want, (size_t)len) != 0) {
                    uint32_t id;
                    memcpy(&id, buf, 4);
                    printf("FAIL echo %u is message %u (%d bytes): out of order, twice or corrupt\n", got, id, len);
                    return 1;
                }
                got++;
            }
            nap();
        }
        printf("ok reliable %u\n", got);
    } else if (!strcmp(mode, "big")) {
        int len, done_ = 0;
        fill(want, n, 12345);
        if ((r = udpgate_client_send(c, 0, want, (size_t)n)) != UDPGATE_OK) {
            printf("FAIL send: %s\n", udpgate_result_name(r));
            return 1;
        }
        deadline = now() + 120;
        while (!done_) {
            if (now() > deadline)
                return fail("big: deadline", c);
            udpgate_client_update(c, now());
            if (udpgate_client_state(c) != UDPGATE_STATE_CONNECTED)
                return fail("big: connection ended", c);
            while ((len = udpgate_client_receive(c, &ch, buf, sizeof buf)) >= 0) {
                if (ch != 0)
                    continue;
                if (len != n || memcmp(buf, want, (size_t)n) != 0) {
                    printf("FAIL big echo differs (%d bytes)\n", len);
                    return 1;
                }
                done_ = 1;
            }
            nap();
        }
        printf("ok big %d\n", n);
    } else if (!strcmp(mode, "sequenced")) {
        uint32_t sent = 0, last = 0, got = 0;
        int any = 0, len;
        double until;
        while (sent < (uint32_t)n) {
            fill(want, 8, sent);
            if (udpgate_client_send(c, 2, want, 8) == UDPGATE_OK)
                sent++;
            if (sent % 3 == 0) /* a few per update: some replace unsent older ones */
                udpgate_client_update(c, now());
            while ((len = udpgate_client_receive(c, &ch, buf, sizeof buf)) >= 0) {
                uint32_t id;
                if (ch != 2)
                    continue;
                memcpy(&id, buf, 4);
                if (any && id <= last) {
                    printf("FAIL sequenced %u after %u\n", id, last);
                    return 1;
                }
                last = id;
                any = 1;
                got++;
            }
            if (sent % 3 == 0)
                nap();
        }
        until = now() + 1;
        while (now() < until) {
            udpgate_client_update(c, now());
            while ((len = udpgate_client_receive(c, &ch, buf, sizeof buf)) >= 0) {
                uint32_t id;
                if (ch != 2)
                    continue;
                memcpy(&id, buf, 4);
                if (any && id <= last) {
                    printf("FAIL sequenced %u after %u\n", id, last);
                    return 1;
                }
                last = id;
                any = 1;
                got++;
            }
            nap();
        }
        if (!got)
            return fail("sequenced: nothing came back", c);
        printf("ok sequenced %u of %u, last %u\n", got, sent, last);
    } else if (!strcmp(mode, "data")) {
        /* n Data packets (§7.1), echoed by the server's OnPacket: each back at most once, intact */
        static uint8_t seen[100000];
        uint32_t k, got = 0;
        int len;
        double until;
        for (k = 0; k < (uint32_t)n && k < sizeof seen; k++) {
            fill(want, 100, k);
            if ((r = udpgate_client_send_data(c, want, 100)) != UDPGATE_OK) {
                printf("FAIL send_data: %s\n", udpgate_result_name(r));
                return 1;
            }
            udpgate_client_update(c, now());
        }
        until = now() + 10;
        while (now() < until && got < (uint32_t)n) {
            udpgate_client_update(c, now());
            while ((len = udpgate_client_receive(c, &ch, buf, sizeof buf)) >= 0) {
                uint32_t id;
                memcpy(&id, buf, 4);
                fill(want, 100, id);
                if (ch != UDPGATE_CHANNEL_DATA || len != 100 || id >= (uint32_t)n || seen[id] ||
                    memcmp(buf, want, 100) != 0) {
                    printf("FAIL data echo: channel %d, %d bytes, id %u\n", ch, len, id);
                    return 1;
                }
                seen[id] = 1;
                got++;
            }
            nap();
        }
        if (!got)
            return fail("data: nothing came back", c);
        printf("ok data %u of %d\n", got, n);
    } else {
        printf("FAIL unknown mode %s\n", mode);
        return 1;
    }
    udpgate_client_disconnect(c, now());
done:
    if (allocs != created_allocs) {
        printf("FAIL %ld allocations after create\n", allocs - created_allocs);
        return 1;
    }
    udpgate_client_destroy(c);
    if (frees != allocs) {
        printf("FAIL %ld allocations, %ld frees\n", allocs, frees);
        return 1;
    }
    printf("allocs %ld\n", allocs);
    return 0;
}
