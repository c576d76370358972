package batchio

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestConfigNormalize(t *testing.T) {
	c := Config{Sockets: 1000, BatchSize: 5000, Mode: Mode(99)}.normalize()
	if reusePortBalances && c.Sockets != MaxSockets {
		t.Errorf("Sockets = %d, want cap %d", c.Sockets, MaxSockets)
	}
	if c.BatchSize != maxBatchSize {
		t.Errorf("BatchSize = %d, want %d", c.BatchSize, maxBatchSize)
	}
	if c.Mode != autoMode {
		t.Errorf("Mode = %v, want %v", c.Mode, autoMode)
	}
	d := Config{}.normalize()
	if d.Sockets < 1 || d.BatchSize != DefaultBatchSize || d.MessageSize != DefaultMessageSize ||
		d.QueueSize != DefaultQueueSize || d.RecvBuffer != DefaultRecvBuffer || d.SendBuffer != DefaultSendBuffer {
		t.Errorf("defaults not applied: %+v", d)
	}
}

func TestBufferWarning(t *testing.T) {
	if w := bufferWarning("receive", 4194304, 4194304); w != "" {
		t.Errorf("granted buffer warned: %q", w)
	}
	want := "receive buffer capped at 212992 bytes (wanted 4194304): raise it with sysctl -w net.core.rmem_max=4194304"
	if w := bufferWarning("receive", 4194304, 212992); w != want {
		t.Errorf("got %q\nwant %q", w, want)
	}
	if w := bufferWarning("send", 4194304, 212992); !strings.Contains(w, "net.core.wmem_max=4194304") {
		t.Errorf("send warning %q does not name wmem_max", w)
	}
}

func TestResolveListenAddr(t *testing.T) {
	for _, tc := range []struct {
		in        string
		want      netip.AddrPort
		dualStack bool
	}{
		{"0.0.0.0:7777", netip.MustParseAddrPort("0.0.0.0:7777"), false},
		{"127.0.0.1:0", netip.MustParseAddrPort("127.0.0.1:0"), false},
		{"[::1]:0", netip.MustParseAddrPort("[::1]:0"), false},
		{"[::]:7777", netip.MustParseAddrPort("[::]:7777"), true},
		{":7777", netip.MustParseAddrPort("[::]:7777"), true},
		{"[::ffff:127.0.0.1]:9", netip.MustParseAddrPort("127.0.0.1:9"), false},
	} {
		la, err := resolveListenAddr(tc.in)
		if err != nil {
			t.Errorf("%s: %v", tc.in, err)
			continue
		}
		if la.ap != tc.want || la.dualStack != tc.dualStack {
			t.Errorf("%s: got %v dual=%v, want %v dual=%v", tc.in, la.ap, la.dualStack, tc.want, tc.dualStack)
		}
	}
	for _, bad := range []string{"7777", "1.2.3.4:99999", "1.2.3.4:notaport"} {
		if _, err := resolveListenAddr(bad); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}

// TestEchoPortable runs on every platform: one echo round trip through a
// group on 127.0.0.1.
func TestEchoPortable(t *testing.T) {
	g := listen(t, "127.0.0.1:0", Config{Sockets: 1})
	s := g.Sockets()[0]
	done := make(chan error, 1)
	go func() {
		b := g.NewBatch()
		n, err := s.Recv(b)
		if err == nil {
			err = s.Send(b, n)
		}
		done <- err
	}()
	c, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(g.LocalAddr()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	msg := []byte("hello batchio")
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 100)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf[:n], msg) {
		t.Fatalf("echo %q, want %q", buf[:n], msg)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	st := g.Stats()
	if st.RxPackets != 1 || st.TxPackets != 1 || st.RxBytes != uint64(len(msg)) {
		t.Errorf("stats %+v", st)
	}
}

func TestPortInUse(t *testing.T) {
	holder, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	addr := holder.LocalAddr().String()
	g, err := Listen(addr, Config{Sockets: 2})
	if err == nil {
		g.Close()
		t.Fatal("Listen on a port in use succeeded")
	}
	want := "address " + addr + " is already in use: stop the other process or choose another port"
	if err.Error() != want {
		t.Errorf("error %q\nwant  %q", err, want)
	}
	if !errors.Is(err, syscall.EADDRINUSE) && !isErrno(err, errAddrInUse) {
		t.Errorf("error does not wrap EADDRINUSE: %#v", err)
	}
}

// TestPortInUseByGroup: a second group on a port already held by a group
// fails, although both set SO_REUSEPORT (which alone would let the second
// silently share the first one's traffic).
func TestPortInUseByGroup(t *testing.T) {
	g1 := listen(t, "127.0.0.1:0", Config{Sockets: 2})
	g2, err := Listen(g1.LocalAddr().String(), Config{Sockets: 2})
	if err == nil {
		g2.Close()
		t.Fatal("second group on the same port succeeded")
	}
	if !strings.Contains(err.Error(), "is already in use") {
		t.Errorf("error %q", err)
	}
}

func TestWriteToErrors(t *testing.T) {
	g := listen(t, "127.0.0.1:0", Config{Sockets: 1, MessageSize: 64})
	s := g.Sockets()[0]
	if err := s.WriteTo(make([]byte, 65), g.LocalAddr()); err != ErrTooLarge {
		t.Errorf("oversize WriteTo: %v", err)
	}
	if err := s.WriteTo([]byte("x"), netip.AddrPort{}); err != ErrInvalidAddr {
		t.Errorf("zero-address WriteTo: %v", err)
	}
	g.Close()
	if err := s.WriteTo([]byte("x"), g.LocalAddr()); !errors.Is(err, net.ErrClosed) {
		t.Errorf("WriteTo after Close: %v", err)
	}
	if _, err := s.Recv(g.NewBatch()); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Recv after Close: %v", err)
	}
}

// TestNoteDrops: the kernel's drop counter is a wrapping uint32; the
// published count must keep growing across the wrap.
func TestNoteDrops(t *testing.T) {
	var c counters
	for _, step := range []struct {
		cum  uint32
		want uint64
	}{
		{0, 0},
		{7, 7},
		{7, 7},
		{0xFFFFFFF0, 0xFFFFFFF0},
		{0x10, 0x100000010},
	} {
		c.noteDrops(step.cum)
		if got := c.snapshot().RxDrops; got != step.want {
			t.Fatalf("after %#x: RxDrops %#x, want %#x", step.cum, got, step.want)
		}
	}
}

// TestEnumNames: Mode and Class print their flag and log names, and a value
// without a name as its type and number.
func TestEnumNames(t *testing.T) {
	for _, tc := range []struct {
		v    fmt.Stringer
		want string
	}{
		{ModeAuto, "auto"}, {ModeNetpoll, "netpoll"}, {ModeBlocking, "blocking"}, {Mode(7), "Mode(7)"},
		{ClassAll, "all"}, {ClassBitSet, "bit-set"}, {ClassBitClear, "bit-clear"}, {Class(200), "Class(200)"},
	} {
		if got := tc.v.String(); got != tc.want {
			t.Errorf("%#v.String() = %q, want %q", tc.v, got, tc.want)
		}
	}
}

// listen returns a group on addr and closes it when the test ends (Close
// may also be called earlier). If Listen fails it skips the test for an
// IPv6 addr (a host without IPv6) and fails it otherwise.
func listen(t testing.TB, addr string, cfg Config) *Group {
	t.Helper()
	g, err := Listen(addr, cfg)
	if err != nil {
		if strings.HasPrefix(addr, "[") {
			t.Skipf("no IPv6: %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}
