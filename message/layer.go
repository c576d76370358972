package message

import (
	"fmt"
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
)

// numClasses is the number of storage chunk sizes: 64 << k bytes up to
// the layer's top chunk (maxPayload bytes), which holds any entry's data.
const numClasses = 10

// Layer is the shared, validated configuration and budgets of one side
// (a server's or a client's): create it once with NewLayer, then one
// Endpoint per connection. Safe for concurrent use.
type Layer struct {
	kinds      []Kind
	maxQueued  []int
	bulk       uint32 // channels declared bulk (ChannelConfig.Bulk)
	maxPayload int
	fragSize   int // data bytes of one fragment: maxPayload − fragHeader
	maxCount   int // most fragments of one message
	maxMsg     int
	sendRate   int64 // bytes per second
	ackDelay   int64 // ns
	resendF    float64
	minResend  int64
	stall      int64
	// stallSilence, stallRTTs: the bound of a peer that acknowledges
	// nothing (Endpoint.silence).
	stallSilence, stallRTTs int64
	recvBudget              int64
	sendBudget              int64 // Config.SendBudget
	connBudget              int64
	reserve                 int64 // part of connBudget kept for the reassembly in progress

	top      int // the top chunk size: maxPayload
	topClass int
	classes  [numClasses]int
	pools    [numClasses]sync.Pool

	// held: the receive storage of all endpoints; holders: the
	// endpoints holding any (the pool's shares); pressLow: the least
	// that an endpoint the full pool refused within its share held,
	// since Reclaim last looked (noPressure: none).
	held     atomic.Int64
	holders  atomic.Int64
	pressLow atomic.Int64
	ccEvents atomic.Uint64 // congestion events of all endpoints
	timeouts atomic.Uint64 // retransmission timeouts of all endpoints
	// The send budget (Endpoint.reserve): bytes reserved, endpoints
	// holding a reservation, Sends refused over the budget or a share.
	sendHeld    atomic.Int64
	senders     atomic.Int64
	sendRefused atomic.Uint64
	bulkCeil    *atomic.Int64 // LimitBulk's ceiling, nil: none
	drops       [NumDropReasons]atomic.Uint64
}

// NewLayer validates cfg and returns the layer. maxPayload is the bytes
// available for one packet's message entries.
func NewLayer(cfg Config, maxPayload int) (*Layer, error) {
	if len(cfg.Channels) > MaxChannels {
		return nil, fmt.Errorf("%w: %d channels, at most %d", ErrNoChannel, len(cfg.Channels), MaxChannels)
	}
	if maxPayload < minMaxPayload || maxPayload > maxMaxPayload {
		return nil, fmt.Errorf("%w: maxPayload %d outside %d..%d", ErrMessageSize, maxPayload, minMaxPayload, maxMaxPayload)
	}
	l := &Layer{maxPayload: maxPayload, fragSize: maxPayload - fragHeader, top: maxPayload}
	l.pressLow.Store(noPressure)
	l.maxMsg = cfg.MaxMessageSize
	if l.maxMsg == 0 {
		l.maxMsg = DefaultMaxMessageSize
	}
	if l.maxMsg < 0 || l.maxMsg > MaxMessageSizeLimit {
		return nil, fmt.Errorf("%w: MaxMessageSize %d outside 1..%d", ErrMessageSize, cfg.MaxMessageSize, MaxMessageSizeLimit)
	}
	l.maxCount = (l.maxMsg + l.fragSize - 1) / l.fragSize
	if l.maxCount > 0xffff {
		return nil, fmt.Errorf("%w: MaxMessageSize %d needs more than 65535 fragments of %d bytes", ErrMessageSize, l.maxMsg, l.fragSize)
	}
	if cfg.SendRate < 0 || cfg.AckDelay < 0 || cfg.ResendFactor < 0 || cfg.MinResend < 0 ||
		cfg.StallTimeout < 0 || cfg.StallSilence < 0 || cfg.StallRTTs < 0 || cfg.ReceiveBudget < 0 || cfg.ConnReceiveBudget < 0 || cfg.SendBudget < 0 {
		return nil, fmt.Errorf("message: negative Config field")
	}
	l.sendRate = int64(or(cfg.SendRate, DefaultSendRate))
	l.ackDelay = int64(orDur(cfg.AckDelay, DefaultAckDelay))
	l.resendF = cfg.ResendFactor
	if l.resendF == 0 {
		l.resendF = DefaultResendFactor
	}
	l.minResend = int64(orDur(cfg.MinResend, DefaultMinResend))
	l.stall = int64(orDur(cfg.StallTimeout, DefaultStallTimeout))
	l.stallSilence = int64(orDur(cfg.StallSilence, DefaultStallSilence))
	l.stallRTTs = int64(or(cfg.StallRTTs, DefaultStallRTTs))
	l.recvBudget = cfg.ReceiveBudget
	if l.recvBudget == 0 {
		l.recvBudget = DefaultReceiveBudget
	}
	l.sendBudget = cfg.SendBudget
	if l.sendBudget == 0 {
		l.sendBudget = DefaultSendBudget
	}
	for k := range l.classes {
		l.classes[k] = min(64<<k, l.top)
		size := l.classes[k]
		l.pools[k].New = func() any { b := make([]byte, size); return &b }
	}
	for l.classes[l.topClass] != l.top {
		l.topClass++
	}
	// The reserve holds the largest message's fragments, plus one unit
	// per channel for the next missing units taken while no reassembly
	// is in progress.
	l.reserve = int64(l.maxCount+MaxChannels) * int64(l.top)
	l.connBudget = int64(cfg.ConnReceiveBudget)
	if l.connBudget == 0 {
		l.connBudget = window*int64(l.top) + l.reserve
	}
	if l.connBudget < l.reserve+int64(l.top) {
		return nil, fmt.Errorf("%w: ConnReceiveBudget %d below one largest message (%d) and one packet", ErrMessageSize, l.connBudget, l.reserve)
	}
	defQueued := 2 * max(l.maxMsg, minQueuedBase)
	for i, c := range cfg.Channels {
		if c.Kind > Sequenced {
			return nil, fmt.Errorf("%w: channel %d has unknown kind %d", ErrNoChannel, i, c.Kind)
		}
		if c.MaxQueued < 0 {
			return nil, fmt.Errorf("message: channel %d: negative MaxQueued", i)
		}
		q := or(c.MaxQueued, defQueued)
		// At least one largest message, in storage chunks.
		if c.Kind == ReliableOrdered {
			q = max(q, l.maxCount*l.top)
		} else {
			q = max(q, l.top)
		}
		if c.Bulk {
			l.bulk |= 1 << i
		}
		l.kinds = append(l.kinds, c.Kind)
		l.maxQueued = append(l.maxQueued, q)
	}
	return l, nil
}

func or(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

func orDur(v, def time.Duration) time.Duration {
	if v == 0 {
		return def
	}
	return v
}

// NewEndpoint returns a new connection's message state. It allocates its
// per-channel state only when a channel is first used.
func (l *Layer) NewEndpoint() *Endpoint {
	return &Endpoint{l: l, progress: -1}
}

// Drops returns the counts of dropped packets (Check) and entries
// (Receive, Next) by reason, over all endpoints.
func (l *Layer) Drops() [NumDropReasons]uint64 {
	var d [NumDropReasons]uint64
	for i := range d {
		d[i] = l.drops[i].Load()
	}
	return d
}

// Held is the bytes all endpoints hold for out-of-order and partly
// reassembled messages.
func (l *Layer) Held() int64 { return l.held.Load() }

// Holders is the number of endpoints holding receive storage: the
// pool's fair share is ReceiveBudget over it, while contended.
func (l *Layer) Holders() int64 { return l.holders.Load() }

// Reclaim reports whether the pool (ReceiveBudget) refused storage to an
// endpoint within its fair share since the last call. If so, free is how
// much the holders above above should give back, the heaviest first, to
// bring the pool down to three quarters of the budget; above is the
// larger of the share of one more holder than there are (the refused
// endpoint's, if it holds nothing yet) and what the least of the refused
// endpoints held: only connections heavier than it give way. The
// endpoints cannot give back what they acknowledged: the caller ends
// their connections (conn ends them with the reason over_budget). A
// server calls it every sweep.
func (l *Layer) Reclaim() (free, above int64) {
	if l.pressLow.Load() == noPressure {
		return 0, 0
	}
	low := l.pressLow.Swap(noPressure)
	free = l.held.Load() - l.recvBudget/4*3
	return max(free, 0), max(low, l.recvBudget/(l.holders.Load()+1))
}

// noPressure is pressLow when nothing was refused since Reclaim.
const noPressure = math.MaxInt64

// press records a refusal by the full pool of an endpoint within its
// share, which held v bytes with the packet.
func (l *Layer) press(v int64) {
	for {
		cur := l.pressLow.Load()
		if v >= cur || l.pressLow.CompareAndSwap(cur, v) {
			return
		}
	}
}

// CongestionEvents counts the congestion controllers' window cuts for
// loss over all endpoints (PathStats.CongestionEvents).
func (l *Layer) CongestionEvents() uint64 { return l.ccEvents.Load() }

// sendGrant is the unit in which endpoints reserve send storage from the
// budget: eight packets' chunks.
func (l *Layer) sendGrant() int64 { return 8 * int64(l.top) }

// SendReserved is the bytes of the send budget (Config.SendBudget) the
// endpoints hold now: what they queue and have unacknowledged beyond
// their floors of one grant (eight packets' storage), rounded up to
// grants.
func (l *Layer) SendReserved() int64 { return l.sendHeld.Load() }

// SendRefused counts the Sends refused because the send budget was spent
// or the endpoint held its share of it (ErrSendShare).
func (l *Layer) SendRefused() uint64 { return l.sendRefused.Load() }

// Timeouts counts the retransmission timeouts of all endpoints: a peer
// that acknowledged no packet for a whole timeout, doubled each time,
// while reliable messages were in flight (Config.StallSilence).
func (l *Layer) Timeouts() uint64 { return l.timeouts.Load() }

// Enabled reports whether at least one channel is configured.
func (l *Layer) Enabled() bool { return len(l.kinds) > 0 }

func (l *Layer) drop(r DropReason) { l.drops[r].Add(1) }

// class returns the chunk class for n data bytes.
func (l *Layer) class(n int) int {
	if n <= 64 {
		return 0
	}
	k := bits.Len(uint(n-1) >> 6)
	return min(k, l.topClass)
}

// chunkCost is the storage n data bytes take.
func (l *Layer) chunkCost(n int) int64 { return int64(l.classes[l.class(n)]) }

// get returns a chunk for n ≤ top data bytes, holding them.
func (l *Layer) get(data []byte) *[]byte {
	k := l.class(len(data))
	p := l.pools[k].Get().(*[]byte)
	*p = (*p)[:len(data)]
	copy(*p, data)
	return p
}

// put returns a chunk to its pool and its cost.
func (l *Layer) put(p *[]byte) int64 {
	c := cap(*p)
	k := l.class(c)
	l.pools[k].Put(p)
	return int64(c)
}

// LimitBulk caps every endpoint's bulk sending (ChannelConfig.Bulk
// channels, and fragments of large messages) at *ceiling bytes per second
// each, read at every send, beside its congestion controller: the bulk
// goes at the smaller of the two. The game's entries are never held by
// it. A ceiling of 0 or below holds nothing. Call it before the first
// endpoint sends; conn's egress budget (Config.EgressRate) moves the
// ceiling as connections come and go.
func (l *Layer) LimitBulk(ceiling *atomic.Int64) { l.bulkCeil = ceiling }
