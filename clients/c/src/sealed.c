/* sealed.c: §11, netcode.io 1.02 connect tokens and the XChaCha20-Poly1305
 * seal of sealed packets, through libsodium. */
#include <sodium.h>

#include "internal.h"

static const uint8_t version_info[13] = {'N', 'E', 'T', 'C', 'O', 'D', 'E', ' ', '1', '.', '0', '2', 0};

int ug_crypto_init(void) { return sodium_init() < 0 ? -1 : 0; }

void ug_random(void *buf, size_t n) { randombytes_buf(buf, n); }

/* §11.1: the public part of a token. */
int ug_token_parse(ug_token *t, const uint8_t *b, size_t len) {
    int i, p = 1093;
    uint32_t count;
    if (len != UG_TOKEN_BYTES || memcmp(b, version_info, 13) != 0)
        return UDPGATE_ERR_TOKEN;
    memset(t, 0, sizeof *t);
    t->protocol_id = ug_le64(b + 13);
    t->create = ug_le64(b + 21);
    t->expire = ug_le64(b + 29);
    t->timeout = (int32_t)ug_le32(b + 1085);
    count = ug_le32(b + 1089);
    if (count < 1 || count > 32)
        return UDPGATE_ERR_TOKEN;
    for (i = 0; i < (int)count; i++) {
        udpgate_address *a = &t->addresses[i];
        if (b[p] == 1) {
            a->family = 4;
            memcpy(a->ip, b + p + 1, 4);
            a->port = ug_le16(b + p + 5);
            p += 7;
        } else if (b[p] == 2) {
            int g;
            a->family = 6;
            for (g = 0; g < 8; g++) { /* each group u16 LE on the token, network order in ip[] */
                uint16_t v = ug_le16(b + p + 1 + 2 * g);
                a->ip[2 * g] = (uint8_t)(v >> 8);
                a->ip[2 * g + 1] = (uint8_t)v;
            }
            a->port = ug_le16(b + p + 17);
            p += 19;
        } else {
            return UDPGATE_ERR_TOKEN;
        }
    }
    t->num_addresses = (int)count;
    memcpy(t->c2s_key, b + p, 32);
    memcpy(t->s2c_key, b + p + 32, 32);
    memcpy(t->request, b, 21);
    memcpy(t->request + 21, b + 29, UG_REQUEST_BYTES - 21);
    return UDPGATE_OK;
}

static void nonce_of(uint8_t nonce[24], const uint8_t salt[16], uint64_t counter) {
    memcpy(nonce, salt, 16);
    ug_put64(nonce + 16, counter);
}

void ug_seal(uint8_t *b, int ad, int len, const uint8_t key[32], const uint8_t salt[16], uint64_t counter) {
    uint8_t nonce[24];
    unsigned long long clen;
    nonce_of(nonce, salt, counter);
    crypto_aead_xchacha20poly1305_ietf_encrypt(b + ad, &clen, b + ad, (unsigned long long)(len - ad), b,
                                               (unsigned long long)ad, NULL, nonce, key);
}

int ug_open(uint8_t *b, int ad, int len, const uint8_t key[32], const uint8_t salt[16], uint64_t counter) {
    uint8_t nonce[24];
    unsigned long long mlen;
    if (len - ad < 16)
        return -1;
    nonce_of(nonce, salt, counter);
    return crypto_aead_xchacha20poly1305_ietf_decrypt(b + ad, &mlen, NULL, b + ad, (unsigned long long)(len - ad), b,
                                                      (unsigned long long)ad, nonce, key) == 0
               ? 0
               : -1;
}
