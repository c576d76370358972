/* client.c: the client of docs/protocol.md: handshake (§6), connection
 * (§7), sealed mode (§11.2, §11.3) and messages (§14). */
#include <math.h>
#include <stdlib.h>

#include "internal.h"

#define RECORDS 256          /* sent packets remembered (power of two, > 128 of §7.4) */
#define RECORD_UNITS 128     /* reliable units one packet carries at most */
#define WINDOW 1024          /* §14.3 reliable window, what the receiver accepts (power of two) */
#define SEND_WINDOW 256      /* units this sender keeps unacknowledged per channel (≤ WINDOW; power of two) */
#define ANSWERED 8           /* §6.3 */
#define DATA_CHANNEL 0xff    /* a Data packet in the queues */
#define DEAD_CHANNEL 0xfe    /* a replaced sequenced message in the send queue */
#define FIRST_RESEND 0.1
#define RESEND_INTERVAL 1.0
#define CHALLENGE_LIFETIME 15.0
#define PROOF_INTERVAL 0.25
#define RESTART_SILENCE 1.5
#define RESTART_INTERVAL 1.1
#define ACK_DELAY 0.005
#define MIN_RESEND 0.010
#define RESEND_FACTOR 0.4
#define FLIGHT_PACKETS 240   /* new units wait while this many packets with units are unreported (§14.4) */
#define TARGET 0.012         /* §14.4: the queueing delay a sender holds */

enum { PH_IDLE, PH_INITIAL, PH_RESPONSE, PH_PROVING, PH_CONNECTED, PH_ENDED };

typedef struct ring {
    uint8_t *buf;
    uint32_t cap;
    uint64_t head, tail; /* absolute offsets */
} ring;

static uint32_t ring_used(const ring *r) { return (uint32_t)(r->tail - r->head); }
static uint32_t ring_free(const ring *r) { return r->cap - ring_used(r); }

static void ring_put(ring *r, uint64_t off, const void *src, uint32_t n) {
    uint32_t at = (uint32_t)(off % r->cap), first = r->cap - at;
    if (n == 0)
        return;
    if (first > n)
        first = n;
    memcpy(r->buf + at, src, first);
    memcpy(r->buf, (const uint8_t *)src + first, n - first);
}

static void ring_get(const ring *r, uint64_t off, void *dst, uint32_t n) {
    uint32_t at = (uint32_t)(off % r->cap), first = r->cap - at;
    if (n == 0)
        return;
    if (first > n)
        first = n;
    memcpy(dst, r->buf + at, first);
    memcpy((uint8_t *)dst + first, r->buf, n - first);
}

typedef struct unit {
    uint64_t msg_off;  /* the message's header in the channel's send ring */
    uint32_t data_off; /* this unit's first byte within the message */
    uint16_t len, index, count;
    uint8_t acked, due, sends;
    double first_sent, last_sent;
} unit;

typedef struct channel {
    uint8_t kind, bulk;
    /* reliable send */
    ring sq;
    unit *units;
    uint16_t base, next_id;  /* oldest unacknowledged, next new unit id */
    uint16_t unsent;         /* the oldest unit cut but never sent */
    uint64_t cut_msg;        /* the message being cut into units (header offset) */
    uint32_t cut_pos;        /* bytes of it cut already */
    int frag_unacked;
    /* sequenced send */
    uint16_t seq_next;
    int64_t seq_pending; /* offset of the unsent sequenced message in the out queue, -1 none */
    /* reliable receive */
    uint16_t recv_next;
    int16_t *slot_of; /* [WINDOW], by id & (WINDOW - 1): the slot holding that unit, -1 none */
    uint8_t *reasm; /* max_message_size bytes: the message being reassembled */
    int rs_on, rs_done, rs_len, rs_count, rs_expect;
    /* sequenced receive */
    uint16_t seq_newest;
    uint8_t seq_any;
} channel;

typedef struct record {
    uint16_t seq;
    uint8_t valid, reported, has_units;
    uint16_t nunits;
    double time;
    uint32_t *units; /* RECORD_UNITS of (channel << 16 | id) */
} record;

struct udpgate_client {
    udpgate_config cfg;
    char bind[64];
    ug_magic magic;
    int o; /* connection header offset */
    ug_socket sock;
    int own_socket, sock_family;
    void *mem;

    int state, end_reason, phase;
    uint32_t server_nv;
    uint16_t server_nf;
    udpgate_address server;

    /* handshake */
    uint8_t client_id, session_id, sent_count;
    double next_resend, gap, progress, challenge_time;
    uint8_t ch_secret;
    uint64_t ch_timestamp;
    uint8_t ch_cookie[20];
    uint8_t answered[ANSWERED][20];
    int n_answered;
    int restarting; /* §6.4: 0 no, 1 sending Initials, 2 sending RestartResponses */
    double hs_sent[4]; /* §6.2: when the last 4 handshake packets left, by SentCount & 3 */
    uint8_t hs_count[4];
    double hs_rtt;     /* the last handshake round trip measured, 0 none */
    double last_restart;
    /* §6.4: a RestartHandshake that came too soon (restart_unneeded,
       rate_limited), honoured once both waits are over unless the server
       is heard after it */
    int restart_pending;
    double restart_pending_at;

    /* sealed */
    int sealed;
    ug_token token;
    int addr_index;
    uint64_t tx_counter, rx_last;
    uint64_t rx_bits[8];
    uint8_t salt[16];
    double next_proof;

    /* connection */
    uint8_t cookie[20];
    uint32_t tag;
    uint16_t send_seq, recv_newest, peer_ack, held_jump;
    uint8_t recv_any, have_held;
    uint64_t recv_bits;
    double last_recv, last_send, timeout;
    record records[RECORDS];
    uint16_t oldest_unreported;
    int unreported_units; /* the flight: packets with reliable units not yet reported */
    uint16_t oldest_flight;
    /* §14.4 congestion window (packets) for bulk units and fragments */
    double cwnd, base_min[2], base_epoch, standing[4], qdelay, last_cut;
    int slow_start, nstanding;
    uint16_t loss_hist; /* the last 16 reports, 1 = lost */
    double srtt, rttvar;
    int has_rtt;
    /* §14.4 retransmission timeout: the last packet reported delivered; while
     * units are in flight and none was for a timeout, one packet goes per
     * timeout, each twice the last (at most 1 s), as TCP's RTO backs off */
    double last_delivered, probe_at;
    int backoff;
    int ack_pending, ack_urgent;
    double ack_pending_since, last_reliable_rx;

    /* messages */
    int nch, P, F, max_frags;
    uint8_t kinds[UDPGATE_MAX_CHANNELS];
    channel ch[UDPGATE_MAX_CHANNELS];
    int frag_owner, rr;
    ring uq;                      /* unreliable/sequenced/Data waiting to go: [ch][u16 len][data] */
    ring rq;                      /* received, waiting for udpgate_client_receive: [ch][u32 len][data] */
    uint8_t *slots;               /* nslots × slot_size */
    uint16_t *slot_len;
    uint32_t *slot_meta;          /* index << 16 | count of a fragment; 0 unfragmented */
    int16_t *free_slots;
    int nslots, nfree, slot_size, reserve;

    udpgate_stats st;
    uint8_t pkt[UDPGATE_MAX_DATAGRAM + 64];
    uint8_t rx[UDPGATE_MAX_DATAGRAM + 64];
    uint8_t pay[UDPGATE_MAX_DATAGRAM];
};

/* ---- names ---- */

const char *udpgate_state_name(int s) {
    switch (s) {
    case UDPGATE_STATE_DISCONNECTED: return "disconnected";
    case UDPGATE_STATE_CONNECTING: return "connecting";
    case UDPGATE_STATE_CONNECTED: return "connected";
    case UDPGATE_STATE_CONNECT_TIMED_OUT: return "connect timed out";
    case UDPGATE_STATE_DENIED_SERVER_FULL: return "denied: server full";
    case UDPGATE_STATE_DENIED_REFUSED: return "denied: refused by the server's application";
    case UDPGATE_STATE_DENIED_ADDRESS_LIMIT: return "denied: too many connections from this address or network";
    case UDPGATE_STATE_DENIED_UNKNOWN_CONNECTION: return "denied: unknown connection";
    case UDPGATE_STATE_DENIED_OTHER: return "denied";
    case UDPGATE_STATE_VERSION_MISMATCH: return "version mismatch: set network_version/network_features to the server's";
    case UDPGATE_STATE_LAYOUT_MISMATCH: return "layout mismatch: configure the server's channels (same count, kinds and order), max_message_size and max_datagram";
    case UDPGATE_STATE_TOKEN_EXPIRED: return "connect token expired";
    case UDPGATE_STATE_TOKEN_INVALID: return "connect token invalid (wrong private key or protocol id)";
    case UDPGATE_STATE_TOKEN_FOREIGN_SERVER: return "connect token does not list this server";
    case UDPGATE_STATE_TOKEN_IN_USE: return "connect token in use from another address";
    case UDPGATE_STATE_TOKEN_REQUIRED: return "the server is sealed: connect with a token";
    case UDPGATE_STATE_TIMED_OUT: return "timed out";
    case UDPGATE_STATE_SERVER_SHUTDOWN: return "server shut down";
    case UDPGATE_STATE_SERVER_CLOSED: return "closed by the server";
    case UDPGATE_STATE_REPLACED: return "replaced by a newer connection";
    case UDPGATE_STATE_STALLED: return "stalled: a reliable message went unacknowledged";
    case UDPGATE_STATE_SOCKET_ERROR: return "socket error";
    }
    return "unknown state";
}

const char *udpgate_result_name(int r) {
    static const char *names[] = {"ok", "invalid argument", "out of memory", "socket error", "bad address",
                                  "wrong state", "no such channel", "too large", "queue full", "empty",
                                  "buffer too small", "bad connect token", "crypto init failed"};
    return (r <= 0 && r >= -12) ? names[-r] : "unknown result";
}

const char *udpgate_drop_name(int d) {
    static const char *names[UDPGATE_DROP_COUNT] = {
        "malformed", "too_large", "bad_magic", "bad_size", "unknown_type", "unexpected_type", "bad_version",
        "bad_body", "session_mismatch", "wrong_client_id", "wrong_cookie", "bad_tag", "stale_sequence",
        "suspect_sequence", "unknown_connection", "restart_unneeded", "rate_limited", "sealed_replay",
        "sealed_forged", "message_refused"};
    return (d >= 0 && d < UDPGATE_DROP_COUNT) ? names[d] : "unknown";
}

/* ---- configuration and memory ---- */

void udpgate_default_config(udpgate_config *c) {
    memset(c, 0, sizeof *c);
    c->network_version = 1;
    c->max_datagram = UDPGATE_DEFAULT_MAX_DATAGRAM;
    c->connect_timeout = 10;
    c->keepalive_interval = 1;
    c->timeout = 5;
    c->num_channels = 4;
    c->channels[0].kind = UDPGATE_RELIABLE_ORDERED;
    c->channels[1].kind = UDPGATE_UNRELIABLE;
    c->channels[2].kind = UDPGATE_SEQUENCED;
    c->channels[3].kind = UDPGATE_RELIABLE_ORDERED;
    c->channels[3].bulk = 1;
    c->max_message_size = UDPGATE_DEFAULT_MAX_MESSAGE_SIZE;
    c->stall_timeout = 10;
    c->max_packets_per_update = 256;
}

/* The configuration with every default filled in, or an error. */
static int normalize(const udpgate_config *in, udpgate_config *c) {
    ug_magic m;
    int i;
    *c = *in;
    if ((c->allocate == NULL) != (c->free == NULL) || (c->send == NULL) != (c->receive == NULL))
        return UDPGATE_ERR_INVALID;
    if (ug_magic_parse(&m, c->magic) != 0)
        return UDPGATE_ERR_INVALID;
    if (c->max_datagram == 0)
        c->max_datagram = UDPGATE_DEFAULT_MAX_DATAGRAM;
    if (c->max_datagram < 128 || c->max_datagram > UDPGATE_MAX_DATAGRAM)
        return UDPGATE_ERR_INVALID;
    if (c->connect_timeout <= 0) c->connect_timeout = 10;
    if (c->keepalive_interval <= 0) c->keepalive_interval = 1;
    if (c->timeout <= 0) c->timeout = 5;
    if (c->stall_timeout <= 0) c->stall_timeout = 10;
    if (c->max_packets_per_update <= 0) c->max_packets_per_update = 256;
    if (c->num_channels < 0 || c->num_channels > UDPGATE_MAX_CHANNELS)
        return UDPGATE_ERR_INVALID;
    for (i = 0; i < c->num_channels; i++)
        if (c->channels[i].kind > UDPGATE_SEQUENCED)
            return UDPGATE_ERR_INVALID;
    if (c->max_message_size == 0)
        c->max_message_size = UDPGATE_DEFAULT_MAX_MESSAGE_SIZE;
    if (c->max_message_size < 1 || c->max_message_size > UDPGATE_MAX_MESSAGE_SIZE)
        return UDPGATE_ERR_INVALID;
    if (c->send_queue_bytes == 0)
        c->send_queue_bytes = 2 * (c->max_message_size > 65536 ? c->max_message_size : 65536);
    if (c->unreliable_queue_bytes == 0)
        c->unreliable_queue_bytes = 65536;
    if (c->receive_queue_bytes == 0)
        c->receive_queue_bytes = c->max_message_size + 65536;
    if (c->send_queue_bytes < c->max_message_size + 4 || c->receive_queue_bytes < c->max_message_size + 16 ||
        c->unreliable_queue_bytes < c->max_datagram + 4)
        return UDPGATE_ERR_INVALID;
    return UDPGATE_OK;
}

/* Sizes derived from a normalized configuration; P is unsealed's (the larger). */
typedef struct layout {
    size_t total, units, sq[UDPGATE_MAX_CHANNELS], slot_of, rec_units, uq, rq, slots, slot_len, slot_meta, free_slots,
        reasm;
    int nslots, slot_size, max_frags;
} layout;

static size_t align16(size_t n) { return (n + 15) & ~(size_t)15; }

static void plan(const udpgate_config *c, layout *l) {
    ug_magic m;
    int i, o, P, F, nrel = 0;
    size_t at;
    ug_magic_parse(&m, c->magic);
    o = ug_conn_offset(&m);
    P = c->max_datagram - o - 18;
    F = P - 9;
    memset(l, 0, sizeof *l);
    for (i = 0; i < c->num_channels; i++)
        nrel += c->channels[i].kind == UDPGATE_RELIABLE_ORDERED;
    l->max_frags = (c->max_message_size + F - 1) / F;
    l->slot_size = P;
    /* a full window of every reliable channel, and the reserve of §14.5 */
    l->nslots = nrel ? WINDOW + l->max_frags + 32 : 0;
    if (l->nslots > 32000)
        l->nslots = 32000;
    at = align16(sizeof(struct udpgate_client));
    l->rec_units = at;
    at += align16((size_t)RECORDS * RECORD_UNITS * 4);
    l->units = at;
    at += align16((size_t)nrel * SEND_WINDOW * sizeof(unit));
    l->slot_of = at;
    at += align16((size_t)nrel * WINDOW * 2);
    for (i = 0; i < c->num_channels; i++)
        if (c->channels[i].kind == UDPGATE_RELIABLE_ORDERED) {
            l->sq[i] = at;
            at += align16((size_t)c->send_queue_bytes);
        }
    l->uq = at;
    at += align16((size_t)c->unreliable_queue_bytes);
    l->rq = at;
    at += align16((size_t)c->receive_queue_bytes);
    l->slots = at;
    at += align16((size_t)l->nslots * (size_t)l->slot_size);
    l->slot_len = at;
    at += align16((size_t)l->nslots * 2);
    l->slot_meta = at;
    at += align16((size_t)l->nslots * 4);
    l->free_slots = at;
    at += align16((size_t)l->nslots * 2);
    l->reasm = at;
    at += (size_t)nrel * align16((size_t)c->max_message_size);
    l->total = at;
}

long udpgate_client_memory_size(const udpgate_config *cfg) {
    udpgate_config c;
    layout l;
    int r;
    if (!cfg)
        return UDPGATE_ERR_INVALID;
    if ((r = normalize(cfg, &c)) != UDPGATE_OK)
        return r;
    plan(&c, &l);
    return (long)l.total;
}

int udpgate_client_create(const udpgate_config *cfg, udpgate_client **out) {
    udpgate_config c;
    layout l;
    udpgate_client *cl;
    uint8_t *mem;
    int r, i, nrel = 0;
    if (!out)
        return UDPGATE_ERR_INVALID;
    *out = NULL;
    if (!cfg)
        return UDPGATE_ERR_INVALID;
    if ((r = normalize(cfg, &c)) != UDPGATE_OK)
        return r;
    if (ug_crypto_init() != 0)
        return UDPGATE_ERR_CRYPTO;
    plan(&c, &l);
    mem = c.allocate ? (uint8_t *)c.allocate(c.allocator_context, l.total) : (uint8_t *)malloc(l.total);
    if (!mem)
        return UDPGATE_ERR_NOMEM;
    memset(mem, 0, l.total);
    cl = (udpgate_client *)mem;
    cl->mem = mem;
    cl->cfg = c;
    if (c.bind_address) {
        size_t n = strlen(c.bind_address);
        if (n >= sizeof cl->bind)
            n = sizeof cl->bind - 1;
        memcpy(cl->bind, c.bind_address, n);
    }
    cl->cfg.bind_address = NULL;
    cl->cfg.magic = NULL;
    ug_magic_parse(&cl->magic, c.magic);
    cl->o = ug_conn_offset(&cl->magic);
    cl->sock.fd = -1;
    cl->own_socket = c.send == NULL;
    cl->nch = c.num_channels;
    cl->max_frags = l.max_frags;
    for (i = 0; i < RECORDS; i++)
        cl->records[i].units = (uint32_t *)(mem + l.rec_units) + (size_t)i * RECORD_UNITS;
    for (i = 0; i < cl->nch; i++) {
        channel *ch = &cl->ch[i];
        cl->kinds[i] = c.channels[i].kind;
        ch->kind = c.channels[i].kind;
        ch->bulk = c.channels[i].bulk;
        ch->seq_pending = -1;
        if (ch->kind == UDPGATE_RELIABLE_ORDERED) {
            ch->units = (unit *)(mem + l.units) + (size_t)nrel * SEND_WINDOW;
            ch->slot_of = (int16_t *)(mem + l.slot_of) + (size_t)nrel * WINDOW;
            ch->sq.buf = mem + l.sq[i];
            ch->sq.cap = (uint32_t)c.send_queue_bytes;
            ch->reasm = mem + l.reasm + (size_t)nrel * align16((size_t)c.max_message_size);
            nrel++;
        }
    }
    cl->uq.buf = mem + l.uq;
    cl->uq.cap = (uint32_t)c.unreliable_queue_bytes;
    cl->rq.buf = mem + l.rq;
    cl->rq.cap = (uint32_t)c.receive_queue_bytes;
    cl->slots = mem + l.slots;
    cl->slot_len = (uint16_t *)(mem + l.slot_len);
    cl->slot_meta = (uint32_t *)(mem + l.slot_meta);
    cl->free_slots = (int16_t *)(mem + l.free_slots);
    cl->nslots = l.nslots;
    cl->slot_size = l.slot_size;
    cl->reserve = l.max_frags + 32;
    cl->client_id = 0;
    ug_random(&cl->client_id, 1);
    cl->client_id &= 7;
    *out = cl;
    return UDPGATE_OK;
}

void udpgate_client_destroy(udpgate_client *cl) {
    if (!cl)
        return;
    if (cl->own_socket)
        ug_socket_close(&cl->sock);
    if (cl->cfg.free)
        cl->cfg.free(cl->cfg.allocator_context, cl->mem);
    else
        free(cl->mem);
}

/* ---- sending datagrams ---- */

static void end(udpgate_client *cl, int state, int reason) {
    cl->state = state;
    cl->end_reason = reason;
    cl->phase = PH_ENDED;
}

static void send_raw(udpgate_client *cl, const uint8_t *d, int n) {
    int r;
    if (n <= 0)
        return;
    if (cl->own_socket)
        r = ug_socket_send(&cl->sock, &cl->server, d, (size_t)n);
    else
        r = cl->cfg.send(cl->cfg.transport_context, &cl->server, d, (size_t)n);
    if (r < 0) {
        end(cl, UDPGATE_STATE_SOCKET_ERROR, 0);
        return;
    }
    cl->st.packets_sent++;
    cl->st.bytes_sent += (uint64_t)n;
}

/* §3.7: the message layout an Initial declares: the channels' kinds in order
 * (wire codes: the kind + 1), the largest reliable message (0 without a
 * reliable channel) and the largest datagram; none without channels. */
static void declare_layout(const udpgate_client *cl, ug_handshake *h) {
    int i, reliable = 0;
    if (cl->cfg.num_channels <= 0)
        return;
    h->layout_channels = (uint8_t)cl->cfg.num_channels;
    for (i = 0; i < cl->cfg.num_channels; i++) {
        h->layout_kinds |= (uint64_t)(cl->cfg.channels[i].kind + 1) << (2 * i);
        reliable |= cl->cfg.channels[i].kind == UDPGATE_RELIABLE_ORDERED;
    }
    h->layout_max_message = reliable ? (uint32_t)cl->cfg.max_message_size : 0;
    h->layout_max_datagram = (uint16_t)cl->cfg.max_datagram;
}

static void send_handshake(udpgate_client *cl, int type, double now) {
    ug_handshake h;
    uint8_t r;
    int n;
    memset(&h, 0, sizeof h);
    h.session_id = cl->session_id;
    h.client_id = cl->client_id;
    h.min_version = UG_MIN_VERSION;
    h.cur_version = UG_CUR_VERSION;
    h.type = (uint8_t)type;
    h.sent_count = cl->sent_count++;
    cl->hs_sent[h.sent_count & 3] = now;
    cl->hs_count[h.sent_count & 3] = h.sent_count;
    h.network_version = cl->cfg.network_version;
    h.network_features = cl->cfg.network_features;
    h.restart = cl->restarting != 0; /* §3.4: set on a restart's Initials */
    if (type == UG_INITIAL)
        declare_layout(cl, &h);
    if (type == UG_RESPONSE || type == UG_RESTART_RESPONSE) {
        h.secret_id = cl->ch_secret;
        h.timestamp = cl->ch_timestamp;
        memcpy(h.cookie, cl->ch_cookie, 20);
        memcpy(h.orig_cookie, cl->cookie, 20);
    }
    ug_random(&r, 1);
    h.random_len = 8 + r % 9;
    ug_random(h.random, (size_t)h.random_len);
    n = ug_encode_handshake(cl->pkt, sizeof cl->pkt, &cl->magic, &h);
    send_raw(cl, cl->pkt, n);
    cl->last_send = now;
}

static int seq_newer(uint16_t a, uint16_t b) {
    unsigned d = (unsigned)(a - b) & UG_SEQ_MASK;
    return d >= 1 && d < 8192;
}

/* Sends a connection packet (sealed when the connection is), and records it.
 * Returns its sequence number. */
static uint16_t send_conn(udpgate_client *cl, int kind, const uint8_t *payload, int len, double now) {
    ug_conn_header h;
    record *rec;
    int n, o = cl->o;
    h.session_id = cl->session_id;
    h.client_id = cl->client_id;
    h.tag = cl->tag;
    h.seq = cl->send_seq;
    h.ack = cl->recv_newest;
    h.ack_bits = cl->recv_any ? cl->recv_bits : 0; /* §7.4: 0 until something arrived */
    h.kind = (uint8_t)kind;
    cl->send_seq = (uint16_t)((cl->send_seq + 1) & UG_SEQ_MASK);
    if (cl->sealed) {
        uint8_t *b = cl->pkt;
        if (cl->tx_counter >= UINT64_MAX - 257) { /* §11.2: never reach the reserved counters */
            end(cl, UDPGATE_STATE_SERVER_CLOSED, 0);
            return h.seq;
        }
        ug_put_prefix(b, &cl->magic, h.session_id, h.client_id);
        ug_put32(b + o, h.tag);
        ug_put64(b + o + 4, cl->tx_counter);
        ug_put16(b + o + 12, h.seq);
        ug_put16(b + o + 14, h.ack);
        ug_put64(b + o + 16, h.ack_bits);
        b[o + 24] = h.kind;
        if (len)
            memmove(b + o + 25, payload, (size_t)len);
        ug_seal(b, o + 12, o + 25 + len, cl->token.c2s_key, cl->salt, cl->tx_counter++);
        n = o + 25 + len + 16;
        b[n++] = 1;
    } else {
        n = ug_encode_conn(cl->pkt, sizeof cl->pkt, &cl->magic, &h, payload, len);
    }
    rec = &cl->records[h.seq & (RECORDS - 1)];
    if (rec->valid && !rec->reported && rec->has_units)
        cl->unreported_units--; /* forgotten unreported: its units resend on their timers */
    rec->seq = h.seq;
    rec->valid = 1;
    rec->reported = 0;
    rec->has_units = 0;
    rec->nunits = 0;
    rec->time = now;
    send_raw(cl, cl->pkt, n);
    cl->last_send = now;
    cl->ack_pending = cl->ack_urgent = 0;
    return h.seq;
}

/* §6.5: the first KeepAlive, padded to the size of a Disconnect. */
static void send_keepalive(udpgate_client *cl, double now, int padded) {
    static const uint8_t zero[4] = {0, 0, 0, 0};
    send_conn(cl, UG_KIND_KEEPALIVE, zero, padded && !cl->sealed ? 1 : 0, now);
}

static void send_disconnects(udpgate_client *cl, int reason, int count, double now) {
    uint8_t r = (uint8_t)reason;
    int i;
    for (i = 0; i < count && cl->phase != PH_ENDED; i++)
        send_conn(cl, UG_KIND_DISCONNECT, &r, 1, now);
}

/* §11.3: a proof. */
static void send_proof(udpgate_client *cl, double now) {
    uint8_t *b = cl->pkt;
    int o = cl->o, p, ad;
    uint16_t seq = cl->send_seq;
    record *rec;
    ug_put_prefix(b, &cl->magic, cl->session_id, cl->client_id);
    ug_put32(b + o, cl->tag);
    b[o + 4] = cl->ch_secret;
    ug_put64(b + o + 5, cl->ch_timestamp);
    memcpy(b + o + 13, cl->ch_cookie, 20);
    memcpy(b + o + 33, cl->token.request, UG_REQUEST_BYTES);
    p = o + 33 + UG_REQUEST_BYTES;
    ug_put64(b + p, cl->tx_counter);
    ad = p + 8;
    ug_put16(b + ad, seq);
    ug_put16(b + ad + 2, cl->recv_newest);
    ug_put64(b + ad + 4, cl->recv_any ? cl->recv_bits : 0);
    b[ad + 12] = UG_KIND_KEEPALIVE;
    ug_seal(b, ad, ad + 13, cl->token.c2s_key, cl->salt, cl->tx_counter++);
    b[ad + 13 + 16] = 1;
    cl->send_seq = (uint16_t)((seq + 1) & UG_SEQ_MASK);
    rec = &cl->records[seq & (RECORDS - 1)];
    rec->seq = seq;
    rec->valid = 1;
    rec->reported = 0;
    rec->has_units = 0;
    rec->nunits = 0;
    rec->time = now;
    send_raw(cl, b, ad + 13 + 17);
    cl->last_send = now;
}

/* ---- connecting ---- */

static void reset_connection(udpgate_client *cl) {
    int i;
    cl->phase = PH_IDLE;
    cl->end_reason = 0;
    cl->session_id = 0;
    cl->sent_count = 0;
    cl->n_answered = 0;
    cl->restarting = 0;
    cl->tx_counter = 0;
    cl->rx_last = 0;
    memset(cl->rx_bits, 0, sizeof cl->rx_bits);
    cl->recv_any = cl->have_held = 0;
    cl->unreported_units = 0;
    cl->cwnd = 10;
    cl->slow_start = 1;
    cl->base_min[0] = cl->base_min[1] = 1e9;
    cl->base_epoch = 0;
    cl->nstanding = 0;
    cl->qdelay = 0;
    cl->last_cut = 0;
    cl->loss_hist = 0;
    cl->has_rtt = 0;
    cl->srtt = 0.1;
    cl->rttvar = 0.05;
    cl->ack_pending = cl->ack_urgent = 0;
    cl->last_reliable_rx = 0;
    for (i = 0; i < RECORDS; i++)
        cl->records[i].valid = 0;
    for (i = 0; i < cl->nch; i++) {
        channel *ch = &cl->ch[i];
        ch->sq.head = ch->sq.tail = 0;
        ch->base = ch->next_id = ch->unsent = 0;
        ch->cut_msg = 0;
        ch->cut_pos = 0;
        ch->frag_unacked = 0;
        ch->seq_next = 0;
        ch->seq_pending = -1;
        ch->recv_next = 0;
        ch->rs_on = ch->rs_done = 0;
        ch->seq_any = 0;
        if (ch->slot_of)
            memset(ch->slot_of, 0xff, WINDOW * sizeof(int16_t));
    }
    cl->frag_owner = -1;
    cl->uq.head = cl->uq.tail = 0;
    cl->rq.head = cl->rq.tail = 0;
    cl->nfree = cl->nslots;
    for (i = 0; i < cl->nslots; i++)
        cl->free_slots[i] = (int16_t)(cl->nslots - 1 - i);
}

static double first_resend(const udpgate_client *cl);

static int start(udpgate_client *cl, const udpgate_address *a, double now) {
    uint8_t r;
    if (cl->own_socket && (cl->sock.fd < 0 || cl->sock_family != a->family)) {
        int e;
        ug_socket_close(&cl->sock);
        e = ug_socket_open(&cl->sock, a->family, cl->bind[0] ? cl->bind : NULL, cl->cfg.socket_buffer_bytes);
        if (e != UDPGATE_OK)
            return e;
        cl->sock_family = a->family;
    }
    reset_connection(cl);
    cl->server = *a;
    ug_random(&r, 1);
    cl->client_id = (uint8_t)((cl->client_id + 1 + r % 7) & 7); /* §2: another ClientID */
    cl->state = UDPGATE_STATE_CONNECTING;
    cl->phase = PH_INITIAL;
    cl->progress = now;
    cl->gap = first_resend(cl);
    cl->next_resend = now + cl->gap;
    cl->P = cl->cfg.max_datagram - cl->o - (cl->sealed ? 42 : 18);
    cl->F = cl->P - 9;
    cl->max_frags = (cl->cfg.max_message_size + cl->F - 1) / cl->F;
    send_handshake(cl, UG_INITIAL, now);
    return UDPGATE_OK;
}

int udpgate_client_connect(udpgate_client *cl, const char *address, double now) {
    udpgate_address a;
    int r;
    if (!cl)
        return UDPGATE_ERR_INVALID;
    if ((r = udpgate_address_parse(&a, address)) != UDPGATE_OK)
        return r;
    cl->sealed = 0;
    return start(cl, &a, now);
}

int udpgate_client_connect_token(udpgate_client *cl, const uint8_t *token, size_t len, double now) {
    int r;
    if (!cl || !token)
        return UDPGATE_ERR_INVALID;
    /* a proof must fit a datagram (§11.3) */
    if (cl->o + 1148 > cl->cfg.max_datagram)
        return UDPGATE_ERR_INVALID;
    if ((r = ug_token_parse(&cl->token, token, len)) != UDPGATE_OK)
        return r;
    cl->sealed = 1;
    cl->addr_index = 0;
    return start(cl, &cl->token.addresses[0], now);
}

/* The connection's numbers from its authorised cookie (§4). */
static void open_connection(udpgate_client *cl, const uint8_t cookie[20], double now) {
    uint16_t server_seq = ug_le16(cookie) & UG_SEQ_MASK;
    memcpy(cl->cookie, cookie, 20);
    memcpy(cl->salt, cookie, 16);
    cl->tag = ug_le32(cookie + 4);
    cl->send_seq = ug_le16(cookie + 2) & UG_SEQ_MASK;
    cl->recv_newest = (uint16_t)((server_seq - 1) & UG_SEQ_MASK);
    cl->recv_bits = ~(uint64_t)0; /* §7.3: the window starts full */
    cl->peer_ack = (uint16_t)((cl->send_seq - 1) & UG_SEQ_MASK); /* the peer's Ack before it heard us */
    cl->oldest_unreported = cl->oldest_flight = cl->send_seq;
    cl->last_recv = now;
    cl->timeout = cl->cfg.timeout;
    if (cl->sealed && cl->token.timeout > 0) {
        cl->timeout = cl->token.timeout;
        if (cl->timeout < 2 * cl->cfg.keepalive_interval)
            cl->timeout = 2 * cl->cfg.keepalive_interval;
    }
}

static void connected(udpgate_client *cl, double now) {
    cl->last_restart = now;
    cl->phase = PH_CONNECTED;
    cl->last_delivered = now;
    cl->backoff = 0;
    cl->state = UDPGATE_STATE_CONNECTED;
    cl->sent_count = 0;
    cl->last_recv = now;
}

/* §6.2: 100 ms, or 3 round trips (at least 50 ms) once one is measured. */
static double first_resend(const udpgate_client *cl) {
    double rtt = cl->has_rtt ? cl->srtt : cl->hs_rtt;
    if (rtt <= 0)
        return FIRST_RESEND;
    return 3 * rtt > 0.05 ? 3 * rtt : 0.05;
}

/* §6.4 step 2: honour a RestartHandshake, now or when the silence it came in
   outlasted RESTART_SILENCE (restart_pending). */
static void begin_restart(udpgate_client *cl, double now) {
    cl->restarting = 1;
    cl->restart_pending = 0;
    cl->last_restart = now;
    cl->progress = now;
    cl->n_answered = 0;
    cl->gap = first_resend(cl);
    send_handshake(cl, UG_INITIAL, now);
    cl->next_resend = now + cl->gap;
}

/* A Challenge or Ack that echoes one of the last 4 SentCounts is a round trip. */
static void hs_rtt_sample(udpgate_client *cl, uint8_t echoed, double now) {
    int i = echoed & 3;
    uint8_t behind = (uint8_t)(cl->sent_count - 1 - echoed);
    if (cl->hs_count[i] == echoed && behind < 4 && now >= cl->hs_sent[i])
        cl->hs_rtt = now - cl->hs_sent[i];
}

static int version_ok(const ug_handshake *h) {
    return h->min_version >= UG_MIN_VERSION && h->min_version <= UG_CUR_VERSION && h->min_version <= h->cur_version;
}

static int answered(const udpgate_client *cl, const uint8_t *cookie) {
    int i, n = cl->n_answered < ANSWERED ? cl->n_answered : ANSWERED;
    for (i = 0; i < n; i++)
        if (memcmp(cl->answered[i], cookie, 20) == 0)
            return 1;
    return 0;
}

static double f64_of(uint64_t bits) {
    double d;
    memcpy(&d, &bits, sizeof d);
    return d;
}

static int denied_state(int reason) {
    switch (reason) {
    case 1: return UDPGATE_STATE_DENIED_SERVER_FULL;
    case 2: return UDPGATE_STATE_DENIED_REFUSED;
    case 3: return UDPGATE_STATE_DENIED_ADDRESS_LIMIT;
    case 4: return UDPGATE_STATE_DENIED_UNKNOWN_CONNECTION;
    }
    return UDPGATE_STATE_DENIED_OTHER;
}

/* A Disconnect's reason as an ending (§7.6, §11.3). */
static int disconnect_state(int reason) {
    switch (reason) {
    case 2: return UDPGATE_STATE_SERVER_SHUTDOWN;
    case 3: return UDPGATE_STATE_TIMED_OUT;
    case 4: return UDPGATE_STATE_REPLACED;
    case 5: return UDPGATE_STATE_TOKEN_EXPIRED;
    case 6: return UDPGATE_STATE_TOKEN_INVALID;
    case 7: return UDPGATE_STATE_TOKEN_FOREIGN_SERVER;
    case 8: return UDPGATE_STATE_TOKEN_IN_USE;
    case 9: return UDPGATE_STATE_DENIED_SERVER_FULL;
    case 10: return UDPGATE_STATE_STALLED;
    case 11: return UDPGATE_STATE_TOKEN_REQUIRED;
    case 12: return UDPGATE_STATE_DENIED_ADDRESS_LIMIT;
    case 13: return UDPGATE_STATE_DENIED_REFUSED;
    }
    return UDPGATE_STATE_SERVER_CLOSED;
}

static int drop(udpgate_client *cl, int reason) {
    cl->st.drops[reason]++;
    return reason;
}

static void on_handshake(udpgate_client *cl, const uint8_t *b, int n, double now) {
    ug_handshake h;
    int r = ug_decode_handshake(&cl->magic, b, (size_t)n, &h);
    if (r != UG_PASS) {
        drop(cl, r);
        return;
    }
    if (h.type != UG_CHALLENGE && h.type != UG_ACK && h.type != UG_RESTART_HANDSHAKE &&
        h.type != UG_VERSION_UPGRADE && h.type != UG_DENIED && h.type != UG_LAYOUT_MISMATCH) {
        drop(cl, UDPGATE_DROP_UNEXPECTED_TYPE);
        return;
    }
    if (h.client_id != cl->client_id) {
        drop(cl, UDPGATE_DROP_WRONG_CLIENT_ID);
        return;
    }
    if (h.type != UG_VERSION_UPGRADE && !version_ok(&h)) {
        drop(cl, UDPGATE_DROP_BAD_VERSION);
        return;
    }
    if (h.type == UG_CHALLENGE || h.type == UG_ACK)
        hs_rtt_sample(cl, h.sent_count, now);
    switch (h.type) {
    case UG_CHALLENGE:
        if (!(f64_of(h.timestamp) > 0)) {
            drop(cl, UDPGATE_DROP_BAD_BODY);
            return;
        }
        if (cl->phase != PH_INITIAL && cl->phase != PH_RESPONSE && !cl->restarting) {
            drop(cl, UDPGATE_DROP_UNEXPECTED_TYPE);
            return;
        }
        cl->session_id = h.session_id;
        cl->ch_secret = h.secret_id;
        cl->ch_timestamp = h.timestamp;
        memcpy(cl->ch_cookie, h.cookie, 20);
        cl->challenge_time = now;
        if (cl->sealed) {
            /* §11.3 step 2: the Challenge's cookie is the authorised cookie; prove at once */
            open_connection(cl, h.cookie, now);
            cl->phase = PH_PROVING;
            cl->progress = now;
            send_proof(cl, now);
            cl->next_proof = now + PROOF_INTERVAL;
            return;
        }
        memcpy(cl->answered[cl->n_answered % ANSWERED], h.cookie, 20);
        cl->n_answered++;
        if (cl->restarting) { /* §6.4 step 3 */
            if (cl->restarting == 1) {
                cl->restarting = 2;
                cl->progress = now;
                cl->gap = first_resend(cl);
            }
            send_handshake(cl, UG_RESTART_RESPONSE, now);
            cl->next_resend = now + cl->gap;
            return;
        }
        if (cl->phase == PH_INITIAL) {
            cl->phase = PH_RESPONSE;
            cl->progress = now;
            cl->gap = first_resend(cl);
        }
        send_handshake(cl, UG_RESPONSE, now);
        cl->next_resend = now + cl->gap;
        return;
    case UG_ACK:
        if (!(f64_of(h.timestamp) < 0)) {
            drop(cl, UDPGATE_DROP_BAD_BODY);
            return;
        }
        if (cl->phase == PH_CONNECTED && cl->restarting == 2 && memcmp(h.cookie, cl->cookie, 20) == 0) {
            cl->restarting = 0; /* §6.4 step 4: moved */
            cl->probe_at = now; /* probe the new path at once */
            cl->sent_count = 0;
            return;
        }
        if (cl->phase != PH_RESPONSE) {
            drop(cl, UDPGATE_DROP_UNEXPECTED_TYPE);
            return;
        }
        if (!answered(cl, h.cookie)) {
            drop(cl, UDPGATE_DROP_WRONG_COOKIE);
            return;
        }
        if (f64_of(h.timestamp) == -2.0) { /* §11.3: a sealed server's Ack, and no token */
            end(cl, UDPGATE_STATE_TOKEN_REQUIRED, 11);
            return;
        }
        open_connection(cl, h.cookie, now);
        connected(cl, now);
        send_keepalive(cl, now, 1);
        return;
    case UG_DENIED:
        if (cl->phase != PH_RESPONSE && cl->phase != PH_INITIAL && cl->restarting != 2) {
            drop(cl, UDPGATE_DROP_UNEXPECTED_TYPE);
            return;
        }
        if (!answered(cl, h.cookie)) {
            drop(cl, UDPGATE_DROP_WRONG_COOKIE);
            return;
        }
        if (cl->phase == PH_CONNECTED && h.reason != 4) {
            drop(cl, UDPGATE_DROP_UNEXPECTED_TYPE); /* §6.3: only Denied 4 ends a restart */
            return;
        }
        end(cl, denied_state(h.reason), h.reason); /* during a restart: closed, no Disconnect */
        return;
    case UG_VERSION_UPGRADE:
        if (cl->phase == PH_CONNECTED || cl->phase == PH_ENDED) {
            drop(cl, UDPGATE_DROP_UNEXPECTED_TYPE);
            return;
        }
        cl->server_nv = h.network_version;
        cl->server_nf = h.network_features;
        end(cl, UDPGATE_STATE_VERSION_MISMATCH, 0);
        return;
    case UG_LAYOUT_MISMATCH: /* §3.7: only an answer to the Initials' declared layout */
        if (cl->phase == PH_CONNECTED || cl->phase == PH_ENDED || cl->cfg.num_channels <= 0) {
            drop(cl, UDPGATE_DROP_UNEXPECTED_TYPE);
            return;
        }
        end(cl, UDPGATE_STATE_LAYOUT_MISMATCH, 0);
        return;
    default: /* RestartHandshake (§6.4) */
        if (cl->phase != PH_CONNECTED || cl->sealed) {
            drop(cl, UDPGATE_DROP_UNEXPECTED_TYPE);
            return;
        }
        if (cl->restarting) {
            drop(cl, UDPGATE_DROP_RESTART_UNNEEDED);
            return;
        }
        if (now - cl->last_recv < RESTART_SILENCE) {
            cl->restart_pending = 1;
            cl->restart_pending_at = now;
            drop(cl, UDPGATE_DROP_RESTART_UNNEEDED);
            return;
        }
        if (now - cl->last_restart < RESTART_INTERVAL) {
            cl->restart_pending = 1;
            cl->restart_pending_at = now;
            drop(cl, UDPGATE_DROP_RATE_LIMITED);
            return;
        }
        begin_restart(cl, now);
        return;
    }
}

/* ---- the receive window of §7.3 ---- */

/* Checks a packet's Seq and Ack; returns UG_PASS if it would be accepted. */
static int seq_check(udpgate_client *cl, uint16_t seq, uint16_t ack) {
    unsigned d = (unsigned)(seq - cl->recv_newest) & UG_SEQ_MASK;
    uint16_t newest_sent = (uint16_t)((cl->send_seq - 1) & UG_SEQ_MASK);
    if (d == 0 || d >= 8192) {
        unsigned back = (unsigned)(cl->recv_newest - seq) & UG_SEQ_MASK;
        if (back == 0 || back > 64 || (cl->recv_bits >> (back - 1) & 1))
            return UDPGATE_DROP_STALE_SEQUENCE;
        if (seq_newer(ack, newest_sent))
            return UDPGATE_DROP_SUSPECT_SEQUENCE;
        return UG_PASS;
    }
    if (seq_newer(ack, newest_sent))
        return UDPGATE_DROP_SUSPECT_SEQUENCE;
    if (seq_newer(cl->peer_ack, ack))
        return UDPGATE_DROP_SUSPECT_SEQUENCE;
    if (d > 64) {
        unsigned hd = (unsigned)(seq - cl->held_jump) & UG_SEQ_MASK;
        if (cl->have_held && seq != cl->held_jump && (hd <= 64 || hd >= UG_SEQ_MOD - 64))
            return UG_PASS;
        cl->held_jump = seq; /* remembered even though the packet is dropped */
        cl->have_held = 1;
        return UDPGATE_DROP_SUSPECT_SEQUENCE;
    }
    return UG_PASS;
}

static void seq_accept(udpgate_client *cl, uint16_t seq, uint16_t ack) {
    unsigned d = (unsigned)(seq - cl->recv_newest) & UG_SEQ_MASK;
    if (d == 0 || d >= 8192) {
        unsigned back = (unsigned)(cl->recv_newest - seq) & UG_SEQ_MASK;
        cl->recv_bits |= (uint64_t)1 << (back - 1);
        return;
    }
    cl->have_held = 0; /* an accepted step forgets a held jump */
    cl->recv_bits = d >= 64 ? 0 : cl->recv_bits << d;
    if (d <= 64)
        cl->recv_bits |= (uint64_t)1 << (d - 1);
    cl->recv_newest = seq;
    cl->peer_ack = ack;
}

/* ---- acks of our packets (§7.4) and what they mean for messages ---- */

static void unit_acked(udpgate_client *cl, int c, uint16_t id) {
    channel *ch = &cl->ch[c];
    unit *u;
    if ((uint16_t)(id - ch->base) >= (uint16_t)(ch->next_id - ch->base))
        return;
    u = &ch->units[id & (SEND_WINDOW - 1)];
    if (u->acked)
        return;
    u->acked = 1;
    if (u->count)
        ch->frag_unacked--;
    while (ch->base != ch->next_id && ch->units[ch->base & (SEND_WINDOW - 1)].acked)
        ch->base++;
    ch->sq.head = ch->base != ch->next_id ? ch->units[ch->base & (SEND_WINDOW - 1)].msg_off : ch->cut_msg;
}

static double rto(const udpgate_client *cl, int sends);

/* §14.4's controller, simplified: a delay sample per acknowledged packet
 * with units; slow start until the queueing delay passes half the target;
 * then growth while under the target and a proportional cut above it, once
 * a round trip; a loss counts only with a queue or heavy loss. */
static void cc_sample(udpgate_client *cl, double sample, double now) {
    double base, standing;
    int i, n;
    if (now - cl->base_epoch > 30) {
        cl->base_min[1] = cl->base_min[0];
        cl->base_min[0] = 1e9;
        cl->base_epoch = now;
    }
    if (sample < cl->base_min[0])
        cl->base_min[0] = sample;
    base = cl->base_min[0] < cl->base_min[1] ? cl->base_min[0] : cl->base_min[1];
    cl->standing[cl->nstanding++ % 4] = sample;
    n = cl->nstanding < 4 ? cl->nstanding : 4;
    for (standing = 1e9, i = 0; i < n; i++)
        if (cl->standing[i] < standing)
            standing = cl->standing[i];
    cl->qdelay = standing - base;
    if (cl->slow_start) {
        cl->cwnd += 1;
        if (cl->qdelay > TARGET / 2)
            cl->slow_start = 0;
    } else if (cl->qdelay <= TARGET) {
        cl->cwnd += (cl->qdelay > TARGET / 2 ? 0.5 : 1) / cl->cwnd;
    } else if (now - cl->last_cut > cl->srtt) {
        double d = cl->qdelay - TARGET, cut = cl->cwnd * (d < TARGET ? d : TARGET) / (2 * TARGET);
        cl->cwnd -= cut > cl->cwnd / 8 ? cut : cl->cwnd / 8;
        cl->last_cut = now;
    }
    if (cl->cwnd > FLIGHT_PACKETS)
        cl->cwnd = FLIGHT_PACKETS;
}

static void cc_loss(udpgate_client *cl, double now) {
    int lost = 0;
    uint16_t h = cl->loss_hist;
    for (; h; h &= (uint16_t)(h - 1))
        lost++;
    if ((cl->qdelay > 2 * TARGET || lost > 4) && now - cl->last_cut > cl->srtt) {
        cl->cwnd *= 0.7;
        if (cl->cwnd < 2)
            cl->cwnd = 2;
        cl->slow_start = 0;
        cl->last_cut = now;
    }
}

static void report(udpgate_client *cl, record *rec, int delivered, double now) {
    int i;
    rec->reported = 1;
    if (rec->has_units)
        cl->unreported_units--;
    if (rec->nunits)
        cl->loss_hist = (uint16_t)(cl->loss_hist << 1 | !delivered);
    if (delivered) {
        cl->last_delivered = now;
        cl->backoff = 0;
        cl->st.packets_acked++;
        cl->st.loss *= 0.99;
        if (rec->nunits)
            cc_sample(cl, now - rec->time, now);
    } else {
        cl->st.packets_lost++;
        cl->st.loss = cl->st.loss * 0.99 + 0.01;
        if (rec->nunits)
            cc_loss(cl, now);
    }
    for (i = 0; i < rec->nunits; i++) {
        int c = (int)(rec->units[i] >> 16);
        uint16_t id = (uint16_t)rec->units[i];
        if (delivered) {
            unit_acked(cl, c, id);
        } else {
            channel *ch = &cl->ch[c];
            if ((uint16_t)(id - ch->base) < (uint16_t)(ch->next_id - ch->base))
                ch->units[id & (SEND_WINDOW - 1)].due = 1;
        }
    }
    (void)now;
}

static void rtt_sample(udpgate_client *cl, double s) {
    if (s < 0)
        return;
    if (!cl->has_rtt) {
        cl->srtt = s;
        cl->rttvar = s / 2;
        cl->has_rtt = 1;
    } else {
        cl->rttvar = 0.75 * cl->rttvar + 0.25 * fabs(cl->srtt - s);
        cl->srtt = 0.875 * cl->srtt + 0.125 * s;
    }
}

/* §14.4 fast repair: units sent well before a packet that was acknowledged
 * first are due at once. */
static void repair(udpgate_client *cl, double sent) {
    double before = sent - (cl->srtt / 8 > 0.002 ? cl->srtt / 8 : 0.002);
    int c;
    for (c = 0; c < cl->nch; c++) {
        channel *ch = &cl->ch[c];
        uint16_t id;
        if (ch->kind != UDPGATE_RELIABLE_ORDERED)
            continue;
        for (id = ch->base; id != ch->unsent; id++) {
            unit *u = &ch->units[id & (SEND_WINDOW - 1)];
            if (!u->acked && u->last_sent < before)
                u->due = 1;
        }
    }
}

static void process_acks(udpgate_client *cl, uint16_t ack, uint64_t bits, double now) {
    int i;
    double newest = -1;
    record *rec = &cl->records[ack & (RECORDS - 1)];
    if (rec->valid && rec->seq == ack && !rec->reported) {
        rtt_sample(cl, now - rec->time);
        if (rec->nunits)
            newest = rec->time;
        report(cl, rec, 1, now);
    }
    for (; bits; bits &= bits - 1) {
        uint16_t s;
        for (i = 0; !(bits >> i & 1); i++)
            ;
        s = (uint16_t)((ack - 1 - i) & UG_SEQ_MASK);
        rec = &cl->records[s & (RECORDS - 1)];
        if (rec->valid && rec->seq == s && !rec->reported) {
            if (rec->nunits && rec->time > newest)
                newest = rec->time;
            report(cl, rec, 1, now);
        }
    }
    if (newest >= 0)
        repair(cl, newest);
    /* lost: more than 64 behind the Ack, unnamed */
    while (cl->oldest_unreported != cl->send_seq) {
        uint16_t s = cl->oldest_unreported;
        unsigned behind = (unsigned)(ack - s) & UG_SEQ_MASK;
        rec = &cl->records[s & (RECORDS - 1)];
        if (rec->valid && rec->seq == s && !rec->reported) {
            if (behind <= 64 || behind >= 8192)
                break;
            report(cl, rec, 0, now);
        }
        cl->oldest_unreported = (uint16_t)((s + 1) & UG_SEQ_MASK);
    }
}

/* ---- receiving messages (§14.3, §14.5) ---- */

static int rq_push(udpgate_client *cl, int c, const uint8_t *d, int len, const uint8_t *d2, int len2) {
    uint8_t hdr[5];
    if (ring_free(&cl->rq) < (uint32_t)(5 + len + len2))
        return -1;
    hdr[0] = (uint8_t)c;
    ug_put32(hdr + 1, (uint32_t)(len + len2));
    ring_put(&cl->rq, cl->rq.tail, hdr, 5);
    ring_put(&cl->rq, cl->rq.tail + 5, d, (uint32_t)len);
    if (len2)
        ring_put(&cl->rq, cl->rq.tail + 5 + (uint32_t)len, d2, (uint32_t)len2);
    cl->rq.tail += 5 + (uint32_t)(len + len2);
    cl->st.messages_received++;
    return 0;
}

static uint8_t *slot_data(udpgate_client *cl, int s) { return cl->slots + (size_t)s * (size_t)cl->slot_size; }

static void free_slot(udpgate_client *cl, channel *ch, uint16_t id) {
    int16_t *p = &ch->slot_of[id & (WINDOW - 1)];
    cl->free_slots[cl->nfree++] = *p;
    *p = -1;
}

/* Moves what became deliverable on a reliable channel into the receive
 * queue, reassembling fragments as message/recv.go's drain does. */
static void deliver(udpgate_client *cl, int c) {
    channel *ch = &cl->ch[c];
    for (;;) {
        int16_t s;
        uint32_t meta;
        int len;
        if (ch->rs_done) {
            if (rq_push(cl, c, ch->reasm, ch->rs_len, NULL, 0) != 0)
                return;
            ch->rs_on = ch->rs_done = 0;
        }
        s = ch->slot_of[ch->recv_next & (WINDOW - 1)];
        if (s < 0)
            return;
        meta = cl->slot_meta[s];
        len = cl->slot_len[s];
        if (meta == 0) {
            ch->rs_on = 0; /* an unfragmented unit in the middle: abandon */
            if (rq_push(cl, c, slot_data(cl, s), len, NULL, 0) != 0)
                return;
        } else {
            int index = (int)(meta >> 16), count = (int)(meta & 0xffff);
            if (ch->rs_on && (index != ch->rs_expect || count != ch->rs_count))
                ch->rs_on = 0; /* inconsistent: abandon */
            if (!ch->rs_on && index == 0) {
                ch->rs_on = 1;
                ch->rs_len = 0;
                ch->rs_count = count;
                ch->rs_expect = 0;
            }
            if (ch->rs_on) { /* else a fragment without its first: dropped */
                if (ch->rs_len + len > cl->cfg.max_message_size) {
                    ch->rs_on = 0; /* too large: abandon */
                } else {
                    memcpy(ch->reasm + ch->rs_len, slot_data(cl, s), (size_t)len);
                    ch->rs_len += len;
                    if (++ch->rs_expect == ch->rs_count)
                        ch->rs_done = 1;
                }
            }
        }
        free_slot(cl, ch, ch->recv_next);
        ch->recv_next++;
    }
}

/* Checks a Messages payload as a whole (pass 0) or applies it (pass 1). */
static int messages(udpgate_client *cl, const uint8_t *p, int len, int apply, int *reliable) {
    int pos = 0, r, need = 0, need_reserve = 0, touched = 0; /* touched: a unit stored */
    ug_entry e;
    if (len == 0)
        return UG_MSG_MALFORMED;
    while (pos < len) {
        channel *ch;
        if ((r = ug_decode_entry(p, len, &pos, cl->nch, cl->kinds, &e)) != UG_PASS)
            return r;
        ch = &cl->ch[e.channel];
        if (ch->kind == UDPGATE_UNRELIABLE) {
            if (e.len > cl->P - 3)
                return UG_MSG_TOO_LARGE;
            if (apply && rq_push(cl, e.channel, e.data, e.len, NULL, 0) != 0)
                cl->st.messages_dropped++;
        } else if (ch->kind == UDPGATE_SEQUENCED) {
            if (e.len > cl->P - 5)
                return UG_MSG_TOO_LARGE;
            if (apply) {
                uint16_t d = (uint16_t)(e.id - ch->seq_newest);
                if (ch->seq_any && (d == 0 || d >= 32768)) {
                    cl->st.messages_dropped++; /* stale */
                } else if (rq_push(cl, e.channel, e.data, e.len, NULL, 0) == 0) {
                    ch->seq_newest = e.id;
                    ch->seq_any = 1;
                } else {
                    cl->st.messages_dropped++;
                }
            }
        } else {
            uint16_t ahead = (uint16_t)(e.id - ch->recv_next);
            if (e.fragment ? (e.len > cl->F || e.count > cl->max_frags) : e.len > cl->P - 5)
                return UG_MSG_TOO_LARGE;
            *reliable = 1;
            if (ahead >= 32768)
                continue; /* behind: a duplicate */
            if (ahead >= WINDOW)
                return UG_MSG_OUT_OF_WINDOW;
            if (ch->slot_of[e.id & (WINDOW - 1)] >= 0)
                continue; /* held already */
            if (!apply) {
                /* the reserve: only the next missing unit, or units of the reassembly in progress */
                if (ahead == 0 || (ch->rs_on && ahead < ch->rs_count - ch->rs_expect))
                    need_reserve++;
                else
                    need++;
                continue;
            }
            {
                int16_t s = cl->free_slots[--cl->nfree];
                memcpy(slot_data(cl, s), e.data, (size_t)e.len);
                cl->slot_len[s] = (uint16_t)e.len;
                cl->slot_meta[s] = e.fragment ? ((uint32_t)e.index << 16 | e.count) : 0;
                ch->slot_of[e.id & (WINDOW - 1)] = s;
                touched = 1;
            }
        }
    }
    if (!apply) {
        if (need + need_reserve > cl->nfree || need > cl->nfree - cl->reserve)
            return UG_MSG_OVER_BUDGET;
        return UG_PASS;
    }
    if (touched) {
        int c;
        for (c = 0; c < cl->nch; c++)
            if (cl->kinds[c] == UDPGATE_RELIABLE_ORDERED)
                deliver(cl, c);
    }
    return UG_PASS;
}

/* ---- receiving connection packets ---- */

static int replay_seen(const udpgate_client *cl, uint64_t c) {
    if (cl->rx_last >= 256 && c <= cl->rx_last - 256)
        return 1;
    if (c > cl->rx_last)
        return 0;
    return (cl->rx_bits[c / 64 % 8] >> (c % 64)) & 1;
}

static void replay_mark(udpgate_client *cl, uint64_t c) {
    if (c > cl->rx_last) {
        uint64_t from = cl->rx_last / 64 + 1, to = c / 64, blk;
        if (to >= from && to - from >= 7)
            memset(cl->rx_bits, 0, sizeof cl->rx_bits);
        else
            for (blk = from; blk <= to; blk++)
                cl->rx_bits[blk % 8] = 0;
        cl->rx_last = c;
    }
    cl->rx_bits[c / 64 % 8] |= (uint64_t)1 << (c % 64);
}

static void on_conn(udpgate_client *cl, uint8_t *b, int n, double now) {
    ug_conn_header h;
    const uint8_t *payload;
    int plen, r, o = cl->o, reliable = 0;
    uint64_t counter = 0;
    if (cl->phase != PH_CONNECTED && cl->phase != PH_PROVING) {
        drop(cl, UDPGATE_DROP_UNKNOWN_CONNECTION);
        return;
    }
    if (cl->sealed && n >= o + 42 && b[n - 1] == 1) {
        uint8_t sess, cid;
        int hs;
        if ((r = ug_decode_prefix(&cl->magic, b, (size_t)n, &sess, &cid, &hs)) != UG_PASS) {
            drop(cl, r);
            return;
        }
        if (sess != cl->session_id) { drop(cl, UDPGATE_DROP_SESSION_MISMATCH); return; }
        if (cid != cl->client_id) { drop(cl, UDPGATE_DROP_WRONG_CLIENT_ID); return; }
        if (ug_le32(b + o) != cl->tag) { drop(cl, UDPGATE_DROP_BAD_TAG); return; }
        counter = ug_le64(b + o + 4);
        if (counter < UINT64_MAX - 256 && replay_seen(cl, counter)) {
            drop(cl, UDPGATE_DROP_SEALED_REPLAY);
            return;
        }
        if (ug_open(b, o + 12, n - 1, cl->token.s2c_key, cl->salt, counter) != 0) {
            drop(cl, UDPGATE_DROP_SEALED_FORGED);
            return;
        }
        h.session_id = sess;
        h.client_id = cid;
        h.tag = cl->tag;
        h.seq = ug_le16(b + o + 12);
        h.ack = ug_le16(b + o + 14);
        h.ack_bits = ug_le64(b + o + 16);
        h.kind = b[o + 24];
        payload = b + o + 25;
        plen = n - 1 - 16 - (o + 25);
        if (h.seq > UG_SEQ_MASK || h.ack > UG_SEQ_MASK || h.kind > 3 ||
            (h.kind == UG_KIND_DISCONNECT && plen != 1) ||
            ((h.kind == UG_KIND_DATA || h.kind == UG_KIND_MESSAGES) && plen < 1)) {
            drop(cl, UDPGATE_DROP_BAD_BODY);
            return;
        }
        if (counter >= UINT64_MAX - 256) { /* a sealed refusal (§11.3) */
            if (cl->phase == PH_PROVING && h.kind == UG_KIND_DISCONNECT) {
                int reason = payload[0];
                end(cl, disconnect_state(reason), reason);
            } else {
                drop(cl, UDPGATE_DROP_SEALED_REPLAY);
            }
            return;
        }
    } else {
        if ((r = ug_decode_conn(&cl->magic, b, (size_t)n, &h, &payload, &plen)) != UG_PASS) {
            drop(cl, r);
            return;
        }
        if (h.session_id != cl->session_id) { drop(cl, UDPGATE_DROP_SESSION_MISMATCH); return; }
        if (h.client_id != cl->client_id) { drop(cl, UDPGATE_DROP_WRONG_CLIENT_ID); return; }
        if (h.tag != cl->tag) { drop(cl, UDPGATE_DROP_BAD_TAG); return; }
        if (cl->sealed) {
            /* in clear, only a refusal 5 or 6 while proving (§11.3) */
            if (cl->phase == PH_PROVING && h.kind == UG_KIND_DISCONNECT && (payload[0] == 5 || payload[0] == 6)) {
                end(cl, disconnect_state(payload[0]), payload[0]);
                return;
            }
            drop(cl, n >= o + 42 ? UDPGATE_DROP_SEALED_FORGED : UDPGATE_DROP_BAD_SIZE);
            return;
        }
    }
    if ((r = seq_check(cl, h.seq, h.ack)) != UG_PASS) {
        drop(cl, r);
        return;
    }
    if (h.kind == UG_KIND_MESSAGES) {
        if (cl->nch == 0 || messages(cl, payload, plen, 0, &reliable) != UG_PASS) {
            drop(cl, UDPGATE_DROP_MESSAGE_REFUSED);
            return;
        }
    }
    /* accepted */
    if (cl->sealed)
        replay_mark(cl, counter);
    seq_accept(cl, h.seq, h.ack);
    cl->recv_any = 1;
    cl->restarting = 0; /* §6.4 step 5: the server still reaches us here */
    if (now > cl->restart_pending_at)
        cl->restart_pending = 0; /* §6.4: the pending request was a stray or a forgery */
    cl->st.packets_received++;
    cl->last_recv = now;
    process_acks(cl, h.ack, h.ack_bits, now);
    if (cl->phase == PH_PROVING) {
        if (h.kind == UG_KIND_DISCONNECT) {
            end(cl, disconnect_state(payload[0]), payload[0]);
            return;
        }
        connected(cl, now);
    }
    switch (h.kind) {
    case UG_KIND_DATA:
        if (rq_push(cl, DATA_CHANNEL, payload, plen, NULL, 0) != 0)
            cl->st.messages_dropped++;
        break;
    case UG_KIND_DISCONNECT:
        end(cl, disconnect_state(payload[0]), payload[0]);
        return;
    case UG_KIND_MESSAGES:
        messages(cl, payload, plen, 1, &reliable);
        if (reliable) { /* §14.4: acks flow promptly */
            if (!cl->ack_pending)
                cl->ack_pending_since = now;
            if (now - cl->last_reliable_rx > ACK_DELAY)
                cl->ack_urgent = 1; /* a lone packet, not one of a run */
            cl->last_reliable_rx = now;
            cl->ack_pending++;
        }
        break;
    }
}

static void on_datagram(udpgate_client *cl, const udpgate_address *from, int n, double now) {
    uint8_t sess, cid;
    int hs, r;
    cl->st.bytes_received += (uint64_t)n;
    if (!ug_address_equal(from, &cl->server)) {
        drop(cl, UDPGATE_DROP_UNKNOWN_CONNECTION);
        return;
    }
    if (n > cl->cfg.max_datagram) {
        drop(cl, UDPGATE_DROP_TOO_LARGE);
        return;
    }
    if ((r = ug_decode_prefix(&cl->magic, cl->rx, (size_t)n, &sess, &cid, &hs)) != UG_PASS) {
        drop(cl, r);
        return;
    }
    if (hs)
        on_handshake(cl, cl->rx, n, now);
    else
        on_conn(cl, cl->rx, n, now);
}

/* ---- sending messages (§14.4) ---- */

static double rto(const udpgate_client *cl, int sends) {
    double t = cl->srtt + (2 * cl->rttvar > 0.002 ? 2 * cl->rttvar : 0.002);
    if (t < MIN_RESEND)
        t = MIN_RESEND;
    if (sends > 2) {
        int k = sends - 2;
        t *= k >= 3 ? 8 : (double)(1 << k);
    }
    return t;
}

/* Cuts the channel's next unit from its queue, or returns 0. */
static int cut_unit(udpgate_client *cl, int c, double now) {
    channel *ch = &cl->ch[c];
    uint8_t hdr[4];
    uint32_t len;
    unit *u;
    if (ch->cut_msg == ch->sq.tail)
        return 0;
    if ((uint16_t)(ch->next_id - ch->base) >= SEND_WINDOW)
        return 0;
    ring_get(&ch->sq, ch->cut_msg, hdr, 4);
    len = ug_le32(hdr);
    u = &ch->units[ch->next_id & (SEND_WINDOW - 1)];
    u->msg_off = ch->cut_msg;
    u->data_off = ch->cut_pos;
    if (len <= (uint32_t)(cl->P - 5)) {
        u->len = (uint16_t)len;
        u->index = u->count = 0;
    } else {
        uint32_t left = len - ch->cut_pos;
        if (ch->cut_pos == 0) { /* the first fragment: one fragmented message at a time */
            if (cl->frag_owner >= 0 && cl->frag_owner != c)
                return 0;
            cl->frag_owner = c;
        }
        u->len = (uint16_t)(left < (uint32_t)cl->F ? left : (uint32_t)cl->F);
        u->index = (uint16_t)(ch->cut_pos / (uint32_t)cl->F);
        u->count = (uint16_t)((len + (uint32_t)cl->F - 1) / (uint32_t)cl->F);
        ch->frag_unacked++;
    }
    u->acked = 0;
    u->due = 0;
    u->sends = 0;
    u->first_sent = now;
    u->last_sent = 0;
    ch->cut_pos += u->len;
    if (ch->cut_pos >= len) {
        ch->cut_msg += 4 + len;
        ch->cut_pos = 0;
    }
    ch->next_id++;
    return 1;
}

/* Appends one unit's entry to the payload; returns 0 if it does not fit. */
static int put_unit(udpgate_client *cl, int c, uint16_t id, uint8_t *pay, int *plen, record *rec, double now,
                    int copy) {
    channel *ch = &cl->ch[c];
    unit *u = &ch->units[id & (SEND_WINDOW - 1)];
    ug_entry e;
    int n;
    if (rec->nunits >= RECORD_UNITS)
        return 0;
    n = ug_entry_len(UDPGATE_RELIABLE_ORDERED, u->count != 0, u->len);
    if (*plen + n > cl->P)
        return 0;
    e.channel = c;
    e.id = id;
    e.fragment = u->count != 0;
    e.index = u->index;
    e.count = u->count;
    e.len = u->len;
    /* the data straight from the ring, through a bounce when it wraps */
    {
        uint64_t off = u->msg_off + 4 + u->data_off;
        uint32_t at = (uint32_t)(off % ch->sq.cap);
        if (at + u->len <= ch->sq.cap) {
            e.data = ch->sq.buf + at;
        } else {
            ring_get(&ch->sq, off, cl->rx, u->len);
            e.data = cl->rx;
        }
    }
    *plen += ug_encode_entry(pay + *plen, (size_t)(cl->P - *plen), UDPGATE_RELIABLE_ORDERED, &e);
    if (u->sends)
        cl->st.resends++;
    else
        u->first_sent = now;
    if (!copy && u->sends < 255)
        u->sends++; /* copies riding on other packets do not back the timer off */
    u->last_sent = now;
    u->due = 0;
    rec->units[rec->nunits++] = (uint32_t)c << 16 | id;
    return 1;
}

/* Builds and sends one Messages (or Data) packet; returns 0 when nothing was due. */
static int send_one(udpgate_client *cl, double now) {
    uint8_t *pay = cl->pay;
    int plen = 0, i, k, full = 0, units = 0;
    record tmp_rec;
    uint32_t unit_buf[RECORD_UNITS];
    tmp_rec.nunits = 0;
    tmp_rec.units = unit_buf;
    /* 1. unreliable, sequenced and Data, in queue order */
    while (cl->uq.head != cl->uq.tail) {
        uint8_t hdr[3];
        int c, len;
        ring_get(&cl->uq, cl->uq.head, hdr, 3);
        c = hdr[0];
        len = ug_le16(hdr + 1);
        if (c == DEAD_CHANNEL) {
            cl->uq.head += 3 + (uint32_t)len;
            continue;
        }
        if (c == DATA_CHANNEL) {
            if (plen)
                break; /* send the messages first */
            ring_get(&cl->uq, cl->uq.head + 3, pay, (uint32_t)len);
            cl->uq.head += 3 + (uint32_t)len;
            send_conn(cl, UG_KIND_DATA, pay, len, now);
            return 1;
        }
        {
            ug_entry e;
            int n = ug_entry_len(cl->kinds[c], 0, len);
            if (plen + n > cl->P)
                break;
            e.channel = c;
            e.fragment = 0;
            e.index = e.count = 0;
            e.len = len;
            if (cl->kinds[c] == UDPGATE_SEQUENCED) {
                e.id = cl->ch[c].seq_next++;
                if (cl->ch[c].seq_pending == (int64_t)cl->uq.head)
                    cl->ch[c].seq_pending = -1;
            } else {
                e.id = 0;
            }
            ring_get(&cl->uq, cl->uq.head + 3, cl->rx, (uint32_t)len);
            e.data = cl->rx;
            plen += ug_encode_entry(pay + plen, (size_t)(cl->P - plen), cl->kinds[c], &e);
            cl->uq.head += 3 + (uint32_t)len;
        }
    }
    /* 2. reliable units: non-bulk channels first, then bulk; round robin */
    if (cl->frag_owner >= 0) {
        channel *fo = &cl->ch[cl->frag_owner];
        if (fo->frag_unacked == 0 && fo->cut_pos == 0)
            cl->frag_owner = -1;
    }
    for (k = 0; k < 2 && !full; k++) {
        for (i = 0; i < cl->nch && !full; i++) {
            int c = (cl->rr + i) % cl->nch;
            channel *ch = &cl->ch[c];
            uint16_t id;
            if (ch->kind != UDPGATE_RELIABLE_ORDERED || ch->bulk != k)
                continue;
            /* due resends, oldest first */
            for (id = ch->base; id != ch->next_id; id++) {
                unit *u = &ch->units[id & (SEND_WINDOW - 1)];
                if (u->acked || u->sends == 0)
                    continue;
                if (u->due || now - u->last_sent >= rto(cl, u->sends) * (ch->bulk ? 2 : 1)) {
                    if (!put_unit(cl, c, id, pay, &plen, &tmp_rec, now, 0)) {
                        full = 1;
                        break;
                    }
                    units++;
                }
            }
            /* new units, inside the window and the flight; bulk units (a bulk
             * channel's, or fragments) also inside the congestion window */
            while (!full && cl->unreported_units < FLIGHT_PACKETS) {
                if (ch->unsent == ch->next_id && !cut_unit(cl, c, now))
                    break;
                if ((ch->bulk || ch->units[ch->unsent & (SEND_WINDOW - 1)].count) && cl->unreported_units >= cl->cwnd)
                    break;
                if (!put_unit(cl, c, ch->unsent, pay, &plen, &tmp_rec, now, 0)) {
                    full = 1;
                    break;
                }
                ch->unsent++;
                units++;
            }
        }
    }
    /* copies of the game's unacknowledged units ride in the room left (§14.4) */
    if (plen > 0 && !full) {
        double every = RESEND_FACTOR * rto(cl, 1);
        if (every < MIN_RESEND)
            every = MIN_RESEND;
        for (i = 0; i < cl->nch && !full; i++) {
            channel *ch = &cl->ch[i];
            uint16_t id;
            if (ch->kind != UDPGATE_RELIABLE_ORDERED || ch->bulk)
                continue;
            for (id = ch->base; id != ch->unsent; id++) {
                unit *u = &ch->units[id & (SEND_WINDOW - 1)];
                if (u->acked || u->count || now - u->last_sent < every)
                    continue;
                if (!put_unit(cl, i, id, pay, &plen, &tmp_rec, now, 1)) {
                    full = 1;
                    break;
                }
                units++;
            }
        }
    }
    cl->rr = cl->nch ? (cl->rr + 1) % cl->nch : 0;
    if (plen == 0)
        return 0;
    {
        uint16_t seq = send_conn(cl, UG_KIND_MESSAGES, pay, plen, now);
        record *rec = &cl->records[seq & (RECORDS - 1)];
        memcpy(rec->units, unit_buf, (size_t)tmp_rec.nunits * 4);
        rec->nunits = tmp_rec.nunits;
        if (units) {
            rec->has_units = 1;
            cl->unreported_units++;
        }
    }
    return 1;
}

/* ---- the public calls ---- */

static void receive_all(udpgate_client *cl, double now) {
    int i;
    for (i = 0; i < 4096 && cl->phase != PH_ENDED; i++) {
        udpgate_address from;
        int n;
        if (cl->own_socket)
            n = ug_socket_recv(&cl->sock, &from, cl->rx, sizeof cl->rx);
        else
            n = cl->cfg.receive(cl->cfg.transport_context, &from, cl->rx, sizeof cl->rx);
        if (n == 0)
            return;
        if (n == -2) {
            drop(cl, UDPGATE_DROP_MALFORMED);
            continue;
        }
        if (n < 0) {
            end(cl, UDPGATE_STATE_SOCKET_ERROR, 0);
            return;
        }
        if (n > (int)sizeof cl->rx)
            n = (int)sizeof cl->rx;
        on_datagram(cl, &from, n, now);
    }
}

static void handshake_timers(udpgate_client *cl, double now) {
    double limit = cl->cfg.connect_timeout;
    if (cl->phase == PH_PROVING && limit > 14)
        limit = 14; /* §11.3: proofs must arrive while the cookie is valid */
    if (now - cl->progress >= limit) {
        if (cl->sealed && cl->addr_index + 1 < cl->token.num_addresses) {
            /* §11.3: try the token's next server */
            cl->addr_index++;
            if (start(cl, &cl->token.addresses[cl->addr_index], now) != UDPGATE_OK)
                end(cl, UDPGATE_STATE_SOCKET_ERROR, 0);
            return;
        }
        end(cl, UDPGATE_STATE_CONNECT_TIMED_OUT, 0);
        return;
    }
    if (cl->phase == PH_PROVING) {
        if (now >= cl->next_proof) {
            send_proof(cl, now);
            cl->next_proof = now + PROOF_INTERVAL;
        }
        return;
    }
    if (cl->phase == PH_RESPONSE && now - cl->challenge_time >= CHALLENGE_LIFETIME) {
        cl->phase = PH_INITIAL; /* §6.2: a fresh Challenge */
        cl->gap = first_resend(cl);
        send_handshake(cl, UG_INITIAL, now);
        cl->next_resend = now + cl->gap;
        return;
    }
    if (now >= cl->next_resend) {
        send_handshake(cl, cl->phase == PH_INITIAL ? UG_INITIAL : UG_RESPONSE, now);
        cl->gap = cl->gap * 2 > RESEND_INTERVAL ? RESEND_INTERVAL : cl->gap * 2;
        cl->next_resend = now + cl->gap;
    }
}

static void connection_timers(udpgate_client *cl, double now) {
    int i, sent = 0;
    if (now - cl->last_recv >= cl->timeout) {
        send_disconnects(cl, 3, 1, now);
        end(cl, UDPGATE_STATE_TIMED_OUT, 3);
        return;
    }
    if (!cl->restarting && cl->restart_pending && now - cl->last_recv >= RESTART_SILENCE &&
        now - cl->last_restart >= RESTART_INTERVAL)
        begin_restart(cl, now); /* §6.4: the silence outlasted the request's arrival */
    if (cl->restarting) {
        if (now - cl->progress >= cl->cfg.connect_timeout) {
            end(cl, UDPGATE_STATE_TIMED_OUT, 0);
            return;
        }
        if (now >= cl->next_resend) {
            send_handshake(cl, cl->restarting == 1 ? UG_INITIAL : UG_RESTART_RESPONSE, now);
            cl->gap = cl->gap * 2 > RESEND_INTERVAL ? RESEND_INTERVAL : cl->gap * 2;
            cl->next_resend = now + cl->gap;
        }
    }
    for (i = 0; i < cl->nch; i++) {
        channel *ch = &cl->ch[i];
        if (ch->kind == UDPGATE_RELIABLE_ORDERED && ch->base != ch->unsent) {
            unit *u = &ch->units[ch->base & (SEND_WINDOW - 1)];
            if (!u->acked && u->sends && now - u->first_sent >= cl->cfg.stall_timeout) {
                send_disconnects(cl, 10, 5, now);
                end(cl, UDPGATE_STATE_STALLED, 10);
                return;
            }
        }
    }
    /* §14.4: a packet unreported for RTO + SRTT/4 leaves the flight, its units due */
    while (cl->oldest_flight != cl->send_seq) {
        record *rec = &cl->records[cl->oldest_flight & (RECORDS - 1)];
        if (rec->valid && rec->seq == cl->oldest_flight && !rec->reported && rec->has_units) {
            int j;
            if (now - rec->time <= rto(cl, 1) + cl->srtt / 4)
                break;
            rec->has_units = 0;
            cl->unreported_units--;
            for (j = 0; j < rec->nunits; j++) {
                channel *ch = &cl->ch[rec->units[j] >> 16];
                uint16_t id = (uint16_t)rec->units[j];
                if ((uint16_t)(id - ch->base) < (uint16_t)(ch->next_id - ch->base))
                    ch->units[id & (SEND_WINDOW - 1)].due = 1;
            }
        }
        cl->oldest_flight = (uint16_t)((cl->oldest_flight + 1) & UG_SEQ_MASK);
    }
    if (cl->unreported_units > 0 && now - cl->last_delivered > rto(cl, 1) + cl->srtt / 4) {
        /* the peer acknowledged nothing for a timeout (it moved, or is gone):
         * probe, instead of resending at the rate of acks that do not come */
        if (now >= cl->probe_at && send_one(cl, now)) {
            double gap = rto(cl, 1) * (double)(1 << (cl->backoff < 7 ? cl->backoff : 7));
            cl->probe_at = now + (gap < 1.0 ? gap : 1.0);
            cl->backoff++;
            sent++;
        }
    } else {
        for (i = 0; i < cl->cfg.max_packets_per_update && cl->phase == PH_CONNECTED; i++) {
            if (!send_one(cl, now))
                break;
            sent++;
        }
    }
    if (cl->phase != PH_CONNECTED)
        return;
    if (!sent && cl->ack_pending &&
        (cl->ack_urgent || cl->ack_pending >= 4 || now - cl->ack_pending_since >= ACK_DELAY))
        send_keepalive(cl, now, 0);
    else if (now - cl->last_send >= cl->cfg.keepalive_interval && now - cl->last_recv < 2 * cl->cfg.keepalive_interval)
        send_keepalive(cl, now, 0);
}

void udpgate_client_update(udpgate_client *cl, double now) {
    if (!cl || cl->phase == PH_IDLE || cl->phase == PH_ENDED)
        return;
    receive_all(cl, now);
    if (cl->phase == PH_INITIAL || cl->phase == PH_RESPONSE || cl->phase == PH_PROVING)
        handshake_timers(cl, now);
    else if (cl->phase == PH_CONNECTED)
        connection_timers(cl, now);
}

void udpgate_client_disconnect(udpgate_client *cl, double now) {
    if (!cl)
        return;
    if (cl->phase == PH_CONNECTED)
        send_disconnects(cl, 1, 5, now);
    reset_connection(cl);
    cl->state = UDPGATE_STATE_DISCONNECTED;
}

int udpgate_client_state(const udpgate_client *cl) { return cl ? cl->state : UDPGATE_STATE_DISCONNECTED; }

int udpgate_client_end_reason(const udpgate_client *cl) { return cl ? cl->end_reason : 0; }

void udpgate_client_server_version(const udpgate_client *cl, uint32_t *nv, uint16_t *nf) {
    if (nv)
        *nv = cl ? cl->server_nv : 0;
    if (nf)
        *nf = cl ? cl->server_nf : 0;
}

int udpgate_client_max_message_size(const udpgate_client *cl, int c) {
    int P;
    if (!cl)
        return UDPGATE_ERR_INVALID;
    P = cl->cfg.max_datagram - cl->o - (cl->sealed ? 42 : 18);
    if (c == UDPGATE_CHANNEL_DATA)
        return P;
    if (c < 0 || c >= cl->nch)
        return UDPGATE_ERR_CHANNEL;
    switch (cl->kinds[c]) {
    case UDPGATE_RELIABLE_ORDERED: return cl->cfg.max_message_size;
    case UDPGATE_UNRELIABLE: return P - 3;
    default: return P - 5;
    }
}

static int uq_push(udpgate_client *cl, int c, const void *data, size_t len) {
    uint8_t hdr[3];
    if (ring_free(&cl->uq) < 3 + len)
        return UDPGATE_ERR_QUEUE_FULL;
    hdr[0] = (uint8_t)c;
    ug_put16(hdr + 1, (uint16_t)len);
    ring_put(&cl->uq, cl->uq.tail, hdr, 3);
    ring_put(&cl->uq, cl->uq.tail + 3, data, (uint32_t)len);
    cl->uq.tail += 3 + len;
    cl->st.messages_sent++;
    return UDPGATE_OK;
}

int udpgate_client_send(udpgate_client *cl, int c, const void *data, size_t len) {
    channel *ch;
    int max;
    if (!cl || (!data && len))
        return UDPGATE_ERR_INVALID;
    if (cl->phase != PH_CONNECTED)
        return UDPGATE_ERR_STATE;
    if (c < 0 || c >= cl->nch)
        return UDPGATE_ERR_CHANNEL;
    max = udpgate_client_max_message_size(cl, c);
    if (len > (size_t)max)
        return UDPGATE_ERR_TOO_LARGE;
    ch = &cl->ch[c];
    if (ch->kind == UDPGATE_RELIABLE_ORDERED) {
        uint8_t hdr[4];
        if (ring_free(&ch->sq) < 4 + len)
            return UDPGATE_ERR_QUEUE_FULL;
        ug_put32(hdr, (uint32_t)len);
        ring_put(&ch->sq, ch->sq.tail, hdr, 4);
        ring_put(&ch->sq, ch->sq.tail + 4, data, (uint32_t)len);
        ch->sq.tail += 4 + len;
        cl->st.messages_sent++;
        return UDPGATE_OK;
    }
    if (ch->kind == UDPGATE_SEQUENCED && ch->seq_pending >= 0) {
        /* §14.4: a newer sequenced message replaces an unsent older one */
        uint8_t dead = DEAD_CHANNEL;
        ring_put(&cl->uq, (uint64_t)ch->seq_pending, &dead, 1);
        ch->seq_pending = -1;
    }
    {
        uint64_t at = cl->uq.tail;
        int r = uq_push(cl, c, data, len);
        if (r == UDPGATE_OK && ch->kind == UDPGATE_SEQUENCED)
            ch->seq_pending = (int64_t)at;
        return r;
    }
}

int udpgate_client_send_data(udpgate_client *cl, const void *data, size_t len) {
    if (!cl || !data || len == 0)
        return UDPGATE_ERR_INVALID;
    if (cl->phase != PH_CONNECTED)
        return UDPGATE_ERR_STATE;
    if (len > (size_t)udpgate_client_max_message_size(cl, UDPGATE_CHANNEL_DATA))
        return UDPGATE_ERR_TOO_LARGE;
    return uq_push(cl, DATA_CHANNEL, data, len);
}

int udpgate_client_peek_size(const udpgate_client *cl) {
    uint8_t hdr[5];
    if (!cl || cl->rq.head == cl->rq.tail)
        return UDPGATE_ERR_EMPTY;
    ring_get(&cl->rq, cl->rq.head, hdr, 5);
    return (int)ug_le32(hdr + 1);
}

int udpgate_client_receive(udpgate_client *cl, int *channel_out, void *buf, size_t cap) {
    uint8_t hdr[5];
    uint32_t len;
    int c;
    if (!cl)
        return UDPGATE_ERR_INVALID;
    if (cl->rq.head == cl->rq.tail)
        return UDPGATE_ERR_EMPTY;
    ring_get(&cl->rq, cl->rq.head, hdr, 5);
    len = ug_le32(hdr + 1);
    if (len > cap || (!buf && len))
        return UDPGATE_ERR_BUFFER;
    ring_get(&cl->rq, cl->rq.head + 5, buf, len);
    cl->rq.head += 5 + len;
    c = hdr[0] == DATA_CHANNEL ? UDPGATE_CHANNEL_DATA : hdr[0];
    if (channel_out)
        *channel_out = c;
    /* room freed: reliable messages held back may move in */
    for (c = 0; c < cl->nch; c++)
        if (cl->kinds[c] == UDPGATE_RELIABLE_ORDERED)
            deliver(cl, c);
    return (int)len;
}

int udpgate_client_queued_bytes(const udpgate_client *cl, int c) {
    if (!cl || c < 0 || c >= cl->nch)
        return UDPGATE_ERR_CHANNEL;
    if (cl->kinds[c] != UDPGATE_RELIABLE_ORDERED)
        return 0;
    return (int)ring_used(&cl->ch[c].sq);
}

udpgate_address udpgate_client_local_address(const udpgate_client *cl) {
    udpgate_address a;
    memset(&a, 0, sizeof a);
    if (cl && cl->own_socket && cl->sock.fd >= 0)
        a = cl->sock.local;
    return a;
}

void udpgate_client_stats(const udpgate_client *cl, udpgate_stats *out) {
    if (!cl || !out)
        return;
    *out = cl->st;
    out->rtt = cl->has_rtt ? cl->srtt : 0;
    out->rtt_var = cl->has_rtt ? cl->rttvar : 0;
}
