package fastpath_test

import (
	"crypto/rand"
	"fmt"
	"net/netip"

	"github.com/udpgate/udpgate/cookie"
	"github.com/udpgate/udpgate/fastpath"
)

// A receive loop hands every datagram to Server.Handle with what its
// connection map knows about the source (a Peer), and does what the
// Decision says: send the reply written into out, promote a client that
// proved its address, move a connection (ActMigrate), or pass a connection
// packet on to the connection's SeqState (ActConn). Here a ClientHandshake
// plays the client, in memory, and then sends one Data packet.
func ExampleServer_Handle() {
	now := 1_700_000_000.0 // Unix seconds: fastpath never reads the clock
	secrets, err := cookie.NewSecrets(now, rand.Reader)
	if err != nil {
		panic(err)
	}
	srv := fastpath.NewServer(fastpath.ServerConfig{
		NetworkVersion: 7,
		ChallengeLimit: fastpath.Limit{Rate: 64},                 // per source; burst 128
		RestartLimit:   fastpath.Limit{Rate: fastpath.Unlimited}, // budget off
	}, secrets, 0, now)
	client := fastpath.NewClientHandshake(fastpath.ClientConfig{ClientID: 1, NetworkVersion: 7}, 0)
	src := netip.MustParseAddrPort("192.0.2.10:40000")

	var (
		d          fastpath.Decision
		peer       fastpath.Peer     // the connection map's entry for src
		serverSeq  fastpath.SeqState // the connection's, once promoted
		rep        fastpath.AckReport
		rnd        = fastpath.NewRand(0)
		toServer   = make([]byte, fastpath.DefaultMaxDatagram)
		toClient   = make([]byte, fastpath.MaxReplyLen)
		handshakes = true
	)
	client.Start(now)
	n, _ := client.Poll(now, toServer) // the Initial
	for n > 0 {
		srv.Handle(&d, src, toServer[:n], now, &peer, toClient)
		n = 0
		switch d.Action {
		case fastpath.ActReply:
			fmt.Println("server:", d.Reply)
			n, _, _ = client.Receive(now, toClient[:d.ReplyLen], toServer)
		case fastpath.ActPromote:
			// Check capacity and the application here; then answer, and
			// keep the connection under the cookie's session tag.
			fmt.Println("server: promote")
			peer = fastpath.Peer{Known: true, ClientID: d.To.ClientID, Tag: cookie.SessionTag(&d.Cookie), Cookie: d.Cookie}
			ss, cs := cookie.Sequences(&d.Cookie)
			serverSeq.Init(ss, cs, now)
			m := srv.Config().BuildAck(toClient, &d.To, &d.Cookie, &rnd)
			_, ev, _ := client.Receive(now, toClient[:m], toServer)
			fmt.Println("client:", ev, client.State())
		case fastpath.ActMigrate:
			// Move the connection whose cookie is d.OrigCookie to src and
			// answer BuildAck with d.OrigCookie (none here).
		case fastpath.ActConn:
			if r := serverSeq.Receive(d.Conn.Seq, d.Conn.Ack, d.Conn.AckBits, now, &rep); r != fastpath.DropNone {
				fmt.Println("server: drop", r)
				break
			}
			switch d.Conn.Kind {
			case fastpath.KindData:
				fmt.Printf("server: data %q\n", d.Payload)
			case fastpath.KindMessages: // package message's channels
			case fastpath.KindKeepAlive: // nothing but the acks
			case fastpath.KindDisconnect: // close the connection
			}
		case fastpath.ActDrop:
			fmt.Println("server: drop", d.Drop)
		}
		if n == 0 && handshakes {
			// Connected: the client's first connection packet.
			handshakes = false
			ck := client.Cookie()
			ss, cs := cookie.Sequences(&ck)
			var clientSeq fastpath.SeqState
			clientSeq.Init(cs, ss, now)
			h := fastpath.ConnHeader{SessionID: client.SessionID(), ClientID: 1, Tag: cookie.SessionTag(&ck), Kind: fastpath.KindData}
			h.Seq, h.Ack, h.AckBits, _, _ = clientSeq.Send(now)
			off := fastpath.ConnHeaderOffset(fastpath.Magic{}) + fastpath.ConnHeaderBytes
			n = fastpath.EncodeConn(toServer, fastpath.Magic{}, &h, append(toServer[off:off], "hi"...))
		}
	}
	// Output:
	// server: challenge
	// server: promote
	// client: connected connected
	// server: data "hi"
}

// A ClientHandshake is driven by two calls: Poll when NextDeadline comes,
// and Receive for each packet from the server. With no server answering,
// it resends its Initial after 100 ms, then at gaps that double up to
// ResendInterval, and gives up after ConnectTimeout.
func ExampleClientHandshake() {
	c := fastpath.NewClientHandshake(fastpath.ClientConfig{
		ClientID: 1, ResendInterval: 1, ConnectTimeout: 3,
	}, 0)
	out := make([]byte, fastpath.MaxClientPacketLen)
	c.Start(0)
	for now := 0.0; ; now = c.NextDeadline() {
		n, ev := c.Poll(now, out)
		if n > 0 {
			var h fastpath.Handshake
			fastpath.DecodeHandshake(fastpath.Magic{}, out[:n], &h)
			fmt.Printf("t=%.1f: send %v #%d\n", now, h.Type, h.SentCount)
		}
		switch ev {
		case fastpath.EventConnected, // Cookie and SessionID are final
			fastpath.EventDenied,       // see DeniedReason
			fastpath.EventWrongVersion, // see ServerVersions
			fastpath.EventTimedOut:
			fmt.Printf("t=%.1f: %v\n", now, ev)
			return
		}
	}
	// Output:
	// t=0.0: send initial #0
	// t=0.1: send initial #1
	// t=0.3: send initial #2
	// t=0.7: send initial #3
	// t=1.5: send initial #4
	// t=2.5: send initial #5
	// t=3.0: timed_out
}

// Each side of a connection keeps a SeqState: Send numbers an outgoing
// packet and stamps its send time, Receive checks an incoming packet's
// sequence fields and reports which of our packets its ack fields deliver.
func ExampleSeqState() {
	var server, client fastpath.SeqState
	now := 1_700_000_000.0
	server.Init(1000, 2000, now) // server's first number, client's first
	client.Init(2000, 1000, now)

	// The server sends three packets; the second is lost on the way.
	var sent [3]fastpath.ConnHeader
	for i := range sent {
		seq, ack, ackBits, _, _ := server.Send(now)
		sent[i] = fastpath.ConnHeader{Seq: seq, Ack: ack, AckBits: ackBits, Kind: fastpath.KindData}
	}
	var rep fastpath.AckReport
	for _, h := range []fastpath.ConnHeader{sent[0], sent[2], sent[0]} {
		r := client.Receive(h.Seq, h.Ack, h.AckBits, now+0.025, &rep)
		fmt.Println("client receives", h.Seq, r)
	}

	// The client's next packet acknowledges what arrived, 50 ms later.
	seq, ack, ackBits, _, _ := client.Send(now + 0.025)
	if r := server.Receive(seq, ack, ackBits, now+0.05, &rep); r != fastpath.DropNone {
		panic(r)
	}
	for _, p := range rep.DeliveredPackets() {
		fmt.Println("server: delivered", p.Seq)
	}
	fmt.Printf("server: RTT %.0f ms\n", server.RTT()*1000)
	// Output:
	// client receives 1000 none
	// client receives 1002 none
	// client receives 1000 stale_sequence
	// server: delivered 1000
	// server: delivered 1002
	// server: RTT 50 ms
}

// Connection packets are byte-aligned after the prefix, so a sender can
// write the message in place after the header and skip a copy, and the
// receiver's payload is a subslice of the datagram.
func ExampleEncodeConn() {
	m, err := fastpath.ParseMagic("1011")
	if err != nil {
		panic(err)
	}
	buf := make([]byte, fastpath.DefaultMaxDatagram)
	msg := "hello"
	payload := buf[fastpath.ConnHeaderOffset(m)+fastpath.ConnHeaderBytes:][:len(msg)]
	copy(payload, msg)
	h := fastpath.ConnHeader{ClientID: 2, Tag: 0xfeedbeef, Seq: 7, Ack: 3, Kind: fastpath.KindData}
	n := fastpath.EncodeConn(buf, m, &h, payload)

	var got fastpath.ConnHeader
	p, r := fastpath.DecodeConn(m, buf[:n], &got)
	fmt.Println(n, r, got.Seq, got.Tag == h.Tag, string(p))
	// Output:
	// 25 none 7 true hello
}
