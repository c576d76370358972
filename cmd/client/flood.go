package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/udpgate/udpgate/internal/traffic/flood"
)

const floodSynopsis = `Send hostile traffic to a server on this host and report what came back:
valid Initials, forged Responses, valid Responses replayed from other
addresses, garbage (empty, random, near-valid but broken), connection packets
from unknown addresses, truncated and oversize datagrams, and Initials of
another network version, from -sources source addresses (127.0.2.1 and up),
each its own socket.

The report gives bytes out and in, the amplification ratio (bytes the server
sent ÷ bytes it received, overall and for the worst source) and the replies by
type. A server that keeps the protocol's no-amplification rule never sends a
source more bytes than it received from it; if it does, the exit status is 3.

Sending stops after -count datagrams or -duration, whichever comes first;
then replies still on their way are drained for up to -grace.`

// errAmplified: the flood found a source that received more bytes than it
// sent (exit status 3).
var errAmplified = errors.New("the server sent a source more bytes than it received from it: it can be used as an amplifier (see the report)")

func runFlood(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("flood", floodSynopsis, stderr)
	count := fs.Int("count", 100_000, fmt.Sprintf("datagrams to send, at most %d", flood.MaxCount))
	duration := fs.Duration("duration", flood.DefaultMaxDuration, fmt.Sprintf("stop sending after this long, at most %v", flood.MaxDurationLimit))
	sources := fs.Int("sources", flood.DefaultSources, fmt.Sprintf("source sockets, at most %d (IPv4: 127.0.2.1 and up; IPv6: ::1 with distinct ports)", flood.MaxSources))
	kinds := make([]string, flood.NumKinds)
	for k := range flood.NumKinds {
		kinds[k] = k.String()
	}
	mix := fs.String("mix", flood.DefaultMix.String(), "`kind=weight,...` of the datagrams; kinds: "+strings.Join(kinds, ", "))
	rate := fs.Float64("rate", 0, "datagrams per second; 0 sends as fast as possible")
	maxDatagram := fs.Int("max-datagram", 1200, "the server's largest datagram (oversize datagrams exceed it)")
	batch := fs.Int("batch", flood.DefaultBatch, fmt.Sprintf("datagrams per sendmmsg, 1..%d", flood.MaxBatch))
	senders := fs.Int("senders", 1, "sending goroutines; 1 leaves the other core of a 2-core machine to the server")
	grace := fs.Duration("grace", flood.DefaultGrace, fmt.Sprintf("after sending, wait up to this long for late replies (at most %v)", flood.MaxGrace))
	top := fs.Int("top", 10, "list this many sources, highest amplification first; -1 lists all")
	seed := fs.Uint64("seed", 0, "random seed, to repeat the same traffic; 0 picks one")
	tf := addTrafficFlags(fs, "with it the proof kind also sends tokens that open but list another server, and proofs with a forged inner seal")
	t, err := tf.parse(fs, args, false)
	if err != nil {
		return err
	}
	key, protocol, server, wire := t.key, t.protocol, t.server, t.wire
	switch {
	case *count < 1 || *count > flood.MaxCount:
		return usagef("-count %d is out of range: use 1..%d", *count, flood.MaxCount)
	case *duration <= 0 || *duration > flood.MaxDurationLimit:
		return usagef("-duration %v is out of range: use more than 0 and at most %v", *duration, flood.MaxDurationLimit)
	case *sources < 1 || *sources > flood.MaxSources:
		return usagef("-sources %d is out of range: use 1..%d", *sources, flood.MaxSources)
	case !(*rate >= 0):
		return usagef("-rate %v is negative: use datagrams per second, or 0 for as fast as possible", *rate)
	case *batch < 1 || *batch > flood.MaxBatch:
		return usagef("-batch %d is out of range: use 1..%d", *batch, flood.MaxBatch)
	case *senders < 1 || *senders > *sources:
		return usagef("-senders %d is out of range: use 1..%d (at most one per source)", *senders, *sources)
	case *grace < 0 || *grace > flood.MaxGrace:
		return usagef("-grace %v is out of range: use 0..%v", *grace, flood.MaxGrace)
	}
	m, err := flood.ParseMix(*mix)
	if err != nil {
		return usagef("-mix: %v", strings.TrimPrefix(err.Error(), "flood: "))
	}

	fmt.Fprintf(stderr, "flooding %s with %d datagrams from %d sources (at most %v) ...\n", server, *count, *sources, *duration)
	rep, err := flood.Run(ctx, flood.Config{
		Server:          server,
		NumSources:      *sources,
		Mix:             m,
		Count:           *count,
		MaxDuration:     *duration,
		Rate:            *rate,
		Magic:           wire.Magic,
		NetworkVersion:  wire.NetworkVersion,
		NetworkFeatures: wire.NetworkFeatures,
		MaxDatagram:     *maxDatagram,
		Batch:           *batch,
		Senders:         *senders,
		Grace:           *grace,
		Seed:            *seed,
		ProtocolID:      protocol,
		PrivateKey:      key,
	})
	if rep != nil {
		if perr := rep.Print(stdout, *top); perr != nil {
			return fmt.Errorf("writing the report: %w", perr)
		}
	}
	switch {
	case errors.Is(err, context.Canceled) && rep != nil:
		fmt.Fprintln(stderr, "interrupted: the report covers what was sent until then")
	case err != nil:
		// The command names itself; the package's prefix would repeat it.
		return errors.New(strings.TrimPrefix(err.Error(), "flood: "))
	}
	if len(rep.Amplified()) > 0 {
		return errAmplified
	}
	return nil
}
