/* seqdiff.c: the C client's receive window (§7.3) on packets read from
 * stdin, one "seq ack ackbits" line each, for seqwin_test.go to compare with
 * Go's internal/seqwin. The program plays the server: it completes a
 * handshake with a fixed cookie (ServerSeq 9264, ClientSeq 8159), then
 * delivers each line as a KeepAlive at one instant and prints the verdict:
 * accept, stale, suspect or other. */
#include <stdio.h>
#include <stdlib.h>

#include "../src/internal.h"

static uint8_t inbox[2048], outbox[2048];
static int inbox_len, outbox_len;
static udpgate_address server;

static int fsend(void *ctx, const udpgate_address *to, const uint8_t *d, size_t n) {
    (void)ctx; (void)to;
    memcpy(outbox, d, n);
    outbox_len = (int)n;
    return (int)n;
}

static int frecv(void *ctx, udpgate_address *from, uint8_t *buf, size_t cap) {
    int n = inbox_len;
    (void)ctx; (void)cap;
    inbox_len = 0;
    if (n)
        memcpy(buf, inbox, (size_t)n);
    *from = server;
    return n;
}

static const uint8_t cookie[20] = {0x30, 0xe4, 0xdf, 0xdf, 0xbc, 0xab, 0xc5, 0x56, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};

static void deliver(udpgate_client *c, const uint8_t *d, int n, double t) {
    memcpy(inbox, d, (size_t)n);
    inbox_len = n;
    udpgate_client_update(c, t);
}

static void answer(udpgate_client *c, int type, double t) {
    ug_handshake h;
    ug_magic m;
    uint8_t b[128];
    ug_magic_parse(&m, "");
    if (ug_decode_handshake(&m, outbox, (size_t)outbox_len, &h) != UG_PASS)
        exit(3);
    h.type = (uint8_t)type;
    h.secret_id = 1;
    h.timestamp = type == UG_CHALLENGE ? 0x41da000000000000ull : 0xbff0000000000000ull;
    memcpy(h.cookie, cookie, 20);
    h.random_len = 8;
    deliver(c, b, ug_encode_handshake(b, sizeof b, &m, &h), t);
}

int main(void) {
    udpgate_config cfg;
    udpgate_client *c;
    udpgate_stats before, after;
    unsigned seq, ack;
    unsigned long long bits;
    double t = 1000;
    int client_id;
    udpgate_default_config(&cfg);
    cfg.send = fsend;
    cfg.receive = frecv;
    cfg.timeout = 1e9;
    if (udpgate_client_create(&cfg, &c) != UDPGATE_OK || udpgate_client_connect(c, "127.0.0.1:40000", t) != UDPGATE_OK)
        return 2;
    udpgate_address_parse(&server, "127.0.0.1:40000");
    client_id = (outbox[0] >> 2) & 7;
    answer(c, UG_CHALLENGE, t);
    answer(c, UG_ACK, t);
    if (udpgate_client_state(c) != UDPGATE_STATE_CONNECTED)
        return 4;
    while (scanf("%u %u %llx", &seq, &ack, &bits) == 3) {
        ug_conn_header h;
        ug_magic m;
        uint8_t b[64];
        ug_magic_parse(&m, "");
        h.session_id = 0;
        h.client_id = (uint8_t)client_id;
        h.tag = ug_le32(cookie + 4);
        h.seq = (uint16_t)seq;
        h.ack = (uint16_t)ack;
        h.ack_bits = bits;
        h.kind = UG_KIND_KEEPALIVE;
        udpgate_client_stats(c, &before);
        deliver(c, b, ug_encode_conn(b, sizeof b, &m, &h, NULL, 0), t);
        udpgate_client_stats(c, &after);
        if (after.packets_received > before.packets_received)
            printf("accept\n");
        else if (after.drops[UDPGATE_DROP_STALE_SEQUENCE] > before.drops[UDPGATE_DROP_STALE_SEQUENCE])
            printf("stale\n");
        else if (after.drops[UDPGATE_DROP_SUSPECT_SEQUENCE] > before.drops[UDPGATE_DROP_SUSPECT_SEQUENCE])
            printf("suspect\n");
        else
            printf("other\n");
    }
    udpgate_client_destroy(c);
    return 0;
}
