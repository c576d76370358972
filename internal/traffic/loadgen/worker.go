package loadgen

import (
	"encoding/binary"
	"runtime"
	"time"

	"github.com/udpgate/udpgate/cookie"
	"github.com/udpgate/udpgate/internal/handshake"
	"github.com/udpgate/udpgate/internal/msgcfg"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/seal"
	"github.com/udpgate/udpgate/internal/seqwin"
	"github.com/udpgate/udpgate/internal/wire"
	"github.com/udpgate/udpgate/token"
)

// Client states.
const (
	stIdle uint8 = iota
	stHandshaking
	// stProving: sealed mode, acknowledged and proving its token.
	stProving
	stConnected
	stFailed
	stClosed
)

// connID is what a connected client's packets carry besides sequence
// numbers.
type connID struct {
	tag      uint32
	session  uint8
	clientID uint8
}

// respStride is the room per client for its stored Response
// (handshake.MaxClientPacketLen rounded up).
const respStride = 96

// worker drives one load socket and the clients on it: clients idx,
// idx+S, idx+2S, …, numbered locally 0..n-1, client j at source address j.
// Only its own goroutine touches it, except the published counters.
type worker struct {
	g   *Generator
	cfg *Config
	idx int
	s   *sock
	n   int
	tx  *txBatch
	rx  *rxBatch

	// Per client, indexed by local number.
	state    []uint8
	inflight []uint16
	sentAt   []int64 // last request (or, in Connect, handshake start)
	heardAt  []int64 // ModeData: last packet accepted from the server, or the start of Run
	ids      []connID
	seqs     []seqwin.SeqState // ModeData
	// hcs: each client's handshake, kept after Connect in ModeData so a
	// connected client can follow a RestartHandshake (docs/protocol.md §6).
	hcs []handshake.ClientHandshake
	// restarting: clients with a restart under way, so scan looks at the
	// handshakes only when there are some.
	restarting int
	resp       []byte // ModeResponse: respStride bytes per client
	respLen    []uint8
	// Sealed mode: each client's sealer (to the server) and opener (from
	// it), made when its Challenge arrives (ackAt: then), and when it last
	// sent a proof.
	sealers []seal.Sealer
	openers []seal.Opener
	// proofCookies: the Challenge's cookie part each client's proofs carry.
	proofCookies []wire.ProofCookie
	proofAt      []int64
	ackAt        []int64
	request      []byte // a proof's request body, before SealProof copies it
	// msg: the state of Config.Messages and Config.BulkSize
	// (messages.go); nil without messages.
	msg *workerMsgs

	out      int // outstanding requests: the sum of inflight
	cursor   int
	template []byte // ModeEcho and ModeInitial: the same datagram for all

	serverAddr [4]byte
	serverPort uint16
	payOff     int // ModeData: where the payload starts in a packet

	hs   protocol.Handshake
	hdr  protocol.ConnHeader
	rep  seqwin.AckReport
	hist Histogram
	// since: in Connect, each client's time from the phase's start to its
	// Ack; lastAck: the phase's last Ack.
	since   Histogram
	lastAck int64
	ctr     counters

	unanswered int
	err        error
}

func newWorker(g *Generator, idx int, s *sock) *worker {
	cfg := &g.cfg
	n := cfg.perSocket(idx)
	w := &worker{
		g: g, cfg: cfg, idx: idx, s: s, n: n,
		tx:         newTxBatch(cfg.Batch, cfg.Server),
		rx:         newRxBatch(cfg.Batch),
		state:      make([]uint8, n),
		inflight:   make([]uint16, n),
		sentAt:     make([]int64, n),
		serverAddr: cfg.Server.Addr().As4(),
		serverPort: cfg.Server.Port(),
		payOff:     wire.ConnHeaderOffset(cfg.Magic) + protocol.ConnHeaderBytes,
	}
	switch cfg.Mode {
	case ModeEcho:
		w.template = make([]byte, cfg.PacketSize)
		for i := range w.template {
			w.template[i] = byte(i)
		}
	case ModeInitial:
		h := protocol.Handshake{
			ClientID: uint8(idx) & 7, MinVersion: protocol.MinHandshakeVersion, CurVersion: protocol.CurHandshakeVersion,
			Type: protocol.TypeInitial, NetworkVersion: cfg.NetworkVersion, NetworkFeatures: cfg.NetworkFeatures,
			RandomLen: protocol.MaxRandomBytes,
		}
		r := wire.NewRand(uint64(idx) + 1)
		r.Fill(h.Random[:])
		buf := make([]byte, handshake.MaxClientPacketLen)
		w.template = buf[:wire.EncodeHandshake(buf, cfg.Magic, &h)]
	case ModeResponse:
		w.ids = make([]connID, n)
		w.resp = make([]byte, n*respStride)
		w.respLen = make([]uint8, n)
	case ModeData:
		w.ids = make([]connID, n)
		w.seqs = make([]seqwin.SeqState, n)
		w.heardAt = make([]int64, n)
		w.hcs = make([]handshake.ClientHandshake, n)
		if cfg.sealed() {
			w.sealers = make([]seal.Sealer, n)
			w.openers = make([]seal.Opener, n)
			w.proofCookies = make([]wire.ProofCookie, n)
			w.proofAt = make([]int64, n)
			w.ackAt = make([]int64, n)
			w.payOff = wire.SealedPayloadOffset(cfg.Magic)
		}
		if cfg.messages() {
			w.msg = newWorkerMsgs(cfg, n)
		}
	}
	return w
}

// global is local client j's number in the generator.
func (w *worker) global(j int) int { return j*w.cfg.Sockets + w.idx }

// client maps a received datagram to its client: it must come from the
// server and be addressed to one of this socket's client addresses.
func (w *worker) client(i int) (p []byte, j int, ok bool) {
	p, from, to, ok := w.rx.msg(i)
	if !ok || from.Addr != w.serverAddr || rawPort(&from) != w.serverPort {
		return nil, 0, false
	}
	j, ok = w.g.src.index(to)
	if !ok || j >= w.n {
		return nil, 0, false
	}
	return p, j, true
}

// slot returns the buffer of the next outgoing message, sending the batch
// first if it is full.
func (w *worker) slot() []byte {
	if w.tx.full() {
		w.flush()
	}
	return w.tx.next()
}

// send queues p from client j; p is a slot from w.slot or a template.
func (w *worker) send(p []byte, j int) {
	if w.tx.full() {
		w.flush()
	}
	w.tx.add(p, w.g.src.addr4(j))
}

func (w *worker) flush() {
	if w.tx.n == 0 {
		return
	}
	_, refused, err := w.s.flush(w.tx)
	w.ctr.loc[cRefused] += uint64(refused)
	if err != nil && w.err == nil {
		w.err = err
	}
}

// ---- Connect ----

// connect runs the handshake of every client on this socket that is not
// connected, until all have connected or failed, or the phase ends. Closed
// loop (open false), at most Window handshakes are in flight; open loop,
// every client starts at once: Initials leave a batch at a time as fast as
// the socket takes them, with the replies read in between, so the
// generator's own receive queue does not overflow while it sends.
func (w *worker) connect(start, deadline int64, open bool) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cfg := w.cfg
	hs := w.hcs
	if hs == nil {
		hs = make([]handshake.ClientHandshake, w.n)
	}
	// Handshake packets per client this phase (saturating), for Resent.
	sent := make([]uint8, w.n)
	window := cfg.Window
	if open {
		window = w.n
	}
	pending := make([]int32, 0, min(2*window, w.n))
	ccfg := handshake.ClientConfig{
		Magic:           cfg.Magic,
		NetworkVersion:  cfg.NetworkVersion,
		NetworkFeatures: cfg.NetworkFeatures,
		Layout:          msgcfg.Layout(&cfg.MessageConfig, protocol.DefaultMaxDatagram),
		ResendInterval:  cfg.ResendInterval.Seconds(),
		ConnectTimeout:  cfg.ConnectTimeout.Seconds(),
		// Sealed: the proof follows the Challenge (docs/protocol.md §11.3).
		ProofAfterChallenge: w.sealers != nil,
	}
	pollEvery := min(int64(cfg.ResendInterval)/4, int64(10*time.Millisecond))
	next, active := 0, 0
	lastPoll := w.g.now()
	for (next < w.n || active > 0) && w.err == nil {
		now := w.g.now()
		if now > deadline || w.g.stopped() {
			break
		}
		sec := seconds(now)
		// Open loop starts one batch per turn, then reads what came back.
		budget := window - active
		if open {
			budget = cfg.Batch
		}
		for budget > 0 && next < w.n {
			j := next
			next++
			if w.state[j] == stConnected {
				continue
			}
			budget--
			c := ccfg
			// Any ClientID will do; varying it exercises the field.
			c.ClientID = uint8(j+w.idx) & 7
			hs[j] = handshake.NewClientHandshake(c, uint64(j)*uint64(w.cfg.Sockets)+uint64(w.idx)+1)
			hs[j].Start(sec)
			w.state[j] = stHandshaking
			w.sentAt[j] = now
			sent[j] = 0
			active++
			pending = append(pending, int32(j))
			w.ctr.loc[cHandshakesStarted]++
			active -= w.pollHandshake(&hs[j], j, sec, now, sent)
		}
		w.flush()
		if open && next < w.n {
			// While Initials are still going out, take everything that
			// has come back without waiting: answers arrive faster than
			// one batch per batch sent (a Challenge and an Ack for each
			// client), and left queued they would overflow the socket.
			for {
				nr, err := w.s.recvNow(w.rx)
				if err != nil {
					w.err = err
					break
				}
				active -= w.connectReplies(hs, nr, start, sent)
				if nr < len(w.rx.hdrs) {
					break
				}
			}
		} else {
			nr, err := w.s.recv(w.rx)
			if err != nil {
				w.err = err
				break
			}
			active -= w.connectReplies(hs, nr, start, sent)
		}
		now = w.g.now()
		sec = seconds(now)
		if now-lastPoll >= pollEvery {
			lastPoll = now
			live := pending[:0]
			for _, j := range pending {
				switch w.state[j] {
				case stHandshaking:
					active -= w.pollHandshake(&hs[j], int(j), sec, now, sent)
				case stProving:
					active -= w.pollProof(int(j), now, sent)
				default:
					continue
				}
				if w.state[j] == stHandshaking || w.state[j] == stProving {
					live = append(live, j)
				}
			}
			pending = live
		}
		w.flush()
		w.ctr.publish()
	}
	// Whatever did not finish in time failed.
	for _, j := range pending {
		if w.state[j] == stHandshaking || w.state[j] == stProving {
			w.state[j] = stFailed
			w.ctr.loc[cHandshakeFailures]++
			w.ctr.loc[cTimedOut]++
		}
	}
	w.ctr.publish()
}

// connectReplies hands the nr datagrams just received to their clients'
// handshakes and sends what they answer; it returns how many handshakes
// ended.
func (w *worker) connectReplies(hs []handshake.ClientHandshake, nr int, start int64, sent []uint8) (ended int) {
	now := w.g.now()
	sec := seconds(now)
	for i := range nr {
		p, j, ok := w.client(i)
		if ok && w.state[j] == stConnected && w.seqs != nil {
			// The server may already be using (or closing) a connection
			// whose Ack came earlier in this very batch: a Disconnect
			// right behind the Ack must end the client, not be lost to
			// the phase change.
			w.connIn(j, p, now, false)
			continue
		}
		if ok && w.state[j] == stProving {
			ended += w.proofIn(j, p, start, now, sent)
			continue
		}
		if !ok || w.state[j] != stHandshaking {
			w.ctr.loc[cUnexpected]++
			continue
		}
		buf := w.slot()
		k, ev, drop := hs[j].Receive(sec, p, buf)
		if k > 0 {
			w.sendHandshake(j, buf[:k], sent)
		}
		if drop != protocol.DropNone {
			w.ctr.loc[cUnexpected]++
		}
		ended += w.handshakeEvent(&hs[j], j, ev, start, now, sent)
	}
	return ended
}

// pollHandshake sends what client j's handshake has due (an Initial, a
// resend) and applies its timeout; it returns 1 if the handshake ended.
func (w *worker) pollHandshake(h *handshake.ClientHandshake, j int, sec float64, now int64, sent []uint8) int {
	buf := w.slot()
	k, ev := h.Poll(sec, buf)
	if k > 0 {
		w.sendHandshake(j, buf[:k], sent)
	}
	return w.handshakeEvent(h, j, ev, 0, now, sent)
}

// sendHandshake queues a handshake packet of client j and counts it in
// sent[j] (if sent is not nil). A Response is also kept in ModeResponse: it
// is what the client repeats in Run.
func (w *worker) sendHandshake(j int, p []byte, sent []uint8) {
	if w.cfg.Mode == ModeResponse && len(p) <= respStride &&
		wire.DecodeHandshake(w.cfg.Magic, p, &w.hs) == protocol.DropNone && w.hs.Type == protocol.TypeResponse {
		w.respLen[j] = uint8(copy(w.resp[j*respStride:], p))
	}
	w.send(p, j)
	w.ctr.loc[cHandshakePackets]++
	if sent != nil && sent[j] < 255 {
		sent[j]++
	}
}

// handshakeEvent applies a handshake's state change to client j and
// returns 1 if the handshake ended (connected or failed). start is the
// phase's start.
func (w *worker) handshakeEvent(h *handshake.ClientHandshake, j int, ev handshake.ClientEvent, start, now int64, sent []uint8) int {
	switch ev {
	case handshake.EventConnected:
		ck := h.Cookie()
		if w.ids != nil {
			w.ids[j] = connID{tag: cookie.SessionTag(&ck), session: h.SessionID(), clientID: uint8(j+w.idx) & 7}
		}
		if w.seqs != nil {
			s, c := cookie.Sequences(&ck)
			w.seqs[j].Init(c, s, seconds(now))
		}
		if w.sealers != nil {
			pc := &w.proofCookies[j]
			pc.SecretID, pc.Timestamp = h.CookieOrigin()
			return w.startProof(j, &ck, now, sent)
		}
		w.connected(j, start, now, sent)
		return 1
	case handshake.EventDenied:
		w.ctr.loc[deniedCounter(h.DeniedReason())]++
	case handshake.EventWrongVersion:
		w.ctr.loc[cWrongVersion]++
	case handshake.EventWrongLayout:
		w.ctr.loc[cWrongLayout]++
	case handshake.EventTimedOut:
		w.ctr.loc[cTimedOut]++
	case handshake.EventTokenRequired:
		// A sealed server, and this run has no tokens.
		w.ctr.loc[cTokenRequired]++
	default:
		return 0
	}
	w.state[j] = stFailed
	w.ctr.loc[cHandshakeFailures]++
	return 1
}

// connected records that client j's handshake (and, sealed, its proof) is
// done; start is the phase's start.
func (w *worker) connected(j int, start, now int64, sent []uint8) {
	w.state[j] = stConnected
	w.ctr.loc[cHandshakes]++
	// One Initial and one Response (sealed: one proof in the Response's
	// place) is a handshake without a resend.
	if sent != nil && sent[j] > 2 {
		w.ctr.loc[cResent]++
	}
	w.hist.Record(time.Duration(now - w.sentAt[j]))
	w.since.Record(time.Duration(now - start))
	w.lastAck = max(w.lastAck, now)
	w.sentAt[j] = now
}

// ---- Sealed mode: proving the token (docs/protocol.md §11.3) ----

// startProof begins client j's proof once its Challenge (authorised cookie ck,
// whose SecretId and Timestamp are in w.proofCookies[j]) is in: make its token's sealer and opener, salted with the cookie, and
// send the first proof. It returns 1 if the client failed.
func (w *worker) startProof(j int, ck *cookie.Cookie, now int64, sent []uint8) int {
	tok, err := w.g.tokens.token(w.global(j))
	if err != nil {
		// newTokenSource made one with these settings: only a broken
		// random source gets here.
		if w.err == nil {
			w.err = err
		}
		w.state[j] = stFailed
		w.ctr.loc[cHandshakeFailures]++
		return 1
	}
	w.proofCookies[j].Cookie = *ck
	salt := (*[seal.SaltBytes]byte)(ck[:seal.SaltBytes])
	w.sealers[j].Init(&tok.ClientToServerKey, salt)
	w.openers[j].Init(&tok.ServerToClientKey, salt)
	w.state[j] = stProving
	w.ackAt[j] = now
	w.sendProof(j, tok, now, sent)
	return 0
}

// sendProof sends a proof of tok from client j: its request body and a
// KeepAlive sealed with the client's key, with the connection's next Seq
// and counter, so that every resend is a fresh packet.
func (w *worker) sendProof(j int, tok *token.ConnectToken, now int64, sent []uint8) {
	buf := w.slot()
	id := &w.ids[j]
	seq, ack, ackBits, _, _ := w.seqs[j].Send(seconds(now))
	h := protocol.ConnHeader{SessionID: id.session, ClientID: id.clientID, Tag: id.tag,
		Seq: seq, Ack: ack, AckBits: ackBits, Kind: protocol.KindKeepAlive}
	req := tok.Request()
	w.request, _ = req.AppendBinary(w.request[:0])
	n := wire.SealProof(buf, w.cfg.Magic, &h, &w.proofCookies[j], w.request, &w.sealers[j])
	w.proofAt[j] = now
	if n == 0 {
		return // the counter is exhausted: the proof times out
	}
	w.send(buf[:n], j)
	w.ctr.loc[cProofs]++
	w.ctr.loc[cHandshakePackets]++
	if sent != nil && sent[j] < 255 {
		sent[j]++
	}
}

// pollProof resends client j's proof every ResendInterval and fails it
// when ConnectTimeout passes from its Challenge without an answer. It returns 1
// if the client failed.
func (w *worker) pollProof(j int, now int64, sent []uint8) int {
	if now-w.ackAt[j] > int64(w.cfg.ConnectTimeout) {
		w.fail(j, cTimedOut)
		return 1
	}
	if now-w.proofAt[j] < int64(w.cfg.ResendInterval) {
		return 0
	}
	tok, err := w.g.tokens.token(w.global(j))
	if err != nil {
		if w.err == nil {
			w.err = err
		}
		w.fail(j, cTimedOut)
		return 1
	}
	w.sendProof(j, tok, now, sent)
	return 0
}

// fail ends proving client j's handshake, counted under why.
func (w *worker) fail(j int, why int) {
	w.state[j] = stFailed
	w.ctr.loc[cHandshakeFailures]++
	w.ctr.loc[why]++
}

// proofIn handles a datagram for proving client j: the first sealed packet
// from the server that opens proves the connection (a sealed Disconnect
// refuses it, reasons 7–9); an unsealed Disconnect carrying the
// connection's Tag refuses it for reason 5 or 6, which the server cannot
// seal. It returns 1 if the handshake ended.
func (w *worker) proofIn(j int, p []byte, start, now int64, sent []uint8) int {
	m := w.cfg.Magic
	h := &w.hdr
	if proof, r := wire.DecodeSealed(m, p, h); r == protocol.DropNone && !proof && h.Tag == w.ids[j].tag {
		payload, _, r := wire.OpenConn(m, p, h, &w.openers[j])
		switch r {
		case protocol.DropNone:
		case protocol.DropSealedReplay:
			w.ctr.loc[cSealedReplay]++
			return 0
		case protocol.DropSealedForged:
			w.ctr.loc[cSealedForged]++
			return 0
		default:
			w.ctr.loc[cUnexpected]++
			return 0
		}
		if h.Kind == protocol.KindDisconnect {
			w.refused(j, payload, false)
			return 1
		}
		if w.seqs[j].Receive(h.Seq, h.Ack, h.AckBits, seconds(now), &w.rep) != protocol.DropNone {
			w.ctr.loc[cUnexpected]++
		}
		if h.Kind == protocol.KindKeepAlive {
			w.ctr.loc[cKeepAlivesIn]++
		}
		w.connected(j, start, now, sent)
		return 1
	}
	payload, r := wire.DecodeConn(m, p, h)
	if r == protocol.DropNone && h.Tag == w.ids[j].tag && h.Kind == protocol.KindDisconnect &&
		len(payload) > 0 && (payload[0] == protocol.DisconnectTokenExpired || payload[0] == protocol.DisconnectTokenInvalid) {
		w.refused(j, payload, true)
		return 1
	}
	w.ctr.loc[cUnexpected]++
	return 0
}

// refused ends proving client j on a Disconnect with payload; the server
// sends reasons 5 and 6 unsealed, the others sealed.
func (w *worker) refused(j int, payload []byte, unsealed bool) {
	c := -1
	if len(payload) > 0 {
		c = refusedCounter(payload[0])
	}
	if c < 0 || unsealed != (c == cRefusedExpired || c == cRefusedInvalid) {
		// Not a refusal the protocol has, or one in the wrong form:
		// still the server ending the connection.
		w.fail(j, cDeniedOther)
		return
	}
	w.fail(j, c)
}

// ---- Run ----

// run sends requests and counts answers until the phase ends, then drains
// answers still on their way for up to LossTimeout.
func (w *worker) run(budget uint64) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cfg := w.cfg
	closedLoop := cfg.Rate == 0
	rate := cfg.Rate * float64(w.n) // this socket's requests per second
	// Tokens may pile up to two batches or 20 ms of sending, so a late
	// wake-up is made up: SO_RCVTIMEO counts in jiffies (4 ms at HZ=250),
	// so an idle worker may sleep several milliseconds past its tick. The
	// window still bounds the burst.
	tokenCap := max(2*float64(cfg.Batch), rate*0.020)
	tokens := 0.0
	lossNs := int64(cfg.LossTimeout)
	scanEvery := max(lossNs/4, int64(5*time.Millisecond))
	last := w.g.now()
	lastScan := last
	// Silence counts only while Run sends: between phases nothing is read.
	for j := range w.heardAt {
		w.heardAt[j] = last
	}
	if w.msg != nil {
		w.msgStart(last)
	}
	for w.err == nil {
		now := w.g.now()
		ph := w.g.phase.Load()
		if ph == phaseStop || w.g.stopped() {
			break
		}
		allow := cfg.Window - w.out
		if !closedLoop {
			tokens = min(tokens+float64(now-last)*1e-9*rate, tokenCap)
			allow = min(allow, int(tokens))
		}
		last = now
		if uint64(max(allow, 0)) > budget {
			allow = int(budget)
		}
		if w.msg != nil {
			// Messages instead of Data.
			w.msgSend(now, &budget)
		} else if allow > 0 {
			k := w.fill(now, allow, closedLoop)
			tokens -= float64(k)
			budget -= uint64(k)
		}
		nr, err := w.s.recv(w.rx)
		if err != nil {
			w.err = err
			break
		}
		now = w.g.now()
		measuring := w.g.phase.Load() == phaseMeasure
		for i := range nr {
			w.answer(i, now, measuring)
		}
		if now-lastScan >= scanEvery {
			lastScan = now
			w.scan(now)
			if w.msg != nil {
				w.msgPoll(now, true)
			}
		} else if w.msg != nil {
			w.msgPoll(now, false)
		}
		w.ctr.publish()
	}
	// Drain: answers in flight still count in the totals, not the window.
	// Reliable messages (small or bulk) have longer: their echoes come
	// back, resends included, unless the run was interrupted.
	end := w.g.now() + lossNs
	if w.msg != nil && w.msg.reliable() {
		end = w.g.now() + max(lossNs, int64(cfg.MessageDrain))
	}
	for (w.out > 0 || w.msg != nil && w.msg.outstanding() > 0 && !w.g.stopped()) && w.err == nil {
		now := w.g.now()
		if now > end {
			break
		}
		nr, err := w.s.recv(w.rx)
		if err != nil {
			w.err = err
			break
		}
		now = w.g.now()
		for i := range nr {
			w.answer(i, now, false)
		}
		if w.msg != nil {
			w.msgPoll(now, false)
		}
		w.ctr.publish()
	}
	if w.msg != nil {
		w.msgFinish()
	}
	w.unanswered = w.out
	clear(w.inflight)
	w.out = 0
	w.ctr.publish()
}

// silence is how long a connected client may accept nothing from the
// server before its connection times out (0: never): connTimeout, or in
// sealed mode the timeout its token carries if it has one (docs/protocol.md
// §11).
func (w *worker) silence() int64 {
	switch {
	case w.heardAt == nil:
		return 0
	case w.cfg.sealed() && w.cfg.TokenTimeout > 0:
		return int64(w.cfg.TokenTimeout)
	}
	return int64(connTimeout)
}

// fill sends up to allow requests, taking clients round-robin; in closed
// loop it skips clients that are waiting for an answer. It returns the
// number sent.
func (w *worker) fill(now int64, allow int, closedLoop bool) int {
	sent := 0
	needConn := w.cfg.Mode.NeedsConnect()
	for tries := 0; sent < allow && tries < w.n; tries++ {
		j := w.cursor
		if w.cursor++; w.cursor == w.n {
			w.cursor = 0
		}
		if closedLoop && w.inflight[j] != 0 || needConn && w.state[j] != stConnected {
			continue
		}
		var p []byte
		switch w.cfg.Mode {
		case ModeEcho, ModeInitial:
			p = w.template
		case ModeResponse:
			if w.respLen[j] == 0 {
				continue
			}
			p = w.resp[j*respStride : j*respStride+int(w.respLen[j])]
		case ModeData:
			p = w.buildConn(j, now, protocol.KindData)
		}
		w.send(p, j)
		w.inflight[j]++
		w.sentAt[j] = now
		w.out++
		sent++
	}
	w.flush()
	w.ctr.loc[cSent] += uint64(sent)
	return sent
}

// buildConn writes client j's next connection packet of kind into the next
// slot: Data carries the send time in its first 8 payload bytes, a
// Disconnect reason 1 (closed by the application), a KeepAlive no payload.
func (w *worker) buildConn(j int, now int64, kind protocol.Kind) []byte {
	return w.buildConnWith(j, now, kind, nil)
}

// buildConnWith is buildConn with the payload of a Messages packet (raw:
// hold.go's, made by hand, not by a message.Endpoint).
func (w *worker) buildConnWith(j int, now int64, kind protocol.Kind, raw []byte) []byte {
	buf := w.slot()
	st := &w.seqs[j]
	id := &w.ids[j]
	seq, ack, ackBits, lost, evicted := st.Send(seconds(now))
	if w.msg != nil {
		// Any packet carries acks; an eviction loses a packet that may
		// have carried messages.
		if evicted {
			w.msgEvicted(j, lost.Seq, now)
		}
		w.msgSent(j, now)
	}
	h := protocol.ConnHeader{SessionID: id.session, ClientID: id.clientID, Tag: id.tag,
		Seq: seq, Ack: ack, AckBits: ackBits, Kind: kind}
	var payload []byte
	switch kind {
	case protocol.KindData:
		payload = buf[w.payOff : w.payOff+w.cfg.PayloadSize]
		if len(payload) >= 8 {
			binary.LittleEndian.PutUint64(payload, uint64(now))
		}
	case protocol.KindDisconnect:
		payload = buf[w.payOff : w.payOff+1]
		payload[0] = protocol.DisconnectClosed
	case protocol.KindMessages:
		payload = buf[w.payOff : w.payOff+copy(buf[w.payOff:], raw)]
	}
	if w.sealers != nil {
		// 0 only when the counter is exhausted (2^64 packets): never.
		return buf[:wire.SealConn(buf, w.cfg.Magic, &h, payload, &w.sealers[j])]
	}
	return buf[:wire.EncodeConn(buf, w.cfg.Magic, &h, payload)]
}

// answer handles received datagram i.
func (w *worker) answer(i int, now int64, measuring bool) {
	p, j, ok := w.client(i)
	if !ok {
		w.ctr.loc[cUnexpected]++
		return
	}
	switch w.cfg.Mode {
	case ModeEcho:
		w.answered(j, now, w.sentAt[j], measuring)
	case ModeInitial:
		if wire.DecodeHandshake(w.cfg.Magic, p, &w.hs) == protocol.DropNone && w.hs.Type == protocol.TypeChallenge {
			w.answered(j, now, w.sentAt[j], measuring)
			return
		}
		w.ctr.loc[cUnexpected]++
	case ModeResponse:
		if wire.DecodeHandshake(w.cfg.Magic, p, &w.hs) == protocol.DropNone && w.hs.Type == protocol.TypeAck && w.hs.Timestamp < 0 {
			w.answered(j, now, w.sentAt[j], measuring)
			return
		}
		w.ctr.loc[cUnexpected]++
	case ModeData:
		w.connIn(j, p, now, measuring)
	}
}

// connIn handles a connection packet for client j.
func (w *worker) connIn(j int, p []byte, now int64, measuring bool) {
	if w.sealers != nil {
		w.sealedIn(j, p, now, measuring)
		return
	}
	payload, r := wire.DecodeConn(w.cfg.Magic, p, &w.hdr)
	if r != protocol.DropNone {
		w.handshakeIn(j, p, now)
		return
	}
	if w.state[j] != stConnected || w.hdr.Tag != w.ids[j].tag {
		w.ctr.loc[cUnexpected]++
		return
	}
	w.connPacket(j, payload, now, measuring)
}

// sealedIn handles a sealed connection packet for client j. A sealed server
// sends no RestartHandshake and no unsealed connection packet, so anything
// that does not open is not an answer.
func (w *worker) sealedIn(j int, p []byte, now int64, measuring bool) {
	h := &w.hdr
	proof, r := wire.DecodeSealed(w.cfg.Magic, p, h)
	if r != protocol.DropNone || proof || w.state[j] != stConnected || h.Tag != w.ids[j].tag {
		w.ctr.loc[cUnexpected]++
		return
	}
	payload, _, r := wire.OpenConn(w.cfg.Magic, p, h, &w.openers[j])
	switch r {
	case protocol.DropNone:
		w.connPacket(j, payload, now, measuring)
	case protocol.DropSealedReplay:
		w.ctr.loc[cSealedReplay]++
	case protocol.DropSealedForged:
		w.ctr.loc[cSealedForged]++
	default:
		w.ctr.loc[cUnexpected]++
	}
}

// connPacket handles connection packet w.hdr with payload, accepted for
// client j.
func (w *worker) connPacket(j int, payload []byte, now int64, measuring bool) {
	h := &w.hdr
	if h.Kind == protocol.KindMessages && !w.msgCheck(j, payload) {
		return
	}
	if w.seqs[j].Receive(h.Seq, h.Ack, h.AckBits, seconds(now), &w.rep) != protocol.DropNone {
		w.ctr.loc[cUnexpected]++
		return
	}
	w.ctr.loc[cSeqLost] += uint64(w.rep.NumLost)
	if w.heardAt != nil {
		w.heardAt[j] = now
	}
	if w.msg != nil {
		w.msgAcks(j, h.Ack, h.AckBits, now)
	}
	if w.sealers == nil {
		// A packet the connection took came from the server, which
		// therefore still knows us here: RestartHandshakes are not to be
		// believed now, and a restart under way is moot (docs/protocol.md
		// §6). A sealed server sends none.
		w.restartEvent(j, w.hcs[j].Heard(seconds(now)), now)
	}
	switch h.Kind {
	case protocol.KindData:
		sent := w.sentAt[j]
		if len(payload) >= 8 {
			sent = int64(binary.LittleEndian.Uint64(payload))
		}
		w.answered(j, now, sent, measuring)
	case protocol.KindKeepAlive:
		w.ctr.loc[cKeepAlivesIn]++
	case protocol.KindMessages:
		w.msgIn(j, payload, now)
	case protocol.KindDisconnect:
		reason := uint8(0)
		if len(payload) > 0 {
			reason = payload[0]
		}
		w.end(j, stClosed)
		w.ctr.loc[cClosed]++
		w.ctr.loc[closedCounter(reason)]++
	}
}

// end takes client j out of the load: its outstanding requests no longer
// count, and it sends nothing more.
func (w *worker) end(j int, st uint8) {
	if w.hcs != nil && w.hcs[j].Restarting() {
		w.restarting--
	}
	w.state[j] = st
	w.out -= int(w.inflight[j])
	w.inflight[j] = 0
	if w.msg != nil {
		w.msgEnd(j)
	}
}

// handshakeIn handles a handshake packet for connected client j in Run:
// the restart (docs/protocol.md §6) that a RestartHandshake asks for, and the
// Challenge and Ack that complete it, all as handshake.ClientHandshake
// decides. Anything else is unexpected.
func (w *worker) handshakeIn(j int, p []byte, now int64) {
	if w.hcs == nil || w.state[j] != stConnected {
		w.ctr.loc[cUnexpected]++
		return
	}
	isRestart := wire.DecodeHandshake(w.cfg.Magic, p, &w.hs) == protocol.DropNone &&
		w.hs.Type == protocol.TypeRestartHandshake
	if isRestart {
		w.ctr.loc[cRestartHandshakes]++
	}
	h := &w.hcs[j]
	buf := w.slot()
	k, ev, drop := h.Receive(seconds(now), p, buf)
	if k > 0 {
		w.sendHandshake(j, buf[:k], nil)
	}
	// A RestartHandshake the client may not honour yet (one per 1.1 s, or
	// one while restarting: the server repeats it for every Data packet
	// until the restart is done) is expected, not an error.
	if drop != protocol.DropNone && !isRestart {
		w.ctr.loc[cUnexpected]++
	}
	w.restartEvent(j, ev, now)
}

// restartEvent applies what a connected client's handshake reported.
func (w *worker) restartEvent(j int, ev handshake.ClientEvent, now int64) {
	switch ev {
	case handshake.EventRestarting:
		w.restarting++
		w.ctr.loc[cRestarts]++
	case handshake.EventReconnected:
		// The server's Ack: heard from it.
		w.restarting--
		w.heardAt[j] = now
		w.ctr.loc[cReconnects]++
	case handshake.EventRestartCanceled:
		w.restarting--
		w.ctr.loc[cRestartsCanceled]++
	case handshake.EventTimedOut:
		// A restart the server never completed: the connection is lost.
		w.restarting--
		w.end(j, stFailed)
		w.ctr.loc[cRestartsFailed]++
	case handshake.EventDenied:
		// The server does not know the connection any more (it restarted,
		// or closed it): lost, and known at once.
		w.restarting--
		w.end(j, stFailed)
		w.ctr.loc[cRestartsDenied]++
	}
}

// answered counts an answer to client j's request sent at sent.
func (w *worker) answered(j int, now, sent int64, measuring bool) {
	if w.inflight[j] == 0 {
		w.ctr.loc[cLate]++
		return
	}
	w.inflight[j]--
	w.out--
	w.ctr.loc[cReplies]++
	if measuring {
		w.hist.Record(time.Duration(now - sent))
	}
}

// scan writes off requests unanswered for LossTimeout, so a dropped packet
// frees its place in the window, and (ModeData) sends a KeepAlive for each
// connected client idle for the keepalive interval.
func (w *worker) scan(now int64) {
	lossNs := int64(w.cfg.LossTimeout)
	data := w.cfg.Mode == ModeData
	silentNs := w.silence()
	for j, c := range w.inflight {
		if w.restarting > 0 && w.hcs[j].Restarting() && w.state[j] == stConnected {
			// Resends and the timeout of a restart under way.
			buf := w.slot()
			k, ev := w.hcs[j].Poll(seconds(now), buf)
			if k > 0 {
				w.sendHandshake(j, buf[:k], nil)
			}
			w.restartEvent(j, ev, now)
			c = w.inflight[j]
		}
		if silentNs > 0 && w.state[j] == stConnected && !(w.hcs != nil && w.hcs[j].Restarting()) && now-w.heardAt[j] > silentNs {
			// The server is gone, or every Disconnect it sent was lost
			// (a busy loopback drops too): the connection times out,
			// as docs/protocol.md §7.5 says. A restart under way has
			// its own timeout.
			w.end(j, stClosed)
			w.ctr.loc[cServerSilent]++
			continue
		}
		if c != 0 {
			if now-w.sentAt[j] > lossNs {
				w.ctr.loc[cLost] += uint64(c)
				w.out -= int(c)
				w.inflight[j] = 0
			}
			continue
		}
		if data && now-w.sentAt[j] >= int64(w.cfg.KeepAlive) && w.state[j] == stConnected {
			w.send(w.buildConn(j, now, protocol.KindKeepAlive), j)
			w.sentAt[j] = now
			w.ctr.loc[cKeepAlivesOut]++
		}
	}
	w.flush()
}

// ---- Disconnect ----

// disconnect sends copies Disconnect packets from every connected client
// (ModeData), at most perSecond datagrams a second, and marks them closed.
func (w *worker) disconnect(copies int, perSecond float64) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	start := w.g.now()
	sent := 0
	for j := range w.n {
		if w.state[j] != stConnected {
			continue
		}
		if w.g.stopped() || w.err != nil {
			break
		}
		for range copies {
			now := w.g.now()
			w.send(w.buildConn(j, now, protocol.KindDisconnect), j)
			sent++
			if w.tx.full() {
				w.flush()
				// Pace: a burst would only overflow the server's buffer.
				if ahead := time.Duration(float64(sent)/perSecond*1e9) - time.Duration(now-start); ahead > 0 {
					time.Sleep(ahead)
				}
			}
		}
		w.state[j] = stClosed
		if w.msg != nil {
			w.msgEnd(j)
		}
	}
	w.flush()
	w.ctr.loc[cDisconnects] += uint64(sent)
	w.ctr.publish()
}

// seconds converts generator time (ns since New) to the protocol's
// seconds. Only differences matter to the client's state machines.
func seconds(ns int64) float64 { return float64(ns) * 1e-9 }
