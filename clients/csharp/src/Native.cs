// Native.cs: the P/Invoke declarations of libudpgate (clients/c/include/udpgate.h)
// and the mirrors of its structs. Internal: Client is the public face.
//
// Every pointer to caller memory is a `ref byte` (the first byte of a Span or
// an array), so the binding needs no unsafe code and copies nothing: the
// marshaller pins the memory for the call and passes its address.

using System;
using System.Runtime.InteropServices;

namespace Udpgate
{
    internal static class Native
    {
        // The library's name: libudpgate.so (Linux, Android), libudpgate.dylib
        // (macOS), udpgate.dll (Windows). iOS links native plugins statically.
#if UNITY_IOS && !UNITY_EDITOR
        internal const string Library = "__Internal";
#else
        internal const string Library = "udpgate";
#endif

        internal const int MaxChannels = 32; // UDPGATE_MAX_CHANNELS

        // udpgate_config, field for field (the Go test
        // TestCSharpLayoutMatchesHeader compares every offset with the C
        // compiler's). Strings are IntPtr to ANSI memory the caller frees
        // after udpgate_client_create, which copies them.
        [StructLayout(LayoutKind.Sequential)]
        internal struct Config
        {
            public IntPtr allocate;
            public IntPtr free;
            public IntPtr allocator_context;
            public IntPtr send;
            public IntPtr receive;
            public IntPtr transport_context;
            public IntPtr bind_address;
            public int socket_buffer_bytes;
            public IntPtr magic;
            public uint network_version;
            public ushort network_features;
            public int max_datagram;
            public double connect_timeout;
            public double keepalive_interval;
            public double timeout;
            public int num_channels;
            // udpgate_channel_config channels[32]: {uint8 kind, uint8 bulk} each
            [MarshalAs(UnmanagedType.ByValArray, SizeConst = 2 * MaxChannels)]
            public byte[] channels;
            public int max_message_size;
            public int send_queue_bytes;
            public int unreliable_queue_bytes;
            public int receive_queue_bytes;
            public double stall_timeout;
            public int max_packets_per_update;
        }

        // The head of udpgate_stats; drops[UDPGATE_DROP_COUNT] (uint64 each)
        // follows it at offset Marshal.SizeOf(typeof(StatsHead)).
        [StructLayout(LayoutKind.Sequential)]
        internal struct StatsHead
        {
            public double rtt;
            public double rtt_var;
            public double loss;
            public ulong packets_sent, packets_received;
            public ulong bytes_sent, bytes_received;
            public ulong packets_acked, packets_lost;
            public ulong messages_sent, messages_received;
            public ulong resends;
            public ulong messages_dropped;
        }

        internal const int MaxDatagram = 1472; // UDPGATE_MAX_DATAGRAM

        // udpgate_send_fn and udpgate_receive_fn: the caller-owned transport.
        [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
        internal delegate int SendFn(IntPtr context, ref Address to, IntPtr data, UIntPtr len);

        [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
        internal delegate int ReceiveFn(IntPtr context, ref Address from, IntPtr buf, UIntPtr cap);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern IntPtr udpgate_state_name(int state);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern IntPtr udpgate_result_name(int result);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern IntPtr udpgate_drop_name(int drop);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern void udpgate_default_config(ref Config cfg);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern int udpgate_client_create(ref Config cfg, out ClientHandle client);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern void udpgate_client_destroy(IntPtr client);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl, CharSet = CharSet.Ansi, BestFitMapping = false)]
        internal static extern int udpgate_client_connect(IntPtr client, string address, double now);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern int udpgate_client_connect_token(IntPtr client, ref byte token, UIntPtr len, double now);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern void udpgate_client_update(IntPtr client, double now);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern void udpgate_client_disconnect(IntPtr client, double now);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern int udpgate_client_state(IntPtr client);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern int udpgate_client_end_reason(IntPtr client);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern void udpgate_client_server_version(IntPtr client, out uint networkVersion, out ushort networkFeatures);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern int udpgate_client_send(IntPtr client, int channel, ref byte data, UIntPtr len);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern int udpgate_client_send_data(IntPtr client, ref byte data, UIntPtr len);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern int udpgate_client_max_message_size(IntPtr client, int channel);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern int udpgate_client_receive(IntPtr client, out int channel, ref byte buf, UIntPtr cap);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern int udpgate_client_peek_size(IntPtr client);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern int udpgate_client_queued_bytes(IntPtr client, int channel);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern Address udpgate_client_local_address(IntPtr client);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern void udpgate_address_format(ref Address a, ref byte buf, UIntPtr cap);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl, CharSet = CharSet.Ansi, BestFitMapping = false)]
        internal static extern int udpgate_address_parse(out Address a, string text);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern void udpgate_client_stats(IntPtr client, ref byte stats);

        // The C library's static strings (state, result and drop names).
        internal static string Text(IntPtr p)
        {
            return p == IntPtr.Zero ? "" : Marshal.PtrToStringAnsi(p);
        }
    }

    // The udpgate_client*: destroyed once, when the Client is disposed or,
    // failing that, finalized. The calls take the raw pointer (Client.Ptr),
    // not the SafeHandle: a SafeHandle argument costs a reference count
    // taken and dropped per call (+40-80 ns on Mono 6.8, a third of a
    // call); a client is used from one thread, and Client keeps itself
    // (and so this handle) alive across each call with GC.KeepAlive.
    internal sealed class ClientHandle : SafeHandle
    {
        // With a caller's transport: the GCHandle the C client holds as its
        // transport_context, freed after the client.
        internal GCHandle Transport;

        public ClientHandle() : base(IntPtr.Zero, true) { }

        public override bool IsInvalid
        {
            get { return handle == IntPtr.Zero; }
        }

        protected override bool ReleaseHandle()
        {
            Native.udpgate_client_destroy(handle);
            if (Transport.IsAllocated)
                Transport.Free();
            return true;
        }
    }
}
