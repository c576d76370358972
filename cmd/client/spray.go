package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/udpgate/udpgate/batchio"
	"github.com/udpgate/udpgate/cookie"
	"github.com/udpgate/udpgate/internal/handshake"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/seqwin"
	"github.com/udpgate/udpgate/internal/wire"
)

const spraySynopsis = `Make one proven connection to a server on this host and send from it, open
loop, -rate connection packets a second until -count or -duration: Messages
packets whose entries are garbage (-kind malformed, with a KeepAlive in
every 1000 to keep the connection open), valid Data packets (-kind data),
or the two in turn (-kind mixed). It is one client at full
speed, what a server's inbound budget (-inbound-packet-rate,
-inbound-byte-rate) holds back: read the server's
udpgate_drops_total{reason="inbound_limited"} and {reason="message_refused"}
beside it. The server's packets are read and acknowledged, so the
connection stays open; the report gives what was sent and the echoes of the
Data packets that came back. Unsealed servers only.`

// Bounds of a spray: it is a load loop, bounded in count and time.
const (
	sprayMaxCount    = 50_000_000
	sprayMaxDuration = 60 * time.Second
	sprayMaxRate     = 1_000_000
	sprayBatch       = 64
	// sprayKeepAlive: -kind malformed sends a KeepAlive every this many
	// packets.
	sprayKeepAlive = 1000
)

func runSpray(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("spray", spraySynopsis, stderr)
	w := addWireFlags(fs)
	rate := fs.Float64("rate", 100_000, fmt.Sprintf("packets per second, open loop, at most %d", sprayMaxRate))
	count := fs.Int("count", 1_000_000, fmt.Sprintf("packets to send, at most %d", sprayMaxCount))
	duration := fs.Duration("duration", 10*time.Second, fmt.Sprintf("stop sending after this long, at most %v", sprayMaxDuration))
	kind := fs.String("kind", "mixed", "malformed (Messages packets of garbage), data (valid Data packets) or mixed (the two in turn)")
	size := fs.Int("size", 300, "payload bytes of each packet")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	server, err := w.target()
	if err != nil {
		return err
	}
	cfg, err := w.config()
	if err != nil {
		return err
	}
	magic, _ := wire.ParseMagic(cfg.Magic)
	switch {
	case !(*rate >= 1 && *rate <= sprayMaxRate):
		return usagef("-rate %v is out of range: use 1..%d packets a second", *rate, sprayMaxRate)
	case *count < 1 || *count > sprayMaxCount:
		return usagef("-count %d is out of range: use 1..%d", *count, sprayMaxCount)
	case *duration <= 0 || *duration > sprayMaxDuration:
		return usagef("-duration %v is out of range: use more than 0 and at most %v", *duration, sprayMaxDuration)
	case *kind != "malformed" && *kind != "data" && *kind != "mixed":
		return usagef("-kind %q: use malformed, data or mixed", *kind)
	case *size < 1 || wire.ConnLen(magic, protocol.KindData, *size) > protocol.DefaultMaxDatagram:
		return usagef("-size %d is out of range: use 1..%d bytes (a datagram of at most %d)", *size,
			protocol.DefaultMaxDatagram-wire.ConnLen(magic, protocol.KindData, 0), protocol.DefaultMaxDatagram)
	}

	g, err := batchio.Listen("127.0.0.1:0", batchio.Config{Sockets: 1, Mode: batchio.ModeNetpoll, BatchSize: sprayBatch,
		MessageSize: protocol.MaxDatagramLimit, QueueSize: 1})
	if err != nil {
		return fmt.Errorf("cannot open a socket: %w", err)
	}
	defer g.Close()
	sp := &sprayer{sock: g.Sockets()[0], server: server, magic: magic}
	hcfg := handshake.ClientConfig{Magic: magic, NetworkVersion: cfg.NetworkVersion, NetworkFeatures: cfg.NetworkFeatures, ClientID: 1}
	if err := sp.connect(ctx, hcfg); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "connected from %s; spraying %s at %.0f packets/s (%s, %d-byte payloads, at most %d packets or %v) ...\n",
		g.LocalAddr(), server, *rate, *kind, *size, *count, *duration)
	go sp.receive()
	r := sp.spray(ctx, *kind, *size, *rate, *count, *duration)
	// Late echoes.
	time.Sleep(100 * time.Millisecond)
	fmt.Fprintf(stdout, "sent %d packets (%d malformed, %d valid) in %.3f s: %.0f packets/s; %d echoes back\n",
		r.sent, r.malformed, r.sent-r.malformed, r.elapsed.Seconds(), float64(r.sent)/r.elapsed.Seconds(), sp.echoes.Load())
	if ctx.Err() != nil {
		fmt.Fprintln(stderr, "interrupted: the report covers what was sent until then")
	}
	return nil
}

// sprayer is the connection a spray sends from.
type sprayer struct {
	sock   *batchio.Socket
	server netip.AddrPort
	magic  wire.Magic
	hdr    protocol.ConnHeader
	// last is the header of the last valid packet, whose sequence fields
	// the malformed ones repeat.
	last protocol.ConnHeader

	mu  sync.Mutex // seq: the sender's and the receiver's
	seq seqwin.SeqState
	rep seqwin.AckReport

	echoes atomic.Uint64
}

// connect runs the handshake: Initial, Challenge, Response, Ack, resending
// as the handshake says, for at most 5 s.
func (sp *sprayer) connect(ctx context.Context, cfg handshake.ClientConfig) error {
	hs := handshake.NewClientHandshake(cfg, 0)
	out, in := batchio.NewBatch(1, protocol.MaxDatagramLimit), batchio.NewBatch(8, protocol.MaxDatagramLimit)
	deadline := time.Now().Add(5 * time.Second)
	send := func(n int) error {
		out.Msgs[0].N, out.Msgs[0].Addr = n, sp.server
		return sp.sock.Send(out, 1)
	}
	hs.Start(seconds(time.Now()))
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if n, _ := hs.Poll(seconds(time.Now()), out.Msgs[0].Buf); n > 0 {
			if err := send(n); err != nil {
				return fmt.Errorf("sending the handshake: %w", err)
			}
		}
		n, err := sp.sock.RecvWithin(in, 50*time.Millisecond)
		if err != nil {
			return fmt.Errorf("receiving the handshake: %w", err)
		}
		for i := range n {
			m := &in.Msgs[i]
			if m.Addr != sp.server {
				continue
			}
			var reply [handshake.MaxReplyLen + 32]byte
			k, ev, _ := hs.Receive(seconds(time.Now()), m.Buf[:m.N], reply[:])
			if k > 0 {
				copy(out.Msgs[0].Buf, reply[:k])
				if err := send(k); err != nil {
					return fmt.Errorf("sending the handshake: %w", err)
				}
			}
			switch ev {
			case handshake.EventConnected:
				ck := hs.Cookie()
				sp.hdr = protocol.ConnHeader{SessionID: hs.SessionID(), ClientID: cfg.ClientID, Tag: cookie.SessionTag(&ck)}
				srv, cl := cookie.Sequences(&ck)
				sp.seq.Init(cl, srv, seconds(time.Now()))
				sp.last = sp.hdr
				sp.last.Seq, sp.last.Ack = cl, (srv+protocol.SeqModulus-1)%protocol.SeqModulus
				return nil
			case handshake.EventDenied:
				return fmt.Errorf("the server denied the connection (reason %d)", hs.DeniedReason())
			case handshake.EventWrongVersion:
				return errors.New("the server runs another network version: give -network-version and -network-features as the server's")
			case handshake.EventTokenRequired:
				return errors.New("the server is sealed: spray speaks to unsealed servers only")
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return fmt.Errorf("no connection to %s within 5 s: is a server listening there (with the same -magic)?", sp.server)
}

// receive reads the server's packets until the socket closes, counting
// Data echoes and feeding the sequence state, so that the Data packets
// acknowledge what the server sent.
func (sp *sprayer) receive() {
	in := batchio.NewBatch(sprayBatch, protocol.MaxDatagramLimit)
	for {
		n, err := sp.sock.Recv(in)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		now := seconds(time.Now())
		sp.mu.Lock()
		for i := range n {
			m := &in.Msgs[i]
			var h protocol.ConnHeader
			if _, r := wire.DecodeConn(sp.magic, m.Buf[:m.N], &h); r != protocol.DropNone || h.Tag != sp.hdr.Tag {
				continue
			}
			if sp.seq.Receive(h.Seq, h.Ack, h.AckBits, now, &sp.rep) == protocol.DropNone && h.Kind == protocol.KindData {
				sp.echoes.Add(1)
			}
		}
		sp.mu.Unlock()
	}
}

// sprayResult is what spray sent.
type sprayResult struct {
	sent, malformed int
	elapsed         time.Duration
}

// spray sends count packets at rate, in batches, until ctx ends or
// duration passes.
func (sp *sprayer) spray(ctx context.Context, kind string, size int, rate float64, count int, duration time.Duration) sprayResult {
	b := batchio.NewBatch(sprayBatch, protocol.MaxDatagramLimit)
	data := make([]byte, size)
	garbage := make([]byte, size)
	rnd := wire.NewRand(0)
	for i := range garbage {
		garbage[i] = byte(rnd.Uint64()) | 0x80 // no valid message entry starts so
	}
	start := time.Now()
	end := start.Add(duration)
	var r sprayResult
	for r.sent < count && ctx.Err() == nil {
		now := time.Now()
		if !now.Before(end) {
			break
		}
		// Open loop: the packets due by now, a batch at most.
		due := min(int(now.Sub(start).Seconds()*rate)+1, count) - r.sent
		if due <= 0 {
			time.Sleep(time.Duration(float64(time.Second) / rate * sprayBatch / 4))
			continue
		}
		n := min(due, sprayBatch)
		ts := seconds(now)
		sp.mu.Lock()
		for i := range n {
			m := &b.Msgs[i]
			h := sp.hdr
			k := r.sent + i
			// malformed keeps the connection open with a KeepAlive in
			// every sprayKeepAlive packets (a refused packet does not
			// refresh the server's timeout).
			bad := (kind == "malformed" && k%sprayKeepAlive != sprayKeepAlive-1) || (kind == "mixed" && k%2 == 0)
			if bad {
				// The server refuses it before its sequence window, so
				// it takes no sequence number of its own: the valid
				// packets' numbers stay consecutive, as the server's
				// window believes (docs/protocol.md §7.3).
				h.Seq, h.Ack, h.AckBits = sp.last.Seq, sp.last.Ack, sp.last.AckBits
				h.Kind = protocol.KindMessages
				m.N = wire.EncodeConn(m.Buf, sp.magic, &h, garbage)
				r.malformed++
			} else {
				h.Seq, h.Ack, h.AckBits, _, _ = sp.seq.Send(ts)
				sp.last = h
				p := data
				h.Kind = protocol.KindData
				if kind == "malformed" {
					h.Kind, p = protocol.KindKeepAlive, nil
				}
				m.N = wire.EncodeConn(m.Buf, sp.magic, &h, p)
			}
			m.Addr = sp.server
		}
		sp.mu.Unlock()
		if err := sp.sock.Send(b, n); err != nil {
			break
		}
		r.sent += n
	}
	r.elapsed = time.Since(start)
	return r
}

func seconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }
