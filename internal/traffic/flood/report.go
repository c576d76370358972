package flood

import (
	"cmp"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/udpgate/udpgate/internal/protocol"
)

// Counter counts datagrams and their bytes (UDP payload).
type Counter struct {
	Datagrams uint64
	Bytes     uint64
}

func (c *Counter) add(n int) {
	c.Datagrams++
	c.Bytes += uint64(n)
}

func (c *Counter) sum(o Counter) {
	c.Datagrams += o.Datagrams
	c.Bytes += o.Bytes
}

// ReplyType classifies a datagram the server sent back: values 0..7 are the
// handshake packet types (ReplyType(protocol.TypeChallenge) and so on), then
// a connection packet, then anything that decodes as neither. A correct
// server sends only Challenge, RestartHandshake and VersionUpgrade to these
// sources.
type ReplyType uint8

const (
	ReplyConn    ReplyType = 8 // a connection packet
	ReplyInvalid ReplyType = 9 // neither a handshake nor a connection packet
	// ReplyRefusal: an unsealed Disconnect refusing a token (reason 5,
	// expired, or 6, invalid), as a sealed-mode server answers a proof,
	// or saying that a token is required (reason 11), as it answers a
	// connection packet in clear on a connection waiting for its proof.
	ReplyRefusal ReplyType = 10
	// ReplySealed: a sealed connection packet (a sealed-mode server's
	// refusal for reasons 7 to 9, or its answer to a valid proof).
	ReplySealed   ReplyType = 11
	NumReplyTypes ReplyType = 12
)

func (t ReplyType) String() string {
	switch {
	case t < 8:
		return protocol.PacketType(t).String()
	case t == ReplyConn:
		return "connection_packet"
	case t == ReplyInvalid:
		return "invalid"
	case t == ReplyRefusal:
		return "token_refusal"
	case t == ReplySealed:
		return "sealed_packet"
	}
	return "ReplyType(" + strconv.Itoa(int(t)) + ")"
}

// StopReason says why sending stopped.
type StopReason uint8

const (
	StopCount    StopReason = iota // Count datagrams were sent
	StopDuration                   // MaxDuration passed
	StopCanceled                   // the context ended
	StopError                      // a socket could not send
)

func (r StopReason) String() string {
	switch r {
	case StopCount:
		return "count reached"
	case StopDuration:
		return "max duration reached"
	case StopCanceled:
		return "canceled"
	case StopError:
		return "send error"
	}
	return "StopReason(" + strconv.Itoa(int(r)) + ")"
}

// SourceReport is one source socket's traffic.
type SourceReport struct {
	// Addr is the socket's address, as the server saw it.
	Addr netip.AddrPort
	// Sent is what the kernel accepted to send; SendErrors the datagrams
	// it refused (none are expected on loopback).
	Sent       Counter
	SendErrors uint64
	// Kinds counts datagrams handed to the kernel, by kind.
	Kinds [NumKinds]uint64
	// Received is everything that arrived from anywhere; Replies splits
	// it by type.
	Received Counter
	Replies  [NumReplyTypes]Counter
}

// Ratio is the source's byte amplification: bytes received ÷ bytes sent
// (0 if it sent nothing). A server that keeps the no-amplification rule
// holds it at or below 1 for every source.
func (s *SourceReport) Ratio() float64 { return ratio(s.Received.Bytes, s.Sent.Bytes) }

// Report is the outcome of a Run.
type Report struct {
	Server  netip.AddrPort
	Mix     Mix
	Stopped StopReason
	// SendTime runs from the first batch to the last; Drain is the wait
	// for late replies after it.
	SendTime time.Duration
	Drain    time.Duration

	Sent       Counter
	SendErrors uint64
	Kinds      [NumKinds]uint64
	Received   Counter
	Replies    [NumReplyTypes]Counter
	// Connected: sources that completed a handshake before the flood, for
	// the sealed-mode kinds (0 without them).
	Connected int

	// Sources has one entry per source socket, in the order of
	// Config.Sources.
	Sources []SourceReport
}

// SendRate is datagrams sent per second of SendTime.
func (r *Report) SendRate() float64 {
	if r.SendTime <= 0 {
		return 0
	}
	return float64(r.Sent.Datagrams) / r.SendTime.Seconds()
}

// Amplification is the overall byte ratio: bytes the server sent to the
// sources ÷ bytes they sent it.
func (r *Report) Amplification() float64 { return ratio(r.Received.Bytes, r.Sent.Bytes) }

// Worst returns the index in Sources of the source with the highest Ratio,
// or -1 if there are no sources.
func (r *Report) Worst() int {
	w := -1
	for i := range r.Sources {
		if w < 0 || r.Sources[i].Ratio() > r.Sources[w].Ratio() {
			w = i
		}
	}
	return w
}

// Amplified returns the sources that received more bytes than they sent:
// empty for a server that keeps the no-amplification rule.
func (r *Report) Amplified() []SourceReport {
	var out []SourceReport
	for _, s := range r.Sources {
		if s.Received.Bytes > s.Sent.Bytes {
			out = append(out, s)
		}
	}
	return out
}

func ratio(in, out uint64) float64 {
	if out == 0 {
		return 0
	}
	return float64(in) / float64(out)
}

func (e *engine) report(sendTime, drain time.Duration) *Report {
	r := &Report{
		Server:    e.st.Server,
		Mix:       e.st.Mix,
		Stopped:   e.why.Load().(StopReason),
		SendTime:  sendTime,
		Drain:     drain,
		Sources:   make([]SourceReport, len(e.srcs)),
		Connected: e.connected,
	}
	for i, s := range e.srcs {
		tx := s.sock.Stats()
		sr := SourceReport{
			Addr:       s.addr,
			Sent:       Counter{Datagrams: tx.TxPackets, Bytes: tx.TxBytes},
			SendErrors: tx.TxErrors,
			Kinds:      s.sentKinds,
			Received:   s.recv,
			Replies:    s.replies,
		}
		r.Sources[i] = sr
		r.Sent.sum(sr.Sent)
		r.SendErrors += sr.SendErrors
		r.Received.sum(sr.Received)
		for k, n := range sr.Kinds {
			r.Kinds[k] += n
		}
		for t, c := range sr.Replies {
			r.Replies[t].sum(c)
		}
	}
	return r
}

// Print writes the report for people: totals, the amplification ratios,
// datagrams by kind and replies by type, and the top sources by ratio (all
// of them if top < 0).
func (r *Report) Print(w io.Writer, top int) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	p := func(format string, a ...any) { fmt.Fprintf(tw, format, a...) }

	p("target\t%s, %d sources, mix %s\n", r.Server, len(r.Sources), r.Mix)
	if r.Mix.sealedKinds() {
		p("connected first\t%d of %d sources (their hostile proofs reach the token checks)\n", r.Connected, len(r.Sources))
	}
	p("stopped\t%s after %v (%.0f datagrams/s), then drained replies for %v\n",
		r.Stopped, r.SendTime.Round(time.Millisecond), r.SendRate(), r.Drain.Round(time.Millisecond))
	p("bytes out (sent to server)\t%d datagrams, %s\n", r.Sent.Datagrams, bytesText(r.Sent.Bytes))
	if r.SendErrors > 0 {
		p("send errors\t%d datagrams refused by the kernel\n", r.SendErrors)
	}
	p("bytes in (server replies)\t%d datagrams, %s\n", r.Received.Datagrams, bytesText(r.Received.Bytes))
	p("amplification overall\t%.4f (server bytes sent ÷ bytes received)\n", r.Amplification())
	if i := r.Worst(); i >= 0 {
		s := &r.Sources[i]
		p("amplification worst source\t%.4f at %s (%s in for %s out)\n", s.Ratio(), s.Addr, bytesText(s.Received.Bytes), bytesText(s.Sent.Bytes))
	}
	amp := r.Amplified()
	if len(amp) == 0 {
		p("sources that received more than they sent\tnone\n")
	} else {
		p("sources that received more than they sent\t%d: THE SERVER AMPLIFIES\n", len(amp))
	}
	p("\nsent by kind\tdatagrams\t\n")
	for k, n := range r.Kinds {
		if r.Mix[k] > 0 || n > 0 {
			p("  %s\t%d\t\n", Kind(k), n)
		}
	}
	p("\nreplies by type\tdatagrams\tbytes\n")
	seen := false
	for t, c := range r.Replies {
		if c.Datagrams > 0 {
			p("  %s\t%d\t%d\n", ReplyType(t), c.Datagrams, c.Bytes)
			seen = true
		}
	}
	if !seen {
		p("  (none)\t\t\n")
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	srcs := slices.Clone(r.Sources)
	slices.SortStableFunc(srcs, func(a, b SourceReport) int { return cmp.Compare(b.Ratio(), a.Ratio()) })
	if top >= 0 && top < len(srcs) {
		srcs = srcs[:top]
	}
	if len(srcs) == 0 {
		return nil
	}
	fmt.Fprintf(w, "\nsources by amplification (%d of %d)\n", len(srcs), len(r.Sources))
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "source\tsent\tbytes sent\treceived\tbytes received\tratio\tchallenge\trestart\tversion_upgrade\tother\t\n")
	for _, s := range srcs {
		other := s.Received.Datagrams - s.Replies[protocol.TypeChallenge].Datagrams -
			s.Replies[protocol.TypeRestartHandshake].Datagrams - s.Replies[protocol.TypeVersionUpgrade].Datagrams
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%.4f\t%d\t%d\t%d\t%d\t\n", s.Addr, s.Sent.Datagrams, s.Sent.Bytes,
			s.Received.Datagrams, s.Received.Bytes, s.Ratio(),
			s.Replies[protocol.TypeChallenge].Datagrams, s.Replies[protocol.TypeRestartHandshake].Datagrams,
			s.Replies[protocol.TypeVersionUpgrade].Datagrams, other)
	}
	return tw.Flush()
}

// bytesText is n bytes, with a rounded unit for large values.
func bytesText(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%d bytes (%.1f GiB)", n, float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%d bytes (%.1f MiB)", n, float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%d bytes (%.1f KiB)", n, float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}
