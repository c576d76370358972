package conn

import (
	"testing"
	"time"

	"github.com/udpgate/udpgate/cookie"
	"github.com/udpgate/udpgate/fastpath"
	"github.com/udpgate/udpgate/internal/conntest"
)

// The per-packet paths of an established connection allocate nothing:
// receiving a Data packet (batch, map lookup, decision, sequence state,
// handler) and Conn.Send.
func TestAllocsEstablished(t *testing.T) {
	if raceEnabled {
		t.Skip("the race runtime allocates; run without -race")
	}
	s := listen(t, Config{Sockets: 1})
	p := newRawPeer(t, s, "127.0.0.1:0")
	ck := p.connect()
	conntest.Eventually(t, "connection", func() bool { return s.Len() == 1 })
	c, ok := s.Conn(p.addr())
	if !ok {
		t.Fatal("no connection")
	}

	// A loop of our own over the server's socket, so the test drives
	// batches without racing the running loop.
	l := newLoop(s, 0, s.socks[0], 8, seconds(time.Now()))
	serverSeq, clientSeq := cookie.Sequences(&ck)
	hdr := fastpath.ConnHeader{ClientID: p.clientID, Tag: cookie.SessionTag(&ck),
		Ack: (serverSeq + fastpath.SeqModulus - 1) % fastpath.SeqModulus, Kind: fastpath.KindData}
	payload := []byte("position update 0123456789")
	next := clientSeq
	receive := func() {
		hdr.Seq = next
		next = (next + 1) % fastpath.SeqModulus
		m := &l.rb.Msgs[0]
		m.N = fastpath.EncodeConn(m.Buf, s.st.magic, &hdr, payload)
		m.Addr = p.addr()
		l.batch(1, time.Now())
	}
	before := c.Stats().PacketsIn
	if n := testing.AllocsPerRun(1000, receive); n != 0 {
		t.Errorf("receiving Data: %v allocs per packet", n)
	}
	if got := c.Stats().PacketsIn - before; got < 1000 {
		t.Fatalf("only %d packets reached the connection", got)
	}
	if n := testing.AllocsPerRun(1000, func() {
		if _, err := c.Send(payload); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("Conn.Send: %v allocs per packet", n)
	}
}
