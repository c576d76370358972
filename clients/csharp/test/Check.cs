// Check.cs: the binding's checks that need the CLR, run by sample_test.go
// (compiled together with src/*.cs, so it sees the internal mirrors).
//
//   mono check.exe enums          every enum member: "Enum.Member value"
//   mono check.exe layout         offsets and sizes of the struct mirrors
//   mono check.exe errors         each misuse and what it raised, one a line
//   mono check.exe bench ADDR COUNT SIZE CHANNEL
//                                 clients/c/test/bench.c in C#: COUNT messages
//                                 as fast as the queue takes them, their echoes
//                                 back; prints "rate <messages/s each way> ..."
//   mono check.exe calls N        ns per call of State, TryReceive (nothing
//                                 waits) and TrySend (not connected): the
//                                 binding's own cost, the C side doing ~nothing
//   mono check.exe channels ADDR  each kind of send and receive against an
//                                 echo server, one line each
//   mono check.exe allocs ADDR N  bytes the managed heap grew by while N
//                                 reliable messages went out and came back
//                                 from an echo server at ADDR (unsealed)

using System;
using System.Diagnostics;
using System.Net;
using System.Net.Sockets;
using System.Runtime.InteropServices;
using Udpgate;

static class Check
{
    static int Main(string[] args)
    {
        switch (args.Length > 0 ? args[0] : "")
        {
            case "enums":
                Enums(typeof(Result));
                Enums(typeof(State));
                Enums(typeof(ChannelKind));
                Enums(typeof(Drop));
                return 0;
            case "layout":
                Layout();
                return 0;
            case "errors":
                Errors();
                return 0;
            case "bench":
                return Bench(args[1], long.Parse(args[2]), int.Parse(args[3]), int.Parse(args[4]));
            case "calls":
                return Calls(int.Parse(args[1]));
            case "channels":
                return Channels(args[1]);
            case "allocs":
                return Allocs(args[1], int.Parse(args[2]), args.Length > 3 && args[3] == "transport");
        }
        Console.Error.WriteLine("usage: check.exe enums | layout | allocs ADDR N");
        return 2;
    }

    // Each misuse, the exception it raised: "what: Type Result message".
    static void Errors()
    {
        Try("max datagram 5", () => new Client(new ClientConfig { MaxDatagram = 5 }));
        Try("magic 2", () => new Client(new ClientConfig { Magic = "2" }));
        Try("33 channels", () => new Client(new ClientConfig { Channels = new ChannelConfig[33] }));
        using (var c = new Client(new ClientConfig { Magic = "1011", Channels = new[] { new ChannelConfig(ChannelKind.Sequenced), new ChannelConfig(ChannelKind.ReliableOrdered, true) } }))
        {
            Console.WriteLine("custom config: " + c.State + " max " + c.MaxMessageSize(0) + " " + c.MaxMessageSize(1));
            Try("max message size of channel 2", () => c.MaxMessageSize(2));
            Try("send before connect", () => c.Send(0, new byte[1]));
            Console.WriteLine("try send before connect: " + c.TrySend(0, new byte[1]));
            Try("connect to a name", () => c.Connect("localhost:7777", 0));
            Try("connect with 10 bytes", () => c.ConnectToken(new byte[10], 0));
            int ch, len;
            Console.WriteLine("receive when empty: " + c.TryReceive(new byte[16], out ch, out len) + " peek " + c.PeekSize);
        }
        using (var t = new Client(new ClientConfig { Transport = new ThrowingTransport() }))
        {
            t.Connect("127.0.0.1:9", 0);
            t.Update(0.001);
            Console.WriteLine("throwing transport: " + t.State + ", " + t.TransportError.Message);
        }
        Address a;
        Console.WriteLine("address: " + Address.TryParse("[2001:db8::1]:7777", out a) + " " + a + " family " + a.Family + " port " + a.Port +
            " byte 1 " + a.GetByte(1).ToString("x2") + ", " + a.ToEndPoint() + ", round trip " + (Address.FromEndPoint(a.ToEndPoint()) == a) +
            "; " + Address.TryParse("10.1.2.3:9", out a) + " " + a + " " + a.ToEndPoint() + " " + (Address.FromEndPoint(a.ToEndPoint()) == a) +
            "; " + Address.TryParse("localhost:9", out a));
        var d = new Client();
        d.Dispose();
        d.Dispose();
        Try("state after dispose", () => { var s = d.State; });
    }

    static void Try(string what, Action a)
    {
        try
        {
            a();
            Console.WriteLine(what + ": no exception");
        }
        catch (UdpgateException e)
        {
            Console.WriteLine(what + ": UdpgateException " + e.Result + " " + e.Message);
        }
        catch (Exception e)
        {
            Console.WriteLine(what + ": " + e.GetType().Name);
        }
    }

    static void Enums(Type t)
    {
        foreach (var name in Enum.GetNames(t))
            Console.WriteLine(t.Name + "." + name + " " + Convert.ToInt64(Enum.Parse(t, name)));
    }

    static void Layout()
    {
        var c = typeof(Native.Config);
        Console.WriteLine("sizeof(udpgate_config) " + Marshal.SizeOf(c));
        foreach (var f in c.GetFields())
            Console.WriteLine("udpgate_config." + f.Name + " " + Marshal.OffsetOf(c, f.Name));
        var s = typeof(Native.StatsHead);
        foreach (var f in s.GetFields())
            Console.WriteLine("udpgate_stats." + f.Name + " " + Marshal.OffsetOf(s, f.Name));
        Console.WriteLine("udpgate_stats.drops " + Marshal.SizeOf(s));
        Console.WriteLine("sizeof(udpgate_stats) " + (Marshal.SizeOf(s) + 8 * (int)Drop.Count));
        var a = typeof(Address);
        Console.WriteLine("sizeof(udpgate_address) " + Marshal.SizeOf(a));
        Console.WriteLine("udpgate_address.family " + Marshal.OffsetOf(a, "family"));
        Console.WriteLine("udpgate_address.ip " + Marshal.OffsetOf(a, "ip0"));
        Console.WriteLine("udpgate_address.port " + Marshal.OffsetOf(a, "port"));
    }

    // What clients/c/test/bench.c does, through the binding, with its
    // configuration: the difference in rate is the binding's cost.
    static int Bench(string address, long count, int size, int chan)
    {
        var clock = Stopwatch.StartNew();
        var cfg = new ClientConfig
        {
            SendQueueBytes = 4 << 20,
            SocketBufferBytes = 8 << 20,
            ReceiveQueueBytes = 4 << 20,
            UnreliableQueueBytes = 1 << 20,
        };
        using (var c = new Client(cfg))
        {
            c.Connect(address, clock.Elapsed.TotalSeconds);
            double t0 = clock.Elapsed.TotalSeconds;
            while (c.State == State.Connecting && clock.Elapsed.TotalSeconds - t0 < 10)
                c.Update(clock.Elapsed.TotalSeconds);
            if (c.State != State.Connected)
            {
                Console.WriteLine("FAIL " + c.StateText);
                return 1;
            }
            var msg = new byte[size];
            for (int i = 0; i < msg.Length; i++)
                msg[i] = 0xab;
            var buf = new byte[1 << 20];
            long sent = 0, got = 0;
            double t, lastGot;
            t0 = lastGot = clock.Elapsed.TotalSeconds;
            while (got < count)
            {
                t = clock.Elapsed.TotalSeconds;
                while (sent < count && c.TrySend(chan, msg) == Result.Ok)
                    sent++;
                c.Update(t);
                int ch, n;
                while (c.TryReceive(buf, out ch, out n))
                {
                    got++;
                    lastGot = t;
                }
                if (c.State != State.Connected)
                {
                    Console.WriteLine("FAIL " + c.StateText + " after " + got + " echoes");
                    return 1;
                }
                if (t - lastGot > (chan == 0 ? 30 : 2))
                    break;
            }
            t = lastGot - t0;
            var st = new Stats();
            c.GetStats(st);
            Console.WriteLine(string.Format(System.Globalization.CultureInfo.InvariantCulture,
                "rate {0:F0} sent {1} echoes {2} in {3:F3} s; packets sent {4} received {5} resends {6}",
                got / t, sent, got, t, st.PacketsSent, st.PacketsReceived, st.Resends));
            c.Disconnect(clock.Elapsed.TotalSeconds);
            return 0;
        }
    }

    static int Calls(int n)
    {
        using (var c = new Client())
        {
            var buf = new byte[64];
            var clock = new Stopwatch();
            double state = 0, receive = 0, send = 0;
            int sink = 0, ch, len;
            for (int round = 0; round < 2; round++) // the first warms up
            {
                clock.Restart();
                for (int i = 0; i < n; i++)
                    sink += (int)c.State;
                state = clock.Elapsed.TotalMilliseconds * 1e6 / n;
                clock.Restart();
                for (int i = 0; i < n; i++)
                    c.TryReceive(buf, out ch, out len);
                receive = clock.Elapsed.TotalMilliseconds * 1e6 / n;
                clock.Restart();
                for (int i = 0; i < n; i++)
                    sink += (int)c.TrySend(0, new ReadOnlySpan<byte>(buf, 0, 16));
                send = clock.Elapsed.TotalMilliseconds * 1e6 / n;
            }
            Console.WriteLine(string.Format(System.Globalization.CultureInfo.InvariantCulture,
                "state {0:F1} receive {1:F1} send {2:F1} ns ({3})", state, receive, send, sink != 0));
            return 0;
        }
    }

    // A message on each channel and a Data packet, echoed; the echo of a
    // 100-byte message offered a 10-byte buffer first; the counters after.
    static int Channels(string address)
    {
        var clock = Stopwatch.StartNew();
        using (var c = new Client())
        {
            c.Connect(address, clock.Elapsed.TotalSeconds);
            if (!Wait(c, clock, () => c.State != State.Connecting))
                return 1;
            Console.WriteLine("state " + c.State + ", local address is IPv4 loopback or any: " +
                (c.LocalAddress.ToString().StartsWith("127.0.0.1:") || c.LocalAddress.ToString().StartsWith("0.0.0.0:")));
            var buf = new byte[4096];
            int ch, len;
            for (int channel = Client.ChannelData; channel < 4; channel++)
            {
                var msg = new byte[100];
                for (int i = 0; i < msg.Length; i++)
                    msg[i] = (byte)(channel * 7 + i);
                Result r = channel == Client.ChannelData ? c.TrySendData(msg) : c.TrySend(channel, msg);
                int queued = channel == 0 || channel == 3 ? c.QueuedBytes(channel) : -1;
                if (!Wait(c, clock, () => c.PeekSize >= 0))
                    return 1;
                int peek = c.PeekSize;
                string small;
                try
                {
                    c.TryReceive(new byte[10], out ch, out len);
                    small = "no exception";
                }
                catch (UdpgateException e)
                {
                    small = e.Result + " \"" + e.Message + "\"";
                }
                bool got = c.TryReceive(buf, out ch, out len);
                bool same = len == msg.Length;
                for (int i = 0; same && i < len; i++)
                    same = buf[i] == msg[i];
                Console.WriteLine("channel " + channel + ": send " + r + (queued >= 0 ? ", queued > 100 " + (queued >= 100) : "") +
                    ", peek " + peek + ", into 10 bytes " + small + ", then " + got + " on " + ch + " " + len + " bytes, same " + same);
            }
            if (!Wait(c, clock, () => c.QueuedBytes(0) == 0 && c.QueuedBytes(3) == 0))
                return 1;
            var st = new Stats();
            c.GetStats(st);
            Console.WriteLine("stats: messages sent " + st.MessagesSent + ", received " + st.MessagesReceived +
                ", rtt > 0 " + (st.Rtt > 0) + ", packets sent > 0 " + (st.PacketsSent > 0) + ", bad tags " + st.Drops[(int)Drop.BadTag] +
                ", queued 0 " + c.QueuedBytes(0));
            c.Disconnect(clock.Elapsed.TotalSeconds);
            Console.WriteLine("after disconnect: " + c.State);
            return 0;
        }
    }

    // Updates the client until done() or an ending or 20 s.
    static bool Wait(Client c, Stopwatch clock, Func<bool> done)
    {
        double deadline = clock.Elapsed.TotalSeconds + 20;
        while (!done())
        {
            c.Update(clock.Elapsed.TotalSeconds);
            if (c.IsEnded || clock.Elapsed.TotalSeconds > deadline)
            {
                Console.WriteLine("FAIL: " + c.StateText + " (" + c.State + ")");
                return false;
            }
            System.Threading.Thread.Sleep(1);
        }
        return true;
    }

    // Connects, warms up (the marshalling stubs are made at a method's first
    // call), then counts the managed bytes allocated while n messages make
    // the round trip through TrySend, Update, TryReceive, State and GetStats.
    static int Allocs(string address, int n, bool transport)
    {
        var clock = Stopwatch.StartNew();
        var cfg = new ClientConfig();
        Address server;
        if (!Address.TryParse(address, out server))
            throw new ArgumentException("bad address " + address);
        if (transport)
            cfg.Transport = new ConnectedTransport(server);
        using (var client = new Client(cfg))
        {
            client.Connect(address, clock.Elapsed.TotalSeconds);
            var msg = new byte[100];
            var buf = new byte[2048];
            var stats = new Stats();
            if (!RoundTrips(client, clock, msg, buf, stats, 100))
                return 1;
            long before = GC.GetAllocatedBytesForCurrentThread();
            if (!RoundTrips(client, clock, msg, buf, stats, n))
                return 1;
            long after = GC.GetAllocatedBytesForCurrentThread();
            Console.WriteLine("allocated " + (after - before) + " bytes for " + n + " messages");
            return 0;
        }
    }

    static bool RoundTrips(Client client, Stopwatch clock, byte[] msg, byte[] buf, Stats stats, int n)
    {
        int sent = 0, got = 0;
        double deadline = clock.Elapsed.TotalSeconds + 30;
        while (got < n)
        {
            double now = clock.Elapsed.TotalSeconds;
            if (now > deadline)
            {
                Console.Error.WriteLine("FAIL: timed out: " + got + " of " + n);
                return false;
            }
            client.Update(now);
            State st = client.State;
            if (st < 0)
            {
                Console.Error.WriteLine("FAIL: " + client.StateText);
                return false;
            }
            if (st == State.Connected && sent < n)
            {
                msg[0] = (byte)sent;
                if (client.TrySend(0, new ReadOnlySpan<byte>(msg, 0, 1 + sent % msg.Length)) == Result.Ok)
                    sent++;
            }
            int ch, len;
            while (client.TryReceive(buf, out ch, out len))
            {
                if (ch != 0 || buf[0] != (byte)got)
                {
                    Console.Error.WriteLine("FAIL: echo " + got + " out of order");
                    return false;
                }
                got++;
            }
            client.GetStats(stats);
        }
        return true;
    }
}

// A transport whose Send throws, as a buggy one would.
sealed class ThrowingTransport : ITransport
{
    public int Send(Address to, ReadOnlySpan<byte> datagram)
    {
        throw new InvalidOperationException("the game's socket is closed");
    }

    public int Receive(out Address from, Span<byte> buffer)
    {
        from = default(Address);
        return 0;
    }
}

// A transport over a socket connected to the server: no per-datagram
// allocation of its own, so the allocation test measures the binding's
// callbacks.
sealed class ConnectedTransport : ITransport
{
    readonly Socket socket;
    readonly Address server;
    readonly byte[] buffer = new byte[1500];

    public ConnectedTransport(Address server)
    {
        this.server = server;
        socket = new Socket(AddressFamily.InterNetwork, SocketType.Dgram, ProtocolType.Udp);
        socket.Blocking = false;
        socket.Connect(server.ToEndPoint());
    }

    public int Send(Address to, ReadOnlySpan<byte> datagram)
    {
        datagram.CopyTo(buffer);
        SocketError err;
        socket.Send(buffer, 0, datagram.Length, SocketFlags.None, out err);
        return datagram.Length;
    }

    public int Receive(out Address from, Span<byte> into)
    {
        from = server;
        if (socket.Available == 0)
            return 0;
        SocketError err;
        int n = socket.Receive(buffer, 0, buffer.Length, SocketFlags.None, out err);
        if (err != SocketError.Success || n <= 0)
            return 0;
        n = Math.Min(n, into.Length);
        new ReadOnlySpan<byte>(buffer, 0, n).CopyTo(into);
        return n;
    }
}
