// Sample.cs: connects to a udpgate server with a connect token (sealed mode)
// or to an address (unsealed), sends N reliable messages on channel 0,
// receives the server's N echoes and checks that they came back once and in
// order. Exit 0 on success; 1 with the reason (the client's state or the
// library's error) otherwise; 2 on a usage error.
//
//   mono sample.exe -token token.bin [-n 100] [-size 64] [-timeout 10]
//   mono sample.exe -connect 127.0.0.1:7777 [-n 100]
//
// -transport: send and receive through the game's own socket (UdpTransport,
// an ITransport over a .NET socket) instead of the library's.
//
// The server must echo messages on the channel they came on (cmd/server
// -app echo, the default) with the stock channel layout (-messages).

using System;
using System.Diagnostics;
using System.IO;
using System.Threading;
using Udpgate;

static class Sample
{
    const int Channel = 0; // reliable-ordered in the stock layout

    static int Main(string[] args)
    {
        string tokenPath = null, address = null;
        int count = 100, size = 64;
        double timeout = 10;
        bool transport = false;
        try
        {
            for (int i = 0; i < args.Length; i++)
            {
                string v = i + 1 < args.Length ? args[i + 1] : null;
                switch (args[i])
                {
                    case "-token": tokenPath = v; i++; break;
                    case "-connect": address = v; i++; break;
                    case "-n": count = int.Parse(v); i++; break;
                    case "-size": size = int.Parse(v); i++; break;
                    case "-transport": transport = true; break;
                    case "-timeout": timeout = double.Parse(v, System.Globalization.CultureInfo.InvariantCulture); i++; break;
                    default: throw new ArgumentException("unknown argument " + args[i]);
                }
            }
            if ((tokenPath == null) == (address == null))
                throw new ArgumentException("give one of -token FILE or -connect IP:PORT");
            if (count < 1 || size < 4)
                throw new ArgumentException("-n must be at least 1 and -size at least 4");
        }
        catch (Exception e)
        {
            Console.Error.WriteLine("usage: sample.exe (-token FILE | -connect IP:PORT) [-n N] [-size BYTES] [-timeout SECONDS] [-transport]: " + e.Message);
            return 2;
        }

        try
        {
            return Run(tokenPath, address, count, size, timeout, transport);
        }
        catch (UdpgateException e)
        {
            Console.Error.WriteLine("FAIL: " + e.Message);
            return 1;
        }
        catch (DllNotFoundException e)
        {
            Console.Error.WriteLine("FAIL: libudpgate not found (" + e.Message + "): build clients/c and put it on LD_LIBRARY_PATH");
            return 1;
        }
    }

    static int Run(string tokenPath, string address, int count, int size, double timeout, bool withTransport)
    {
        var clock = Stopwatch.StartNew();
        Func<double> now = () => clock.Elapsed.TotalSeconds;

        var config = new ClientConfig();
        UdpTransport transport = null;
        if (withTransport)
            config.Transport = transport = new UdpTransport(System.Net.Sockets.AddressFamily.InterNetwork);
        using (transport)
        using (var client = new Client(config))
        {
            if (tokenPath != null)
                client.ConnectToken(File.ReadAllBytes(tokenPath), now());
            else
                client.Connect(address, now());

            var message = new byte[size];
            var received = new byte[client.MaxMessageSize(Channel)];
            int sent = 0, echoed = 0;
            bool wasConnected = false;
            double deadline = now() + timeout;

            while (echoed < count)
            {
                client.Update(now());
                State state = client.State;
                if (state < 0)
                {
                    Console.Error.WriteLine("FAIL: " + client.StateText + " (state " + state + ", reason " + client.EndReason + ") after " + echoed + " of " + count + " echoes" + Dropped(client) +
                        (client.TransportError != null ? "; the transport threw " + client.TransportError : ""));
                    return 1;
                }
                if (state == State.Connected && !wasConnected)
                {
                    wasConnected = true;
                    Console.WriteLine(transport == null ? "connected from " + client.LocalAddress : "connected through the game's socket");
                }

                // Queue what fits; QueueFull means wait for acks.
                while (state == State.Connected && sent < count)
                {
                    Fill(message, sent);
                    Result r = client.TrySend(Channel, message);
                    if (r == Result.QueueFull)
                        break;
                    if (r != Result.Ok)
                        throw new UdpgateException("send message " + sent, r);
                    sent++;
                }

                int channel, length;
                while (client.TryReceive(received, out channel, out length))
                {
                    if (channel != Channel || length != size || !Check(received, length, echoed))
                    {
                        Console.Error.WriteLine("FAIL: echo " + echoed + " wrong: channel " + channel + ", " + length + " bytes, first index " + Index(received));
                        return 1;
                    }
                    echoed++;
                }

                if (now() > deadline)
                {
                    Console.Error.WriteLine("FAIL: timed out after " + timeout + " s in state " + client.StateText + ": " + sent + " sent, " + echoed + " of " + count + " echoes" + Dropped(client));
                    return 1;
                }
                Thread.Sleep(1); // a game's frame; a real one would render here
            }

            var stats = new Stats();
            client.GetStats(stats);
            client.Disconnect(now());
            Console.WriteLine("ok: " + echoed + " echoes of " + size + " bytes in order in " + clock.Elapsed.TotalSeconds.ToString("F3") +
                " s, rtt " + (stats.Rtt * 1000).ToString("F2") + " ms, " + stats.PacketsSent + " packets sent, " + stats.Resends + " resends" +
                (transport != null ? "; the game's socket sent " + transport.Sent + " and received " + transport.Received : ""));
            return 0;
        }
    }

    // The datagrams the client dropped, by reason: ", dropped 3 bad_tag", or "".
    static string Dropped(Client client)
    {
        var stats = new Stats();
        client.GetStats(stats);
        string s = "";
        for (int i = 0; i < stats.Drops.Length; i++)
            if (stats.Drops[i] != 0)
                s += ", dropped " + stats.Drops[i] + " " + Client.DropName((Drop)i);
        return s + "; " + stats.PacketsReceived + " packets received";
    }

    // Message i: its index in the first 4 bytes, then bytes derived from it.
    static void Fill(byte[] b, int i)
    {
        b[0] = (byte)i; b[1] = (byte)(i >> 8); b[2] = (byte)(i >> 16); b[3] = (byte)(i >> 24);
        for (int j = 4; j < b.Length; j++)
            b[j] = (byte)(i * 31 + j);
    }

    static bool Check(byte[] b, int length, int i)
    {
        if (Index(b) != i)
            return false;
        for (int j = 4; j < length; j++)
            if (b[j] != (byte)(i * 31 + j))
                return false;
        return true;
    }

    static int Index(byte[] b)
    {
        return b[0] | b[1] << 8 | b[2] << 16 | b[3] << 24;
    }
}
