/* internal.h: the library's internal declarations (not installed). */
#ifndef UDPGATE_INTERNAL_H
#define UDPGATE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "udpgate.h"

/* A decoder's verdict: UG_PASS, or a udpgate_drop value. */
#define UG_PASS (-1)

/* §13 */
#define UG_PREFIX_BITS 6
#define UG_BASE_BITS 82
#define UG_MIN_RANDOM 8
#define UG_MAX_RANDOM 16
#define UG_MIN_VERSION 3
#define UG_CUR_VERSION 4
#define UG_COOKIE_BYTES 20
#define UG_CONN_HEADER_BYTES 17
#define UG_SEQ_MOD 16384u
#define UG_SEQ_MASK 16383u

enum { UG_INITIAL, UG_CHALLENGE, UG_RESPONSE, UG_ACK, UG_RESTART_HANDSHAKE, UG_RESTART_RESPONSE,
       UG_VERSION_UPGRADE, UG_DENIED, UG_LAYOUT_MISMATCH };
enum { UG_KIND_DATA, UG_KIND_KEEPALIVE, UG_KIND_DISCONNECT, UG_KIND_MESSAGES };

typedef struct ug_magic {
    uint32_t bits;
    int n;
} ug_magic;

typedef struct ug_handshake {
    uint8_t session_id, client_id, restart, min_version, cur_version, type, sent_count;
    uint32_t network_version;
    uint16_t network_features;
    uint8_t secret_id;
    uint64_t timestamp; /* the f64's bits, kept unchanged (§6.3) */
    uint8_t reason;
    uint8_t cookie[UG_COOKIE_BYTES];
    uint8_t orig_cookie[UG_COOKIE_BYTES];
    /* §3.7: an Initial's declared message layout, or a LayoutMismatch's (the
     * server's); all zero declares none. kinds: channel i's code (1
     * reliable-ordered, 2 unreliable, 3 sequenced) in bits 2i, 2i+1. */
    uint64_t layout_kinds;
    uint32_t layout_max_message;
    uint16_t layout_max_datagram;
    uint8_t layout_channels;
    uint8_t random[UG_MAX_RANDOM];
    int random_len;
} ug_handshake;

typedef struct ug_conn_header {
    uint8_t session_id, client_id;
    uint32_t tag;
    uint16_t seq, ack;
    uint64_t ack_bits;
    uint8_t kind;
} ug_conn_header;

/* One message entry (§14.2). */
typedef struct ug_entry {
    int channel;
    uint16_t id;
    int fragment; /* 0/1 */
    uint16_t index, count;
    const uint8_t *data;
    int len;
} ug_entry;

/* wire.c */
int ug_magic_parse(ug_magic *m, const char *s);
int ug_conn_offset(const ug_magic *m);
int ug_payload_bits(const uint8_t *d, size_t len);
int ug_body_bits(int type);
int ug_handshake_len(const ug_magic *m, int type, int random_len);
int ug_encode_handshake(uint8_t *dst, size_t cap, const ug_magic *m, const ug_handshake *h);
int ug_decode_prefix(const ug_magic *m, const uint8_t *b, size_t len, uint8_t *session, uint8_t *client,
                     int *handshake);
int ug_decode_handshake(const ug_magic *m, const uint8_t *b, size_t len, ug_handshake *h);
int ug_conn_len(const ug_magic *m, int kind, int payload_len);
int ug_encode_conn(uint8_t *dst, size_t cap, const ug_magic *m, const ug_conn_header *h, const uint8_t *payload,
                   int payload_len);
int ug_decode_conn(const ug_magic *m, const uint8_t *b, size_t len, ug_conn_header *h, const uint8_t **payload,
                   int *payload_len);
void ug_put_prefix(uint8_t *dst, const ug_magic *m, uint8_t session, uint8_t client);
/* entries: kinds[ch] is each configured channel's kind; returns the bytes
 * written, or 0 if it does not fit. */
int ug_entry_len(int kind, int fragment, int len);
int ug_encode_entry(uint8_t *dst, size_t cap, int kind, const ug_entry *e);
/* Decodes the entry at b[*pos..len); returns UG_PASS or a message drop code
 * (UG_MSG_*). */
enum { UG_MSG_MALFORMED = 0, UG_MSG_RESERVED_BITS, UG_MSG_BAD_CHANNEL, UG_MSG_BAD_FRAGMENT, UG_MSG_TOO_LARGE,
       UG_MSG_OUT_OF_WINDOW, UG_MSG_OVER_BUDGET };
int ug_decode_entry(const uint8_t *b, int len, int *pos, int nch, const uint8_t *kinds, ug_entry *e);

static inline uint16_t ug_le16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline uint32_t ug_le32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static inline uint64_t ug_le64(const uint8_t *p) { return (uint64_t)ug_le32(p) | ((uint64_t)ug_le32(p + 4) << 32); }
static inline void ug_put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static inline void ug_put32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); p[2] = (uint8_t)(v >> 16); p[3] = (uint8_t)(v >> 24);
}
static inline void ug_put64(uint8_t *p, uint64_t v) { ug_put32(p, (uint32_t)v); ug_put32(p + 4, (uint32_t)(v >> 32)); }

/* sealed.c: §11 */
#define UG_TOKEN_BYTES 2048
#define UG_REQUEST_BYTES 1077
#define UG_SEAL_OVERHEAD 24 /* counter 8, MAC 16 */
#define UG_PROOF_EXTRA (1 + 8 + 20 + UG_REQUEST_BYTES) /* cookie part and request body */
typedef struct ug_token {
    uint64_t protocol_id, create, expire;
    int32_t timeout;
    int num_addresses;
    udpgate_address addresses[32];
    uint8_t c2s_key[32], s2c_key[32];
    uint8_t request[UG_REQUEST_BYTES];
} ug_token;
int ug_token_parse(ug_token *t, const uint8_t *b, size_t len);
int ug_crypto_init(void);
void ug_random(void *buf, size_t n);
/* Seals b[0..len) in place: b[0..ad) is associated data (ending with the
 * counter), b[ad..len) the plaintext; writes the MAC at b[len..len+16).
 * nonce = salt ‖ counter. */
void ug_seal(uint8_t *b, int ad, int len, const uint8_t key[32], const uint8_t salt[16], uint64_t counter);
/* Opens: b[ad..len) is ciphertext ‖ MAC; returns 0 and the plaintext in
 * place (len − 16 bytes), or −1. */
int ug_open(uint8_t *b, int ad, int len, const uint8_t key[32], const uint8_t salt[16], uint64_t counter);

/* socket.c */
typedef struct ug_socket {
    int fd;
    udpgate_address local;
} ug_socket;
int ug_socket_open(ug_socket *s, int family, const char *bind_address, int buffer_bytes);
void ug_socket_close(ug_socket *s);
int ug_socket_send(ug_socket *s, const udpgate_address *to, const uint8_t *d, size_t n);
int ug_socket_recv(ug_socket *s, udpgate_address *from, uint8_t *buf, size_t cap);
int ug_address_equal(const udpgate_address *a, const udpgate_address *b);

#endif
