package batchio

import (
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// preferPair is a steered group of one bit-set and one bit-clear socket
// and a client that reaches either by the datagram's first byte (Bit 5).
type preferPair struct {
	high, low *Socket // the bit-clear and the bit-set socket
	cli       *Socket
	cb        *Batch
	dst       Message
}

func newPreferPair(t *testing.T) *preferPair {
	t.Helper()
	srv := listen(t, "127.0.0.1:0", Config{Steer: Steer{Enabled: true, Bit: 5, SetSockets: 1, ClearSockets: 1}})
	if !srv.Steered() {
		t.Skipf("not steered: %v", srv.Warnings())
	}
	cli := listen(t, "127.0.0.2:0", Config{Sockets: 1})
	p := &preferPair{high: srv.Sockets()[1], low: srv.Sockets()[0], cli: cli.Sockets()[0], cb: NewBatch(64, 8)}
	p.dst.Addr = srv.LocalAddr()
	return p
}

// send sends, in one sendmmsg, nLow datagrams to the low socket (bit 5
// set) and then nHigh to the high one, each carrying its index in byte 1.
func (p *preferPair) send(t *testing.T, nLow, nHigh int) {
	t.Helper()
	for i := range nLow + nHigh {
		m := &p.cb.Msgs[i]
		m.N, m.Addr = 2, p.dst.Addr
		m.Buf[0], m.Buf[1] = 0, byte(i)
		if i < nLow {
			m.Buf[0] = 1 << 5
		}
	}
	if err := p.cli.Send(p.cb, nLow+nHigh); err != nil {
		t.Fatal(err)
	}
}

// TestRecvPreferOrder: with datagrams queued on both sockets, RecvPrefer
// empties the preferred one first, then takes at most lowMax at a time
// from the other, each counted on the socket it came from.
func TestRecvPreferOrder(t *testing.T) {
	p := newPreferPair(t)
	p.send(t, 10, 5)
	// Both queues are full once the high socket's datagrams are readable:
	// loopback queues one sendmmsg's datagrams in order on one CPU's
	// backlog, and the low socket's were first.
	if readable([]*Socket{p.high}, 5e9) != 0 {
		t.Fatal("no datagram reached the preferred socket")
	}
	b := NewBatch(64, 8)
	var fromHigh, fromLow []int
	for sum(fromHigh)+sum(fromLow) < 15 {
		n, from, err := p.high.RecvPrefer(b, p.low, 4)
		if err != nil {
			t.Fatal(err)
		}
		switch from {
		case p.high:
			if len(fromLow) > 0 {
				t.Fatalf("a batch from the preferred socket after one from the other: %v then %v", fromLow, b.Msgs[:n])
			}
			fromHigh = append(fromHigh, n)
		case p.low:
			if n > 4 {
				t.Fatalf("%d datagrams from the other socket in one batch, want at most lowMax 4", n)
			}
			fromLow = append(fromLow, n)
		default:
			t.Fatalf("batch from %p, neither socket", from)
		}
		for _, m := range b.Msgs[:n] {
			if low := m.Buf[0] != 0; low != (from == p.low) {
				t.Fatalf("datagram %x reported from the wrong socket", m.Buf[:m.N])
			}
		}
	}
	if sum(fromHigh) != 5 || sum(fromLow) != 10 {
		t.Fatalf("got %v from the preferred socket and %v from the other, want 5 and 10", fromHigh, fromLow)
	}
	if got := p.low.Stats().RxPackets; got != 10 {
		t.Errorf("other socket counted %d received, want 10", got)
	}
	if got := p.high.Stats().RxPackets; got != 5 {
		t.Errorf("preferred socket counted %d received, want 5", got)
	}
}

func sum(v []int) (s int) {
	for _, x := range v {
		s += x
	}
	return s
}

// TestRecvPreferWakes: a RecvPrefer asleep with both sockets empty wakes
// for a datagram on either, and for Close.
func TestRecvPreferWakes(t *testing.T) {
	for _, low := range []bool{false, true} {
		p := newPreferPair(t)
		got := make(chan *Socket, 1)
		go func() {
			b := NewBatch(8, 8)
			_, from, err := p.high.RecvPrefer(b, p.low, 4)
			if err != nil {
				t.Error(err)
			}
			got <- from
		}()
		if low {
			p.send(t, 1, 0)
		} else {
			p.send(t, 0, 1)
		}
		want := p.high
		if low {
			want = p.low
		}
		if from := <-got; from != want {
			t.Errorf("datagram to the low socket %v: woke with a batch from %p, want %p", low, from, want)
		}
	}
	p := newPreferPair(t)
	errc := make(chan error, 1)
	go func() {
		_, _, err := p.high.RecvPrefer(NewBatch(8, 8), p.low, 4)
		errc <- err
	}()
	// Close may come before or during the wait; either way it must end it.
	p.high.close()
	if err := <-errc; !errors.Is(err, net.ErrClosed) {
		t.Errorf("RecvPrefer after Close: %v, want net.ErrClosed", err)
	}
}

// TestRecvPreferZeroAllocs: a RecvPrefer that takes from either socket,
// and one that waits, allocate nothing.
func TestRecvPreferZeroAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	p := newPreferPair(t)
	b := NewBatch(64, 8)
	low := false
	round := func() {
		if low = !low; low {
			p.send(t, 8, 0)
		} else {
			p.send(t, 0, 8)
		}
		for got := 0; got < 8; {
			n, _, err := p.high.RecvPrefer(b, p.low, 4)
			if err != nil {
				t.Fatal(err)
			}
			got += n
		}
	}
	round()
	if a := testing.AllocsPerRun(200, round); a != 0 {
		t.Errorf("RecvPrefer: %v allocs per round, want 0", a)
	}
}

// TestRecvPreferBesideLowsLoop: the low socket's own loop, asleep in Recv,
// holds nothing RecvPrefer needs (such as the descriptor's read lock): with
// that loop's receive timeout off, so that it sleeps until a datagram
// comes, RecvPrefer's look at the low socket returns at once.
func TestRecvPreferBesideLowsLoop(t *testing.T) {
	p := newPreferPair(t)
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
		// The low socket's loop takes a datagram and goes back to sleep,
		// so that RecvPrefer's look at the low socket most likely
		// meets it asleep; then a datagram for the preferred socket.
		p.send(t, 1, 0)
		<-took
		if n, err := p.low.tryRecv(b, 4); n != 0 || err != nil {
			t.Fatalf("a look at the empty low socket: %d datagrams, %v", n, err)
		}
		got := make(chan error, 1)
		go func() {
			n, from, err := p.high.RecvPrefer(b, p.low, 4)
			if err == nil && (from != p.high || n != 1) {
				err = fmt.Errorf("%d datagrams, from the preferred socket %v; want 1 from it", n, from == p.high)
			}
			got <- err
		}()
		p.send(t, 0, 1)
		if err := <-got; err != nil {
			t.Fatal(err)
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
	p := newPreferPair(t)
	b := NewBatch(64, 8)
	if n, err := p.high.RecvWithin(b, time.Millisecond); n != 0 || err != nil {
		t.Fatalf("nothing sent: %d datagrams, %v; want 0, nil", n, err)
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
