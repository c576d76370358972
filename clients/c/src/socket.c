/* socket.c: addresses and the library-owned non-blocking UDP socket. */
#if !defined(_WIN32) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200112L
#endif
#include <stdio.h>
#include <stdlib.h>

#include "internal.h"

#ifdef _WIN32
#include <winsock2.h>
#include <ws2tcpip.h>
typedef int socklen_t;
#define UG_CLOSE closesocket
#else
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#define UG_CLOSE close
#endif

int udpgate_address_parse(udpgate_address *out, const char *text) {
    char host[64];
    const char *colon, *h;
    size_t hl;
    long port;
    char *end;
    if (!out || !text)
        return UDPGATE_ERR_ADDRESS;
    memset(out, 0, sizeof *out);
    if (text[0] == '[') {
        const char *close = strchr(text, ']');
        if (!close || close[1] != ':')
            return UDPGATE_ERR_ADDRESS;
        h = text + 1;
        hl = (size_t)(close - h);
        colon = close + 1;
    } else {
        colon = strrchr(text, ':');
        if (!colon)
            return UDPGATE_ERR_ADDRESS;
        h = text;
        hl = (size_t)(colon - text);
    }
    if (hl == 0 || hl >= sizeof host)
        return UDPGATE_ERR_ADDRESS;
    memcpy(host, h, hl);
    host[hl] = 0;
    port = strtol(colon + 1, &end, 10);
    if (*end || end == colon + 1 || port < 0 || port > 65535)
        return UDPGATE_ERR_ADDRESS;
    if (text[0] == '[') {
        if (inet_pton(AF_INET6, host, out->ip) != 1)
            return UDPGATE_ERR_ADDRESS;
        out->family = 6;
    } else {
        if (inet_pton(AF_INET, host, out->ip) != 1)
            return UDPGATE_ERR_ADDRESS;
        out->family = 4;
    }
    out->port = (uint16_t)port;
    return UDPGATE_OK;
}

void udpgate_address_format(const udpgate_address *a, char *buf, size_t cap) {
    char ip[64] = "?";
    if (!buf || cap == 0)
        return;
    if (a->family == 4)
        inet_ntop(AF_INET, a->ip, ip, sizeof ip);
    else if (a->family == 6)
        inet_ntop(AF_INET6, a->ip, ip, sizeof ip);
    if (a->family == 6)
        snprintf(buf, cap, "[%s]:%u", ip, a->port);
    else
        snprintf(buf, cap, "%s:%u", ip, a->port);
}

int ug_address_equal(const udpgate_address *a, const udpgate_address *b) {
    return a->family == b->family && a->port == b->port && memcmp(a->ip, b->ip, a->family == 4 ? 4 : 16) == 0;
}

static socklen_t to_sockaddr(const udpgate_address *a, struct sockaddr_storage *ss) {
    memset(ss, 0, sizeof *ss);
    if (a->family == 4) {
        struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
        s4->sin_family = AF_INET;
        s4->sin_port = htons(a->port);
        memcpy(&s4->sin_addr, a->ip, 4);
        return sizeof *s4;
    } else {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons(a->port);
        memcpy(&s6->sin6_addr, a->ip, 16);
        return sizeof *s6;
    }
}

static void from_sockaddr(const struct sockaddr_storage *ss, udpgate_address *a) {
    memset(a, 0, sizeof *a);
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *s4 = (const struct sockaddr_in *)ss;
        a->family = 4;
        a->port = ntohs(s4->sin_port);
        memcpy(a->ip, &s4->sin_addr, 4);
    } else if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)ss;
        a->family = 6;
        a->port = ntohs(s6->sin6_port);
        memcpy(a->ip, &s6->sin6_addr, 16);
    }
}

int ug_socket_open(ug_socket *s, int family, const char *bind_address, int buffer_bytes) {
    udpgate_address b;
    struct sockaddr_storage ss;
    socklen_t sl;
    int fd, one = 1;
    memset(&b, 0, sizeof b);
    if (bind_address && *bind_address) {
        if (udpgate_address_parse(&b, bind_address) != UDPGATE_OK || b.family != family)
            return UDPGATE_ERR_ADDRESS;
    } else {
        b.family = (uint8_t)family;
    }
    fd = (int)socket(family == 4 ? AF_INET : AF_INET6, SOCK_DGRAM, IPPROTO_UDP);
    if (fd < 0)
        return UDPGATE_ERR_SOCKET;
    if (family == 6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, (const char *)&one, sizeof one);
    if (buffer_bytes <= 0)
        buffer_bytes = 1 << 20;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, (const char *)&buffer_bytes, sizeof buffer_bytes);
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, (const char *)&buffer_bytes, sizeof buffer_bytes);
    sl = to_sockaddr(&b, &ss);
    if (bind(fd, (struct sockaddr *)&ss, sl) != 0) {
        UG_CLOSE(fd);
        return UDPGATE_ERR_SOCKET;
    }
#ifdef _WIN32
    {
        u_long nb = 1;
        ioctlsocket(fd, FIONBIO, &nb);
    }
#else
    if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL, 0) | O_NONBLOCK) != 0) {
        UG_CLOSE(fd);
        return UDPGATE_ERR_SOCKET;
    }
#endif
    sl = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
        from_sockaddr(&ss, &s->local);
    s->fd = fd;
    return UDPGATE_OK;
}

void ug_socket_close(ug_socket *s) {
    if (s->fd >= 0)
        UG_CLOSE(s->fd);
    s->fd = -1;
}

int ug_socket_send(ug_socket *s, const udpgate_address *to, const uint8_t *d, size_t n) {
    struct sockaddr_storage ss;
    socklen_t sl = to_sockaddr(to, &ss);
    long r = (long)sendto(s->fd, (const char *)d, n, 0, (struct sockaddr *)&ss, sl);
    if (r < 0) {
#ifdef _WIN32
        int e = WSAGetLastError();
        if (e == WSAEWOULDBLOCK || e == WSAECONNRESET || e == WSAENOBUFS)
            return 0;
#else
        /* a full buffer or an ICMP error reported late: the packet is lost, not the socket */
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ECONNREFUSED || errno == ENOBUFS ||
            errno == EINTR || errno == EHOSTUNREACH || errno == ENETUNREACH)
            return 0;
#endif
        return -1;
    }
    return (int)r;
}

int ug_socket_recv(ug_socket *s, udpgate_address *from, uint8_t *buf, size_t cap) {
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    long r = (long)recvfrom(s->fd, (char *)buf, cap, 0, (struct sockaddr *)&ss, &sl);
    if (r < 0) {
#ifdef _WIN32
        int e = WSAGetLastError(); /* an ICMP port unreachable shows as WSAECONNRESET */
        if (e == WSAEWOULDBLOCK || e == WSAECONNRESET || e == WSAEMSGSIZE)
            return 0;
#else
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNREFUSED)
            return 0;
#endif
        return -1;
    }
    from_sockaddr(&ss, from);
    return r == 0 ? -2 : (int)r; /* -2: an empty datagram (malformed) */
}
