/* fake_server.h: the server side of the C test programs that drive a
 * client through its transport callbacks (api.c, msgdiff.c, seqdiff.c):
 * one datagram each way, and Challenge and Ack answers with a fixed
 * cookie (ServerSeq 9264, ClientSeq 8159). Include after internal.h. */
#ifndef UDPGATE_TEST_FAKE_SERVER_H
#define UDPGATE_TEST_FAKE_SERVER_H

static uint8_t inbox[2048], outbox[2048];
static int inbox_len, outbox_len;
static udpgate_address server;

static inline int fsend(void *ctx, const udpgate_address *to, const uint8_t *d, size_t n) {
    (void)ctx; (void)to;
    memcpy(outbox, d, n);
    outbox_len = (int)n;
    return (int)n;
}

static inline int frecv(void *ctx, udpgate_address *from, uint8_t *buf, size_t cap) {
    int n = inbox_len;
    (void)ctx; (void)cap;
    inbox_len = 0;
    if (n)
        memcpy(buf, inbox, (size_t)n);
    *from = server;
    return n;
}

static const uint8_t cookie[20] = {0x30, 0xe4, 0xdf, 0xdf, 0xbc, 0xab, 0xc5, 0x56, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};

static inline void deliver(udpgate_client *c, const uint8_t *d, int n, double t) {
    memcpy(inbox, d, (size_t)n);
    inbox_len = n;
    udpgate_client_update(c, t);
}

static inline void answer(udpgate_client *c, int type, double t) {
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

/* connect_fake creates a client with cfg (its send and receive set to the
 * fake's) and completes its handshake at t; it returns 0 and the client's
 * ClientID in *client_id, or the exit code of what failed: 2 creating or
 * connecting, 4 not connected after the Challenge and Ack. */
static inline int connect_fake(udpgate_config *cfg, udpgate_client **c, double t, int *client_id) {
    cfg->send = fsend;
    cfg->receive = frecv;
    if (udpgate_client_create(cfg, c) != UDPGATE_OK || udpgate_client_connect(*c, "127.0.0.1:40000", t) != UDPGATE_OK)
        return 2;
    udpgate_address_parse(&server, "127.0.0.1:40000");
    *client_id = (outbox[0] >> 2) & 7;
    answer(*c, UG_CHALLENGE, t);
    answer(*c, UG_ACK, t);
    return udpgate_client_state(*c) == UDPGATE_STATE_CONNECTED ? 0 : 4;
}

#endif
