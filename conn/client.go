package conn

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/udpgate/udpgate/cookie"
	"github.com/udpgate/udpgate/internal/handshake"
	"github.com/udpgate/udpgate/internal/msgcfg"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/seqwin"
	"github.com/udpgate/udpgate/internal/wire"
	"github.com/udpgate/udpgate/netsim"
)

// Client is a connection to a server, made by Dial.
type Client struct {
	st       settings
	server   netip.AddrPort
	local    string
	clientID uint8

	mu  sync.Mutex // guards hs, udp, srcIP, conn, restarts, dialed, hsErr
	hs  handshake.ClientHandshake
	udp clientSocket // a UDP socket, or a simulated network's endpoint
	// srcIP is the address udp's datagrams to the server leave from when
	// udp is bound to an unspecified one (LocalAddr), else invalid.
	srcIP    netip.Addr
	conn     *Conn
	restarts uint64
	// connected is closed, once, when Dial has its answer: the first
	// connect (hsErr nil) or a failure (hsErr). dialed records that it is.
	connected chan struct{}
	dialed    bool
	hsErr     error

	done   chan struct{} // closed when the connection ends
	quit   chan struct{} // closed by stop: the timers goroutine returns
	endErr atomic.Pointer[error]
	closed atomic.Bool
	wg     sync.WaitGroup
	drops  [protocol.NumDropReasons]atomic.Uint64
	// msgTimer runs the connection's message timers (messages.go); nil
	// without channels.
	msgTimer *msgTimer
}

// Dial connects to the server at addr ("127.0.0.1:7777", "[::1]:7777",
// "localhost:7777") and returns when the handshake completes, fails (a
// *DeniedError, a *VersionError, an *UnreachableError, ErrTimedOut) or ctx
// ends. Against a sealed server (docs/protocol.md §11) a Dial without
// Config.Token fails with ErrTokenRequired, as soon as the server's Ack
// says it is sealed; a sealed Dial fails with the refusal's error
// (ErrToken*, *DeniedError), or with a *DisconnectedError when the server
// closed the new connection before the client learned it was in.
//
// When the server's host answers the first Initial with ICMP port
// unreachable (nothing listens on that port), Dial fails at once with an
// *UnreachableError instead of waiting ConnectTimeout (Linux; elsewhere the
// error is not reported and Dial times out).
//
// With Config.Network set, the client binds an endpoint of that simulated
// network instead of a UDP socket: at Config.LocalAddr, or at 127.0.0.1
// (::1 for an IPv6 server) and an ephemeral port. No ICMP errors exist
// there: a dial nobody answers times out.
func Dial(ctx context.Context, addr string, cfg Config) (*Client, error) {
	st, err := cfg.settings()
	if err != nil {
		return nil, err
	}
	server, err := resolve(st.Network, addr)
	if err != nil {
		return nil, err
	}
	clientID := st.ClientID
	if clientID == 0 {
		r := wire.NewRand(0)
		clientID = uint8(r.Intn(8))
	}
	c := &Client{
		st:        st,
		server:    server,
		local:     cfg.localAddr(server),
		clientID:  clientID,
		connected: make(chan struct{}),
		done:      make(chan struct{}),
		quit:      make(chan struct{}),
	}
	c.hs = handshake.NewClientHandshake(handshake.ClientConfig{
		Magic:           st.magic,
		NetworkVersion:  st.NetworkVersion,
		NetworkFeatures: st.NetworkFeatures,
		Layout:          msgcfg.Layout(&st.Messages, st.MaxDatagram),
		ClientID:        clientID,
		ConnectTimeout:  st.connectTO,
		// Sealed: the proof follows the Challenge (docs/protocol.md §11.3).
		ProofAfterChallenge: st.Token != nil,
	}, 0)
	udp, err := c.listen()
	if err != nil {
		return nil, err
	}
	c.udp, c.srcIP = udp, c.sourceAddr(udp)
	c.wg.Add(2)
	go c.read(udp)
	go c.timers()
	if st.msgs != nil {
		c.msgTimer = newMsgTimer()
		c.wg.Add(1)
		go c.msgTimer.run(c.done, c.quit, st.Now, &c.wg)
	}
	c.mu.Lock()
	c.hs.Start(seconds(st.Now()))
	c.pollLocked(st.Now())
	c.mu.Unlock()

	select {
	case <-c.connected:
	case <-ctx.Done():
		c.stop()
		return nil, fmt.Errorf("conn: dial %s: %w", addr, ctx.Err())
	}
	if c.hsErr != nil {
		c.stop()
		return nil, c.hsErr
	}
	return c, nil
}

// localAddr is where the client binds: its LocalAddr for tests and load
// generators, else any address of the server's family.
func (c Config) localAddr(server netip.AddrPort) string {
	if c.LocalAddr != "" {
		return c.LocalAddr
	}
	if server.Addr().Is4() {
		return "0.0.0.0:0"
	}
	return "[::]:0"
}

// resolve finds the server's address: on the simulated network nw if it is
// set (netsim.Network.Resolve: literal addresses and the names SetHost
// gave), else by the system's resolver.
func resolve(nw *netsim.Network, addr string) (netip.AddrPort, error) {
	if nw != nil {
		ap, err := nw.Resolve(addr)
		if err != nil {
			return netip.AddrPort{}, fmt.Errorf("conn: bad server address %q: %w", addr, err)
		}
		return ap, nil
	}
	if ap, err := netip.ParseAddrPort(addr); err == nil {
		return ap, nil
	}
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("conn: bad server address %q: %v (use host:port, e.g. 127.0.0.1:7777)", addr, err)
	}
	ap := ua.AddrPort()
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), nil
}

// listen opens the client's socket: on Config.Network if it is set, else
// a UDP socket.
func (c *Client) listen() (clientSocket, error) { return listenClient(c.st.Network, c.local) }

// Conn is the established connection.
func (c *Client) Conn() *Conn {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.conn
}

// Send sends payload as one Data packet (see Conn.Send).
func (c *Client) Send(payload []byte) (uint16, error) { return c.Conn().Send(payload) }

// LocalAddr is the client's current local address: its socket's port and
// the address its datagrams to the server leave from. A socket bound to
// an unspecified address (the default: Config.LocalAddr empty) reports
// the source address the host's routes choose for the server, as the
// server sees it without NAT, not "0.0.0.0" or "::".
func (c *Client) LocalAddr() netip.AddrPort {
	c.mu.Lock()
	defer c.mu.Unlock()
	la := c.udp.LocalAddr()
	if c.srcIP.IsValid() {
		return netip.AddrPortFrom(c.srcIP, la.Port())
	}
	return la
}

// sourceAddr is the local address the host's routes pick for udp's
// datagrams to the server, when udp is a UDP socket bound to an
// unspecified address: a UDP socket connected to the server (connect
// sends nothing) learns it from the kernel, once per socket. An
// IPv4-mapped one is unmapped, as the server sees it. Otherwise, or when
// the kernel has no route, it is invalid.
func (c *Client) sourceAddr(udp clientSocket) netip.Addr {
	if _, ok := udp.(udpSocket); !ok || !udp.LocalAddr().Addr().IsUnspecified() {
		return netip.Addr{}
	}
	probe, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(c.server))
	if err != nil {
		return netip.Addr{}
	}
	defer probe.Close()
	ip := probe.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap()
	if ip.IsUnspecified() {
		return netip.Addr{}
	}
	return ip
}

// Done is closed when the connection ends; Err then says why.
func (c *Client) Done() <-chan struct{} { return c.done }

// Err is why the connection ended (a *DisconnectedError), or nil while it
// is open.
func (c *Client) Err() error {
	if p := c.endErr.Load(); p != nil {
		return *p
	}
	return nil
}

// Restarts counts completed restarts (migrations to a new address).
func (c *Client) Restarts() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.restarts
}

// Drops counts datagrams the client dropped, by reason.
func (c *Client) Drops() (d [protocol.NumDropReasons]uint64) {
	for i := range d {
		d[i] = c.drops[i].Load()
	}
	return d
}

// Rebind moves the client to a new local UDP socket (a new port; on a
// Config.Network, a new endpoint), as a NAT rebinding or a network change
// would. The server, seeing connection packets from an unknown address,
// asks the client to restart, and the connection migrates with its
// sequence numbers intact.
func (c *Client) Rebind() error {
	udp, err := c.listen()
	if err != nil {
		return err
	}
	src := c.sourceAddr(udp)
	c.mu.Lock()
	old := c.udp
	c.udp, c.srcIP = udp, src
	if c.conn != nil {
		c.conn.mu.Lock()
		c.conn.link = udp.link()
		c.conn.mu.Unlock()
	}
	c.mu.Unlock()
	c.wg.Add(1)
	go c.read(udp)
	return old.Close()
}

// Close ends the connection as Conn.Close does: it waits up to
// Config.Linger for queued reliable messages to be acknowledged, then
// tells the server with Disconnect packets. The error wraps
// ErrUndelivered when messages were left unacknowledged.
func (c *Client) Close() error {
	if c.closed.Load() {
		return nil
	}
	var err error
	if conn := c.Conn(); conn != nil {
		if conn.inCallback() {
			go func() { _ = conn.linger(); c.closeNow() }() // as Conn.Close
			return nil
		}
		err = conn.linger()
	}
	c.closeNow()
	return err
}

// closeNow ends the connection without lingering.
func (c *Client) closeNow() {
	if c.closed.Load() {
		return
	}
	if conn := c.Conn(); conn != nil {
		conn.shutdown(ReasonClosed, false)
	}
	c.stop()
}

// stop releases the socket and goroutines.
func (c *Client) stop() {
	if c.closed.Swap(true) {
		return
	}
	close(c.quit)
	c.mu.Lock()
	udp := c.udp
	c.mu.Unlock()
	udp.Close()
	c.wg.Wait()
	c.ended(ReasonClosed, false)
}

// ended records why the connection ended (first cause wins).
func (c *Client) ended(reason DisconnectReason, remote bool) {
	var err error = &DisconnectedError{Reason: reason, Remote: remote}
	if c.endErr.CompareAndSwap(nil, &err) {
		close(c.done)
	}
}

// UnreachableError is returned by Dial when the server's host answered the
// handshake with ICMP port unreachable: no program listens on that UDP port
// there. An off-path attacker who knows the client's port could forge one
// (ICMP is not authenticated), so only a dial that has heard nothing from
// the server yet gives up on it.
type UnreachableError struct {
	Addr netip.AddrPort // the server address dialled
	Err  error          // the socket error, ECONNREFUSED
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("conn: dial %v: port unreachable: nothing listens on that UDP port (check the address and port, and that the server is running): %v",
		e.Addr, e.Err)
}

func (e *UnreachableError) Unwrap() error { return e.Err }

// refusedLocked handles a socket error: an ICMP port unreachable (ECONNREFUSED)
// ends a dial that is still sending Initials. Anything else, and any error
// once the server has answered, is ignored: the handshake's resends and the
// connection's timeout deal with loss. c.mu is held.
func (c *Client) refusedLocked(err error) {
	if !errors.Is(err, syscall.ECONNREFUSED) || c.dialed || c.conn != nil ||
		c.hs.State() != handshake.ClientSendingInitial {
		return
	}
	c.dialDoneLocked(&UnreachableError{Addr: c.server, Err: err})
}

// dialDoneLocked gives Dial its answer, once. c.mu is held.
func (c *Client) dialDoneLocked(err error) {
	if c.dialed {
		return
	}
	c.dialed = true
	c.hsErr = err
	close(c.connected)
}

func (c *Client) read(udp clientSocket) {
	defer c.wg.Done()
	buf := make([]byte, protocol.MaxDatagramLimit+1)
	rep := new(seqwin.AckReport)
	for {
		n, from, err := udp.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			c.mu.Lock()
			c.refusedLocked(err)
			c.mu.Unlock()
			continue
		}
		if from != c.server {
			c.drops[protocol.DropUnknownConnection].Add(1)
			continue
		}
		if n > c.st.MaxDatagram {
			c.drops[protocol.DropTooLarge].Add(1)
			continue
		}
		c.handle(buf[:n], c.st.Now(), rep)
	}
}

func (c *Client) handle(pkt []byte, now time.Time, rep *seqwin.AckReport) {
	p, r := wire.DecodePrefix(c.st.magic, pkt)
	if r != protocol.DropNone {
		c.drops[r].Add(1)
		return
	}
	if !p.Handshake {
		c.mu.Lock()
		conn := c.conn
		c.mu.Unlock()
		if conn == nil {
			c.drops[protocol.DropUnknownConnection].Add(1)
			return
		}
		if conn.sec != nil {
			if r := c.handleSealed(conn, pkt, now, rep); r != protocol.DropNone {
				c.drops[r].Add(1)
			}
			return
		}
		var h protocol.ConnHeader
		payload, r := wire.DecodeConn(c.st.magic, pkt, &h)
		switch {
		case r != protocol.DropNone:
		case h.SessionID != conn.session:
			r = protocol.DropSessionMismatch
		case h.ClientID != conn.clientID:
			r = protocol.DropClientIDMismatch
		case h.Tag != conn.tag:
			r = protocol.DropBadTag
		default:
			r = conn.receive(&h, payload, now, rep, nil)
		}
		if r != protocol.DropNone {
			c.drops[r].Add(1)
		}
		return
	}
	var out [handshake.MaxReplyLen + 32]byte
	c.mu.Lock()
	if c.conn != nil && c.conn.sec != nil {
		// A sealed connection never restarts: a server moves it when a
		// sealed packet arrives from a new address, and a RestartHandshake
		// here is a stray or a forgery.
		c.mu.Unlock()
		c.drops[protocol.DropRestartUnneeded].Add(1)
		return
	}
	if c.dialed && c.conn == nil {
		// Dial has failed already: nothing the server says matters.
		c.mu.Unlock()
		c.drops[protocol.DropUnexpectedType].Add(1)
		return
	}
	hev := c.heardLocked()
	n, ev, r := c.hs.Receive(seconds(now), pkt, out[:])
	udp := c.udp
	c.mu.Unlock()
	if r != protocol.DropNone {
		c.drops[r].Add(1)
	}
	if n > 0 {
		if _, err := udp.WriteToUDPAddrPort(out[:n], c.server); err != nil {
			c.mu.Lock()
			c.refusedLocked(err)
			c.mu.Unlock()
		}
	}
	c.event(hev, now)
	c.event(ev, now)
}

// heardLocked tells the handshake when the connection last accepted a
// packet from the server, so that a RestartHandshake is honoured only after
// a silence and a restart is dropped when the server turns out to reach us
// (handshake.ClientHandshake.Heard). The time is the connection's own
// lastRecv, read when the handshake is about to act rather than on every
// packet. c.mu is held.
func (c *Client) heardLocked() handshake.ClientEvent {
	if c.conn == nil {
		return handshake.EventNone
	}
	return c.hs.Heard(seconds(time.Unix(0, c.conn.lastRecv.Load())))
}

// event acts on a handshake outcome.
func (c *Client) event(ev handshake.ClientEvent, now time.Time) {
	switch ev {
	case handshake.EventConnected:
		c.mu.Lock()
		if c.dialed {
			// Dial failed a moment ago (port unreachable): too late.
			c.mu.Unlock()
			return
		}
		conn := &Conn{
			st:       &c.st,
			cli:      c,
			link:     c.udp.link(),
			clientID: c.clientID,
			session:  c.hs.SessionID(),
			cookie:   c.hs.Cookie(),
			addr:     c.server,
		}
		conn.tag = cookie.SessionTag(&conn.cookie)
		conn.initSeq(false, now)
		// Every packet of the connection and OnConnect run on the read
		// goroutine, in order: no gate to hold.
		conn.ready.Store(true)
		c.conn = conn
		if c.st.Token != nil {
			// Sealed: connected once the server accepts the token.
			c.startProof(conn, now)
			c.proveLocked(now)
			c.mu.Unlock()
			return
		}
		c.dialDoneLocked(nil)
		c.mu.Unlock()
		// The first packet goes at once, padded to a Disconnect's size:
		// a sealed server answers it with reason 11 (token required) in
		// the same round trip, which it could not do for a shorter one
		// (no reply larger than its request). An unsealed server takes
		// it as any KeepAlive.
		var pad [1]byte
		_, _ = conn.send(protocol.KindKeepAlive, pad[:], false)
		c.st.Handler.OnConnect(conn)
	case handshake.EventReconnected:
		c.mu.Lock()
		c.restarts++
		conn := c.conn
		c.mu.Unlock()
		if conn != nil {
			conn.lastRecv.Store(now.UnixNano())
		}
		c.st.Logger.Debug("connection restarted", "local", c.LocalAddr())
	case handshake.EventRestartCanceled:
		// The server's packets still arrive here: the RestartHandshake
		// was forged, or answered a stray packet.
		c.st.Logger.Debug("restart canceled: the server still reaches this address", "local", c.LocalAddr())
	case handshake.EventDenied:
		c.mu.Lock()
		conn := c.conn
		if conn == nil {
			c.dialDoneLocked(&DeniedError{Reason: c.hs.DeniedReason()})
		}
		c.mu.Unlock()
		if conn != nil {
			// A restart the server refused (DeniedUnknownConnection): it
			// no longer holds this connection, having restarted or
			// closed it. Said by the server, so no Disconnect goes back.
			c.st.Logger.Debug("restart refused: the server does not know this connection", "reason", c.hs.DeniedReason())
			conn.shutdown(ReasonShutdown, true)
		}
	case handshake.EventTokenRequired:
		// A sealed server's Ack, and no token to prove: it made no
		// connection, and Dial fails now rather than connect a client
		// whose first packet it would refuse (reason 11).
		c.mu.Lock()
		c.dialDoneLocked(ErrTokenRequired)
		c.mu.Unlock()
	case handshake.EventWrongVersion:
		c.mu.Lock()
		v, f := c.hs.ServerVersions()
		c.dialDoneLocked(&VersionError{ServerNetworkVersion: v, ServerNetworkFeatures: f})
		c.mu.Unlock()
	case handshake.EventWrongLayout:
		c.mu.Lock()
		c.dialDoneLocked(&VersionError{ServerNetworkVersion: c.st.NetworkVersion, ServerNetworkFeatures: c.st.NetworkFeatures,
			Layout: msgcfg.LayoutDiff(c.hs.ServerLayout(), msgcfg.Layout(&c.st.Messages, c.st.MaxDatagram))})
		c.mu.Unlock()
	case handshake.EventTimedOut:
		c.mu.Lock()
		conn := c.conn
		if conn == nil {
			c.dialDoneLocked(ErrTimedOut)
		}
		c.mu.Unlock()
		if conn != nil {
			// A restart nobody answered: the server is gone for us.
			conn.shutdown(ReasonTimedOut, false)
		}
	}
}

// pollLocked sends a handshake packet when one is due. c.mu is held.
func (c *Client) pollLocked(now time.Time) handshake.ClientEvent {
	var out [handshake.MaxReplyLen + 32]byte
	n, ev := c.hs.Poll(seconds(now), out[:])
	if n > 0 {
		// A send can return the ICMP error of an earlier one.
		if _, err := c.udp.WriteToUDPAddrPort(out[:n], c.server); err != nil {
			c.refusedLocked(err)
		}
	}
	return ev
}

// timers drives handshake resends and, once connected, keepalives and the
// timeout.
func (c *Client) timers() {
	defer c.wg.Done()
	t := time.NewTicker(min(c.st.SweepInterval, 50*time.Millisecond))
	defer t.Stop()
	for !c.closed.Load() {
		select {
		case <-t.C:
		case <-c.done:
			return
		case <-c.quit:
			return
		}
		now := c.st.Now()
		c.mu.Lock()
		hev := c.heardLocked()
		ev := c.pollLocked(now)
		c.proveLocked(now)
		conn := c.conn
		c.mu.Unlock()
		c.event(hev, now)
		c.event(ev, now)
		if conn != nil {
			conn.tick(now)
		}
	}
}
