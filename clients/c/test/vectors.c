/* vectors.c: reads the protocol's test vectors (converted to lines by
 * clients/c/interop_test.go) from stdin, decodes every packet and checks its
 * fields, encodes the fields and checks the bytes. Prints "ok N" and exits 0,
 * or prints each mismatch and exits 1. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "../src/internal.h"

static int failures, checked;

static int unhex(const char *s, uint8_t *out, int cap) {
    int n = 0;
    if (strcmp(s, "-") == 0)
        return 0;
    while (s[0] && s[1] && n < cap) {
        unsigned v;
        if (sscanf(s, "%2x", &v) != 1)
            return -1;
        out[n++] = (uint8_t)v;
        s += 2;
    }
    return n;
}

static void fail(const char *name, const char *what) {
    printf("FAIL %s: %s\n", name, what);
    failures++;
}

#define CHECK(name, cond, what) do { if (!(cond)) fail(name, what); } while (0)

static void set_magic(ug_magic *m, const char *s) { ug_magic_parse(m, strcmp(s, "-") == 0 ? "" : s); }

int main(void) {
    char line[8192], kind[16];
    static uint8_t pkt[4096], buf[4096], tmp[4096];
    while (fgets(line, sizeof line, stdin)) {
        char name[128], magic[64], hex[4096];
        if (sscanf(line, "%15s", kind) != 1)
            continue;
        if (strcmp(kind, "hs") == 0) {
            unsigned sess, cli, type, restart, minv, curv, sent, nf, secret, reason;
            unsigned long nv;
            char ts[32], cookie[64], orig[64], rnd[64], lkinds[32];
            unsigned lch, lmax, ldg;
            ug_handshake want, got;
            int n, m2;
            ug_magic m;
            if (sscanf(line, "hs %127s %63s %4095s %u %u %u %u %u %u %u %lu %u %u %31s %63s %63s %u %63s %u %31s %u %u",
                       name, magic, hex, &sess, &cli, &type, &restart, &minv, &curv, &sent, &nv, &nf, &secret, ts,
                       cookie, orig, &reason, rnd, &lch, lkinds, &lmax, &ldg) != 22) {
                fail("hs", "bad line");
                continue;
            }
            set_magic(&m, magic);
            memset(&want, 0, sizeof want);
            want.session_id = (uint8_t)sess; want.client_id = (uint8_t)cli; want.type = (uint8_t)type;
            want.restart = (uint8_t)restart; want.min_version = (uint8_t)minv; want.cur_version = (uint8_t)curv;
            want.sent_count = (uint8_t)sent; want.network_version = (uint32_t)nv;
            want.network_features = (uint16_t)nf; want.secret_id = (uint8_t)secret;
            want.timestamp = strtoull(ts, NULL, 16); want.reason = (uint8_t)reason;
            want.layout_channels = (uint8_t)lch; want.layout_kinds = strtoull(lkinds, NULL, 16);
            want.layout_max_message = (uint32_t)lmax; want.layout_max_datagram = (uint16_t)ldg;
            unhex(cookie, want.cookie, 20);
            unhex(orig, want.orig_cookie, 20);
            want.random_len = unhex(rnd, want.random, 16);
            n = unhex(hex, pkt, sizeof pkt);
            memset(&got, 0, sizeof got); /* the padding, for memcmp */
            CHECK(name, ug_decode_handshake(&m, pkt, (size_t)n, &got) == UG_PASS, "decode");
            CHECK(name, memcmp(&got, &want, sizeof got) == 0, "decoded fields differ");
            m2 = ug_encode_handshake(buf, sizeof buf, &m, &want);
            CHECK(name, m2 == n && memcmp(buf, pkt, (size_t)n) == 0, "encoding differs");
            CHECK(name, ug_handshake_len(&m, want.type, want.random_len) == n, "length rule");
            checked++;
        } else if (strcmp(kind, "conn") == 0) {
            unsigned sess, cli, tag, seq, ack, k;
            char bits[32], pay[4096];
            ug_conn_header want, got;
            const uint8_t *p;
            int n, pl, wl, m2;
            ug_magic m;
            if (sscanf(line, "conn %127s %63s %4095s %u %u %u %u %u %31s %u %4095s", name, magic, hex, &sess, &cli,
                       &tag, &seq, &ack, bits, &k, pay) != 11) {
                fail("conn", "bad line");
                continue;
            }
            set_magic(&m, magic);
            memset(&want, 0, sizeof want);
            memset(&got, 0, sizeof got);
            want.session_id = (uint8_t)sess; want.client_id = (uint8_t)cli; want.tag = tag;
            want.seq = (uint16_t)seq; want.ack = (uint16_t)ack; want.ack_bits = strtoull(bits, NULL, 16);
            want.kind = (uint8_t)k;
            wl = unhex(pay, tmp, sizeof tmp);
            n = unhex(hex, pkt, sizeof pkt);
            CHECK(name, ug_decode_conn(&m, pkt, (size_t)n, &got, &p, &pl) == UG_PASS, "decode");
            CHECK(name, memcmp(&got, &want, sizeof got) == 0, "decoded header differs");
            CHECK(name, pl == wl && memcmp(p, tmp, (size_t)wl) == 0, "decoded payload differs");
            m2 = ug_encode_conn(buf, sizeof buf, &m, &want, tmp, wl);
            CHECK(name, m2 == n && memcmp(buf, pkt, (size_t)n) == 0, "encoding differs");
            checked++;
        } else if (strcmp(kind, "term") == 0) {
            int valid, bits, n;
            if (sscanf(line, "term %4095s %d %d", hex, &valid, &bits) != 3) {
                fail("term", "bad line");
                continue;
            }
            n = unhex(hex, pkt, sizeof pkt);
            CHECK(hex, ug_payload_bits(pkt, (size_t)n) == (valid ? bits : -1), "payload bits");
            checked++;
        } else if (strcmp(kind, "cookie") == 0) {
            char ck[64];
            unsigned ss, cs, tag;
            if (sscanf(line, "cookie %63s %u %u %u", ck, &ss, &cs, &tag) != 4) {
                fail("cookie", "bad line");
                continue;
            }
            unhex(ck, tmp, 20);
            CHECK(ck, (ug_le16(tmp) & UG_SEQ_MASK) == ss, "server seq");
            CHECK(ck, (ug_le16(tmp + 2) & UG_SEQ_MASK) == cs, "client seq");
            CHECK(ck, ug_le32(tmp + 4) == tag, "tag");
            checked++;
        } else if (strcmp(kind, "msg") == 0) {
            char kinds[40];
            int ne, i, n, pl, pos = 0, out = 0, nch;
            uint8_t kk[32];
            const uint8_t *p;
            ug_conn_header h;
            ug_magic m;
            if (sscanf(line, "msg %127s %4095s %39s %d", name, hex, kinds, &ne) != 4) {
                fail("msg", "bad line");
                continue;
            }
            ug_magic_parse(&m, "");
            nch = (int)strlen(kinds);
            for (i = 0; i < nch; i++)
                kk[i] = (uint8_t)(kinds[i] == 'R' ? UDPGATE_RELIABLE_ORDERED
                                                  : kinds[i] == 'U' ? UDPGATE_UNRELIABLE : UDPGATE_SEQUENCED);
            n = unhex(hex, pkt, sizeof pkt);
            CHECK(name, ug_decode_conn(&m, pkt, (size_t)n, &h, &p, &pl) == UG_PASS && h.kind == UG_KIND_MESSAGES,
                  "decode packet");
            for (i = 0; i < ne; i++) {
                unsigned ch, id, idx, cnt;
                char data[4096];
                ug_entry e, w;
                uint8_t wd[2048];
                if (!fgets(line, sizeof line, stdin) ||
                    sscanf(line, "entry %u %u %u %u %4095s", &ch, &id, &idx, &cnt, data) != 5) {
                    fail(name, "bad entry line");
                    break;
                }
                memset(&w, 0, sizeof w);
                w.channel = (int)ch; w.id = (uint16_t)id; w.index = (uint16_t)idx; w.count = (uint16_t)cnt;
                w.fragment = cnt > 0; w.len = unhex(data, wd, sizeof wd); w.data = wd;
                if (ug_decode_entry(p, pl, &pos, nch, kk, &e) != UG_PASS) {
                    fail(name, "decode entry");
                    break;
                }
                CHECK(name, e.channel == w.channel && e.id == w.id && e.index == w.index && e.count == w.count &&
                                e.fragment == w.fragment && e.len == w.len && memcmp(e.data, wd, (size_t)w.len) == 0,
                      "entry fields differ");
                out += ug_encode_entry(tmp + out, sizeof tmp - (size_t)out, kk[w.channel], &w);
            }
            CHECK(name, pos == pl, "bytes left after the entries");
            CHECK(name, out == pl && memcmp(tmp, p, (size_t)pl) == 0, "entries encode differently");
            CHECK(name, ug_encode_conn(buf, sizeof buf, &m, &h, tmp, out) == n && memcmp(buf, pkt, (size_t)n) == 0,
                  "packet encodes differently");
            checked++;
        } else if (strcmp(kind, "sealed") == 0) {
            /* a sealed packet (§11.2, §11.3): opens to its plaintext and seals back to its bytes */
            char key[80], salt[40], pt[4096];
            unsigned long long counter;
            int ad, n, pl;
            uint8_t k[32], sl[16];
            if (sscanf(line, "sealed %127s %4095s %d %79s %39s %llu %4095s", name, hex, &ad, key, salt, &counter, pt) != 7) {
                fail("sealed", "bad line");
                continue;
            }
            n = unhex(hex, pkt, sizeof pkt);
            unhex(key, k, 32);
            unhex(salt, sl, 16);
            pl = unhex(pt, tmp, sizeof tmp);
            memcpy(buf, pkt, (size_t)n);
            CHECK(name, buf[n - 1] == 1, "terminator");
            CHECK(name, ug_le64(buf + ad - 8) == counter, "counter");
            CHECK(name, ug_open(buf, ad, n - 1, k, sl, counter) == 0, "does not open");
            CHECK(name, n - 1 - 16 - ad == pl && memcmp(buf + ad, tmp, (size_t)pl) == 0, "plaintext differs");
            memcpy(buf + ad, tmp, (size_t)pl);
            ug_seal(buf, ad, ad + pl, k, sl, counter);
            buf[ad + pl + 16] = 1;
            CHECK(name, memcmp(buf, pkt, (size_t)n) == 0, "seals differently");
            checked++;
        } else if (strcmp(kind, "token") == 0) {
            /* a netcode.io 1.02 connect token (§11.1): its public part and request body */
            static char tok[8192], req[4096];
            char c2s[80], s2c[80], addrs[512];
            int timeout, i;
            ug_token t;
            static uint8_t tb[4096];
            char *a;
            if (sscanf(line, "token %8191s %4095s %79s %79s %d %511s", tok, req, c2s, s2c, &timeout, addrs) != 6) {
                fail("token", "bad line");
                continue;
            }
            unhex(tok, tb, sizeof tb);
            CHECK("token", ug_token_parse(&t, tb, UG_TOKEN_BYTES) == UDPGATE_OK, "does not parse");
            CHECK("token", unhex(req, tmp, sizeof tmp) == UG_REQUEST_BYTES &&
                               memcmp(t.request, tmp, UG_REQUEST_BYTES) == 0, "request body differs");
            unhex(c2s, tmp, 32);
            CHECK("token", memcmp(t.c2s_key, tmp, 32) == 0, "client-to-server key");
            unhex(s2c, tmp, 32);
            CHECK("token", memcmp(t.s2c_key, tmp, 32) == 0, "server-to-client key");
            CHECK("token", t.timeout == timeout, "timeout");
            for (i = 0, a = strtok(addrs, ","); a; a = strtok(NULL, ","), i++) {
                udpgate_address want;
                CHECK("token", udpgate_address_parse(&want, a) == UDPGATE_OK && i < t.num_addresses &&
                                   ug_address_equal(&want, &t.addresses[i]), "address differs");
            }
            CHECK("token", i == t.num_addresses, "address count");
            checked++;
        } else {
            fail(kind, "unknown line kind");
        }
    }
    if (failures) {
        printf("%d failures\n", failures);
        return 1;
    }
    printf("ok %d\n", checked);
    return checked > 0 ? 0 : 1;
}
