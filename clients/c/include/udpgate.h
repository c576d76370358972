/*
 * udpgate.h: a C99 client of the udpgate protocol (docs/protocol.md, version 1).
 *
 * One header, one library (libudpgate), one dependency (libsodium, for
 * randomness and sealed mode). The shape is netcode.io's and ENet's:
 *
 *   - no threads and no global state: every call takes the client;
 *   - the caller passes the time (seconds, any monotonic origin, as a
 *     double) to udpgate_client_update() and polls for state changes
 *     (udpgate_client_state) and received messages (udpgate_client_receive);
 *   - the library owns a non-blocking UDP socket (IPv4 or IPv6), or the
 *     caller owns it and passes send/receive callbacks (udpgate_config.send,
 *     .receive: Unreal's FSocket, Godot's PacketPeerUDP, console sockets);
 *   - all memory is taken at udpgate_client_create() through the allocator
 *     hooks (udpgate_config.allocate/.free, or malloc/free), sized by the
 *     configuration (udpgate_client_memory_size tells how much); nothing is
 *     allocated per packet or per message afterwards, and a full queue is an
 *     error code, never a growth.
 *
 * What it speaks: the handshake (§2–§6: magic header, session id, versions
 * 3..4, cookie echo, Denied and VersionUpgrade), connection packets (§7:
 * sequence numbers, acks, RTT and loss, KeepAlive, timeout, 5 redundant
 * Disconnects), sealed mode (§11: a netcode.io 1.02 connect token,
 * XChaCha20-Poly1305 through libsodium) and messages (§14: reliable-ordered,
 * unreliable and sequenced channels, fragmentation and reassembly).
 *
 * A game loop:
 *
 *   udpgate_config cfg;
 *   udpgate_default_config(&cfg);           // stock layout: 4 channels
 *   udpgate_client *c;
 *   if (udpgate_client_create(&cfg, &c) != UDPGATE_OK) ...;
 *   udpgate_client_connect(c, "127.0.0.1:7777", now());
 *   for (;;) {
 *       udpgate_client_update(c, now());     // receive, timers, send
 *       if (udpgate_client_state(c) < 0) break;   // an ending: see udpgate_state
 *       int ch; uint8_t buf[2048]; int n;
 *       while ((n = udpgate_client_receive(c, &ch, buf, sizeof buf)) >= 0) ...;
 *       if (udpgate_client_state(c) == UDPGATE_STATE_CONNECTED)
 *           udpgate_client_send(c, 0, "hi", 2);
 *   }
 *   udpgate_client_destroy(c);
 *
 * Thread safety: none; use one client from one thread at a time.
 */
#ifndef UDPGATE_H
#define UDPGATE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32) && defined(UDPGATE_SHARED) && defined(UDPGATE_BUILDING)
#define UDPGATE_API __declspec(dllexport)
#elif defined(_WIN32) && defined(UDPGATE_SHARED)
#define UDPGATE_API __declspec(dllimport)
#elif defined(__GNUC__)
#define UDPGATE_API __attribute__((visibility("default")))
#else
#define UDPGATE_API
#endif

#define UDPGATE_VERSION_MAJOR 0
#define UDPGATE_VERSION_MINOR 1
#define UDPGATE_VERSION_PATCH 0

/* ---- constants of the protocol (docs/protocol.md §13, §14.6) ---------- */

#define UDPGATE_MAX_CHANNELS 32            /* §14.1 */
#define UDPGATE_DEFAULT_MAX_DATAGRAM 1200  /* §7.7 */
#define UDPGATE_MAX_DATAGRAM 1472          /* §7.7 */
#define UDPGATE_CONNECT_TOKEN_BYTES 2048   /* §11.1 */
#define UDPGATE_KEY_BYTES 32               /* §11.1 */
#define UDPGATE_DEFAULT_MAX_MESSAGE_SIZE (256 * 1024) /* §14.1 */
#define UDPGATE_MAX_MESSAGE_SIZE (8 * 1024 * 1024)    /* §14.6 */

/* The pseudo channel of Kind-0 Data packets (§7.1): udpgate_client_send_data
 * sends one, and udpgate_client_receive reports one with this channel. */
#define UDPGATE_CHANNEL_DATA (-1)

/* ---- results ----------------------------------------------------------- */

/* Every call that can fail returns UDPGATE_OK (0) or one of these (< 0). */
typedef enum udpgate_result {
    UDPGATE_OK = 0,
    UDPGATE_ERR_INVALID = -1,      /* an argument or configuration value out of range */
    UDPGATE_ERR_NOMEM = -2,        /* the allocator hook returned NULL at create */
    UDPGATE_ERR_SOCKET = -3,       /* the library's socket could not be opened or bound */
    UDPGATE_ERR_ADDRESS = -4,      /* not a numeric "a.b.c.d:port" or "[v6]:port" */
    UDPGATE_ERR_STATE = -5,        /* not possible in this state (e.g. send before CONNECTED) */
    UDPGATE_ERR_CHANNEL = -6,      /* no such channel in the configuration */
    UDPGATE_ERR_TOO_LARGE = -7,    /* message larger than the channel allows */
    UDPGATE_ERR_QUEUE_FULL = -8,   /* the channel's send queue is full: retry after update() */
    UDPGATE_ERR_EMPTY = -9,        /* udpgate_client_receive: nothing to receive */
    UDPGATE_ERR_BUFFER = -10,      /* udpgate_client_receive: the caller's buffer is too small
                                      (the message stays queued; udpgate_client_peek_size tells) */
    UDPGATE_ERR_TOKEN = -11,       /* the connect token is malformed (size, version, addresses) */
    UDPGATE_ERR_CRYPTO = -12       /* libsodium failed to initialise */
} udpgate_result;

/* ---- states ------------------------------------------------------------ */

/* A client's state. 0 and positive values are live; negative values are
 * endings: the client stays there until the next udpgate_client_connect*().
 * udpgate_state_name() names each one. */
typedef enum udpgate_state {
    UDPGATE_STATE_DISCONNECTED = 0,  /* created, or closed by udpgate_client_disconnect */
    UDPGATE_STATE_CONNECTING = 1,    /* handshake (§6) or proving a token (§11.3) */
    UDPGATE_STATE_CONNECTED = 2,     /* connection packets and messages flow (§7, §14) */

    /* the handshake ended */
    UDPGATE_STATE_CONNECT_TIMED_OUT = -1,        /* no progress for connect_timeout (§6.2) */
    UDPGATE_STATE_DENIED_SERVER_FULL = -2,       /* Denied 1 (§3.2), or sealed refusal 9 */
    UDPGATE_STATE_DENIED_REFUSED = -3,           /* Denied 2, or sealed refusal 13 (the server's application) */
    UDPGATE_STATE_DENIED_ADDRESS_LIMIT = -4,     /* Denied 3, or sealed refusal 12 */
    UDPGATE_STATE_DENIED_UNKNOWN_CONNECTION = -5,/* Denied 4 (§6.4) */
    UDPGATE_STATE_DENIED_OTHER = -6,             /* a Denied reason this client does not know:
                                                    udpgate_client_end_reason() has its number */
    UDPGATE_STATE_VERSION_MISMATCH = -7,         /* VersionUpgrade (§3.6): udpgate_client_server_version */
    UDPGATE_STATE_TOKEN_EXPIRED = -8,            /* sealed refusal 5 */
    UDPGATE_STATE_TOKEN_INVALID = -9,            /* sealed refusal 6: wrong private key or protocol id */
    UDPGATE_STATE_TOKEN_FOREIGN_SERVER = -10,    /* sealed refusal 7: this server is not in the token */
    UDPGATE_STATE_TOKEN_IN_USE = -11,            /* sealed refusal 8: proven from another address */
    UDPGATE_STATE_TOKEN_REQUIRED = -12,          /* the server is sealed and this client has no token
                                                    (sealed Ack, §11.3, or Disconnect 11) */
    /* the connection ended */
    UDPGATE_STATE_TIMED_OUT = -13,               /* nothing heard for the timeout (§7.5) */
    UDPGATE_STATE_SERVER_SHUTDOWN = -14,         /* Disconnect 2 (§7.6) */
    UDPGATE_STATE_SERVER_CLOSED = -15,           /* Disconnect 1, or a reason this client does not know */
    UDPGATE_STATE_REPLACED = -16,                /* Disconnect 4 */
    UDPGATE_STATE_STALLED = -17,                 /* a reliable message unacknowledged for stall_timeout,
                                                    or Disconnect 10 from the server (§14.4) */
    UDPGATE_STATE_SOCKET_ERROR = -18,            /* the socket or the send callback failed */
    UDPGATE_STATE_LAYOUT_MISMATCH = -19          /* LayoutMismatch (§3.7): the server's channels (count,
                                                    kinds, order), max_message_size or max_datagram
                                                    differ from this client's */
} udpgate_state;

/* The state's name, e.g. "denied: server full"; never NULL. */
UDPGATE_API const char *udpgate_state_name(int state);
/* The result's name, e.g. "queue full"; never NULL. */
UDPGATE_API const char *udpgate_result_name(int result);

/* ---- addresses --------------------------------------------------------- */

typedef struct udpgate_address {
    uint8_t family;   /* 4 or 6; 0: none */
    uint8_t ip[16];   /* IPv4: ip[0..3] in dotted order; IPv6: 16 bytes network order */
    uint16_t port;
} udpgate_address;

/* Parses "a.b.c.d:port" or "[v6]:port" (numeric only: resolve names yourself). */
UDPGATE_API int udpgate_address_parse(udpgate_address *out, const char *text);
/* Writes "a.b.c.d:port" or "[v6]:port" into buf (at least 48 bytes). */
UDPGATE_API void udpgate_address_format(const udpgate_address *a, char *buf, size_t cap);

/* ---- configuration ----------------------------------------------------- */

typedef enum udpgate_channel_kind {
    UDPGATE_RELIABLE_ORDERED = 0,  /* exactly once, in order, fragmented up to max_message_size */
    UDPGATE_UNRELIABLE = 1,        /* at most once, arrival order, one packet (P − 3 bytes) */
    UDPGATE_SEQUENCED = 2          /* at most once, only if newer (P − 5 bytes) */
} udpgate_channel_kind;

typedef struct udpgate_channel_config {
    uint8_t kind;  /* udpgate_channel_kind */
    uint8_t bulk;  /* §14.4: its units yield to the other channels' in every packet */
} udpgate_channel_config;

/* Caller-owned transport: return the number of bytes sent (or len), < 0 on a
 * hard error (the client ends in UDPGATE_STATE_SOCKET_ERROR). */
typedef int (*udpgate_send_fn)(void *context, const udpgate_address *to,
                               const uint8_t *data, size_t len);
/* Caller-owned transport: copy one waiting datagram into buf and its source
 * into *from, return its length; return 0 when none waits (non-blocking), < 0
 * on a hard error. A datagram longer than cap may be truncated: it is dropped
 * as too large. */
typedef int (*udpgate_receive_fn)(void *context, udpgate_address *from,
                                  uint8_t *buf, size_t cap);

typedef struct udpgate_config {
    /* Allocator hooks (both or neither; NULL: malloc/free). Called only in
     * udpgate_client_create and udpgate_client_destroy. */
    void *(*allocate)(void *context, size_t size);
    void (*free)(void *context, void *ptr);
    void *allocator_context;

    /* Transport: both NULL (default): the library opens a non-blocking UDP
     * socket of the server address's family, bound to bind_address (NULL:
     * any address, ephemeral port). Both set: the caller's socket. */
    udpgate_send_fn send;
    udpgate_receive_fn receive;
    void *transport_context;
    const char *bind_address;      /* e.g. "0.0.0.0:0"; NULL for any */
    int socket_buffer_bytes;       /* SO_RCVBUF/SO_SNDBUF; 0: 1 MiB */

    /* §2, §3.6: must equal the server's. */
    const char *magic;             /* "" or NULL: none; else up to 32 '0'/'1' characters */
    uint32_t network_version;      /* default 1, as cmd/server */
    uint16_t network_features;     /* default 0 */
    int max_datagram;              /* §7.7: 1200 default, at most 1472; must equal the server's */

    /* Timers in seconds (§6.2, §7.5). 0: the default. */
    double connect_timeout;        /* 10 */
    double keepalive_interval;     /* 1 */
    double timeout;                /* 5 (a sealed token's timeout replaces it, §11.3) */

    /* §11.3: the token's protocol id is inside the token; nothing to set. */

    /* §14: channels, equal to the server's (the stock layout of
     * internal/msgcfg by default: 0 reliable, 1 unreliable, 2 sequenced,
     * 3 reliable bulk). num_channels 0: no messages (Data packets only). */
    int num_channels;
    udpgate_channel_config channels[UDPGATE_MAX_CHANNELS];
    int max_message_size;          /* §14.1: default 256 KiB, at most 8 MiB; equal to the server's */

    /* Memory budgets, in bytes; 0: the default. */
    int send_queue_bytes;          /* per reliable channel: 2 × max(max_message_size, 64 KiB) */
    int unreliable_queue_bytes;    /* unreliable + sequenced + Data waiting to go: 64 KiB */
    int receive_queue_bytes;       /* delivered messages waiting for udpgate_client_receive:
                                      max_message_size + 64 KiB (at least max_message_size + 16) */

    /* §14.4 sender rules. 0: the default. */
    double stall_timeout;          /* 10 s */
    int max_packets_per_update;    /* 256: bound on packets one update() sends */
} udpgate_config;

/* Fills cfg with the defaults above (the stock channel layout). */
UDPGATE_API void udpgate_default_config(udpgate_config *cfg);

/* ---- the client -------------------------------------------------------- */

typedef struct udpgate_client udpgate_client;

/* Bytes udpgate_client_create will take for cfg (one allocation), or < 0 if
 * cfg is invalid (a udpgate_result). */
UDPGATE_API long udpgate_client_memory_size(const udpgate_config *cfg);

/* Creates a client: all of its memory is taken here. Returns UDPGATE_OK and
 * *out, or an error (*out is NULL). */
UDPGATE_API int udpgate_client_create(const udpgate_config *cfg, udpgate_client **out);

/* Sends nothing (call udpgate_client_disconnect first to tell the server),
 * closes the library's socket and frees everything. NULL is fine. */
UDPGATE_API void udpgate_client_destroy(udpgate_client *client);

/* Starts an unsealed connection (§6) to "ip:port". From any state: a live
 * connection is dropped silently (disconnect first to tell the server). */
UDPGATE_API int udpgate_client_connect(udpgate_client *client, const char *address, double now);

/* Starts a sealed connection (§11) with a netcode.io 1.02 connect token (its
 * 2048 bytes, as the backend issued it: Go's token package, or `client
 * token`). The client tries the token's server addresses in order. */
UDPGATE_API int udpgate_client_connect_token(udpgate_client *client, const uint8_t *token,
                                             size_t len, double now);

/* Receives every waiting datagram, runs the timers and sends what is due.
 * Call it every frame (or more often for throughput); now must not go back. */
UDPGATE_API void udpgate_client_update(udpgate_client *client, double now);

/* Closes the connection: 5 Disconnect packets with reason 1 (§7.6), state
 * DISCONNECTED. Queued messages are dropped. */
UDPGATE_API void udpgate_client_disconnect(udpgate_client *client, double now);

/* The state (udpgate_state). */
UDPGATE_API int udpgate_client_state(const udpgate_client *client);

/* For an ending: the raw number behind it (Denied reason, Disconnect reason,
 * sealed refusal reason), 0 if none. */
UDPGATE_API int udpgate_client_end_reason(const udpgate_client *client);

/* After VERSION_MISMATCH: the server's NetworkVersion and NetworkFeatures. */
UDPGATE_API void udpgate_client_server_version(const udpgate_client *client,
                                               uint32_t *network_version,
                                               uint16_t *network_features);

/* Queues a message on a channel (§14). Copies it; returns UDPGATE_OK or
 * UDPGATE_ERR_STATE (not CONNECTED), _CHANNEL, _TOO_LARGE, _QUEUE_FULL.
 * The next update() packs it. */
UDPGATE_API int udpgate_client_send(udpgate_client *client, int channel,
                                    const void *data, size_t len);

/* Queues a Kind-0 Data packet (§7.1): 1..max_data_size() bytes, unreliable. */
UDPGATE_API int udpgate_client_send_data(udpgate_client *client, const void *data, size_t len);

/* The largest message a channel takes (the largest Data payload for
 * UDPGATE_CHANNEL_DATA), or < 0 for no such channel. */
UDPGATE_API int udpgate_client_max_message_size(const udpgate_client *client, int channel);

/* Takes the next received message: copies it into buf, sets *channel (or
 * UDPGATE_CHANNEL_DATA) and returns its length (>= 0). UDPGATE_ERR_EMPTY:
 * nothing waits. UDPGATE_ERR_BUFFER: cap is too small (nothing taken). */
UDPGATE_API int udpgate_client_receive(udpgate_client *client, int *channel, void *buf, size_t cap);

/* The length of the next received message, or UDPGATE_ERR_EMPTY. */
UDPGATE_API int udpgate_client_peek_size(const udpgate_client *client);

/* Bytes queued to send on a reliable channel, not yet acknowledged. */
UDPGATE_API int udpgate_client_queued_bytes(const udpgate_client *client, int channel);

/* The local address of the library's socket (family 0 with callbacks). */
UDPGATE_API udpgate_address udpgate_client_local_address(const udpgate_client *client);

/* ---- statistics -------------------------------------------------------- */

/* Why a received datagram was dropped (docs/protocol.md §10, §11.5, §14.5). */
typedef enum udpgate_drop {
    UDPGATE_DROP_MALFORMED = 0,
    UDPGATE_DROP_TOO_LARGE,
    UDPGATE_DROP_BAD_MAGIC,
    UDPGATE_DROP_BAD_SIZE,
    UDPGATE_DROP_UNKNOWN_TYPE,
    UDPGATE_DROP_UNEXPECTED_TYPE,
    UDPGATE_DROP_BAD_VERSION,
    UDPGATE_DROP_BAD_BODY,
    UDPGATE_DROP_SESSION_MISMATCH,
    UDPGATE_DROP_WRONG_CLIENT_ID,
    UDPGATE_DROP_WRONG_COOKIE,
    UDPGATE_DROP_BAD_TAG,
    UDPGATE_DROP_STALE_SEQUENCE,
    UDPGATE_DROP_SUSPECT_SEQUENCE,
    UDPGATE_DROP_UNKNOWN_CONNECTION,  /* before the Ack, or not from the server's address */
    UDPGATE_DROP_RESTART_UNNEEDED,
    UDPGATE_DROP_RATE_LIMITED,
    UDPGATE_DROP_SEALED_REPLAY,
    UDPGATE_DROP_SEALED_FORGED,
    UDPGATE_DROP_MESSAGE_REFUSED,     /* §14.5: the entries are malformed or over budget */
    UDPGATE_DROP_COUNT
} udpgate_drop;

UDPGATE_API const char *udpgate_drop_name(int drop);

typedef struct udpgate_stats {
    double rtt;                 /* smoothed round trip, seconds (§7.4); 0 before a sample */
    double rtt_var;
    double loss;                /* smoothed fraction of packets reported lost (§7.4) */
    uint64_t packets_sent, packets_received;
    uint64_t bytes_sent, bytes_received;
    uint64_t packets_acked, packets_lost;
    uint64_t messages_sent, messages_received;
    uint64_t resends;           /* reliable units sent again */
    uint64_t messages_dropped;  /* unreliable/sequenced messages that found no room, stale sequenced */
    uint64_t drops[UDPGATE_DROP_COUNT];
} udpgate_stats;

UDPGATE_API void udpgate_client_stats(const udpgate_client *client, udpgate_stats *out);

#ifdef __cplusplus
}
#endif
#endif /* UDPGATE_H */
