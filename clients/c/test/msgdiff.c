/* msgdiff.c: the C client's message receiver (§14.3, §14.5) on Messages
 * payloads read from stdin, one hex line each, for msgdiff_test.go to
 * compare with Go's message.Endpoint. The program plays the server (as
 * seqdiff.c does), delivers each payload in the next packet and prints
 * "refused" or "accepted", then every message received, "msg CH HEX",
 * then "end". */
#include <stdio.h>
#include <stdlib.h>

#include "../src/internal.h"

#include "fake_server.h"

int main(void) {
    udpgate_config cfg;
    udpgate_client *c;
    udpgate_stats before, after;
    static char line[70000];
    static uint8_t pay[40000], msg[1 << 20];
    double t = 1000;
    int client_id;
    uint16_t seq = 9264;
    int rc;
    udpgate_default_config(&cfg);
    cfg.timeout = 1e9;
    cfg.stall_timeout = 1e9;
    if ((rc = connect_fake(&cfg, &c, t, &client_id)) != 0)
        return rc;
    while (fgets(line, sizeof line, stdin)) {
        ug_conn_header h;
        ug_magic m;
        static uint8_t b[2048];
        int n = 0, len, ch, i;
        while (line[2 * n] && line[2 * n] != '\n' && n < (int)sizeof pay) {
            unsigned v;
            sscanf(line + 2 * n, "%2x", &v);
            pay[n++] = (uint8_t)v;
        }
        ug_magic_parse(&m, "");
        h.session_id = 0;
        h.client_id = (uint8_t)client_id;
        h.tag = ug_le32(cookie + 4);
        h.seq = seq;
        h.ack = 8159;
        h.ack_bits = 0;
        h.kind = UG_KIND_MESSAGES;
        udpgate_client_stats(c, &before);
        len = ug_encode_conn(b, sizeof b, &m, &h, pay, n);
        if (len < 0)
            return 5;
        deliver(c, b, len, t);
        udpgate_client_stats(c, &after);
        if (after.packets_received > before.packets_received) {
            printf("accepted\n");
            seq = (uint16_t)((seq + 1) & UG_SEQ_MASK);
        } else {
            printf("refused\n");
        }
        while ((len = udpgate_client_receive(c, &ch, msg, sizeof msg)) >= 0) {
            printf("msg %d ", ch);
            for (i = 0; i < len; i++)
                printf("%02x", msg[i]);
            printf("\n");
        }
        printf("end\n");
    }
    udpgate_client_destroy(c);
    return 0;
}
