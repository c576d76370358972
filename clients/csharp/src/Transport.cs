// Transport.cs: the caller-owned socket (udpgate_config.send/.receive): a
// game that must use its engine's or platform's socket (Godot's
// PacketPeerUDP, a console's API) gives the client an ITransport instead of
// letting the library open one.

using System;
using System.Net;
using System.Runtime.InteropServices;

namespace Udpgate
{
    /// <summary>An IPv4 or IPv6 address and port: udpgate_address, byte for
    /// byte. A value type: comparing or copying one allocates nothing.</summary>
    [StructLayout(LayoutKind.Explicit, Size = 20)]
    public struct Address : IEquatable<Address>
    {
        // family at 0 (4, 6, or 0: none), ip[16] at 1 (IPv4 in ip[0..3]),
        // port at 18: the header's layout (TestCSharpLayoutMatchesHeader).
        [FieldOffset(0)] byte family;
        [FieldOffset(1)] ulong ip0;
        [FieldOffset(9)] ulong ip1;
        [FieldOffset(18)] ushort port;

        /// <summary>4 or 6; 0 for no address.</summary>
        public int Family
        {
            get { return family; }
        }

        public int Port
        {
            get { return port; }
        }

        /// <summary>Parses "a.b.c.d:port" or "[v6]:port" (numeric only).</summary>
        public static bool TryParse(string text, out Address address)
        {
            return Native.udpgate_address_parse(out address, text) == 0;
        }

        /// <summary>The address of an IPEndPoint (IPv4, or IPv6 including IPv4-mapped).</summary>
        public static Address FromEndPoint(IPEndPoint endPoint)
        {
            var a = new Address();
            byte[] b = endPoint.Address.GetAddressBytes();
            a.family = (byte)(b.Length == 4 ? 4 : 6);
            for (int i = 0; i < b.Length; i++)
                a.SetByte(i, b[i]);
            a.port = (ushort)endPoint.Port;
            return a;
        }

        /// <summary>An IPEndPoint of the address (allocates).</summary>
        public IPEndPoint ToEndPoint()
        {
            var b = new byte[family == 4 ? 4 : 16];
            for (int i = 0; i < b.Length; i++)
                b[i] = GetByte(i);
            return new IPEndPoint(new IPAddress(b), port);
        }

        /// <summary>Byte i (0..15) of the IP address in network order.</summary>
        public byte GetByte(int i)
        {
            if (i < 0 || i > 15)
                throw new ArgumentOutOfRangeException("i");
            ulong w = i < 8 ? ip0 : ip1;
            int k = i & 7;
            return (byte)(w >> (8 * (BitConverter.IsLittleEndian ? k : 7 - k)));
        }

        void SetByte(int i, byte v)
        {
            int k = i & 7;
            int shift = 8 * (BitConverter.IsLittleEndian ? k : 7 - k);
            ulong mask = ~(0xffUL << shift), bits = (ulong)v << shift;
            if (i < 8)
                ip0 = (ip0 & mask) | bits;
            else
                ip1 = (ip1 & mask) | bits;
        }

        public bool Equals(Address o)
        {
            return family == o.family && ip0 == o.ip0 && ip1 == o.ip1 && port == o.port;
        }

        public override bool Equals(object o)
        {
            return o is Address && Equals((Address)o);
        }

        public override int GetHashCode()
        {
            return (ip0 ^ ip1).GetHashCode() * 31 + port * 7 + family;
        }

        public static bool operator ==(Address a, Address b) { return a.Equals(b); }
        public static bool operator !=(Address a, Address b) { return !a.Equals(b); }

        /// <summary>"a.b.c.d:port" or "[v6]:port", by the C library.</summary>
        public override string ToString()
        {
            var buf = new byte[64];
            Native.udpgate_address_format(ref this, ref buf[0], (UIntPtr)buf.Length);
            int end = Array.IndexOf(buf, (byte)0);
            return System.Text.Encoding.ASCII.GetString(buf, 0, end < 0 ? buf.Length : end);
        }
    }

    /// <summary>A socket of the caller's (ClientConfig.Transport). The client
    /// calls it only from inside its own calls (Connect, Update, Disconnect),
    /// on their thread. Neither method may block. An exception thrown from
    /// one ends the client in State.SocketError, and Client.TransportError
    /// keeps it.</summary>
    public interface ITransport
    {
        /// <summary>Sends one datagram to `to`; returns datagram.Length (or
        /// any count &gt;= 0), &lt; 0 on a hard error.</summary>
        int Send(Address to, ReadOnlySpan<byte> datagram);

        /// <summary>Copies one waiting datagram into buffer and its source into
        /// from; returns its length, 0 when none waits, &lt; 0 on a hard
        /// error.</summary>
        int Receive(out Address from, Span<byte> buffer);
    }

    // The bridge from the C callbacks to an ITransport: static methods (as
    // IL2CPP and Mono's AOT require of a native-to-managed callback) that
    // find the transport through the GCHandle the C client holds as its
    // context, and a buffer for the copies (the binding has no unsafe code to
    // make a Span over native memory). One copy per datagram, no allocation.
    internal sealed class TransportBridge
    {
        internal readonly ITransport Transport;
        internal readonly byte[] Buffer = new byte[Native.MaxDatagram];
        internal Exception Error;

        internal TransportBridge(ITransport t)
        {
            Transport = t;
        }

        static readonly Native.SendFn sendFn = Send;
        static readonly Native.ReceiveFn receiveFn = Receive;
        internal static readonly IntPtr SendPtr = Marshal.GetFunctionPointerForDelegate(sendFn);
        internal static readonly IntPtr ReceivePtr = Marshal.GetFunctionPointerForDelegate(receiveFn);

        [MonoPInvokeCallback(typeof(Native.SendFn))]
        static int Send(IntPtr context, ref Address to, IntPtr data, UIntPtr len)
        {
            var b = (TransportBridge)GCHandle.FromIntPtr(context).Target;
            try
            {
                int n = (int)len;
                if (n > b.Buffer.Length)
                    return -1;
                Marshal.Copy(data, b.Buffer, 0, n);
                return b.Transport.Send(to, new ReadOnlySpan<byte>(b.Buffer, 0, n));
            }
            catch (Exception e)
            {
                b.Error = e;
                return -1;
            }
        }

        [MonoPInvokeCallback(typeof(Native.ReceiveFn))]
        static int Receive(IntPtr context, ref Address from, IntPtr buf, UIntPtr cap)
        {
            var b = (TransportBridge)GCHandle.FromIntPtr(context).Target;
            try
            {
                int max = (int)Math.Min((ulong)cap, (ulong)b.Buffer.Length);
                int n = b.Transport.Receive(out from, new Span<byte>(b.Buffer, 0, max));
                if (n > max)
                    return -1;
                if (n > 0)
                    Marshal.Copy(b.Buffer, 0, buf, n);
                return n;
            }
            catch (Exception e)
            {
                b.Error = e;
                return -1;
            }
        }
    }

    // Marks a method called from native code, for ahead-of-time compilers
    // (IL2CPP, Mono's full AOT), which recognise the attribute by its name.
    [AttributeUsage(AttributeTargets.Method)]
    internal sealed class MonoPInvokeCallbackAttribute : Attribute
    {
        public MonoPInvokeCallbackAttribute(Type delegateType) { }
    }
}
