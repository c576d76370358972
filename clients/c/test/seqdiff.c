/* seqdiff.c: the C client's receive window (§7.3) on packets read from
 * stdin, one "seq ack ackbits" line each, for seqwin_test.go to compare with
 * Go's internal/seqwin. The program plays the server: it completes a
 * handshake with a fixed cookie (ServerSeq 9264, ClientSeq 8159), then
 * delivers each line as a KeepAlive at one instant and prints the verdict:
 * accept, stale, suspect or other. */
#include <stdio.h>
#include <stdlib.h>

#include "../src/internal.h"

#include "fake_server.h"

int main(void) {
    udpgate_config cfg;
    udpgate_client *c;
    udpgate_stats before, after;
    unsigned seq, ack;
    unsigned long long bits;
    double t = 1000;
    int client_id;
    int rc;
    udpgate_default_config(&cfg);
    cfg.timeout = 1e9;
    if ((rc = connect_fake(&cfg, &c, t, &client_id)) != 0)
        return rc;
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
