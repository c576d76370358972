package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/udpgate/udpgate/conn"
	"github.com/udpgate/udpgate/internal/msgcfg"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/wire"
)

const noackSynopsis = `Attack a server on this host with receivers that never acknowledge
(issue 29, target 2): -clients connections each send a -size-byte
reliable message every -interval for the server's echo application to
send back, and receive the echoes, but the ack fields of every packet they
send stay what they were in their first connection packet (or, with
-ack-for, in their last one -ack-for after the first message). The server sees peers
that ask for data and never confirm it.

Each client is a real client (the full handshake, messages on the tools'
channel layout) behind a relay of its own that rewrites the ack fields of
the packets it sends; the relays' sockets have addresses 127.0.10.1 and up,
one per 200 clients, so that the server's per-address limits admit them.

The report gives what the server sent the attackers, summed over them by
time since the first message (every client connects first, then all send
from the same instant, or with -spread in turn over each interval; 10 ms
steps for the first 100 ms, then 100 ms ones), against their first
second; and how and when they were ended (stalled: the server's stall
bound, from the first message). Run players beside it with client load
-messages reliable to see what they lose.

Unsealed servers only (a sealed packet's ack fields are authenticated).
Sending stops after -duration, or when every client has been ended.`

// Bounds of the attack.
const (
	noackMaxClients  = 2000
	noackMaxDuration = 2 * time.Minute
	noackPerIP       = 200
	noackBuckets     = 10 + 59 // 10 × 10 ms, then 100 ms steps to 6 s
)

// noackBucket is the report bucket of a time since the first message.
func noackBucket(d time.Duration) int {
	if d < 100*time.Millisecond {
		return int(d / (10 * time.Millisecond))
	}
	return min(9+int(d/(100*time.Millisecond)), noackBuckets-1)
}

// noackRelay stands between one client and the server and freezes the
// ack fields of the client's packets.
type noackRelay struct {
	front, back *net.UDPConn
	magic       wire.Magic
	ackFor      time.Duration
	client      atomic.Pointer[netip.AddrPort]
	start       atomic.Int64 // Unix ns of the first message: the report's time 0
	frozen      bool         // front loop only
	ack         uint16
	bits        uint64
	bytes       [noackBuckets]atomic.Int64 // the server's bytes to the client, by bucket
	total       atomic.Int64
}

// forward runs the client-to-server direction.
func (r *noackRelay) forward() {
	buf := make([]byte, 65536)
	var h protocol.ConnHeader
	for {
		n, from, err := r.front.ReadFromUDPAddrPort(buf)
		if err != nil {
			return
		}
		if r.client.Load() == nil {
			r.client.Store(&from)
		}
		p := buf[:n]
		if payload, dr := wire.DecodeConn(r.magic, p, &h); dr == protocol.DropNone {
			now := time.Now().UnixNano()
			start := r.start.Load()
			switch {
			case !r.frozen && r.ackFor > 0 && (start == 0 || time.Duration(now-start) < r.ackFor):
			case !r.frozen:
				r.frozen, r.ack, r.bits = true, h.Ack, h.AckBits
			default:
				h.Ack, h.AckBits = r.ack, r.bits
				wire.EncodeConn(p, r.magic, &h, payload)
			}
		}
		_, _ = r.back.Write(p)
	}
}

// backward runs the server-to-client direction and counts its bytes.
func (r *noackRelay) backward() {
	buf := make([]byte, 65536)
	for {
		n, err := r.back.Read(buf)
		if err != nil {
			return
		}
		if f := r.start.Load(); f != 0 {
			r.bytes[noackBucket(time.Duration(time.Now().UnixNano()-f))].Add(int64(n))
		}
		r.total.Add(int64(n))
		if c := r.client.Load(); c != nil {
			_, _ = r.front.WriteToUDPAddrPort(buf[:n], *c)
		}
	}
}

// noackEnd records how a client ended.
type noackEnd struct {
	conn.NopHandler
	mu     sync.Mutex
	at     time.Time
	reason conn.DisconnectReason
	done   bool
}

func (h *noackEnd) OnDisconnect(_ *conn.Conn, reason conn.DisconnectReason, _ bool) {
	h.mu.Lock()
	h.at, h.reason, h.done = time.Now(), reason, true
	h.mu.Unlock()
}

// OnMessage takes the echoes (and drops them).
func (h *noackEnd) OnMessage(*conn.Conn, int, []byte) {}

// runNoAck runs the attack; SIGINT or SIGTERM ends it early, with the
// report.
func runNoAck(args []string, stdout, stderr io.Writer) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fs := newFlagSet("noack", noackSynopsis, stderr)
	w := addWireFlags(fs)
	clients := fs.Int("clients", 500, fmt.Sprintf("attacking connections, at most %d", noackMaxClients))
	duration := fs.Duration("duration", 10*time.Second, fmt.Sprintf("stop after this long, at most %v", noackMaxDuration))
	size := fs.Int("size", 1000, "`bytes` of each reliable message (channel 0) the server echoes")
	interval := fs.Duration("interval", 50*time.Millisecond, "each client sends a message this often")
	metricsURL := fs.String("metrics", "", "the server's metrics `URL` on loopback (e.g. http://127.0.0.1:9100/metrics): its udpgate_sent_bytes_total is read every 100 ms and reported, the egress as the server sees it (the relays' count lags behind when this host's CPU is saturated)")
	ackFor := fs.Duration("ack-for", 0, "acknowledge normally until this long after the first message, then freeze (0: never acknowledge)")
	spread := fs.Bool("spread", false, "spread the clients' sends evenly over each -interval (in 50 steps, or one a client when fewer), as unsynchronised players send, instead of all at one instant")
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
	switch {
	case *clients < 1 || *clients > noackMaxClients:
		return usagef("-clients %d is out of range: use 1..%d", *clients, noackMaxClients)
	case *duration <= 0 || *duration > noackMaxDuration:
		return usagef("-duration %v is out of range: use more than 0 and at most %v", *duration, noackMaxDuration)
	case *size < 16 || *size > 60000:
		return usagef("-size %d is out of range: use 16..60000", *size)
	case *interval < time.Millisecond:
		return usagef("-interval %v is too short: use at least 1ms", *interval)
	case *ackFor < 0:
		return usagef("-ack-for must not be negative")
	case !server.Addr().Is4():
		return usagef("-server %s: noack needs an IPv4 loopback server (its relays use 127.0.10.1 and up)", server)
	}
	if *metricsURL != "" {
		u, err := url.Parse(*metricsURL)
		if err != nil || u.Scheme != "http" {
			return usagef("-metrics %q: give an http URL, e.g. http://127.0.0.1:9100/metrics", *metricsURL)
		}
		if a, err := netip.ParseAddr(u.Hostname()); err != nil || !a.IsLoopback() {
			return usagef("-metrics %q: the host must be a loopback address", *metricsURL)
		}
	}
	magic, _ := wire.ParseMagic(w.magic)
	cfg.Messages = msgcfg.Config(0, 0)
	ctx, cancel := context.WithTimeout(ctx, *duration)
	defer cancel()

	relays := make([]*noackRelay, *clients)
	ends := make([]*noackEnd, *clients)
	conns := make([]*conn.Client, *clients)
	defer func() {
		for i := range relays {
			if conns[i] != nil {
				conns[i].Close()
			}
			if relays[i] != nil {
				relays[i].front.Close()
				relays[i].back.Close()
			}
		}
	}()
	start := time.Now()
	for i := range relays {
		src := netip.AddrFrom4([4]byte{127, 0, byte(10 + i/noackPerIP), 1})
		back, err := net.DialUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(src, 0)), net.UDPAddrFromAddrPort(server))
		if err != nil {
			return fmt.Errorf("relay %d: %w (on Linux every 127.0.0.0/8 address is local; elsewhere add %v to the loopback interface)", i, err, src)
		}
		front, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")))
		if err != nil {
			back.Close()
			return fmt.Errorf("relay %d: %w", i, err)
		}
		r := &noackRelay{front: front, back: back, magic: magic, ackFor: *ackFor}
		relays[i] = r
		go r.forward()
		go r.backward()
		ends[i] = &noackEnd{}
		c := cfg
		c.Handler = ends[i]
		dctx, dcancel := context.WithTimeout(ctx, 5*time.Second)
		cl, err := conn.Dial(dctx, front.LocalAddr().String(), c)
		dcancel()
		if err != nil {
			return fmt.Errorf("client %d: %w", i, err)
		}
		conns[i] = cl
	}
	acking := "never"
	if *ackFor > 0 {
		acking = "for " + ackFor.String() + ", then never"
	}
	fmt.Fprintf(stdout, "noack: %d clients connected in %v; each sends %d B every %v, acknowledging %s\n",
		*clients, time.Since(start).Round(time.Millisecond), *size, *interval, acking)

	msg := make([]byte, *size)
	sendAt := time.Now()
	for _, r := range relays {
		r.start.Store(sendAt.UnixNano())
	}
	var scraped []int64 // udpgate_sent_bytes_total every 100 ms from sendAt
	scrapeDone := make(chan struct{})
	if *metricsURL != "" {
		go func() {
			defer close(scrapeDone)
			st := time.NewTicker(100 * time.Millisecond)
			defer st.Stop()
			for len(scraped) < 10*int(noackMaxDuration/time.Second) {
				if v, err := scrapeSentBytes(ctx, *metricsURL); err == nil {
					scraped = append(scraped, v)
				} else {
					scraped = append(scraped, -1)
				}
				select {
				case <-ctx.Done():
					return
				case <-st.C:
				}
			}
		}()
	} else {
		close(scrapeDone)
	}
	// steps: each tick sends for every steps-th client, so that a client
	// still sends once an interval (all at one instant unless -spread).
	steps := 1
	if *spread {
		steps = min(len(conns), 50)
	}
	tk := time.NewTicker(*interval / time.Duration(steps))
	defer tk.Stop()
	var sent int64
	var rtts []time.Duration // the clients' round trips when they fall silent
	live := false            // a client sent, or still could, in this interval
send:
	for tick := 0; ; tick++ {
		select {
		case <-ctx.Done():
			break send
		case <-tk.C:
		}
		if rtts == nil && time.Since(sendAt) >= *ackFor {
			for _, cl := range conns {
				rtts = append(rtts, cl.Conn().MessageStats().Path.RTT)
			}
			slices.Sort(rtts)
		}
		for i, cl := range conns {
			if i%steps != tick%steps {
				continue
			}
			if err := cl.Conn().SendMessage(msgcfg.Reliable, msg); err == nil {
				sent++
				live = true
			} else if !errors.Is(err, conn.ErrClosed) {
				live = true // queue full: it is still there
			}
		}
		if tick%steps == steps-1 { // an interval's sends done
			if !live {
				break // every client has been ended
			}
			live = false
		}
	}
	elapsed := time.Since(start)
	cancel()
	<-scrapeDone

	// The report.
	var sum [noackBuckets]int64
	var total int64
	var stalls []time.Duration
	other := map[conn.DisconnectReason]int{}
	for i, r := range relays {
		for b := range sum {
			sum[b] += r.bytes[b].Load()
		}
		total += r.total.Load()
		e := ends[i]
		e.mu.Lock()
		if e.done {
			if e.reason == conn.ReasonStalled {
				stalls = append(stalls, e.at.Sub(sendAt))
			} else {
				other[e.reason]++
			}
		}
		e.mu.Unlock()
	}
	var first int64
	for b := 0; b < 19; b++ { // 0–1 s
		first += sum[b]
	}
	fmt.Fprintf(stdout, "sent %d messages in %v; the server sent the attackers %d B (%.1f MB/s over the run)\n",
		sent, elapsed.Round(time.Millisecond), total, float64(total)/elapsed.Seconds()/1e6)
	if len(rtts) > 0 {
		fmt.Fprintf(stdout, "the clients' smoothed round trips when they fell silent (at %v): p50 %v, p90 %v, max %v\n", *ackFor,
			rtts[len(rtts)/2].Round(time.Microsecond), rtts[len(rtts)*9/10].Round(time.Microsecond), rtts[len(rtts)-1].Round(time.Microsecond))
	}
	fmt.Fprintf(stdout, "server egress to the attackers by time since the first message (summed over them; first second %d B):\n", first)
	for b := range sum {
		lo, width := time.Duration(b)*10*time.Millisecond, 10*time.Millisecond
		if b >= 10 {
			lo, width = time.Duration(b-9)*100*time.Millisecond, 100*time.Millisecond
		}
		if b == noackBuckets-1 {
			fmt.Fprintf(stdout, "  %6v and after   %10d B\n", lo, sum[b])
			continue
		}
		rate := float64(sum[b]) / width.Seconds()
		fmt.Fprintf(stdout, "  %6v–%-6v  %10d B  %8.2f MB/s  %6.1f %% of the first second's rate\n",
			lo, lo+width, sum[b], rate/1e6, 100*rate/max(float64(first), 1))
	}
	if len(scraped) > 1 {
		fmt.Fprintf(stdout, "the server's own count of bytes sent (udpgate_sent_bytes_total, every datagram, players' too), by 100 ms since the first message:\n")
		for i := 1; i < len(scraped) && i <= 60; i++ {
			if scraped[i] < 0 || scraped[i-1] < 0 {
				continue
			}
			fmt.Fprintf(stdout, "  %6v  %8.2f MB/s\n", time.Duration(i)*100*time.Millisecond, float64(scraped[i]-scraped[i-1])/0.1/1e6)
		}
	}
	slices.Sort(stalls)
	if len(stalls) > 0 {
		fmt.Fprintf(stdout, "stalled: %d of %d, after min %v, p50 %v, max %v from the first message\n", len(stalls), *clients,
			stalls[0].Round(time.Millisecond), stalls[len(stalls)/2].Round(time.Millisecond), stalls[len(stalls)-1].Round(time.Millisecond))
	} else {
		fmt.Fprintf(stdout, "stalled: 0 of %d\n", *clients)
	}
	for r, n := range other {
		fmt.Fprintf(stdout, "ended otherwise: %d %v\n", n, r)
	}
	return nil
}

// scrapeSentBytes reads udpgate_sent_bytes_total from a metrics page.
func scrapeSentBytes(ctx context.Context, u string) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "udpgate_sent_bytes_total "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return int64(f), err
		}
	}
	return 0, fmt.Errorf("no udpgate_sent_bytes_total at %s", u)
}
