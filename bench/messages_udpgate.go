package main

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/udpgate/udpgate/conn"
	"github.com/udpgate/udpgate/internal/msgcfg"
	"github.com/udpgate/udpgate/message"
)

// udpgate's side of the message scenarios: a server whose application
// echoes every message on its channel (and answers a bulk message with
// bulkReply), and clients that send on channel 0.

// msgChannels: channel 0 reliable-ordered (every benchmark message), 1
// unreliable (configured, unused), as a game would have both.
func msgConfig(spec msgServerSpec) message.Config {
	if spec.Tools {
		return msgcfg.Config(spec.MaxMessageSize, spec.SendRate)
	}
	return message.Config{
		Channels:       []message.ChannelConfig{{Kind: message.ReliableOrdered}, {Kind: message.Unreliable}},
		SendRate:       spec.SendRate,
		MaxMessageSize: spec.MaxMessageSize,
	}
}

// msgEchoApp is the udpgate message server's application: it echoes a
// message on its channel and answers a bulk message on replyCh (-1: on the
// bulk message's channel).
type msgEchoApp struct {
	conn.NopHandler
	replyCh int
}

func (a msgEchoApp) OnMessage(c *conn.Conn, ch int, msg []byte) {
	if len(msg) == 0 {
		return
	}
	switch msg[0] {
	case tagEcho:
		c.SendMessage(ch, msg)
	case tagBulk:
		if len(msg) >= msgHeader {
			r := ch
			if a.replyCh >= 0 {
				r = a.replyCh
			}
			c.SendMessage(r, bulkReply(msg, len(msg)))
		}
	}
}

// msgBaseConfig is the benchmark's udpgate configuration for message
// scenarios, as startServer's: no per-source Challenge limit, no limit of
// connections per address (every client is 127.0.0.1), connection timers
// far beyond a run so no KeepAlive adds datagrams to the wire count.
//
// With spec.LibTimers the connection timers are the library's defaults
// instead, as a game would run them (the bottleneck scenarios).
func msgBaseConfig(h conn.Handler, spec msgServerSpec) conn.Config {
	if spec.LibTimers {
		cfg := msgBaseConfig(h, msgServerSpec{Tools: spec.Tools, SendRate: spec.SendRate, MaxMessageSize: spec.MaxMessageSize})
		cfg.KeepAlive, cfg.Timeout = 0, 0
		return cfg
	}
	return conn.Config{
		Handler:             h,
		NetworkVersion:      benchNetVersion,
		ChallengeRate:       -1,
		KeepAlive:           time.Hour,
		Timeout:             2 * time.Hour,
		MaxClients:          1 << 16,
		MaxClientsPerIP:     -1,
		MaxClientsPerPrefix: -1,
		// No inbound budget: a bulk flow through a 100 Mbit/s bottleneck
		// is 10k datagrams a second from one connection, above the
		// default's 9k; the scenarios measure the stack, not the budget.
		InboundPacketRate: -1,
		InboundByteRate:   -1,
		Messages:          msgConfig(spec),
		// A finished run's clients close at once: Close would otherwise
		// wait up to 5 s for what is still queued, time no run measures.
		Linger: -1,
	}
}

func startUdpgateMsgServer(v variant, spec msgServerSpec) (*server, error) {
	app := msgEchoApp{replyCh: -1}
	if spec.Tools {
		// A bulk message is answered on the game's reliable channel, not
		// the bulk one.
		app.replyCh = msgcfg.Reliable
	}
	cfg := msgBaseConfig(app, spec)
	cfg.Sockets, cfg.BatchSize, cfg.RecvBuffer, cfg.SendBuffer = v.Sockets, v.Batch, v.Buffer, v.Buffer
	cfg.AllowFragmentation, cfg.NoSteering = v.Frag, v.NoSteer
	s, err := conn.Listen("127.0.0.1:0", cfg)
	if err != nil {
		return nil, err
	}
	return udpgateServer(s), nil
}

// msgClientApp hands a client's messages to on.
type msgClientApp struct {
	conn.NopHandler
	on func([]byte)
}

func (a *msgClientApp) OnMessage(c *conn.Conn, ch int, msg []byte) { a.on(msg) }

type udpgateMsgClient struct{ c *conn.Client }

func dialUdpgateMsg(ctx context.Context, addr netip.AddrPort, spec msgServerSpec, on func([]byte)) (msgClient, error) {
	c, err := conn.Dial(ctx, addr.String(), msgBaseConfig(&msgClientApp{on: on}, spec))
	if err != nil {
		return nil, err
	}
	return &udpgateMsgClient{c: c}, nil
}

// send: one message goes at once (SendMessage); a burst is queued and
// flushed together.
func (u *udpgateMsgClient) send(msgs [][]byte) error {
	c := u.c.Conn()
	if len(msgs) == 1 {
		return c.SendMessage(0, msgs[0])
	}
	for _, m := range msgs {
		if err := c.QueueMessage(0, m); err != nil {
			return err
		}
	}
	return c.Flush()
}

// resent counts every entry sent again, resends and speculative copies
// alike (message.Stats.Resent + Copies), as kcp-go counts every segment
// it sends again: what the comparison weighs is the bytes spent.
func (u *udpgateMsgClient) resent() int64 {
	st := u.c.Conn().MessageStats()
	return int64(st.Resent + st.Copies)
}

// pathInfo is what the client's congestion controller knows of the path
// (message.PathStats), for msg-bulk's record of each transfer.
func (u *udpgateMsgClient) pathInfo() string {
	p := u.c.Conn().MessageStats().Path
	return fmt.Sprintf("rtt %.1f base %.1f queue %.1f ms, window %d B, pacing %.1f MB/s, delivery %.1f MB/s, slow start %v, events %d",
		p.RTT.Seconds()*1e3, p.BaseRTT.Seconds()*1e3, p.QueueDelay.Seconds()*1e3, p.Window, float64(p.PacingRate)/1e6, float64(p.DeliveryRate)/1e6, p.SlowStart, p.CongestionEvents)
}

// close discards what is still queued (Close would linger for it): the
// run's figures are taken.
func (u *udpgateMsgClient) close() { _ = u.c.Close() } // Linger -1: at once
