package message

import (
	"fmt"
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
	recvBudget int64
	connBudget int64
	reserve    int64 // part of connBudget kept for the reassembly in progress

	top      int // the top chunk size: maxPayload
	topClass int
	classes  [numClasses]int
	pools    [numClasses]sync.Pool

	held     atomic.Int64
	ccEvents atomic.Uint64 // congestion events of all endpoints
	bulkCeil *atomic.Int64 // LimitBulk's ceiling, nil: none
	drops    [NumDropReasons]atomic.Uint64
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
		cfg.StallTimeout < 0 || cfg.ReceiveBudget < 0 || cfg.ConnReceiveBudget < 0 {
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
	l.recvBudget = cfg.ReceiveBudget
	if l.recvBudget == 0 {
		l.recvBudget = DefaultReceiveBudget
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

// CongestionEvents counts the congestion controllers' window cuts for
// loss over all endpoints (PathStats.CongestionEvents).
func (l *Layer) CongestionEvents() uint64 { return l.ccEvents.Load() }

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
