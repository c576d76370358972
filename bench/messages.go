package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/udpgate/udpgate/internal/testkit/netem"
	"github.com/udpgate/udpgate/internal/testkit/procstat"
	"github.com/udpgate/udpgate/internal/traffic/loadgen"
)

// The message scenarios compare udpgate's message layer (conn's
// SendMessage over reliable-ordered channels) with kcp-go
// (github.com/xtaci/kcp-go/v5, kcp.go), the library a game would otherwise
// pick for reliable messages over UDP. Both servers run in child processes
// as every other server does; the clients run in the harness, and where the
// path is lossy they talk through internal/testkit/netem's in-process proxy on
// loopback, which also counts every datagram either side sends.
//
//   - msg-lossy (5 % loss each way) and msg-lossy-N (N % loss each way):
//     4 clients each send 60 messages of 100 bytes a second for
//     -msg-duration over a path with 25 ms (+0–4 ms jitter) of delay each
//     way; the server echoes every message. Per run: messages sent,
//     delivered (echo received, exactly once), out of order and duplicated
//     echoes, message round trip p50/p99 from the message's first send to
//     its echo's arrival, and UDP bytes on the wire (both directions, lost
//     datagrams included) per delivered payload byte (100 each way per
//     echoed message).
//   - msg-bulk (msg-bulk-Nm: N MiB, up to 8, the largest message udpgate
//     takes): one client sends one 1 MiB reliable message over 1 % loss
//     and 25 ms each way, and the server answers with a short "got N bytes"
//     message once it holds all of it: seconds from the send call to that
//     answer, -msg-bulk times per run (median per run, and the first
//     transfer's apart: it starts from the congestion controller's initial
//     window, the later ones from the window the first left). udpgate runs
//     with the default Config.Messages (the send ceiling 32 MiB/s), as a
//     user's server does.
//   - msg-cpu-N: N clients on plain loopback each send bursts of 4
//     messages of 100 bytes (QueueMessage ×4, Flush; kcp-go: one
//     WriteBuffers of 4) at -msg-rate messages per second in total,
//     echoed: the server child's CPU per echoed message over the window. The
//     raw echo runs in the same scenario with N clients sending one
//     datagram (msgRawSize bytes) per burst at the same burst rate: its CPU
//     per echoed datagram is the floor a message of such a burst is
//     compared with.

// Message scenario kinds.
const (
	scMsgLossy = "msg-lossy"
	scMsgBulk  = "msg-bulk"
	scMsgCPU   = "msg-cpu"
)

const (
	// kindKCP is kcp-go's echo server (kcp.go), only in message scenarios.
	kindKCP = "kcp"
	// msgEnv carries a message server's settings (msgServerSpec as JSON)
	// to a udpgate or kcp child.
	msgEnv = "UDPGATE_BENCH_MSG"

	msgSize        = 100 // bytes per message in msg-lossy and msg-cpu
	msgLossyN      = 4   // msg-lossy's clients
	msgLossyRate   = 60  // messages per second per client
	msgDelay       = 25 * time.Millisecond
	msgJitter      = 4 * time.Millisecond
	msgLossDef     = 0.05
	msgBulkSize    = 1 << 20 // msg-bulk; msg-bulk-Nm: N MiB
	msgBulkMaxMiB  = 8       // message.MaxMessageSizeLimit
	msgBulkLoss    = 0.01
	msgBulkWait    = 30 * time.Second // per transfer, plus msgBulkWaitMiB per MiB past the first
	msgBulkWaitMiB = 5 * time.Second
	msgBurst       = 4 // messages per flush in msg-cpu
	msgDrainLimit  = 10 * time.Second
	// msgRawSize is the raw echo's datagram in msg-cpu: about what
	// carries a burst of 4 messages of 100 bytes with their headers.
	msgRawSize = msgBurst*msgSize + 32
	// msgSocketBuffer: the proxy's and kcp-go's socket buffers, as
	// udpgate's server has by default (batchio.DefaultRecvBuffer).
	msgSocketBuffer = 4 << 20
	// ipUDPHeaders: IPv4 and UDP headers per datagram.
	ipUDPHeaders = 28
)

// Message tags: the first byte of every benchmark message.
const (
	tagEcho  = 'E' // echo this message
	tagBulk  = 'B' // the start of a bulk message: answer with tagReply once it is all in
	tagReply = 'R' // the answer to a bulk message
)

// A message's header: tag, sequence number, first-send time (Unix ns),
// client index; a bulk message adds its total size.
const (
	offSeq    = 1
	offTime   = 5
	offClient = 13
	offTotal  = 15
	msgHeader = 19
	// pingSeq marks the message each client sends and waits for before
	// the run, to know its path is up.
	pingSeq = math.MaxUint32
)

func putHeader(b []byte, tag byte, seq uint32, client int, now time.Time) {
	b[0] = tag
	binary.LittleEndian.PutUint32(b[offSeq:], seq)
	binary.LittleEndian.PutUint64(b[offTime:], uint64(now.UnixNano()))
	binary.LittleEndian.PutUint16(b[offClient:], uint16(client))
}

func msgSeq(b []byte) uint32 { return binary.LittleEndian.Uint32(b[offSeq:]) }
func msgTime(b []byte) time.Time {
	return time.Unix(0, int64(binary.LittleEndian.Uint64(b[offTime:])))
}

// A bulk answer's header adds the server's clock (Unix ns) when it had the
// whole message: the harness and the servers share the machine's clock, so
// the bottleneck scenarios time deliveries where they happen, without the
// answer's way back.
const (
	offRecv     = msgHeader
	replyHeader = offRecv + 8
)

// bulkReply is the server's answer to a complete bulk message of n bytes
// whose first bytes are head: the header, the time it was complete, then
// "got N bytes".
func bulkReply(head []byte, n int) []byte {
	r := make([]byte, replyHeader, replyHeader+24)
	copy(r, head[:msgHeader])
	r[0] = tagReply
	binary.LittleEndian.PutUint32(r[offTotal:], uint32(n))
	binary.LittleEndian.PutUint64(r[offRecv:], uint64(time.Now().UnixNano()))
	return fmt.Appendf(r, "got %d bytes", n)
}

// replyTime is when the server had the bulk message answer r is about.
func replyTime(r []byte) time.Time {
	return time.Unix(0, int64(binary.LittleEndian.Uint64(r[offRecv:])))
}

// msgServerSpec is a message server child's settings.
type msgServerSpec struct {
	// SendRate and MaxMessageSize for udpgate's Config.Messages (0: the
	// defaults).
	SendRate       int `json:"send_rate,omitempty"`
	MaxMessageSize int `json:"max_message_size,omitempty"`
	// Tools: the tools' channel layout (internal/msgcfg: reliable,
	// unreliable, sequenced, bulk), a bulk message answered on the
	// reliable channel. LibTimers: the library's default KeepAlive and
	// Timeout instead of the benchmark's far ones.
	Tools     bool `json:"tools,omitempty"`
	LibTimers bool `json:"lib_timers,omitempty"`
}

func (sc scenario) messages() bool {
	return sc.Kind == scMsgLossy || sc.Kind == scMsgBulk || sc.Kind == scMsgCPU
}

// parseMsgScenario reads msg-lossy, msg-lossy-N (N % loss each way),
// msg-bulk, msg-bulk-Nm (N MiB) and msg-cpu-N (N clients); ok is false
// for other names.
func parseMsgScenario(s string) (sc scenario, ok bool, err error) {
	switch {
	case strings.HasPrefix(s, scMsgBulk+"-"):
		n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(s, scMsgBulk+"-"), "m"))
		if err != nil || !strings.HasSuffix(s, "m") || n < 1 || n > msgBulkMaxMiB {
			return sc, true, fmt.Errorf("scenario %q: want msg-bulk-Nm with N the message in MiB, 1 to %d", s, msgBulkMaxMiB)
		}
		return scenario{Name: s, Kind: scMsgBulk, Clients: 1}, true, nil
	case s == scMsgLossy || s == scMsgBulk:
		n := msgLossyN
		if s == scMsgBulk {
			n = 1
		}
		return scenario{Name: s, Kind: s, Clients: n}, true, nil
	case strings.HasPrefix(s, scMsgLossy+"-"):
		p, err := strconv.Atoi(strings.TrimPrefix(s, scMsgLossy+"-"))
		if err != nil || p < 0 || p > 50 {
			return sc, true, fmt.Errorf("scenario %q: want msg-lossy-N with N the loss each way in percent, 0 to 50", s)
		}
		return scenario{Name: s, Kind: scMsgLossy, Clients: msgLossyN}, true, nil
	case strings.HasPrefix(s, scMsgCPU+"-"):
		c, err := parseCount(strings.TrimPrefix(s, scMsgCPU+"-"))
		if err != nil || c < 1 || c > 5000 {
			return sc, true, fmt.Errorf("scenario %q: want msg-cpu-N with 1 to 5000 clients (each a real client with its socket), k suffix allowed", s)
		}
		return scenario{Name: s, Kind: scMsgCPU, Clients: c}, true, nil
	}
	return sc, false, nil
}

// lightCPU: msg-lossy, msg-bulk and the bottleneck scenarios measure time
// and bytes, not CPU, and use a few per cent of the machine, so whatever
// else runs on it outweighs them: their runs are neither retried nor
// flagged for sharing the machine (acct is still recorded).
func (sc scenario) lightCPU() bool {
	return sc.Kind == scMsgLossy || sc.Kind == scMsgBulk || sc.Kind == scBn
}

// msgLoss is the scenario's loss probability each way.
func (sc scenario) msgLoss() float64 {
	switch sc.Kind {
	case scMsgBulk:
		return msgBulkLoss
	case scMsgCPU:
		return 0
	}
	if p, ok := strings.CutPrefix(sc.Name, scMsgLossy+"-"); ok {
		n, _ := strconv.Atoi(p)
		return float64(n) / 100
	}
	return msgLossDef
}

// msgRuns: udpgate (without overload control, which message scenarios
// have nothing to do with) and kcp-go run every message scenario, the raw
// echo msg-cpu-N.
func (sc scenario) msgRuns(v variant) bool {
	switch v.Kind {
	case kindUdpgate:
		return !v.Overload
	case kindKCP:
		// kcp/cc is for the bottleneck scenarios: here kcp-go runs the
		// issue's fast profile.
		return !v.KCPCC
	case kindRawEcho:
		return sc.Kind == scMsgCPU
	}
	return false
}

// msgRecord is one message scenario run.
type msgRecord struct {
	Clients int     `json:"clients"`
	LossPct float64 `json:"loss_pct_each_way,omitempty"`
	Seconds float64 `json:"seconds"` // sending phase (msg-lossy) or window (msg-cpu)

	// msg-lossy.
	Sent       uint64  `json:"sent,omitempty"`
	Delivered  uint64  `json:"delivered,omitempty"`
	OutOfOrder uint64  `json:"out_of_order"`
	Duplicated uint64  `json:"duplicated"`
	SendErrors uint64  `json:"send_errors"`
	P50ms      float64 `json:"rtt_p50_ms,omitempty"`
	P99ms      float64 `json:"rtt_p99_ms,omitempty"`
	MaxMs      float64 `json:"rtt_max_ms,omitempty"`
	// UDP payload bytes and datagrams both ways at the proxy (lost ones
	// included), and those per delivered payload byte (2 × message size
	// per echoed message), without and with 28 bytes of IPv4+UDP headers
	// per datagram.
	WireBytes     uint64  `json:"wire_bytes,omitempty"`
	WireDatagrams uint64  `json:"wire_datagrams,omitempty"`
	PayloadBytes  uint64  `json:"payload_bytes,omitempty"`
	WirePerByte   float64 `json:"wire_per_payload_byte,omitempty"`
	WireIPPerByte float64 `json:"wire_ip_per_payload_byte,omitempty"`
	// Resent: udpgate's clients' MessageStats().Resent (kcp-go: -1, not
	// counted).
	Resent int64 `json:"resent"`
	// Datagrams the kernel dropped at the proxy's front socket.
	ProxyDrops uint64 `json:"proxy_kernel_drops"`

	// msg-bulk: seconds per transfer, and their median.
	BulkBytes   int       `json:"bulk_bytes,omitempty"`
	BulkSeconds []float64 `json:"bulk_seconds,omitempty"`
	BulkMedian  float64   `json:"bulk_median_s,omitempty"`
	// BulkPaths: udpgate's client's path (message.PathStats) at the start
	// of each transfer and after it.
	BulkPaths []string `json:"bulk_paths,omitempty"`

	// msg-cpu (msg-lossy too: per delivered message): server CPU per
	// echoed message (the raw echo: per echoed datagram), echoes per
	// second, the server's CPU ÷ wall time.
	Unit     string  `json:"unit,omitempty"`
	Echoed   uint64  `json:"echoed,omitempty"`
	PerSec   float64 `json:"per_second,omitempty"`
	CPUNs    float64 `json:"server_cpu_ns_per_unit,omitempty"`
	Util     float64 `json:"server_util,omitempty"`
	LoadNs   float64 `json:"harness_cpu_ns_per_unit,omitempty"`
	Lost     uint64  `json:"lost,omitempty"`
	Datagram int     `json:"raw_datagram_bytes,omitempty"`
}

// msgClient is one client of either library.
type msgClient interface {
	// send sends msgs together (one flush).
	send(msgs [][]byte) error
	// resent is the client's count of resent message entries (-1: not
	// known).
	resent() int64
	close()
}

// msgDialer connects a client to addr; on is called with every message
// received (borrowed for the call), from one goroutine per client. spec is
// the server's message settings, which udpgate's client mirrors.
type msgDialer func(ctx context.Context, addr netip.AddrPort, spec msgServerSpec, on func([]byte)) (msgClient, error)

func msgDialerFor(kind string) msgDialer {
	if kind == kindKCP {
		return dialKCP
	}
	return dialUdpgateMsg
}

// msgSpec is the server (and client) message settings of a scenario.
func (sc scenario) msgSpec() msgServerSpec {
	if sc.Kind == scMsgBulk {
		return msgServerSpec{MaxMessageSize: sc.bulkSize()}
	}
	return msgServerSpec{}
}

// bulkSize is msg-bulk's message: 1 MiB, msg-bulk-Nm's N MiB.
func (sc scenario) bulkSize() int {
	if n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(sc.Name, scMsgBulk+"-"), "m")); err == nil {
		return n << 20
	}
	return msgBulkSize
}

// bulkWait bounds one msg-bulk transfer.
func (sc scenario) bulkWait() time.Duration {
	return msgBulkWait + time.Duration(sc.bulkSize()/msgBulkSize-1)*msgBulkWaitMiB
}

// startMsgChild starts variant v's message server.
func startMsgChild(v variant, spec msgServerSpec, life time.Duration) (*child, error) {
	js, _ := json.Marshal(spec)
	return startChild(v, false, life, msgEnv+"="+string(js))
}

// startMsgServer is a child's message server for variant v (childMain,
// when msgEnv is set).
func startMsgServer(v variant, specJSON string) (*server, error) {
	var spec msgServerSpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		return nil, fmt.Errorf("%s: %v", msgEnv, err)
	}
	switch v.Kind {
	case kindUdpgate:
		return startUdpgateMsgServer(v, spec)
	case kindKCP:
		return startKCPServer(kcpProfileFor(v))
	case kindQUIC:
		return startQUICServer()
	}
	return nil, fmt.Errorf("variant %s has no message server", v.Spec)
}

// runMsg measures variant v under a message scenario.
func runMsg(ctx context.Context, opt *options, sc scenario, v variant, rep int) (runRecord, error) {
	rec := runRecord{Rep: rep, Scenario: sc.Name, Variant: v.Spec}
	var err error
	switch {
	case sc.Kind == scMsgCPU && v.Kind == kindRawEcho:
		rec.Msg, err = runMsgCPURaw(ctx, opt, sc, v, &rec)
	case sc.Kind == scMsgCPU:
		rec.Msg, err = runMsgCPU(ctx, opt, sc, v, &rec)
	case sc.Kind == scMsgBulk:
		rec.Msg, err = runMsgBulk(ctx, opt, sc, v, rep, &rec)
	default:
		rec.Msg, err = runMsgLossy(ctx, opt, sc, v, rep, &rec)
	}
	return rec, err
}

// counter counts what the proxy sees, both directions.
type counter struct{ bytes, datagrams atomic.Uint64 }

func (c *counter) observe(f netem.Fate, b []byte) {
	c.bytes.Add(uint64(len(b)))
	c.datagrams.Add(1)
}

// lossyProxy starts a netem proxy for the scenario in front of server,
// counting into cnt.
func lossyProxy(sc scenario, server netip.AddrPort, rep int, cnt *counter) (*netem.Proxy, error) {
	// Socket buffers as udpgate's server has by default, so that a
	// burst (kcp-go sends a whole window at once) is not dropped at the
	// proxy's own sockets.
	cfg := netem.Config{Loss: sc.msgLoss(), Delay: msgDelay, Seed: uint64(rep + 1), SocketBuffer: msgSocketBuffer}
	if sc.Kind == scMsgLossy {
		cfg.Jitter = msgJitter
	}
	p, err := netem.New(server, cfg)
	if err != nil {
		return nil, err
	}
	p.Observe(cnt.observe)
	return p, nil
}

// tracker records one client's echoes.
type tracker struct {
	mu      sync.Mutex
	seen    []bool
	maxSeq  int64
	got     uint64
	ooo     uint64
	dup     uint64
	rtts    []float64 // ms
	ping    chan struct{}
	pinged  bool
	replies chan []byte // bulk answers
}

func newTracker(n int) *tracker {
	return &tracker{seen: make([]bool, n), maxSeq: -1, ping: make(chan struct{}), replies: make(chan []byte, 4)}
}

func (t *tracker) on(b []byte) {
	now := time.Now()
	if len(b) < msgHeader {
		return
	}
	seq := msgSeq(b)
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case seq == pingSeq:
		if !t.pinged {
			t.pinged = true
			close(t.ping)
		}
		return
	case b[0] == tagReply:
		select {
		case t.replies <- slices.Clone(b):
		default:
		}
		return
	case int(seq) >= len(t.seen):
		return
	}
	if t.seen[seq] {
		t.dup++
		return
	}
	t.seen[seq] = true
	t.got++
	if int64(seq) < t.maxSeq {
		t.ooo++
	}
	t.maxSeq = max(t.maxSeq, int64(seq))
	t.rtts = append(t.rtts, float64(now.Sub(msgTime(b)))/float64(time.Millisecond))
}

func (t *tracker) delivered() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.got
}

// dialAll connects n clients to addr (16 at a time) and waits until each
// has had an echo of a ping; ons[i] receives client i's messages.
func dialAll(ctx context.Context, dial msgDialer, addr netip.AddrPort, spec msgServerSpec, ts []*tracker, extra func(i int, b []byte)) ([]msgClient, error) {
	n := len(ts)
	cs := make([]msgClient, n)
	errs := make([]error, n)
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			on := ts[i].on
			if extra != nil {
				on = func(b []byte) { ts[i].on(b); extra(i, b) }
			}
			c, err := dial(ctx, addr, spec, on)
			if err != nil {
				errs[i] = err
				return
			}
			cs[i] = c
			p := make([]byte, msgSize)
			putHeader(p, tagEcho, pingSeq, i, time.Now())
			// A ping a second until it is answered (kcp-go has no
			// handshake, so this is how its server accepts the session).
			for try := 0; ; try++ {
				if err := c.send([][]byte{p}); err != nil && try == 0 {
					errs[i] = fmt.Errorf("ping: %w", err)
					return
				}
				select {
				case <-ts[i].ping:
					return
				case <-time.After(time.Second):
				case <-ctx.Done():
					errs[i] = fmt.Errorf("ping: %w", ctx.Err())
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		closeAll(cs)
		return nil, err
	}
	return cs, nil
}

// resentSum is the clients' resent message entries since r0 (kcp-go: its
// process-wide resent segments since r0, from kcpRetrans).
func resentSum(kind string, cs []msgClient, r0 int64) int64 {
	if kind == kindKCP {
		return kcpRetrans() - r0
	}
	var n int64
	for _, c := range cs {
		r := c.resent()
		if r < 0 {
			return -1
		}
		n += r
	}
	return n - r0
}

func closeAll(cs []msgClient) {
	var wg sync.WaitGroup
	for _, c := range cs {
		if c != nil {
			wg.Add(1)
			go func() { defer wg.Done(); c.close() }()
		}
	}
	wg.Wait()
}

func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// lossyRun is what msg-lossy and msg-bulk share: a message server behind
// a lossy proxy that counts the wire, and clients connected through it.
type lossyRun struct {
	kind string
	ch   *child
	px   *netem.Proxy
	cnt  counter
	cs   []msgClient
}

// startLossy starts variant v's message server for run (plus the connect
// budgets), the scenario's proxy in front of it, and one client per tracker.
func startLossy(ctx context.Context, sc scenario, v variant, rep int, run time.Duration, ts []*tracker) (*lossyRun, error) {
	ch, err := startMsgChild(v, sc.msgSpec(), run+2*connectBudget)
	if err != nil {
		return nil, err
	}
	lr := &lossyRun{kind: v.Kind, ch: ch}
	lr.px, err = lossyProxy(sc, ch.addr, rep, &lr.cnt)
	if err != nil {
		ch.stop()
		return nil, err
	}
	dctx, cancel := context.WithTimeout(ctx, connectBudget)
	lr.cs, err = dialAll(dctx, msgDialerFor(v.Kind), lr.px.Addr(), sc.msgSpec(), ts, nil)
	cancel()
	if err != nil {
		lr.px.Close()
		ch.stop()
		return nil, fmt.Errorf("connect through the proxy: %w", err)
	}
	return lr, nil
}

func (lr *lossyRun) close() {
	closeAll(lr.cs)
	lr.px.Close()
	lr.ch.stop()
}

// wireMark is a lossy run's counters at one moment.
type wireMark struct {
	bytes, datagrams, proxyDrops uint64
	resent                       int64
	s                            sample
}

func (lr *lossyRun) mark() wireMark {
	pd, _ := udpDrops(lr.px.Addr().Port())
	return wireMark{bytes: lr.cnt.bytes.Load(), datagrams: lr.cnt.datagrams.Load(), proxyDrops: pd,
		resent: resentSum(lr.kind, lr.cs, 0), s: takeSample(lr.ch.pid)}
}

// wire fills m's wire and resend figures between w0 and w1, payload being
// the application bytes carried both ways.
func (lr *lossyRun) wire(m *msgRecord, w0, w1 wireMark, payload uint64) {
	m.ProxyDrops = w1.proxyDrops - w0.proxyDrops
	m.WireBytes, m.WireDatagrams = w1.bytes-w0.bytes, w1.datagrams-w0.datagrams
	m.Resent = -1 // a library that does not say
	if w0.resent >= 0 && w1.resent >= 0 {
		m.Resent = w1.resent - w0.resent
	}
	m.PayloadBytes = payload
	if payload > 0 {
		m.WirePerByte = float64(m.WireBytes) / float64(payload)
		m.WireIPPerByte = float64(m.WireBytes+ipUDPHeaders*m.WireDatagrams) / float64(payload)
	}
}

// runMsgLossy: msg-lossy and msg-lossy-N.
func runMsgLossy(ctx context.Context, opt *options, sc scenario, v variant, rep int, rec *runRecord) (*msgRecord, error) {
	dur := opt.MsgDuration
	perClient := int(float64(msgLossyRate) * dur.Seconds())
	ts := make([]*tracker, sc.Clients)
	for i := range ts {
		ts[i] = newTracker(perClient)
	}
	lr, err := startLossy(ctx, sc, v, rep, dur+msgDrainLimit, ts)
	if err != nil {
		return nil, err
	}
	defer lr.close()
	ch, cs := lr.ch, lr.cs
	// Counting starts now: the pings' stragglers are few and both
	// libraries have them.
	w0 := lr.mark()
	start := time.Now()
	var sendErrs atomic.Uint64
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := make([]byte, msgSize)
			for k := range perClient {
				at := start.Add(time.Duration(k) * time.Second / msgLossyRate)
				if d := time.Until(at); d > 0 {
					select {
					case <-time.After(d):
					case <-ctx.Done():
						return
					}
				}
				putHeader(m, tagEcho, uint32(k), i, time.Now())
				if c.send([][]byte{m}) != nil {
					sendErrs.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	sent := uint64(perClient*len(cs)) - sendErrs.Load()
	sendSecs := time.Since(start).Seconds()
	drainEnd := time.Now().Add(msgDrainLimit)
	for time.Now().Before(drainEnd) && ctx.Err() == nil {
		var got uint64
		for _, t := range ts {
			got += t.delivered()
		}
		if got >= sent {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	w1 := lr.mark()
	m := &msgRecord{Clients: len(cs), LossPct: 100 * sc.msgLoss(), Seconds: sendSecs, Sent: sent,
		SendErrors: sendErrs.Load(), Unit: "message"}
	var rtts []float64
	for _, t := range ts {
		t.mu.Lock()
		m.Delivered += t.got
		m.OutOfOrder += t.ooo
		m.Duplicated += t.dup
		rtts = append(rtts, t.rtts...)
		t.mu.Unlock()
	}
	slices.Sort(rtts)
	m.P50ms, m.P99ms = percentile(rtts, 0.50), percentile(rtts, 0.99)
	if len(rtts) > 0 {
		m.MaxMs = rtts[len(rtts)-1]
	}
	lr.wire(m, w0, w1, 2*msgSize*m.Delivered)
	m.Echoed = m.Delivered
	if w0.s.err == nil && w1.s.err == nil && m.Delivered > 0 {
		m.CPUNs = float64(w1.s.server.Stat-w0.s.server.Stat) / float64(m.Delivered)
		m.Util = float64(w1.s.server.Sched-w0.s.server.Sched) / float64(w1.s.at.Sub(w0.s.at))
		rec.Acct = acct(w0.s, w1.s)
	}
	rec.ServerStats = ch.stop()
	if m.Delivered == 0 {
		return m, fmt.Errorf("no message echoed (sent %d; server: %s)", sent, rec.ServerStats)
	}
	return m, nil
}

// runMsgBulk: msg-bulk.
func runMsgBulk(ctx context.Context, opt *options, sc scenario, v variant, rep int, rec *runRecord) (*msgRecord, error) {
	n := opt.MsgBulk
	ts := []*tracker{newTracker(0)}
	size, wait := sc.bulkSize(), sc.bulkWait()
	lr, err := startLossy(ctx, sc, v, rep, time.Duration(n)*wait, ts)
	if err != nil {
		return nil, err
	}
	defer lr.close()
	ch, cs := lr.ch, lr.cs
	m := &msgRecord{Clients: 1, LossPct: 100 * sc.msgLoss(), BulkBytes: size}
	w0 := lr.mark()
	big := make([]byte, size)
	for i := range big {
		big[i] = byte(i)
	}
	pi, _ := cs[0].(interface{ pathInfo() string })
	for k := range n {
		if pi != nil {
			m.BulkPaths = append(m.BulkPaths, fmt.Sprintf("before %d: %s", k, pi.pathInfo()))
		}
		t0 := time.Now()
		putHeader(big, tagBulk, uint32(k), 0, t0)
		binary.LittleEndian.PutUint32(big[offTotal:], uint32(size))
		if err := cs[0].send([][]byte{big}); err != nil {
			return m, fmt.Errorf("bulk send %d: %w", k, err)
		}
		for {
			select {
			case r := <-ts[0].replies:
				if msgSeq(r) != uint32(k) {
					continue
				}
				if got := binary.LittleEndian.Uint32(r[offTotal:]); got != uint32(size) {
					return m, fmt.Errorf("bulk %d: the server got %d bytes, not %d", k, got, size)
				}
				m.BulkSeconds = append(m.BulkSeconds, time.Since(t0).Seconds())
				if pi != nil {
					m.BulkPaths = append(m.BulkPaths, fmt.Sprintf("after %d: %s", k, pi.pathInfo()))
				}
			case <-time.After(wait):
				return m, fmt.Errorf("bulk %d: no answer within %v", k, wait)
			case <-ctx.Done():
				return m, ctx.Err()
			}
			break
		}
	}
	w1 := lr.mark()
	lr.wire(m, w0, w1, uint64(n)*uint64(size))
	m.BulkMedian = procstat.Median(m.BulkSeconds)
	if w0.s.err == nil && w1.s.err == nil {
		rec.Acct = acct(w0.s, w1.s)
		m.Util = float64(w1.s.server.Sched-w0.s.server.Sched) / float64(w1.s.at.Sub(w0.s.at))
	}
	rec.ServerStats = ch.stop()
	return m, nil
}

// runMsgCPU: msg-cpu-N with udpgate or kcp-go.
func runMsgCPU(ctx context.Context, opt *options, sc scenario, v variant, rec *runRecord) (*msgRecord, error) {
	ch, err := startMsgChild(v, sc.msgSpec(), opt.Warmup+opt.Window+2*connectBudget)
	if err != nil {
		return nil, err
	}
	defer ch.stop()
	var echoed atomic.Uint64
	ts := make([]*tracker, sc.Clients)
	for i := range ts {
		ts[i] = newTracker(0)
	}
	count := func(i int, b []byte) {
		if msgSeq(b) != pingSeq {
			echoed.Add(1)
		}
	}
	dctx, cancel := context.WithTimeout(ctx, connectBudget)
	cs, err := dialAll(dctx, msgDialerFor(v.Kind), ch.addr, sc.msgSpec(), ts, count)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	defer closeAll(cs)
	m := &msgRecord{Clients: len(cs), Unit: "message", Resent: 0}
	bursts := opt.MsgRate / msgBurst // per second, all clients
	var s0, s1 sample
	var e0, e1 uint64
	var sent, sendErrs atomic.Uint64
	r0 := resentSum(v.Kind, cs, 0)
	start := time.Now()
	mark := start.Add(opt.Warmup)
	end := mark.Add(opt.Window)
	// Two senders, each for half the clients, pacing bursts evenly.
	const senders = 2
	var wg sync.WaitGroup
	var marks sync.Once
	for w := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []int
			for i := w; i < len(cs); i += senders {
				mine = append(mine, i)
			}
			if len(mine) == 0 {
				return
			}
			rate := bursts / senders
			bufs := make([][]byte, msgBurst)
			for j := range bufs {
				bufs[j] = make([]byte, msgSize)
			}
			var done int
			seq := make([]uint32, len(mine))
			for ctx.Err() == nil {
				now := time.Now()
				if now.After(end) {
					return
				}
				if w == 0 && now.After(mark) {
					marks.Do(func() { s0, e0 = takeSample(ch.pid), echoed.Load() })
				}
				due := int(rate*now.Sub(start).Seconds()) - done
				for ; due > 0; due-- {
					k := done % len(mine)
					i := mine[k]
					for j := range bufs {
						putHeader(bufs[j], tagEcho, seq[k], i, now)
						seq[k]++
					}
					if cs[i].send(bufs) != nil {
						sendErrs.Add(1)
					} else {
						sent.Add(msgBurst)
					}
					done++
				}
				time.Sleep(time.Millisecond)
			}
		}()
	}
	wg.Wait()
	s1, e1 = takeSample(ch.pid), echoed.Load()
	if ctx.Err() != nil {
		return m, ctx.Err()
	}
	if s0.err != nil || s1.err != nil || s0.at.IsZero() {
		return m, fmt.Errorf("reading the server's CPU time: %v %v", s0.err, s1.err)
	}
	fillCPU(m, rec, s0, s1, e1-e0)
	m.SendErrors = sendErrs.Load()
	m.Resent = resentSum(v.Kind, cs, r0)
	rec.ServerStats = ch.stop()
	if m.Echoed == 0 {
		return m, fmt.Errorf("no echoes in the window (sent %d, send errors %d; server: %s)", sent.Load(), m.SendErrors, rec.ServerStats)
	}
	return m, nil
}

// fillCPU sets the window's figures from two samples and n echoes.
func fillCPU(m *msgRecord, rec *runRecord, s0, s1 sample, n uint64) {
	wall := s1.at.Sub(s0.at)
	m.Seconds = wall.Seconds()
	m.Echoed = n
	if n > 0 {
		m.PerSec = float64(n) / wall.Seconds()
		m.CPUNs = float64(s1.server.Stat-s0.server.Stat) / float64(n)
		m.LoadNs = float64(s1.self.Stat-s0.self.Stat) / float64(n)
	}
	m.Util = float64(s1.server.Sched-s0.server.Sched) / float64(wall)
	rec.Acct = acct(s0, s1)
	rec.Seconds, rec.Replies, rec.PPS, rec.CPUNs, rec.Util, rec.LoadNs = m.Seconds, n, m.PerSec, m.CPUNs, m.Util, m.LoadNs
}

// runMsgCPURaw: the raw echo in msg-cpu-N, with the data-N machinery
// (internal/traffic/loadgen's echo mode): N clients, one datagram of msgRawSize
// bytes per burst, at msg-cpu's burst rate.
func runMsgCPURaw(ctx context.Context, opt *options, sc scenario, v variant, rec *runRecord) (*msgRecord, error) {
	ch, err := startChild(v, false, opt.Warmup+opt.Window+connectBudget)
	if err != nil {
		return nil, err
	}
	defer ch.stop()
	gen, err := ch.newGen(loadgen.Config{
		Mode:       loadgen.ModeEcho,
		Clients:    sc.Clients,
		PacketSize: msgRawSize,
		Rate:       opt.MsgRate / msgBurst / float64(sc.Clients),
		KeepAlive:  time.Hour,
	})
	if err != nil {
		return nil, err
	}
	defer gen.Close()
	r, s0, s1, err := runSampled(ctx, gen, opt, ch.pid)
	if err != nil {
		return nil, err
	}
	m := &msgRecord{Clients: sc.Clients, Unit: "datagram", Datagram: msgRawSize, Lost: r.Window.Lost, Resent: -1}
	fillCPU(m, rec, s0, s1, r.Window.Replies)
	rec.Lost = r.Window.Lost
	rec.ServerStats = ch.stop()
	if m.Echoed == 0 {
		return m, fmt.Errorf("no replies in the window (sent %d; server: %s)", r.Window.Sent, rec.ServerStats)
	}
	return m, nil
}

// msgCell summarises one variant under one message scenario: medians over
// repetitions; ratios are medians of same-repetition ratios to kcp-go (and
// in msg-cpu to the raw echo per datagram).
type msgCell struct {
	Scenario      string  `json:"scenario"`
	Kind          string  `json:"kind"`
	Variant       string  `json:"variant"`
	Runs          int     `json:"runs"`
	LossPct       float64 `json:"loss_pct_each_way"`
	Sent          float64 `json:"sent"`
	Delivered     float64 `json:"delivered"`
	OutOfOrder    float64 `json:"out_of_order"`
	Duplicated    float64 `json:"duplicated"`
	P50ms         float64 `json:"rtt_p50_ms"`
	P99ms         float64 `json:"rtt_p99_ms"`
	WirePerByte   float64 `json:"wire_per_payload_byte"`
	WireIPPerByte float64 `json:"wire_ip_per_payload_byte"`
	Resent        float64 `json:"resent"`
	BulkBytes     int     `json:"bulk_bytes,omitempty"`
	BulkMedian    float64 `json:"bulk_median_s"`
	BulkMin       float64 `json:"bulk_min_s"`
	BulkMax       float64 `json:"bulk_max_s"`
	BulkFirst     float64 `json:"bulk_first_s"` // median over runs of each run's first transfer
	PerSec        float64 `json:"per_second"`
	CPUNs         float64 `json:"server_cpu_ns_per_unit"`
	Util          float64 `json:"server_util"`
	Unit          string  `json:"unit"`
	// Same-repetition ratios (0: the reference did not run).
	P50VsKCP       float64 `json:"p50_vs_kcp"`
	P99VsKCP       float64 `json:"p99_vs_kcp"`
	WireVsKCP      float64 `json:"wire_vs_kcp"`
	BulkVsKCP      float64 `json:"bulk_vs_kcp"`
	BulkFirstVsKCP float64 `json:"bulk_first_vs_kcp"`
	CPUVsKCP       float64 `json:"cpu_vs_kcp"`
	CPUVsRaw       float64 `json:"cpu_per_msg_vs_raw_per_datagram"`
	Flagged        int     `json:"flagged,omitempty"`
}

func summariseMsg(sc scenario, rs []runRecord, kcpRuns, rawRuns map[int]runRecord) msgCell {
	c := msgCell{Scenario: sc.Name, Kind: sc.Kind, Variant: rs[0].Variant, Runs: len(rs), LossPct: 100 * sc.msgLoss(), BulkMin: math.Inf(1)}
	var f = map[string][]float64{}
	add := func(k string, x float64) { f[k] = append(f[k], x) }
	ratio := func(k string, a, b float64) {
		if a > 0 && b > 0 {
			add(k, a/b)
		}
	}
	for _, r := range rs {
		m := r.Msg
		if m == nil {
			continue
		}
		c.Unit = m.Unit
		add("sent", float64(m.Sent))
		add("delivered", float64(m.Delivered))
		add("ooo", float64(m.OutOfOrder))
		add("dup", float64(m.Duplicated))
		add("p50", m.P50ms)
		add("p99", m.P99ms)
		add("wire", m.WirePerByte)
		add("wireip", m.WireIPPerByte)
		add("resent", float64(m.Resent))
		add("bulk", m.BulkMedian)
		c.BulkBytes = m.BulkBytes
		for _, s := range m.BulkSeconds {
			c.BulkMin, c.BulkMax = min(c.BulkMin, s), max(c.BulkMax, s)
		}
		if len(m.BulkSeconds) > 0 {
			add("bulkfirst", m.BulkSeconds[0])
		}
		add("persec", m.PerSec)
		add("cpu", m.CPUNs)
		add("util", m.Util)
		if r.Flag != "" {
			c.Flagged++
		}
		if k, ok := kcpRuns[r.Rep]; ok && k.Msg != nil {
			ratio("p50k", m.P50ms, k.Msg.P50ms)
			ratio("p99k", m.P99ms, k.Msg.P99ms)
			ratio("wirek", m.WirePerByte, k.Msg.WirePerByte)
			ratio("bulkk", m.BulkMedian, k.Msg.BulkMedian)
			if len(m.BulkSeconds) > 0 && len(k.Msg.BulkSeconds) > 0 {
				ratio("bulkfirstk", m.BulkSeconds[0], k.Msg.BulkSeconds[0])
			}
			ratio("cpuk", m.CPUNs, k.Msg.CPUNs)
		}
		if x, ok := rawRuns[r.Rep]; ok && x.Msg != nil {
			ratio("cpur", m.CPUNs, x.Msg.CPUNs)
		}
	}
	if math.IsInf(c.BulkMin, 1) {
		c.BulkMin = 0
	}
	g := func(k string) float64 { return procstat.Median(f[k]) }
	c.Sent, c.Delivered, c.OutOfOrder, c.Duplicated = g("sent"), g("delivered"), g("ooo"), g("dup")
	c.P50ms, c.P99ms, c.WirePerByte, c.WireIPPerByte, c.Resent = g("p50"), g("p99"), g("wire"), g("wireip"), g("resent")
	c.BulkMedian, c.PerSec, c.CPUNs, c.Util = g("bulk"), g("persec"), g("cpu"), g("util")
	c.P50VsKCP, c.P99VsKCP, c.WireVsKCP, c.BulkVsKCP = g("p50k"), g("p99k"), g("wirek"), g("bulkk")
	c.CPUVsKCP, c.CPUVsRaw = g("cpuk"), g("cpur")
	c.BulkFirst, c.BulkFirstVsKCP = g("bulkfirst"), g("bulkfirstk")
	return c
}

// msgRunsByRep indexes a variant kind's first variant's runs of scenario
// name by repetition.
func msgRunsByRep(opt *options, recs []runRecord, name, kind string) map[int]runRecord {
	ref := baseline(opt.Variants, kind)
	out := map[int]runRecord{}
	if ref == "" {
		return out
	}
	for _, r := range recs {
		if r.Scenario == name && r.Variant == ref {
			out[r.Rep] = r
		}
	}
	return out
}

func writeMsgs(w io.Writer, cells []msgCell, opt *options) {
	var lossy, bulk, cpu []msgCell
	for _, c := range cells {
		switch c.Kind {
		case scMsgLossy:
			lossy = append(lossy, c)
		case scMsgBulk:
			bulk = append(bulk, c)
		case scMsgCPU:
			cpu = append(cpu, c)
		}
	}
	fmt.Fprintf(w, "\n## Messages: udpgate vs kcp-go %s\n\n", kcpVersion())
	fmt.Fprintf(w, "kcp-go profile: SetNoDelay(1, 10, 2, 1), SetWindowSize(1024, 1024), message mode, SetWriteDelay(false), SetACKNoDelay(true), "+
		"no FEC, no encryption, default MTU 1400. udpgate: channels {reliable-ordered, unreliable}, messages on the reliable one, "+
		"MaxDatagram 1200; socket buffers 4 MiB for both servers, kcp-go's clients and the proxy. Medians over repetitions; ratios are medians of same-repetition udpgate ÷ kcp-go (below 1: udpgate better).\n")
	if len(lossy) > 0 {
		fmt.Fprintf(w, "\n### Echoed messages over a lossy path (msg-lossy)\n\n"+
			"%d clients × %d messages/s × %d bytes for %v each, echoed by the server, through internal/testkit/netem on loopback: "+
			"the loss in the table each way, %v + 0–%v delay each way. Round trip from the message's first send (kcp-go: Write) "+
			"to its echo's arrival (Read); wire bytes are UDP payloads both ways as the proxy received them (lost ones included), "+
			"÷ 2 × %d bytes per echoed message.\n\n",
			msgLossyN, msgLossyRate, msgSize, opt.MsgDuration, msgDelay, msgJitter, msgSize)
		fmt.Fprintln(w, "| scenario | server | sent | delivered | out of order | duplicated | RTT p50 / p99 ms | ÷ kcp p50 / p99 | wire B per payload B | with IP+UDP | ÷ kcp (wire) | resent | server CPU µs/msg |")
		fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
		for _, c := range lossy {
			fmt.Fprintf(w, "| %s (%.0f %%) | %s%s | %.0f | %.0f | %.0f | %.0f | %.1f / %.1f | %s / %s | %.2f | %.2f | %s | %s | %.1f |\n",
				c.Scenario, c.LossPct, c.Variant, flagMark(c.Flagged), c.Sent, c.Delivered, c.OutOfOrder, c.Duplicated,
				c.P50ms, c.P99ms, ratio(c.P50VsKCP), ratio(c.P99VsKCP), c.WirePerByte, c.WireIPPerByte, ratio(c.WireVsKCP), c.resentText(), c.CPUNs/1000)
		}
	}
	if len(bulk) > 0 {
		fmt.Fprintf(w, "\n### One 1 MiB reliable message (msg-bulk; msg-bulk-Nm: N MiB)\n\n"+
			"%d transfer(s) per run over %.0f %% loss and %v delay each way (no jitter): seconds from the send call until the client has the "+
			"server's \"got N bytes\" answer, sent once the server holds the whole message; *first*: each run's first transfer (median over runs), "+
			"which starts from the congestion controller's initial window. udpgate: the default Config.Messages (send ceiling 32 MiB/s), "+
			"MaxMessageSize the message's size. kcp-go: one Write of the whole message in message mode, which kcp-go's session cuts into separate messages of at "+
			"most one segment (mss), so the server counts bytes up to the size in the first segment's header.\n\n",
			opt.MsgBulk, 100*msgBulkLoss, msgDelay)
		fmt.Fprintln(w, "| scenario | server | size | seconds (median) | range | ÷ kcp | first | first ÷ kcp | resent |")
		fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|")
		for _, c := range bulk {
			fmt.Fprintf(w, "| %s | %s%s | %d MiB | %.3f | %.3f–%.3f | %s | %.3f | %s | %s |\n", c.Scenario, c.Variant, flagMark(c.Flagged),
				c.BulkBytes>>20, c.BulkMedian, c.BulkMin, c.BulkMax, ratio(c.BulkVsKCP), c.BulkFirst, ratio(c.BulkFirstVsKCP), c.resentText())
		}
	}
	if len(cpu) > 0 {
		fmt.Fprintf(w, "\n### Server CPU per echoed message (msg-cpu)\n\n"+
			"Every client sends bursts of %d messages of %d bytes (udpgate: QueueMessage ×%d then Flush; kcp-go: one WriteBuffers of %d), "+
			"%.0f messages/s in total, on loopback without loss; the server echoes each. The raw echo gets one %d-byte datagram per burst "+
			"from as many clients at the same burst rate (internal/traffic/loadgen, as in data-N). Server CPU (/proc/PID/stat) over a %v window "+
			"÷ echoes received in it: per message, the raw echo per datagram.\n\n",
			msgBurst, msgSize, msgBurst, msgBurst, opt.MsgRate, msgRawSize, opt.Window)
		fmt.Fprintln(w, "| scenario | server | echoed/s | server CPU ns per echo | unit | ÷ raw echo per datagram | ÷ kcp | server util | resent (clients) |")
		fmt.Fprintln(w, "|---|---|---:|---:|---|---:|---:|---:|---:|")
		for _, c := range cpu {
			fmt.Fprintf(w, "| %s | %s%s | %s | %.0f | %s | %s | %s | %.2f | %s |\n", c.Scenario, c.Variant, flagMark(c.Flagged),
				thousands(c.PerSec), c.CPUNs, c.Unit, ratio(c.CPUVsRaw), ratio(c.CPUVsKCP), c.Util, c.resentText())
		}
	}
}

// resentText is the resent column: the count, or a dash where the library
// does not say.
func (c msgCell) resentText() string {
	if c.Resent < 0 {
		return "–"
	}
	return fmt.Sprintf("%.0f", c.Resent)
}

// msgTargets: the goal for msg-cpu.
func msgTargets(c msgCell) []target {
	if c.Kind != scMsgCPU || c.CPUVsRaw == 0 {
		return nil
	}
	return []target{{Name: c.Scenario + " (" + c.Variant + "): server CPU per echoed message ÷ raw echo per datagram", Goal: "≤ 0.5", Got: c.CPUVsRaw, Met: c.CPUVsRaw <= 0.5}}
}

func logMsg(w io.Writer, r *runRecord) {
	m := r.Msg
	switch {
	case m.BulkBytes > 0:
		fmt.Fprintf(w, "rep %d %-11s %-16s %d bytes: %v s (median %.3f s), resent %d, proxy drops %d, wire %.2f B/B\n",
			r.Rep, r.Scenario, r.Variant, m.BulkBytes, m.BulkSeconds, m.BulkMedian, m.Resent, m.ProxyDrops, m.WirePerByte)
	case m.Sent > 0:
		fmt.Fprintf(w, "rep %d %-11s %-16s sent %d delivered %d ooo %d dup %d  rtt p50 %.1fms p99 %.1fms max %.1fms  wire %.2f B/B (%.2f with IP+UDP)  resent %d  server %.1f µs/msg  acct %.2f\n",
			r.Rep, r.Scenario, r.Variant, m.Sent, m.Delivered, m.OutOfOrder, m.Duplicated, m.P50ms, m.P99ms, m.MaxMs,
			m.WirePerByte, m.WireIPPerByte, m.Resent, m.CPUNs/1000, r.Acct)
	default:
		fmt.Fprintf(w, "rep %d %-11s %-16s %8.0f %s/s echoed  server %5.0f ns/%s  util %.2f  harness %5.0f ns/%s  send errors %d  resent %d  acct %.2f\n",
			r.Rep, r.Scenario, r.Variant, m.PerSec, m.Unit, m.CPUNs, m.Unit, m.Util, m.LoadNs, m.Unit, m.SendErrors, m.Resent, r.Acct)
	}
}

// kcpVersion is the kcp-go module version built in, from the build info.
func kcpVersion() string {
	if v := depVersion("github.com/xtaci/kcp-go/v5"); v != "" {
		return v
	}
	return "v5"
}
