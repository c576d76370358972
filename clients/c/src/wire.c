/* wire.c: the codec of docs/protocol.md §1 (bitstream), §2 (prefix), §3
 * (handshake packets), §7 (connection packets) and §14.2 (message entries).
 * No state, no allocation. */
#include "internal.h"

int ug_magic_parse(ug_magic *m, const char *s) {
    m->bits = 0;
    m->n = 0;
    if (!s)
        return 0;
    for (; *s; s++) {
        if (m->n >= 32 || (*s != '0' && *s != '1'))
            return -1;
        if (*s == '1')
            m->bits |= (uint32_t)1 << m->n;
        m->n++;
    }
    return 0;
}

int ug_conn_offset(const ug_magic *m) { return (m->n + UG_PREFIX_BITS + 7) / 8; }

/* §1: the number of payload bits, or −1 when malformed. */
int ug_payload_bits(const uint8_t *d, size_t len) {
    int hi;
    uint8_t last;
    if (len == 0 || d[len - 1] == 0)
        return -1;
    last = d[len - 1];
    for (hi = 7; !(last & (1 << hi)); hi--)
        ;
    return (int)(8 * (len - 1)) + hi;
}

static uint64_t get_bits(const uint8_t *b, int pos, int n) {
    uint64_t v = 0;
    int i = 0;
    while (i < n) {
        int p = pos + i, off = p & 7, take = 8 - off;
        if (take > n - i)
            take = n - i;
        v |= (uint64_t)((b[p >> 3] >> off) & ((1u << take) - 1)) << i;
        i += take;
    }
    return v;
}

static void put_bits(uint8_t *b, int pos, uint64_t v, int n) {
    int i = 0;
    while (i < n) {
        int p = pos + i, off = p & 7, take = 8 - off;
        if (take > n - i)
            take = n - i;
        b[p >> 3] |= (uint8_t)(((v >> i) & ((1u << take) - 1)) << off);
        i += take;
    }
}

int ug_body_bits(int type) {
    switch (type) {
    case UG_INITIAL:
    case UG_CHALLENGE:
    case UG_RESPONSE:
    case UG_ACK:
        return 225;
    case UG_RESTART_RESPONSE:
        return 385;
    case UG_DENIED:
        return 168;
    case UG_LAYOUT_MISMATCH:
        return 224;
    default:
        return 0;
    }
}

int ug_handshake_len(const ug_magic *m, int type, int random_len) {
    return (m->n + UG_PREFIX_BITS + UG_BASE_BITS - 1 + ug_body_bits(type) + 8 * random_len + 1 + 7) / 8;
}

static uint64_t prefix_word(const ug_magic *m, uint8_t session, uint8_t client, int hs) {
    return (uint64_t)m->bits | ((uint64_t)(session | (client << 2) | (hs << 5)) << m->n);
}

void ug_put_prefix(uint8_t *dst, const ug_magic *m, uint8_t session, uint8_t client) {
    int o = ug_conn_offset(m);
    memset(dst, 0, (size_t)o);
    put_bits(dst, 0, prefix_word(m, session, client, 0), m->n + UG_PREFIX_BITS);
}

/* §3.7: a Layout the wire may carry: none declared (all zero), or 1..32
 * channels each with a kind code 1..3 and none beyond them, a non-zero
 * MaxDatagram, and MaxMessage non-zero exactly when a channel is reliable. */
static int layout_valid(const ug_handshake *h) {
    int i, reliable = 0;
    if (!h->layout_channels && !h->layout_kinds && !h->layout_max_message && !h->layout_max_datagram)
        return 1;
    if (h->layout_channels == 0 || h->layout_channels > 32 || h->layout_max_datagram == 0)
        return 0;
    for (i = 0; i < 32; i++) {
        unsigned k = (unsigned)(h->layout_kinds >> (2 * i)) & 3;
        if ((k == 0) != (i >= h->layout_channels))
            return 0;
        reliable |= k == 1;
    }
    return reliable == (h->layout_max_message != 0);
}

/* The Layout's 224 bits at pos: Channels(8) Kinds(64) MaxMessage(32)
 * MaxDatagram(16) and 104 zero bits (already zero in dst). */
static void put_layout(uint8_t *dst, int pos, const ug_handshake *h) {
    put_bits(dst, pos, h->layout_channels, 8);
    put_bits(dst, pos + 8, h->layout_kinds, 64);
    put_bits(dst, pos + 72, h->layout_max_message, 32);
    put_bits(dst, pos + 104, h->layout_max_datagram, 16);
}

static int get_layout(const uint8_t *b, int pos, ug_handshake *h) {
    int i;
    h->layout_channels = (uint8_t)get_bits(b, pos, 8);
    h->layout_kinds = get_bits(b, pos + 8, 64);
    h->layout_max_message = (uint32_t)get_bits(b, pos + 72, 32);
    h->layout_max_datagram = (uint16_t)get_bits(b, pos + 104, 16);
    for (i = 120; i < 224; i += 52)
        if (get_bits(b, pos + i, 52))
            return 0;
    return layout_valid(h);
}

int ug_encode_handshake(uint8_t *dst, size_t cap, const ug_magic *m, const ug_handshake *h) {
    int n, pos, i;
    if (h->type > UG_LAYOUT_MISMATCH || h->session_id > 3 || h->client_id > 7 || h->random_len < UG_MIN_RANDOM ||
        h->random_len > UG_MAX_RANDOM || h->secret_id > 1)
        return -1;
    if ((h->type == UG_INITIAL || h->type == UG_LAYOUT_MISMATCH) && !layout_valid(h))
        return -1;
    n = ug_handshake_len(m, h->type, h->random_len);
    if ((size_t)n > cap)
        return -1;
    memset(dst, 0, (size_t)n);
    pos = m->n + UG_PREFIX_BITS;
    put_bits(dst, 0, prefix_word(m, h->session_id, h->client_id, 1), pos);
    put_bits(dst, pos, h->restart & 1, 1);
    put_bits(dst, pos + 1, h->min_version, 8);
    put_bits(dst, pos + 9, h->cur_version, 8);
    put_bits(dst, pos + 17, h->type, 8);
    put_bits(dst, pos + 25, h->sent_count, 8);
    put_bits(dst, pos + 33, h->network_version, 32);
    put_bits(dst, pos + 65, h->network_features, 16);
    pos += 81;
    switch (h->type) {
    case UG_CHALLENGE:
    case UG_RESPONSE:
    case UG_ACK:
    case UG_RESTART_RESPONSE:
        put_bits(dst, pos, h->secret_id, 1);
        put_bits(dst, pos + 1, h->timestamp, 64);
        for (i = 0; i < UG_COOKIE_BYTES; i++)
            put_bits(dst, pos + 65 + 8 * i, h->cookie[i], 8);
        if (h->type == UG_RESTART_RESPONSE)
            for (i = 0; i < UG_COOKIE_BYTES; i++)
                put_bits(dst, pos + 225 + 8 * i, h->orig_cookie[i], 8);
        break;
    case UG_DENIED:
        put_bits(dst, pos, h->reason, 8);
        for (i = 0; i < UG_COOKIE_BYTES; i++)
            put_bits(dst, pos + 8 + 8 * i, h->cookie[i], 8);
        break;
    case UG_INITIAL:
        put_layout(dst, pos + 1, h); /* after SecretId 0 */
        break;
    case UG_LAYOUT_MISMATCH:
        put_layout(dst, pos, h);
        break;
    }
    pos += ug_body_bits(h->type);
    for (i = 0; i < h->random_len; i++)
        put_bits(dst, pos + 8 * i, h->random[i], 8);
    pos += 8 * h->random_len;
    put_bits(dst, pos, 1, 1);
    return n;
}

int ug_decode_prefix(const ug_magic *m, const uint8_t *b, size_t len, uint8_t *session, uint8_t *client,
                     int *handshake) {
    int pb = ug_payload_bits(b, len);
    uint64_t w;
    if (pb < m->n + UG_PREFIX_BITS)
        return UDPGATE_DROP_MALFORMED;
    w = get_bits(b, 0, m->n + UG_PREFIX_BITS);
    if ((w & (((uint64_t)1 << m->n) - 1)) != m->bits)
        return UDPGATE_DROP_BAD_MAGIC;
    w >>= m->n;
    *session = (uint8_t)(w & 3);
    *client = (uint8_t)((w >> 2) & 7);
    *handshake = (int)((w >> 5) & 1);
    return UG_PASS;
}

int ug_decode_handshake(const ug_magic *m, const uint8_t *b, size_t len, ug_handshake *h) {
    int pb, pos, hs, r, random, i;
    uint64_t v;
    r = ug_decode_prefix(m, b, len, &h->session_id, &h->client_id, &hs);
    if (r != UG_PASS)
        return r;
    if (!hs)
        return UDPGATE_DROP_UNEXPECTED_TYPE;
    pb = ug_payload_bits(b, len);
    pos = m->n + UG_PREFIX_BITS;
    if (pb < pos + 81)
        return UDPGATE_DROP_MALFORMED;
    v = get_bits(b, pos, 33);
    h->restart = (uint8_t)(v & 1);
    h->min_version = (uint8_t)(v >> 1);
    h->cur_version = (uint8_t)(v >> 9);
    h->type = (uint8_t)(v >> 17);
    h->sent_count = (uint8_t)(v >> 25);
    h->network_version = (uint32_t)get_bits(b, pos + 33, 32);
    h->network_features = (uint16_t)get_bits(b, pos + 65, 16);
    pos += 81;
    if (h->type > UG_LAYOUT_MISMATCH) /* the last type */
        return UDPGATE_DROP_UNKNOWN_TYPE;
    random = pb - pos - ug_body_bits(h->type);
    if (random < 8 * UG_MIN_RANDOM || random > 8 * UG_MAX_RANDOM || (random & 7))
        return UDPGATE_DROP_BAD_SIZE;
    if ((h->type == UG_RESTART_HANDSHAKE || h->type == UG_RESTART_RESPONSE) && !h->restart)
        return UDPGATE_DROP_BAD_BODY;
    if (h->type == UG_VERSION_UPGRADE && h->restart)
        return UDPGATE_DROP_BAD_BODY;
    h->secret_id = 0;
    h->timestamp = 0;
    h->reason = 0;
    memset(h->cookie, 0, sizeof h->cookie);
    memset(h->orig_cookie, 0, sizeof h->orig_cookie);
    h->layout_channels = 0;
    h->layout_kinds = 0;
    h->layout_max_message = 0;
    h->layout_max_datagram = 0;
    switch (h->type) {
    case UG_INITIAL:
        if (get_bits(b, pos, 1) || !get_layout(b, pos + 1, h))
            return UDPGATE_DROP_BAD_BODY;
        break;
    case UG_LAYOUT_MISMATCH:
        if (!get_layout(b, pos, h))
            return UDPGATE_DROP_BAD_BODY;
        break;
    case UG_CHALLENGE:
    case UG_RESPONSE:
    case UG_ACK:
    case UG_RESTART_RESPONSE:
        h->secret_id = (uint8_t)get_bits(b, pos, 1);
        h->timestamp = get_bits(b, pos + 1, 64);
        for (i = 0; i < UG_COOKIE_BYTES; i++)
            h->cookie[i] = (uint8_t)get_bits(b, pos + 65 + 8 * i, 8);
        if (h->type == UG_RESTART_RESPONSE)
            for (i = 0; i < UG_COOKIE_BYTES; i++)
                h->orig_cookie[i] = (uint8_t)get_bits(b, pos + 225 + 8 * i, 8);
        break;
    case UG_DENIED:
        h->reason = (uint8_t)get_bits(b, pos, 8);
        for (i = 0; i < UG_COOKIE_BYTES; i++)
            h->cookie[i] = (uint8_t)get_bits(b, pos + 8 + 8 * i, 8);
        break;
    }
    pos += ug_body_bits(h->type);
    h->random_len = random / 8;
    memset(h->random, 0, sizeof h->random);
    for (i = 0; i < h->random_len; i++)
        h->random[i] = (uint8_t)get_bits(b, pos + 8 * i, 8);
    return UG_PASS;
}

/* §7.2: with KeepAlive padding to the smallest RestartHandshake. */
int ug_conn_len(const ug_magic *m, int kind, int payload_len) {
    int n = ug_conn_offset(m) + UG_CONN_HEADER_BYTES + payload_len + 1;
    int min = (m->n + 152 + 7) / 8;
    if (kind == UG_KIND_KEEPALIVE && n < min)
        n = min;
    return n;
}

static int payload_ok(int kind, int n) {
    switch (kind) {
    case UG_KIND_DATA:
    case UG_KIND_MESSAGES:
        return n >= 1;
    case UG_KIND_DISCONNECT:
        return n == 1;
    default:
        return 1;
    }
}

int ug_encode_conn(uint8_t *dst, size_t cap, const ug_magic *m, const ug_conn_header *h, const uint8_t *payload,
                   int payload_len) {
    int n, o, p;
    if (h->session_id > 3 || h->client_id > 7 || h->seq > UG_SEQ_MASK || h->ack > UG_SEQ_MASK || h->kind > 3 ||
        !payload_ok(h->kind, payload_len))
        return -1;
    n = ug_conn_len(m, h->kind, payload_len);
    if ((size_t)n > cap)
        return -1;
    o = ug_conn_offset(m);
    ug_put_prefix(dst, m, h->session_id, h->client_id);
    ug_put32(dst + o, h->tag);
    ug_put16(dst + o + 4, h->seq);
    ug_put16(dst + o + 6, h->ack);
    ug_put64(dst + o + 8, h->ack_bits);
    dst[o + 16] = h->kind;
    p = o + UG_CONN_HEADER_BYTES;
    if (payload_len > 0 && payload != dst + p)
        memmove(dst + p, payload, (size_t)payload_len);
    p += payload_len;
    if (p < n - 1)
        memset(dst + p, 0, (size_t)(n - 1 - p));
    dst[n - 1] = 1;
    return n;
}

int ug_decode_conn(const ug_magic *m, const uint8_t *b, size_t len, ug_conn_header *h, const uint8_t **payload,
                   int *payload_len) {
    int hs, r, o, end;
    r = ug_decode_prefix(m, b, len, &h->session_id, &h->client_id, &hs);
    if (r != UG_PASS)
        return r;
    if (hs)
        return UDPGATE_DROP_UNEXPECTED_TYPE;
    end = (int)len - 1;
    o = ug_conn_offset(m);
    if (b[end] != 1 || end < o + UG_CONN_HEADER_BYTES)
        return UDPGATE_DROP_BAD_SIZE;
    h->tag = ug_le32(b + o);
    h->seq = ug_le16(b + o + 4);
    h->ack = ug_le16(b + o + 6);
    h->ack_bits = ug_le64(b + o + 8);
    h->kind = b[o + 16];
    *payload = b + o + UG_CONN_HEADER_BYTES;
    *payload_len = end - o - UG_CONN_HEADER_BYTES;
    if (h->seq > UG_SEQ_MASK || h->ack > UG_SEQ_MASK || h->kind > 3 || !payload_ok(h->kind, *payload_len))
        return UDPGATE_DROP_BAD_BODY;
    return UG_PASS;
}

/* §14.2 */
int ug_entry_len(int kind, int fragment, int len) {
    return 1 + (kind != UDPGATE_UNRELIABLE ? 2 : 0) + (fragment ? 4 : 0) + (len < 128 ? 1 : 2) + len;
}

int ug_encode_entry(uint8_t *dst, size_t cap, int kind, const ug_entry *e) {
    int n = ug_entry_len(kind, e->fragment, e->len), p = 0;
    if ((size_t)n > cap || e->len > 16383)
        return 0;
    dst[p++] = (uint8_t)(e->channel | (e->fragment ? 0x20 : 0));
    if (kind != UDPGATE_UNRELIABLE) {
        ug_put16(dst + p, e->id);
        p += 2;
    }
    if (e->fragment) {
        ug_put16(dst + p, e->index);
        ug_put16(dst + p + 2, e->count);
        p += 4;
    }
    if (e->len < 128) {
        dst[p++] = (uint8_t)e->len;
    } else {
        dst[p++] = (uint8_t)(0x80 | (e->len & 0x7f));
        dst[p++] = (uint8_t)(e->len >> 7);
    }
    memcpy(dst + p, e->data, (size_t)e->len);
    return n;
}

int ug_decode_entry(const uint8_t *b, int len, int *pos, int nch, const uint8_t *kinds, ug_entry *e) {
    int p = *pos, kind, l;
    uint8_t head;
    if (p >= len)
        return UG_MSG_MALFORMED;
    head = b[p++];
    if (head & 0xc0)
        return UG_MSG_RESERVED_BITS;
    e->channel = head & 0x1f;
    e->fragment = (head >> 5) & 1;
    if (e->channel >= nch)
        return UG_MSG_BAD_CHANNEL;
    kind = kinds[e->channel];
    e->id = 0;
    e->index = e->count = 0;
    if (kind != UDPGATE_UNRELIABLE) {
        if (p + 2 > len)
            return UG_MSG_MALFORMED;
        e->id = ug_le16(b + p);
        p += 2;
    }
    if (e->fragment) {
        if (kind != UDPGATE_RELIABLE_ORDERED)
            return UG_MSG_BAD_FRAGMENT;
        if (p + 4 > len)
            return UG_MSG_MALFORMED;
        e->index = ug_le16(b + p);
        e->count = ug_le16(b + p + 2);
        p += 4;
        if (e->count < 2 || e->index >= e->count)
            return UG_MSG_BAD_FRAGMENT;
    }
    if (p >= len)
        return UG_MSG_MALFORMED;
    l = b[p++];
    if (l & 0x80) {
        if (p >= len || b[p] == 0 || (b[p] & 0x80))
            return UG_MSG_MALFORMED;
        l = (l & 0x7f) | (b[p++] << 7);
    }
    if (l > len - p)
        return UG_MSG_MALFORMED;
    e->data = b + p;
    e->len = l;
    *pos = p + l;
    return UG_PASS;
}
