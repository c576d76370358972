// Client.cs: a udpgate client over libudpgate (clients/c), for Unity native
// plugins, Godot .NET and plain .NET/Mono programs. No threads: call Update
// every frame with the time, then poll State and TryReceive.

using System;
using System.Runtime.InteropServices;

namespace Udpgate
{
    /// <summary>A failed call: the C library's result and its text.</summary>
    public sealed class UdpgateException : Exception
    {
        /// <summary>The C library's result (never Ok).</summary>
        public Result Result { get; private set; }

        public UdpgateException(string operation, Result result)
            : base("udpgate: " + operation + ": " + Client.ResultName(result) + " (" + (int)result + ")")
        {
            Result = result;
        }
    }

    /// <summary>One channel of the layout; the server's must be the same
    /// (docs/protocol.md §14.1).</summary>
    public struct ChannelConfig
    {
        public ChannelKind Kind;
        /// <summary>§14.4: its units yield to the other channels' in every packet.</summary>
        public bool Bulk;

        public ChannelConfig(ChannelKind kind, bool bulk = false)
        {
            Kind = kind;
            Bulk = bulk;
        }
    }

    /// <summary>udpgate_config without the hooks. A new one holds the C
    /// library's defaults (udpgate_default_config): the stock layout of 4
    /// channels (0 reliable, 1 unreliable, 2 sequenced, 3 reliable bulk),
    /// 1200-byte datagrams, 256 KiB messages. 0 in a number means the
    /// library's default.</summary>
    public sealed class ClientConfig
    {
        /// <summary>The local address to bind, e.g. "0.0.0.0:0"; null: any.</summary>
        public string BindAddress;
        /// <summary>SO_RCVBUF/SO_SNDBUF; 0: 1 MiB.</summary>
        public int SocketBufferBytes;
        /// <summary>"" or null: none; else up to 32 '0'/'1' characters (§2).</summary>
        public string Magic;
        public uint NetworkVersion;
        public ushort NetworkFeatures;
        /// <summary>§7.7: must equal the server's.</summary>
        public int MaxDatagram;
        /// <summary>Seconds.</summary>
        public double ConnectTimeout, KeepAliveInterval, Timeout, StallTimeout;
        /// <summary>The channel layout, at most 32; empty: Data packets only.</summary>
        public ChannelConfig[] Channels;
        public int MaxMessageSize;
        /// <summary>Memory budgets in bytes (per reliable channel; unreliable;
        /// received and not yet taken).</summary>
        public int SendQueueBytes, UnreliableQueueBytes, ReceiveQueueBytes;
        public int MaxPacketsPerUpdate;
        /// <summary>A socket of the caller's; null (the default): the library
        /// opens its own, and BindAddress and SocketBufferBytes apply to it.</summary>
        public ITransport Transport;

        public ClientConfig()
        {
            var n = NewNative();
            Native.udpgate_default_config(ref n);
            SocketBufferBytes = n.socket_buffer_bytes;
            NetworkVersion = n.network_version;
            NetworkFeatures = n.network_features;
            MaxDatagram = n.max_datagram;
            ConnectTimeout = n.connect_timeout;
            KeepAliveInterval = n.keepalive_interval;
            Timeout = n.timeout;
            StallTimeout = n.stall_timeout;
            Channels = new ChannelConfig[n.num_channels];
            for (int i = 0; i < Channels.Length; i++)
                Channels[i] = new ChannelConfig((ChannelKind)n.channels[2 * i], n.channels[2 * i + 1] != 0);
            MaxMessageSize = n.max_message_size;
            SendQueueBytes = n.send_queue_bytes;
            UnreliableQueueBytes = n.unreliable_queue_bytes;
            ReceiveQueueBytes = n.receive_queue_bytes;
            MaxPacketsPerUpdate = n.max_packets_per_update;
        }

        internal static Native.Config NewNative()
        {
            var n = new Native.Config();
            n.channels = new byte[2 * Native.MaxChannels];
            return n;
        }

        // The native form; the strings it points to are the caller's to free.
        internal Native.Config ToNative()
        {
            var chans = Channels ?? new ChannelConfig[0];
            if (chans.Length > Native.MaxChannels)
                throw new UdpgateException("config: " + chans.Length + " channels (at most " + Native.MaxChannels + ")", Result.Invalid);
            var n = NewNative();
            n.socket_buffer_bytes = SocketBufferBytes;
            n.network_version = NetworkVersion;
            n.network_features = NetworkFeatures;
            n.max_datagram = MaxDatagram;
            n.connect_timeout = ConnectTimeout;
            n.keepalive_interval = KeepAliveInterval;
            n.timeout = Timeout;
            n.stall_timeout = StallTimeout;
            n.num_channels = chans.Length;
            for (int i = 0; i < chans.Length; i++)
            {
                n.channels[2 * i] = (byte)chans[i].Kind;
                n.channels[2 * i + 1] = chans[i].Bulk ? (byte)1 : (byte)0;
            }
            n.max_message_size = MaxMessageSize;
            n.send_queue_bytes = SendQueueBytes;
            n.unreliable_queue_bytes = UnreliableQueueBytes;
            n.receive_queue_bytes = ReceiveQueueBytes;
            n.max_packets_per_update = MaxPacketsPerUpdate;
            return n;
        }
    }

    /// <summary>udpgate_stats: filled by <see cref="Client.GetStats"/>.</summary>
    public sealed class Stats
    {
        /// <summary>Smoothed round trip and its variation, seconds; 0 before a sample.</summary>
        public double Rtt, RttVar;
        /// <summary>Smoothed fraction of packets reported lost.</summary>
        public double Loss;
        public ulong PacketsSent, PacketsReceived, BytesSent, BytesReceived;
        public ulong PacketsAcked, PacketsLost, MessagesSent, MessagesReceived;
        /// <summary>Reliable units sent again.</summary>
        public ulong Resends;
        /// <summary>Unreliable or sequenced messages that found no room, and stale sequenced ones.</summary>
        public ulong MessagesDropped;
        /// <summary>Received datagrams dropped, indexed by <see cref="Drop"/>.</summary>
        public readonly ulong[] Drops = new ulong[(int)Drop.Count];
    }

    /// <summary>A udpgate client: one connection to one server. Not thread
    /// safe: use it from one thread (the game loop). Dispose it to close its
    /// socket and free its memory (call Disconnect first to tell the
    /// server).</summary>
    public sealed class Client : IDisposable
    {
        /// <summary>The channel TryReceive reports for a Kind-0 Data packet.</summary>
        public const int ChannelData = -1;

        static readonly int statsHead = Marshal.SizeOf(typeof(Native.StatsHead));

        readonly ClientHandle handle; // owns the pointer; frees it once
        IntPtr ptr;                   // the same pointer, Zero once disposed
        readonly byte[] statsBuf = new byte[statsHead + 8 * (int)Drop.Count];
        readonly TransportBridge bridge; // with a caller's transport

        /// <summary>A client with the library's defaults.</summary>
        public Client() : this(new ClientConfig()) { }

        /// <summary>Takes all of the client's memory and opens its socket;
        /// throws UdpgateException (Invalid, NoMemory, Socket, Crypto).</summary>
        public Client(ClientConfig config)
        {
            if (config == null)
                throw new ArgumentNullException("config");
            var n = config.ToNative();
            var transport = new GCHandle();
            if (config.Transport != null)
            {
                bridge = new TransportBridge(config.Transport);
                transport = GCHandle.Alloc(bridge);
                n.send = TransportBridge.SendPtr;
                n.receive = TransportBridge.ReceivePtr;
                n.transport_context = GCHandle.ToIntPtr(transport);
            }
            try
            {
                n.bind_address = Marshal.StringToHGlobalAnsi(config.BindAddress);
                n.magic = Marshal.StringToHGlobalAnsi(config.Magic);
                int r = Native.udpgate_client_create(ref n, out handle);
                if (r != 0)
                {
                    handle.Dispose();
                    throw new UdpgateException("create", (Result)r);
                }
                handle.Transport = transport; // freed with the client
                transport = new GCHandle();
                ptr = handle.DangerousGetHandle();
            }
            finally
            {
                Marshal.FreeHGlobal(n.bind_address);
                Marshal.FreeHGlobal(n.magic);
                if (transport.IsAllocated)
                    transport.Free();
            }
        }

        /// <summary>Starts an unsealed connection to "ip:port" (numeric; resolve names yourself).</summary>
        public void Connect(string address, double now)
        {
            int r = Native.udpgate_client_connect(Ptr, address, now);
            GC.KeepAlive(this);
            if (r != 0)
                throw new UdpgateException("connect " + address, (Result)r);
        }

        /// <summary>Starts a sealed connection with a netcode.io 1.02 connect
        /// token (its 2048 bytes, as the game's backend issued it).</summary>
        public void ConnectToken(byte[] token, double now)
        {
            if (token == null || token.Length == 0)
                throw new UdpgateException("connect token: empty token", Result.Token);
            int r = Native.udpgate_client_connect_token(Ptr, ref token[0], (UIntPtr)token.Length, now);
            GC.KeepAlive(this);
            Check("connect token", r);
        }

        /// <summary>Receives every waiting datagram, runs the timers and sends
        /// what is due. Call it every frame; now (seconds, any monotonic
        /// origin) must not go back.</summary>
        public void Update(double now)
        {
            Native.udpgate_client_update(Ptr, now);
            GC.KeepAlive(this);
        }

        /// <summary>Tells the server (5 Disconnect packets) and drops queued messages.</summary>
        public void Disconnect(double now)
        {
            Native.udpgate_client_disconnect(Ptr, now);
            GC.KeepAlive(this);
        }

        public State State
        {
            get
            {
                int s = Native.udpgate_client_state(Ptr);
                GC.KeepAlive(this);
                return (State)s;
            }
        }

        /// <summary>The state's text from the C library, e.g. "denied: server full".</summary>
        public string StateText
        {
            get { return StateName(State); }
        }

        public bool IsConnected
        {
            get { return State == State.Connected; }
        }

        /// <summary>True in an ending (a negative state): the reason is <see cref="State"/>.</summary>
        public bool IsEnded
        {
            get { return (int)State < 0; }
        }

        /// <summary>For an ending: the raw number behind it (Denied,
        /// Disconnect or sealed refusal reason), 0 if none.</summary>
        public int EndReason
        {
            get
            {
                int r = Native.udpgate_client_end_reason(Ptr);
                GC.KeepAlive(this);
                return r;
            }
        }

        /// <summary>After VersionMismatch: what the server runs.</summary>
        public void GetServerVersion(out uint networkVersion, out ushort networkFeatures)
        {
            Native.udpgate_client_server_version(Ptr, out networkVersion, out networkFeatures);
            GC.KeepAlive(this);
        }

        /// <summary>Queues a message (copied). Returns Ok, or State (not
        /// connected), Channel, TooLarge, QueueFull (retry after Update).
        /// Allocates nothing.</summary>
        public Result TrySend(int channel, ReadOnlySpan<byte> message)
        {
            int r = Native.udpgate_client_send(Ptr, channel, ref MemoryMarshal.GetReference(message), (UIntPtr)message.Length);
            GC.KeepAlive(this);
            return (Result)r;
        }

        /// <summary>TrySend, throwing UdpgateException on any error.</summary>
        public void Send(int channel, ReadOnlySpan<byte> message)
        {
            Check("send", (int)TrySend(channel, message));
        }

        /// <summary>Queues a Kind-0 Data packet (unreliable, one packet).</summary>
        public Result TrySendData(ReadOnlySpan<byte> data)
        {
            int r = Native.udpgate_client_send_data(Ptr, ref MemoryMarshal.GetReference(data), (UIntPtr)data.Length);
            GC.KeepAlive(this);
            return (Result)r;
        }

        /// <summary>Takes the next received message into buffer: true with its
        /// channel (or ChannelData) and length, false when none waits.
        /// Throws UdpgateException (Buffer) if the buffer is shorter than the
        /// message, which stays queued (PeekSize tells its length).
        /// Allocates nothing.</summary>
        public bool TryReceive(Span<byte> buffer, out int channel, out int length)
        {
            int n = Native.udpgate_client_receive(Ptr, out channel, ref MemoryMarshal.GetReference(buffer), (UIntPtr)buffer.Length);
            GC.KeepAlive(this);
            if (n >= 0)
            {
                length = n;
                return true;
            }
            length = 0;
            if (n == (int)Result.Empty)
                return false;
            throw new UdpgateException("receive into " + buffer.Length + " bytes (the next message has " + PeekSize + ")", (Result)n);
        }

        /// <summary>The length of the next received message, or -1 if none waits.</summary>
        public int PeekSize
        {
            get
            {
                int n = Native.udpgate_client_peek_size(Ptr);
                GC.KeepAlive(this);
                return n >= 0 ? n : -1;
            }
        }

        /// <summary>The largest message a channel takes (the largest Data
        /// payload for ChannelData); throws for no such channel.</summary>
        public int MaxMessageSize(int channel)
        {
            int n = Native.udpgate_client_max_message_size(Ptr, channel);
            GC.KeepAlive(this);
            if (n < 0)
                throw new UdpgateException("max message size of channel " + channel, Result.Channel);
            return n;
        }

        /// <summary>Bytes queued on a reliable channel, not yet acknowledged.</summary>
        public int QueuedBytes(int channel)
        {
            int n = Native.udpgate_client_queued_bytes(Ptr, channel);
            GC.KeepAlive(this);
            return n;
        }

        /// <summary>The local address of the library's socket, e.g.
        /// 0.0.0.0:51234 (Family 0 with a caller's transport).</summary>
        public Address LocalAddress
        {
            get
            {
                var a = Native.udpgate_client_local_address(Ptr);
                GC.KeepAlive(this);
                return a;
            }
        }

        /// <summary>With a caller's transport: the exception one of its calls
        /// threw (which ended the client in State.SocketError), or null.</summary>
        public Exception TransportError
        {
            get { return bridge == null ? null : bridge.Error; }
        }

        /// <summary>Fills into with the client's counters. Allocates nothing.</summary>
        public void GetStats(Stats into)
        {
            if (into == null)
                throw new ArgumentNullException("into");
            // The native struct is written into a managed buffer the client
            // owns, then read field by field.
            Native.udpgate_client_stats(Ptr, ref statsBuf[0]);
            GC.KeepAlive(this);
            var b = statsBuf;
            into.Rtt = BitConverter.ToDouble(b, 0);
            into.RttVar = BitConverter.ToDouble(b, 8);
            into.Loss = BitConverter.ToDouble(b, 16);
            into.PacketsSent = BitConverter.ToUInt64(b, 24);
            into.PacketsReceived = BitConverter.ToUInt64(b, 32);
            into.BytesSent = BitConverter.ToUInt64(b, 40);
            into.BytesReceived = BitConverter.ToUInt64(b, 48);
            into.PacketsAcked = BitConverter.ToUInt64(b, 56);
            into.PacketsLost = BitConverter.ToUInt64(b, 64);
            into.MessagesSent = BitConverter.ToUInt64(b, 72);
            into.MessagesReceived = BitConverter.ToUInt64(b, 80);
            into.Resends = BitConverter.ToUInt64(b, 88);
            into.MessagesDropped = BitConverter.ToUInt64(b, 96);
            for (int i = 0; i < into.Drops.Length; i++)
                into.Drops[i] = BitConverter.ToUInt64(b, statsHead + 8 * i);
        }

        /// <summary>Closes the socket and frees the client's memory, sending
        /// nothing (call Disconnect first). Later calls throw ObjectDisposedException.</summary>
        public void Dispose()
        {
            ptr = IntPtr.Zero;
            handle.Dispose();
        }

        // The C client for a call. Every call is followed by
        // GC.KeepAlive(this), so that the handle's finalizer cannot free the
        // client while C runs (were the Client otherwise unreachable).
        IntPtr Ptr
        {
            get
            {
                if (ptr == IntPtr.Zero)
                    throw new ObjectDisposedException("Udpgate.Client");
                return ptr;
            }
        }

        /// <summary>The C library's name of a state, e.g. "denied: server full".</summary>
        public static string StateName(State state)
        {
            return Native.Text(Native.udpgate_state_name((int)state));
        }

        /// <summary>The C library's name of a result, e.g. "queue full".</summary>
        public static string ResultName(Result result)
        {
            return Native.Text(Native.udpgate_result_name((int)result));
        }

        /// <summary>The C library's name of a drop reason, e.g. "bad_tag".</summary>
        public static string DropName(Drop drop)
        {
            return Native.Text(Native.udpgate_drop_name((int)drop));
        }

        static void Check(string operation, int r)
        {
            if (r != 0)
                throw new UdpgateException(operation, (Result)r);
        }
    }
}
