/* api.c: the public API's contracts without a server: argument and
 * configuration checks, names, addresses, states before connecting, and
 * the receive calls' buffer rules on a connected client (the program plays
 * the server through the transport callbacks, as seqdiff.c does). Prints
 * "ok N" or each failed check. */
#include <stdio.h>
#include <stdlib.h>

#include "../src/internal.h"

static int failures, checks;
#define CHECK(cond) do { checks++; if (!(cond)) { printf("FAIL line %d: %s\n", __LINE__, #cond); failures++; } } while (0)

#include "fake_server.h"

int main(void) {
    udpgate_config cfg, bad;
    udpgate_client *c = NULL;
    udpgate_address a;
    char text[64];
    uint8_t token[2048], buf[64];
    int i, ch;

    /* names are never NULL */
    for (i = -20; i <= 3; i++)
        CHECK(udpgate_state_name(i) != NULL);
    for (i = -13; i <= 0; i++)
        CHECK(udpgate_result_name(i) != NULL);
    for (i = -1; i <= UDPGATE_DROP_COUNT; i++)
        CHECK(udpgate_drop_name(i) != NULL);

    /* addresses */
    CHECK(udpgate_address_parse(&a, "127.0.0.1:7777") == UDPGATE_OK && a.family == 4 && a.port == 7777);
    udpgate_address_format(&a, text, sizeof text);
    CHECK(strcmp(text, "127.0.0.1:7777") == 0);
    CHECK(udpgate_address_parse(&a, "[2001:db8::42]:50000") == UDPGATE_OK && a.family == 6 && a.port == 50000);
    udpgate_address_format(&a, text, sizeof text);
    CHECK(strcmp(text, "[2001:db8::42]:50000") == 0);
    CHECK(udpgate_address_parse(&a, "example.com:1") == UDPGATE_ERR_ADDRESS);
    CHECK(udpgate_address_parse(&a, "1.2.3.4") == UDPGATE_ERR_ADDRESS);
    CHECK(udpgate_address_parse(&a, "1.2.3.4:70000") == UDPGATE_ERR_ADDRESS);
    CHECK(udpgate_address_parse(&a, "[::1]7") == UDPGATE_ERR_ADDRESS);

    /* configuration checks */
    udpgate_default_config(&cfg);
    CHECK(udpgate_client_memory_size(&cfg) > 0);
    bad = cfg; bad.magic = "10x1";
    CHECK(udpgate_client_create(&bad, &c) == UDPGATE_ERR_INVALID && c == NULL);
    bad = cfg; bad.max_datagram = 2000;
    CHECK(udpgate_client_create(&bad, &c) == UDPGATE_ERR_INVALID);
    bad = cfg; bad.num_channels = 33;
    CHECK(udpgate_client_create(&bad, &c) == UDPGATE_ERR_INVALID);
    bad = cfg; bad.channels[1].kind = 9;
    CHECK(udpgate_client_create(&bad, &c) == UDPGATE_ERR_INVALID);
    bad = cfg; bad.send = fsend; /* one callback without the other */
    CHECK(udpgate_client_create(&bad, &c) == UDPGATE_ERR_INVALID);
    bad = cfg; bad.max_message_size = UDPGATE_MAX_MESSAGE_SIZE + 1;
    CHECK(udpgate_client_create(&bad, &c) == UDPGATE_ERR_INVALID);
    CHECK(udpgate_client_create(NULL, &c) == UDPGATE_ERR_INVALID);
    udpgate_client_destroy(NULL);

    /* before connecting */
    cfg.send = fsend;
    cfg.receive = frecv;
    cfg.max_message_size = 4096;
    CHECK(udpgate_client_create(&cfg, &c) == UDPGATE_OK && c != NULL);
    CHECK(udpgate_client_state(c) == UDPGATE_STATE_DISCONNECTED);
    CHECK(udpgate_client_send(c, 0, "x", 1) == UDPGATE_ERR_STATE);
    CHECK(udpgate_client_receive(c, &ch, buf, sizeof buf) == UDPGATE_ERR_EMPTY);
    CHECK(udpgate_client_peek_size(c) == UDPGATE_ERR_EMPTY);
    CHECK(udpgate_client_connect(c, "nowhere", 0) == UDPGATE_ERR_ADDRESS);
    memset(token, 0, sizeof token);
    CHECK(udpgate_client_connect_token(c, token, sizeof token, 0) == UDPGATE_ERR_TOKEN);
    CHECK(udpgate_client_connect_token(c, token, 100, 0) == UDPGATE_ERR_TOKEN);
    CHECK(udpgate_client_local_address(c).family == 0);
    udpgate_client_update(c, 0); /* idle: nothing */
    udpgate_client_disconnect(c, 0);

    /* connecting: the handshake times out at connect_timeout */
    udpgate_address_parse(&server, "127.0.0.1:40000");
    CHECK(udpgate_client_connect(c, "127.0.0.1:40000", 100) == UDPGATE_OK);
    CHECK(udpgate_client_state(c) == UDPGATE_STATE_CONNECTING);
    udpgate_client_update(c, 109.9);
    CHECK(udpgate_client_state(c) == UDPGATE_STATE_CONNECTING);
    udpgate_client_update(c, 110.0);
    CHECK(udpgate_client_state(c) == UDPGATE_STATE_CONNECT_TIMED_OUT);

    /* connected: sizes, channels, the receive buffer rules */
    CHECK(udpgate_client_connect(c, "127.0.0.1:40000", 200) == UDPGATE_OK);
    answer(c, UG_CHALLENGE, 200);
    answer(c, UG_ACK, 200);
    CHECK(udpgate_client_state(c) == UDPGATE_STATE_CONNECTED);
    CHECK(udpgate_client_max_message_size(c, 0) == 4096);
    CHECK(udpgate_client_max_message_size(c, 1) == 1181 - 3);
    CHECK(udpgate_client_max_message_size(c, 2) == 1181 - 5);
    CHECK(udpgate_client_max_message_size(c, UDPGATE_CHANNEL_DATA) == 1181);
    CHECK(udpgate_client_max_message_size(c, 4) == UDPGATE_ERR_CHANNEL);
    CHECK(udpgate_client_send(c, 4, "x", 1) == UDPGATE_ERR_CHANNEL);
    CHECK(udpgate_client_send(c, 1, buf, 1179) == UDPGATE_ERR_TOO_LARGE);
    CHECK(udpgate_client_send(c, 0, buf, 4097) == UDPGATE_ERR_TOO_LARGE);
    CHECK(udpgate_client_send(c, 0, "", 0) == UDPGATE_OK);
    CHECK(udpgate_client_send_data(c, "", 0) == UDPGATE_ERR_INVALID);
    CHECK(udpgate_client_queued_bytes(c, 0) == 4);
    {
        /* the server's unreliable message of 100 bytes, received into 64 */
        ug_conn_header h;
        ug_magic m;
        uint8_t b[256], pay[128];
        int n;
        ug_magic_parse(&m, "");
        h.session_id = 0;
        h.client_id = (uint8_t)((outbox[0] >> 2) & 7);
        h.tag = ug_le32(cookie + 4);
        h.seq = 9264;
        h.ack = 8159;
        h.ack_bits = 0;
        h.kind = UG_KIND_MESSAGES;
        pay[0] = 1;
        pay[1] = 100;
        for (i = 0; i < 100; i++)
            pay[2 + i] = (uint8_t)i;
        n = ug_encode_conn(b, sizeof b, &m, &h, pay, 102);
        deliver(c, b, n, 200);
        CHECK(udpgate_client_peek_size(c) == 100);
        CHECK(udpgate_client_receive(c, &ch, buf, sizeof buf) == UDPGATE_ERR_BUFFER);
        CHECK(udpgate_client_peek_size(c) == 100);
        {
            uint8_t big[128];
            CHECK(udpgate_client_receive(c, &ch, big, sizeof big) == 100 && ch == 1 && big[99] == 99);
        }
        CHECK(udpgate_client_receive(c, &ch, buf, sizeof buf) == UDPGATE_ERR_EMPTY);
    }
    {
        /* §6.4: a RestartHandshake that comes 0.5 s into a silence is
           refused (restart_unneeded) and honoured once the silence reaches
           1.5 s, with no other RestartHandshake */
        ug_handshake h, in;
        ug_magic m;
        uint8_t b[128];
        ug_magic_parse(&m, "");
        memset(&h, 0, sizeof h);
        h.type = UG_RESTART_HANDSHAKE;
        h.restart = 1;
        h.client_id = (uint8_t)((outbox[0] >> 2) & 7);
        h.min_version = UG_MIN_VERSION;
        h.cur_version = UG_CUR_VERSION;
        h.random_len = 8;
        deliver(c, b, ug_encode_handshake(b, sizeof b, &m, &h), 200.5);
        udpgate_client_update(c, 201.49);
        CHECK(ug_decode_handshake(&m, outbox, (size_t)outbox_len, &in) != UG_PASS || !in.restart);
        udpgate_client_update(c, 201.5);
        CHECK(ug_decode_handshake(&m, outbox, (size_t)outbox_len, &in) == UG_PASS && in.type == UG_INITIAL && in.restart);
    }
    /* silence: timed out at the timeout, one Disconnect (reason 3) sent */
    udpgate_client_update(c, 204.9);
    CHECK(udpgate_client_state(c) == UDPGATE_STATE_CONNECTED);
    udpgate_client_update(c, 205.0);
    CHECK(udpgate_client_state(c) == UDPGATE_STATE_TIMED_OUT && udpgate_client_end_reason(c) == 3);
    CHECK(outbox_len == 20 && outbox[1 + 16] == UG_KIND_DISCONNECT && outbox[18] == 3);
    udpgate_client_destroy(c);
    if (failures) {
        printf("%d of %d checks failed\n", failures, checks);
        return 1;
    }
    printf("ok %d\n", checks);
    return 0;
}
