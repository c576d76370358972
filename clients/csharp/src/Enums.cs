// Enums.cs: the C header's enums (clients/c/include/udpgate.h), value for
// value. The Go test TestCSharpEnumsMatchHeader parses the header and fails
// when a value here differs or one is missing.

namespace Udpgate
{
    /// <summary>What a call returned: udpgate_result. 0 is success; the
    /// others are errors. <see cref="Client.ResultName"/> has the C
    /// library's text for each.</summary>
    public enum Result
    {
        Ok = 0,
        /// <summary>An argument or configuration value out of range.</summary>
        Invalid = -1,
        /// <summary>The allocator returned NULL at create.</summary>
        NoMemory = -2,
        /// <summary>The library's socket could not be opened or bound.</summary>
        Socket = -3,
        /// <summary>Not a numeric "a.b.c.d:port" or "[v6]:port".</summary>
        Address = -4,
        /// <summary>Not possible in this state (e.g. send before Connected).</summary>
        State = -5,
        /// <summary>No such channel in the configuration.</summary>
        Channel = -6,
        /// <summary>The message is larger than the channel allows.</summary>
        TooLarge = -7,
        /// <summary>The channel's send queue is full: retry after Update.</summary>
        QueueFull = -8,
        /// <summary>Receive: nothing to receive.</summary>
        Empty = -9,
        /// <summary>Receive: the buffer is too small (the message stays
        /// queued; <see cref="Client.PeekSize"/> tells its length).</summary>
        Buffer = -10,
        /// <summary>The connect token is malformed (size, version, addresses).</summary>
        Token = -11,
        /// <summary>libsodium failed to initialise.</summary>
        Crypto = -12,
    }

    /// <summary>A client's state: udpgate_state. 0 and positive values are
    /// live; negative values are endings, where the client stays until the
    /// next Connect.</summary>
    public enum State
    {
        Disconnected = 0,
        Connecting = 1,
        Connected = 2,

        // the handshake ended
        ConnectTimedOut = -1,
        DeniedServerFull = -2,
        DeniedRefused = -3,
        DeniedAddressLimit = -4,
        DeniedUnknownConnection = -5,
        /// <summary>A Denied reason this client does not know:
        /// <see cref="Client.EndReason"/> has its number.</summary>
        DeniedOther = -6,
        /// <summary>VersionUpgrade: <see cref="Client.GetServerVersion"/>.</summary>
        VersionMismatch = -7,
        TokenExpired = -8,
        /// <summary>Wrong private key or protocol id.</summary>
        TokenInvalid = -9,
        /// <summary>This server is not in the token.</summary>
        TokenForeignServer = -10,
        /// <summary>The token was proven from another address.</summary>
        TokenInUse = -11,
        /// <summary>The server is sealed and this client has no token.</summary>
        TokenRequired = -12,

        // the connection ended
        TimedOut = -13,
        ServerShutdown = -14,
        ServerClosed = -15,
        Replaced = -16,
        /// <summary>A reliable message unacknowledged for the stall
        /// timeout, or the server said so.</summary>
        Stalled = -17,
        SocketError = -18,
        /// <summary>LayoutMismatch (docs/protocol.md §3.7): the server's
        /// channels, MaxMessageSize or MaxDatagram differ.</summary>
        LayoutMismatch = -19,
    }

    /// <summary>A channel's kind: udpgate_channel_kind (docs/protocol.md §14).</summary>
    public enum ChannelKind : byte
    {
        /// <summary>Exactly once, in order, fragmented up to MaxMessageSize.</summary>
        ReliableOrdered = 0,
        /// <summary>At most once, in arrival order, one packet.</summary>
        Unreliable = 1,
        /// <summary>At most once, only if newer than the last delivered.</summary>
        Sequenced = 2,
    }

    /// <summary>Why a received datagram was dropped: udpgate_drop, the
    /// index of <see cref="Stats.Drops"/>.</summary>
    public enum Drop
    {
        Malformed = 0,
        TooLarge,
        BadMagic,
        BadSize,
        UnknownType,
        UnexpectedType,
        BadVersion,
        BadBody,
        SessionMismatch,
        WrongClientId,
        WrongCookie,
        BadTag,
        StaleSequence,
        SuspectSequence,
        UnknownConnection,
        RestartUnneeded,
        RateLimited,
        SealedReplay,
        SealedForged,
        MessageRefused,
        /// <summary>The number of reasons (not a reason).</summary>
        Count,
    }
}
