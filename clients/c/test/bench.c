/* bench.c: throughput of the C client against an echoing udpgate server.
 *   bench ADDRESS COUNT SIZE CHANNEL
 * sends COUNT messages of SIZE bytes on CHANNEL as fast as the send queue
 * takes them, from one thread, and receives their echoes; prints
 * "rate <messages per second each way> ..." once COUNT echoes are in (a
 * reliable channel: all of them; otherwise until 2 s pass without one). */
#define _POSIX_C_SOURCE 200112L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "udpgate.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    udpgate_config cfg;
    udpgate_client *c;
    udpgate_stats st;
    static uint8_t msg[65536], buf[1 << 20];
    long count, sent = 0, got = 0;
    int size, chan, ch, n;
    double t0, t, last_got;
    if (argc != 5)
        return 2;
    count = atol(argv[2]);
    size = atoi(argv[3]);
    chan = atoi(argv[4]);
    udpgate_default_config(&cfg);
    cfg.send_queue_bytes = 4 << 20;
    cfg.socket_buffer_bytes = 8 << 20;
    cfg.receive_queue_bytes = 4 << 20;
    cfg.unreliable_queue_bytes = 1 << 20;
    if (udpgate_client_create(&cfg, &c) != UDPGATE_OK || udpgate_client_connect(c, argv[1], now()) != UDPGATE_OK)
        return 1;
    t0 = now();
    while (udpgate_client_state(c) == UDPGATE_STATE_CONNECTING && now() - t0 < 10)
        udpgate_client_update(c, now());
    if (udpgate_client_state(c) != UDPGATE_STATE_CONNECTED) {
        printf("FAIL %s\n", udpgate_state_name(udpgate_client_state(c)));
        return 1;
    }
    memset(msg, 0xab, sizeof msg);
    t0 = last_got = now();
    while (got < count) {
        t = now();
        while (sent < count && udpgate_client_send(c, chan, msg, (size_t)size) == UDPGATE_OK)
            sent++;
        udpgate_client_update(c, t);
        while ((n = udpgate_client_receive(c, &ch, buf, sizeof buf)) >= 0) {
            got++;
            last_got = t;
        }
        if (udpgate_client_state(c) != UDPGATE_STATE_CONNECTED) {
            printf("FAIL %s after %ld echoes\n", udpgate_state_name(udpgate_client_state(c)), got);
            return 1;
        }
        if (t - last_got > (chan == 0 ? 30 : 2))
            break;
    }
    t = last_got - t0;
    udpgate_client_stats(c, &st);
    {
        struct rusage ru;
        double cpu;
        getrusage(RUSAGE_SELF, &ru);
        cpu = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
              (double)ru.ru_stime.tv_usec / 1e6;
        printf("cpu %.3f s (the whole process, one thread)\n", cpu);
    }
    printf("rate %.0f sent %ld echoes %ld in %.3f s; packets sent %llu received %llu resends %llu\n",
           (double)got / t, sent, got, t, (unsigned long long)st.packets_sent,
           (unsigned long long)st.packets_received, (unsigned long long)st.resends);
    udpgate_client_disconnect(c, now());
    udpgate_client_destroy(c);
    return 0;
}
