// UdpTransport.cs: an ITransport over a .NET UDP socket, the shape of one
// over an engine's socket (Godot's PacketPeerUDP, Unity's or a console's):
// the sample uses it with -transport instead of the library's own socket.

using System;
using System.Net;
using System.Net.Sockets;
using Udpgate;

sealed class UdpTransport : ITransport, IDisposable
{
    readonly Socket socket;
    readonly byte[] buffer = new byte[1500];
    EndPoint any;
    Address lastTo;           // the last destination, and its EndPoint: a
    IPEndPoint lastEndPoint;  // client sends to one server, so one conversion
    public long Sent, Received;

    public UdpTransport(AddressFamily family)
    {
        socket = new Socket(family, SocketType.Dgram, ProtocolType.Udp);
        socket.Blocking = false;
        any = new IPEndPoint(family == AddressFamily.InterNetworkV6 ? IPAddress.IPv6Any : IPAddress.Any, 0);
        socket.Bind(any);
    }

    public int Send(Address to, ReadOnlySpan<byte> datagram)
    {
        if (lastEndPoint == null || to != lastTo)
        {
            lastTo = to;
            lastEndPoint = to.ToEndPoint();
        }
        datagram.CopyTo(buffer);
        Sent++;
        try
        {
            return socket.SendTo(buffer, 0, datagram.Length, SocketFlags.None, lastEndPoint);
        }
        catch (SocketException e) when (e.SocketErrorCode == SocketError.WouldBlock || e.SocketErrorCode == SocketError.NoBufferSpaceAvailable)
        {
            return datagram.Length; // dropped, as a full network would
        }
    }

    public int Receive(out Address from, Span<byte> into)
    {
        from = default(Address);
        if (socket.Available == 0)
            return 0;
        EndPoint source = any;
        int n;
        try
        {
            n = socket.ReceiveFrom(buffer, ref source);
        }
        catch (SocketException e) when (e.SocketErrorCode == SocketError.WouldBlock || e.SocketErrorCode == SocketError.ConnectionReset)
        {
            return 0;
        }
        if (n > into.Length)
            n = into.Length; // truncated: the client drops it as too large
        new ReadOnlySpan<byte>(buffer, 0, n).CopyTo(into);
        from = Address.FromEndPoint((IPEndPoint)source);
        Received++;
        return n;
    }

    public void Dispose()
    {
        socket.Dispose();
    }
}
