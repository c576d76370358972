/* fuzz.c: a libFuzzer driver over the client's receive path
 * (clang -fsanitize=fuzzer,address,undefined; run by
 * clients/c/fuzz_test.go for $FUZZTIME_C).
 *
 * Input: a mode byte, then records [flags][len][bytes]. Mode 0 feeds the
 * records to a client that is handshaking; mode 1 completes a handshake
 * first (the driver plays the server) so the records meet a connected
 * client; mode 2 gets a sealed client to its proofs. A record with flag 1
 * on a connected unsealed client is wrapped as a connection packet that
 * passes the prefix, Tag and sequence checks (its bytes are Kind, AckBits
 * low byte and payload), so the fuzzer reaches the message decoder; on a
 * proving sealed client it is sealed under the token's key (its counter
 * the next, or with AckBits byte 0xff a reserved refusal counter), so the
 * fuzzer reaches the replay window and a sealed connection. Every
 * record advances the clock by (flags >> 1) ms and is followed by update()
 * and by draining receive(). One client serves every input (connect resets
 * it); no allocation may happen after its create. */
#include <stdio.h>
#include <stdlib.h>

#include "../src/internal.h"

static long allocs;
static void *count_alloc(void *ctx, size_t n) { (void)ctx; allocs++; return malloc(n); }
static void count_free(void *ctx, void *p) { (void)ctx; free(p); }

static uint8_t inbox[2048];
static int inbox_len;
static uint8_t outbox[2048];
static int outbox_len;
static udpgate_address server;

static int fsend(void *ctx, const udpgate_address *to, const uint8_t *d, size_t n) {
    (void)ctx; (void)to;
    if (n <= sizeof outbox) {
        memcpy(outbox, d, n);
        outbox_len = (int)n;
    }
    return (int)n;
}

static int frecv(void *ctx, udpgate_address *from, uint8_t *buf, size_t cap) {
    int n = inbox_len;
    (void)ctx;
    if (n == 0)
        return 0;
    if ((size_t)n > cap)
        n = (int)cap;
    memcpy(buf, inbox, (size_t)n);
    *from = server;
    inbox_len = 0;
    return n;
}

static void deliver_packet(udpgate_client *c, const uint8_t *d, int n, double t) {
    static uint8_t buf[1 << 17];
    int ch;
    if (n > (int)sizeof inbox)
        n = (int)sizeof inbox;
    memcpy(inbox, d, (size_t)n);
    inbox_len = n;
    udpgate_client_update(c, t);
    while (udpgate_client_receive(c, &ch, buf, sizeof buf) >= 0)
        ;
}

static const uint8_t cookie[20] = {0x30, 0xe4, 0xdf, 0xdf, 0xbc, 0xab, 0xc5, 0x56, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};

/* The driver's server: answers the client's last packet with type. */
static void answer(udpgate_client *c, int type, double t) {
    ug_handshake h;
    ug_magic m;
    uint8_t b[128];
    int n;
    ug_magic_parse(&m, "");
    if (ug_decode_handshake(&m, outbox, (size_t)outbox_len, &h) != UG_PASS)
        return;
    h.type = (uint8_t)type;
    h.secret_id = 1;
    h.timestamp = type == UG_CHALLENGE ? 0x41da000000000000ull : 0xbff0000000000000ull;
    memcpy(h.cookie, cookie, 20);
    h.random_len = 8;
    n = ug_encode_handshake(b, sizeof b, &m, &h);
    if (n > 0)
        deliver_packet(c, b, n, t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static udpgate_config cfg;
    static udpgate_client *c;
    static long created;
    uint8_t token[UG_TOKEN_BYTES];
    size_t p = 1;
    double t = 1000;
    int mode, client_id = 0;
    uint16_t server_seq = ug_le16(cookie) & UG_SEQ_MASK, next_seq, client_seq = ug_le16(cookie + 2) & UG_SEQ_MASK;
    uint64_t next_counter = 0;
    if (size < 1)
        return 0;
    mode = data[0] % 3;
    if (!c) { /* one client for the whole run: each connect starts afresh */
        udpgate_default_config(&cfg);
        cfg.allocate = count_alloc;
        cfg.free = count_free;
        cfg.send = fsend;
        cfg.receive = frecv;
        cfg.max_message_size = 8192;
        cfg.send_queue_bytes = 65536;
        cfg.receive_queue_bytes = 16384;
        cfg.unreliable_queue_bytes = 4096;
        if (udpgate_client_create(&cfg, &c) != UDPGATE_OK)
            abort();
        created = allocs;
    }
    inbox_len = outbox_len = 0;
    udpgate_address_parse(&server, "127.0.0.1:40000");
    if (mode == 2) {
        memset(token, 0, sizeof token);
        memcpy(token, "NETCODE 1.02", 13);
        ug_put32(token + 1085, 5);
        ug_put32(token + 1089, 1);
        token[1093] = 1;
        token[1094] = 127;
        token[1097] = 1;
        ug_put16(token + 1098, 40000);
        if (udpgate_client_connect_token(c, token, sizeof token, t) != UDPGATE_OK)
            abort();
    } else if (udpgate_client_connect(c, "127.0.0.1:40000", t) != UDPGATE_OK) {
        abort();
    }
    if (outbox_len > 0)
        client_id = (outbox[0] >> 2) & 7;
    if (mode >= 1)
        answer(c, UG_CHALLENGE, t);
    if (mode == 1) {
        answer(c, UG_ACK, t);
        if (udpgate_client_state(c) != UDPGATE_STATE_CONNECTED)
            abort();
    }
    next_seq = server_seq;
    while (p + 2 <= size) {
        uint8_t flags = data[p];
        int len = data[p + 1];
        const uint8_t *rec = data + p + 2;
        if (len > (int)(size - p - 2))
            len = (int)(size - p - 2);
        p += 2 + (size_t)len;
        t += (flags >> 1) * 0.001;
        if ((flags & 1) && mode == 1 && len >= 2) {
            uint8_t b[512];
            ug_conn_header h;
            ug_magic m;
            int n;
            ug_magic_parse(&m, "");
            h.session_id = 0;
            h.client_id = (uint8_t)client_id;
            h.tag = ug_le32(cookie + 4);
            h.seq = next_seq;
            h.ack = client_seq;
            h.ack_bits = rec[1];
            h.kind = rec[0] & 3;
            n = ug_encode_conn(b, sizeof b, &m, &h, rec + 2, len - 2);
            if (n > 0) {
                next_seq = (uint16_t)((next_seq + 1) & UG_SEQ_MASK);
                deliver_packet(c, b, n, t);
            }
        } else if ((flags & 1) && mode == 2 && len >= 2) {
            /* sealed under the token's (zero) server-to-client key: reaches the
             * replay window, the body rules and, once one opens, a sealed connection */
            static const uint8_t zero_key[32];
            uint8_t b[512];
            ug_magic m;
            int n = len - 2, o = 1;
            uint64_t counter = rec[1] == 0xff ? UINT64_MAX - 256 + (n > 0 ? rec[2] : 0) : next_counter++;
            ug_magic_parse(&m, "");
            if (n > 400)
                n = 400;
            ug_put_prefix(b, &m, 0, (uint8_t)client_id);
            ug_put32(b + o, ug_le32(cookie + 4));
            ug_put64(b + o + 4, counter);
            ug_put16(b + o + 12, next_seq);
            ug_put16(b + o + 14, client_seq);
            ug_put64(b + o + 16, rec[1]);
            b[o + 24] = rec[0] & 3;
            memcpy(b + o + 25, rec + 2, (size_t)n);
            ug_seal(b, o + 12, o + 25 + n, zero_key, cookie, counter);
            b[o + 25 + n + 16] = 1;
            next_seq = (uint16_t)((next_seq + 1) & UG_SEQ_MASK);
            deliver_packet(c, b, o + 25 + n + 17, t);
        } else {
            deliver_packet(c, rec, len, t);
        }
        if (udpgate_client_state(c) == UDPGATE_STATE_CONNECTED && (flags & 0x80))
            udpgate_client_send(c, flags & 3, rec, (size_t)len);
    }
    udpgate_client_disconnect(c, t);
    if (allocs != created)
        abort(); /* no allocation after create */
    return 0;
}
