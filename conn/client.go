package conn

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/udpgate/udpgate/cookie"
	"github.com/udpgate/udpgate/fastpath"
)

// Client is a connection to a server, made by Dial.
type Client struct {
	st       settings
	server   netip.AddrPort
	local    string
	clientID uint8

	mu        sync.Mutex // guards hs, udp, conn
	hs        fastpath.ClientHandshake
	udp       *net.UDPConn
	conn      *Conn
	restarts  uint64
	connected chan struct{} // closed on the first connect or a handshake failure
	hsErr     error

	done   chan struct{} // closed when the connection ends
	endErr atomic.Pointer[error]
	closed atomic.Bool
	wg     sync.WaitGroup
	drops  [fastpath.NumDropReasons]atomic.Uint64
}

// Dial connects to the server at addr ("127.0.0.1:7777", "[::1]:7777",
// "localhost:7777") and returns when the handshake completes, fails (a
// *DeniedError, a *VersionError, ErrTimedOut) or ctx ends.
func Dial(ctx context.Context, addr string, cfg Config) (*Client, error) {
	st, err := cfg.settings()
	if err != nil {
		return nil, err
	}
	server, err := resolve(addr)
	if err != nil {
		return nil, err
	}
	clientID := st.ClientID
	if clientID == 0 {
		r := fastpath.NewRand(0)
		clientID = uint8(r.Intn(8))
	}
	c := &Client{
		st:        st,
		server:    server,
		local:     cfg.localAddr(server),
		clientID:  clientID,
		connected: make(chan struct{}),
		done:      make(chan struct{}),
	}
	c.hs = fastpath.NewClientHandshake(fastpath.ClientConfig{
		Magic:           st.magic,
		NetworkVersion:  st.NetworkVersion,
		NetworkFeatures: st.NetworkFeatures,
		ClientID:        clientID,
		ConnectTimeout:  st.connectTO,
	}, 0)
	udp, err := c.listen()
	if err != nil {
		return nil, err
	}
	c.udp = udp
	c.wg.Add(2)
	go c.read(udp)
	go c.timers()
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

func resolve(addr string) (netip.AddrPort, error) {
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

func (c *Client) listen() (*net.UDPConn, error) {
	la, err := net.ResolveUDPAddr("udp", c.local)
	if err != nil {
		return nil, fmt.Errorf("conn: bad local address %q: %v", c.local, err)
	}
	udp, err := net.ListenUDP("udp", la)
	if err != nil {
		return nil, fmt.Errorf("conn: cannot open a UDP socket on %s: %w", c.local, err)
	}
	return udp, nil
}

// Conn is the established connection.
func (c *Client) Conn() *Conn {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.conn
}

// Send sends payload as one Data packet (see Conn.Send).
func (c *Client) Send(payload []byte) (uint16, error) { return c.Conn().Send(payload) }

// RTT is the smoothed round-trip time.
func (c *Client) RTT() time.Duration { return c.Conn().RTT() }

// LocalAddr is the client's current local address.
func (c *Client) LocalAddr() netip.AddrPort {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.udp.LocalAddr().(*net.UDPAddr).AddrPort()
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
func (c *Client) Drops() (d [fastpath.NumDropReasons]uint64) {
	for i := range d {
		d[i] = c.drops[i].Load()
	}
	return d
}

// Rebind moves the client to a new local UDP socket (a new port), as a NAT
// rebinding or a network change would. The server, seeing connection packets
// from an unknown address, asks the client to restart, and the connection
// migrates with its sequence numbers intact.
func (c *Client) Rebind() error {
	udp, err := c.listen()
	if err != nil {
		return err
	}
	c.mu.Lock()
	old := c.udp
	c.udp = udp
	if c.conn != nil {
		c.conn.mu.Lock()
		c.conn.link.udp = udp
		c.conn.mu.Unlock()
	}
	c.mu.Unlock()
	c.wg.Add(1)
	go c.read(udp)
	return old.Close()
}

// Close ends the connection, telling the server with Disconnect packets.
func (c *Client) Close() error {
	if c.closed.Load() {
		return nil
	}
	if conn := c.Conn(); conn != nil {
		conn.shutdown(ReasonClosed, false)
	}
	c.stop()
	return nil
}

// stop releases the socket and goroutines.
func (c *Client) stop() {
	if c.closed.Swap(true) {
		return
	}
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

func (c *Client) read(udp *net.UDPConn) {
	defer c.wg.Done()
	buf := make([]byte, fastpath.MaxDatagramLimit+1)
	rep := new(fastpath.AckReport)
	for {
		n, from, err := udp.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		from = netip.AddrPortFrom(from.Addr().Unmap(), from.Port())
		if from != c.server {
			c.drops[fastpath.DropUnknownConnection].Add(1)
			continue
		}
		if n > c.st.MaxDatagram {
			c.drops[fastpath.DropTooLarge].Add(1)
			continue
		}
		c.handle(buf[:n], c.st.Now(), rep)
	}
}

func (c *Client) handle(pkt []byte, now time.Time, rep *fastpath.AckReport) {
	p, r := fastpath.DecodePrefix(c.st.magic, pkt)
	if r != fastpath.DropNone {
		c.drops[r].Add(1)
		return
	}
	if !p.Handshake {
		c.mu.Lock()
		conn := c.conn
		c.mu.Unlock()
		if conn == nil {
			c.drops[fastpath.DropUnknownConnection].Add(1)
			return
		}
		var h fastpath.ConnHeader
		payload, r := fastpath.DecodeConn(c.st.magic, pkt, &h)
		switch {
		case r != fastpath.DropNone:
		case h.SessionID != conn.session:
			r = fastpath.DropSessionMismatch
		case h.ClientID != conn.clientID:
			r = fastpath.DropClientIDMismatch
		case h.Tag != conn.tag:
			r = fastpath.DropBadTag
		default:
			r = conn.receive(&h, payload, now, rep, nil)
		}
		if r != fastpath.DropNone {
			c.drops[r].Add(1)
		}
		return
	}
	var out [fastpath.MaxReplyLen + 32]byte
	c.mu.Lock()
	n, ev, r := c.hs.Receive(seconds(now), pkt, out[:])
	udp := c.udp
	c.mu.Unlock()
	if r != fastpath.DropNone {
		c.drops[r].Add(1)
	}
	if n > 0 {
		_, _ = udp.WriteToUDPAddrPort(out[:n], c.server)
	}
	c.event(ev, now)
}

// event acts on a handshake outcome.
func (c *Client) event(ev fastpath.ClientEvent, now time.Time) {
	switch ev {
	case fastpath.EventConnected:
		c.mu.Lock()
		conn := &Conn{
			st:       &c.st,
			cli:      c,
			link:     link{udp: c.udp},
			clientID: c.clientID,
			session:  c.hs.SessionID(),
			cookie:   c.hs.Cookie(),
			addr:     c.server,
		}
		conn.tag = cookie.SessionTag(&conn.cookie)
		conn.initSeq(false, now)
		c.conn = conn
		c.mu.Unlock()
		close(c.connected)
		c.st.Handler.OnConnect(conn)
	case fastpath.EventReconnected:
		c.mu.Lock()
		c.restarts++
		conn := c.conn
		c.mu.Unlock()
		if conn != nil {
			conn.lastRecv.Store(now.UnixNano())
		}
		c.st.Logger.Debug("connection restarted", "local", c.LocalAddr())
	case fastpath.EventDenied:
		c.mu.Lock()
		c.hsErr = &DeniedError{Reason: c.hs.DeniedReason()}
		c.mu.Unlock()
		close(c.connected)
	case fastpath.EventWrongVersion:
		c.mu.Lock()
		v, f := c.hs.ServerVersions()
		c.hsErr = &VersionError{ServerNetworkVersion: v, ServerNetworkFeatures: f}
		c.mu.Unlock()
		close(c.connected)
	case fastpath.EventTimedOut:
		c.mu.Lock()
		conn := c.conn
		if conn == nil {
			c.hsErr = ErrTimedOut
		}
		c.mu.Unlock()
		if conn == nil {
			close(c.connected)
		} else {
			// A restart nobody answered: the server is gone for us.
			conn.shutdown(ReasonTimedOut, false)
		}
	}
}

// pollLocked sends a handshake packet when one is due. c.mu is held.
func (c *Client) pollLocked(now time.Time) fastpath.ClientEvent {
	var out [fastpath.MaxReplyLen + 32]byte
	n, ev := c.hs.Poll(seconds(now), out[:])
	if n > 0 {
		_, _ = c.udp.WriteToUDPAddrPort(out[:n], c.server)
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
		}
		now := c.st.Now()
		c.mu.Lock()
		ev := c.pollLocked(now)
		conn := c.conn
		c.mu.Unlock()
		c.event(ev, now)
		if conn != nil {
			conn.tick(now)
		}
	}
}
