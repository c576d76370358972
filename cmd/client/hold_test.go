package main

import (
	"strings"
	"testing"

	"github.com/udpgate/udpgate/conn"
	"github.com/udpgate/udpgate/internal/msgcfg"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/testkit/conntest"
	"github.com/udpgate/udpgate/internal/wire"
	"github.com/udpgate/udpgate/message"
)

// TestHoldPayloads: a server's message layer takes every payload hold
// sends and delivers none: the message lacks its last fragment, and the
// units after it wait for it. It holds them all.
func TestHoldPayloads(t *testing.T) {
	p := protocol.DefaultMaxDatagram - wire.ConnLen(wire.Magic{}, protocol.KindMessages, 0)
	l, err := message.NewLayer(msgcfg.Config(8000, 0), p)
	if err != nil {
		t.Fatal(err)
	}
	e := l.NewEndpoint()
	pkts := holdPayloads(8000, p)
	if cnt := holdFragments(8000, p); cnt != 7 || len(pkts) != cnt-1+message.Window-1 {
		t.Fatal(cnt, len(pkts))
	}
	for i, pk := range pkts {
		if len(pk) != p {
			t.Fatalf("packet %d: %d bytes, want a full %d", i, len(pk), p)
		}
		if r := e.Check(pk); r != message.DropNone {
			t.Fatalf("packet %d refused: %v", i, r)
		}
		e.Receive(pk, 0)
		if _, _, ok := e.Next(); ok {
			t.Fatalf("packet %d delivered a message", i)
		}
	}
	if e.Held() != int64(len(pkts)*p) {
		t.Fatalf("held %d, want %d", e.Held(), len(pkts)*p)
	}
	e.Release()
}

// TestHoldEndToEnd: client hold against a server whose receive budget
// holds a third of what 8 holders ask: they connect, send, are refused
// beyond their share, and disconnect at the end.
func TestHoldEndToEnd(t *testing.T) {
	mc := msgcfg.Config(8000, 0)
	mc.ReceiveBudget = 700_000
	s := conntest.Listen(t, conn.Listen, conn.Config{Handler: conn.NopHandler{}, NetworkVersion: 1, ChallengeRate: -1, Sockets: 1, Messages: mc})
	var out, errb strings.Builder
	err := runHold([]string{"-server", s.Addr().String(), "-clients", "8", "-sources", "2", "-duration", "300ms",
		"-message-max-size", "8000"}, &out, &errb)
	t.Logf("output:\n%s%s", out.String(), errb.String())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"hold: 8 clients from 2 addresses (127.2.0.1 up)", "connected: 8 of 8", "held: "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
	st := s.Stats()
	if st.MessageDrops[message.DropOverShare] == 0 {
		t.Errorf("no refusal over the share: %v", st.MessageDrops)
	}
}
