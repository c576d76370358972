/* layout.c: the C compiler's offsets and sizes of the structs the C#
 * binding mirrors (src/Native.cs), printed as test/Check.cs's "layout"
 * prints its own; sample_test.go compares the two. */
#include <stddef.h>
#include <stdio.h>

#include "udpgate.h"

#define F(s, f) printf(#s "." #f " %zu\n", offsetof(s, f))

int main(void) {
    printf("sizeof(udpgate_config) %zu\n", sizeof(udpgate_config));
    F(udpgate_config, allocate);
    F(udpgate_config, free);
    F(udpgate_config, allocator_context);
    F(udpgate_config, send);
    F(udpgate_config, receive);
    F(udpgate_config, transport_context);
    F(udpgate_config, bind_address);
    F(udpgate_config, socket_buffer_bytes);
    F(udpgate_config, magic);
    F(udpgate_config, network_version);
    F(udpgate_config, network_features);
    F(udpgate_config, max_datagram);
    F(udpgate_config, connect_timeout);
    F(udpgate_config, keepalive_interval);
    F(udpgate_config, timeout);
    F(udpgate_config, num_channels);
    F(udpgate_config, channels);
    F(udpgate_config, max_message_size);
    F(udpgate_config, send_queue_bytes);
    F(udpgate_config, unreliable_queue_bytes);
    F(udpgate_config, receive_queue_bytes);
    F(udpgate_config, stall_timeout);
    F(udpgate_config, max_packets_per_update);
    F(udpgate_stats, rtt);
    F(udpgate_stats, rtt_var);
    F(udpgate_stats, loss);
    F(udpgate_stats, packets_sent);
    F(udpgate_stats, packets_received);
    F(udpgate_stats, bytes_sent);
    F(udpgate_stats, bytes_received);
    F(udpgate_stats, packets_acked);
    F(udpgate_stats, packets_lost);
    F(udpgate_stats, messages_sent);
    F(udpgate_stats, messages_received);
    F(udpgate_stats, resends);
    F(udpgate_stats, messages_dropped);
    F(udpgate_stats, drops);
    printf("sizeof(udpgate_stats) %zu\n", sizeof(udpgate_stats));
    printf("sizeof(udpgate_address) %zu\n", sizeof(udpgate_address));
    F(udpgate_address, family);
    F(udpgate_address, ip);
    F(udpgate_address, port);
    return 0;
}
