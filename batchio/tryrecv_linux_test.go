package batchio

import (
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// steerPair is a steered group of one bit-set and one bit-clear socket
// and a client that reaches either by the datagram's first byte (Bit 5):
// a handshake socket and a connection socket, as udpgate steers them.
type steerPair struct {
	high, low *Socket // the bit-clear and the bit-set socket
	cli       *Socket
	cb        *Batch
	dst       netip.AddrPort
}

func newSteerPair(t *testing.T) *steerPair {
	t.Helper()
	srv := listen(t, "127.0.0.1:0", Config{Steer: Steer{Enabled: true, Bit: 5, SetSockets: 1, ClearSockets: 1}})
	if !srv.Steered() {
		t.Skipf("not steered: %v", srv.Warnings())
	}
	cli := listen(t, "127.0.0.2:0", Config{Sockets: 1})
	p := &steerPair{high: srv.Sockets()[1], low: srv.Sockets()[0], cli: cli.Sockets()[0], cb: NewBatch(64, 8)}
	p.dst = srv.LocalAddr()
	return p
}

// send sends, in one sendmmsg, nLow datagrams to the low socket (bit 5
// set) and then nHigh to the high one, each carrying its index in byte 1.
func (p *steerPair) send(t *testing.T, nLow, nHigh int) {
	t.Helper()
	if err := p.sendErr(nLow, nHigh); err != nil {
		t.Fatal(err)
	}
}

func (p *steerPair) sendErr(nLow, nHigh int) error {
	for i := range nLow + nHigh {
		m := &p.cb.Msgs[i]
		m.N, m.Addr = 2, p.dst
		m.Buf[0], m.Buf[1] = 0, byte(i)
		if i < nLow {
			m.Buf[0] = 1 << 5
		}
	}
	return p.cli.Send(p.cb, nLow+nHigh)
}

// TestTryRecv: TryRecv takes at most max of the datagrams queued, never
// sleeps, and counts them on the socket they came from.
func TestTryRecv(t *testing.T) {
	p := newSteerPair(t)
	b := NewBatch(64, 8)
	if n, err := p.low.TryRecv(b, 4); n != 0 || err != nil {
		t.Fatalf("nothing queued: %d, %v; want 0, nil", n, err)
	}
	p.send(t, 10, 0)
	if readable([]*Socket{p.low}, 5e9) != 0 {
		t.Fatal("nothing reached the low socket")
	}
	got := 0
	for got < 10 {
		n, err := p.low.TryRecv(b, 4)
		if err != nil || n > 4 {
			t.Fatalf("%d datagrams (at most 4 asked), %v", n, err)
		}
		if n == 0 && readable([]*Socket{p.low}, 5e9) != 0 {
			t.Fatalf("%d of 10 received, then nothing", got)
		}
		for _, m := range b.Msgs[:n] {
			if m.N != 2 || m.Buf[0] != 1<<5 {
				t.Fatalf("datagram %x, want one sent to the low socket", m.Buf[:m.N])
			}
		}
		got += n
	}
	if c := p.low.Stats().RxPackets; c != 10 {
		t.Errorf("low socket counted %d received, want 10", c)
	}
	p.low.close()
	if _, err := p.low.TryRecv(b, 4); !errors.Is(err, net.ErrClosed) {
		t.Errorf("TryRecv after Close: %v, want net.ErrClosed", err)
	}
}

// TestTryRecvBesideOwnLoop: the socket's own loop, asleep in Recv, holds
// nothing TryRecv needs (such as the descriptor's read lock): with that
// loop's receive timeout off, so that it sleeps until a datagram comes,
// another goroutine's TryRecv still returns at once.
func TestTryRecvBesideOwnLoop(t *testing.T) {
	p := newSteerPair(t)
	_ = p.low.sys.rc.Control(func(fd uintptr) {
		if err := unix.SetsockoptTimeval(int(fd), unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{}); err != nil {
			t.Fatal(err)
		}
	})
	took := make(chan int)
	go func() {
		defer close(took)
		b := NewBatch(64, 8)
		for {
			n, err := p.low.Recv(b)
			if err != nil {
				return
			}
			took <- n
		}
	}()
	b := NewBatch(64, 8)
	for range 25 {
		// The loop takes a datagram and goes back to sleep, so that
		// TryRecv most likely meets it asleep.
		p.send(t, 1, 0)
		<-took
		if n, err := p.low.TryRecv(b, 4); n != 0 || err != nil {
			t.Fatalf("a look at the empty socket: %d datagrams, %v", n, err)
		}
	}
	p.low.close()
	for range took {
	}
}

// TestRecvWithin: with nothing queued RecvWithin returns 0 once its wait
// is over; it returns a datagram that is queued or arrives, and
// net.ErrClosed after Close; and it allocates nothing.
func TestRecvWithin(t *testing.T) {
	p := newSteerPair(t)
	b := NewBatch(64, 8)
	if n, err := p.high.RecvWithin(b, time.Millisecond); n != 0 || err != nil {
		t.Fatalf("nothing sent: %d datagrams, %v; want 0, nil", n, err)
	}
	// A datagram that comes during the wait ends it.
	sent := make(chan error, 1)
	go func() { sent <- p.sendErr(0, 1) }()
	if n, err := p.high.RecvWithin(b, time.Hour); n != 1 || err != nil {
		t.Fatalf("one sent during the wait: %d datagrams, %v", n, err)
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	p.send(t, 0, 3)
	for got := 0; got < 3; {
		n, err := p.high.RecvWithin(b, time.Hour)
		if err != nil || n == 0 {
			t.Fatalf("3 sent, %d received: then %d, %v", got, n, err)
		}
		got += n
	}
	if !raceEnabled {
		round := func() {
			p.send(t, 0, 1)
			if n, err := p.high.RecvWithin(b, time.Hour); n != 1 || err != nil {
				t.Fatalf("%d, %v", n, err)
			}
			if n, err := p.high.RecvWithin(b, 0); n != 0 || err != nil {
				t.Fatalf("nothing queued, no wait: %d, %v", n, err)
			}
		}
		if a := testing.AllocsPerRun(100, round); a != 0 {
			t.Errorf("RecvWithin: %v allocs per round, want 0", a)
		}
	}
	errc := make(chan error, 1)
	go func() {
		_, err := p.high.RecvWithin(NewBatch(8, 8), time.Hour)
		errc <- err
	}()
	p.high.close()
	if err := <-errc; !errors.Is(err, net.ErrClosed) {
		t.Errorf("RecvWithin after Close: %v, want net.ErrClosed", err)
	}
}
