package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/udpgate/udpgate/internal/msgcfg"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/traffic/loadgen"
	"github.com/udpgate/udpgate/internal/wire"
	"github.com/udpgate/udpgate/message"
)

const holdSynopsis = `Hold a server's receive memory for messages, as issue 29's attacker did:
-clients proven connections from -sources loopback addresses (from
-first-source up) each send every fragment but the last of a largest
reliable message (-message-max-size, as the server's) and then a full
window of out-of-order units after it, on the reliable channel 0, each
once; then they only keep their connections alive (KeepAlives) until
-duration, counted from the first send, has passed. Run players beside it (client load -messages
reliable) and watch their round trips, and the server's
udpgate_message_receive_held_bytes, _holders and
udpgate_message_drops_total{reason="over_share"}. Loopback only.`

// Bounds of client hold: an attack tool must stay small and short.
const (
	holdMaxClients  = 10_000
	holdMaxDuration = 10 * time.Minute
)

// runHold is the hold command.
func runHold(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("hold", holdSynopsis, stderr)
	clients := fs.Int("clients", 2000, fmt.Sprintf("connections that hold, 1..%d", holdMaxClients))
	sources := fs.Int("sources", 8, "distinct source addresses (from -first-source up); the server's -max-clients-per-ip and -max-clients-per-prefix must allow clients ÷ sources")
	first := fs.String("first-source", "127.2.0.1", "the first source address, in 127.0.0.0/8 (client load uses 127.1.0.1 up)")
	duration := fs.Duration("duration", 30*time.Second, fmt.Sprintf("how long to hold, from the first send, at most %v", holdMaxDuration))
	rate := fs.Float64("rate", 20_000, "Messages packets per second in all while sending, 1..1000000")
	msgMax := fs.Int("message-max-size", message.DefaultMaxMessageSize, fmt.Sprintf("the server's -message-max-size, 1..%d: the largest message, all of whose fragments but the last are sent", message.MaxMessageSizeLimit))
	tf := addTrafficFlags(fs, "the clients' tokens are made with it")
	t, err := tf.parse(fs, args, true)
	if err != nil {
		return err
	}
	if err := loadgen.CheckServer(t.server); err != nil {
		return usagef("-server %v: hold needs an IPv4 loopback server (127.0.0.0/8)", t.server)
	}
	src, err := netip.ParseAddr(*first)
	switch {
	case err != nil || !src.Is4() || !src.IsLoopback():
		return usagef("-first-source %q: use an IPv4 address in 127.0.0.0/8", *first)
	case *clients < 1 || *clients > holdMaxClients:
		return usagef("-clients %d is out of range: use 1..%d", *clients, holdMaxClients)
	case *sources < 1 || *sources > *clients:
		return usagef("-sources %d is out of range: use 1..-clients", *sources)
	case *duration <= 0 || *duration > holdMaxDuration:
		return usagef("-duration %v is out of range: use more than 0 and at most %v", *duration, holdMaxDuration)
	case !(*rate >= 1) || *rate > 1e6:
		return usagef("-rate %v is out of range: use 1..1000000 packets per second", *rate)
	case *msgMax < 1 || *msgMax > message.MaxMessageSizeLimit:
		return usagef("-message-max-size %d is out of range: use 1..%d, as the server's", *msgMax, message.MaxMessageSizeLimit)
	}
	magic, _ := wire.ParseMagic(t.wire.Magic) // checked by parse
	payload := protocol.DefaultMaxDatagram - wire.ConnLen(magic, protocol.KindMessages, 0)
	if t.key != nil {
		payload = protocol.DefaultMaxDatagram - wire.SealedConnLen(magic, 0)
	}
	pkts := holdPayloads(*msgMax, payload)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	gen, err := loadgen.New(loadgen.Config{
		Server: t.server, Mode: loadgen.ModeData, Clients: *clients, Sources: *sources, FirstSource: src,
		Magic: magic, NetworkVersion: t.wire.NetworkVersion, NetworkFeatures: t.wire.NetworkFeatures,
		PrivateKey: t.key, ProtocolID: t.protocol,
	})
	if err != nil {
		return err
	}
	defer gen.Close()
	cfg := gen.Config()
	fmt.Fprintf(stdout, "hold: %d clients from %d addresses (%v up) → %v: %d packets each (%d fragments of a %d-byte message, its last left out, and %d out-of-order units), then KeepAlives, %v in all\n",
		cfg.Clients, cfg.SourcesUsed(), src, t.server, len(pkts), holdFragments(*msgMax, payload)-1, *msgMax, len(pkts)-holdFragments(*msgMax, payload)+1, *duration)
	cres, err := gen.Connect(ctx)
	if err != nil && cres.Connected == 0 {
		return fmt.Errorf("no client connected: %w", err)
	}
	fmt.Fprintf(stdout, "connected: %d of %d in %v\n", cres.Connected, cfg.Clients, cres.AllIn.Round(time.Millisecond))
	start := time.Now()
	sent, herr := gen.Hold(ctx, pkts, *duration, *rate)
	c := gen.Counters()
	fmt.Fprintf(stdout, "held: %d Messages packets sent; after %v, %d clients still connected, %d closed by the server (%d of them for a reason other than closed, shutdown, timed out or replaced: over_budget among them)\n",
		sent, time.Since(start).Round(time.Millisecond), gen.Connected(), c.Closed, c.ClosedOther)
	_, derr := gen.Disconnect(context.Background(), 5, 0)
	if errors.Is(herr, context.Canceled) {
		herr = nil
	}
	return errors.Join(herr, derr)
}

// holdFragments is the fragments of a message of size bytes in Messages
// payloads of payload bytes (docs/protocol.md §14.3).
func holdFragments(size, payload int) int {
	frag := payload - 9
	return max((size+frag-1)/frag, 2)
}

// holdPayloads are the Messages payloads one holding client sends, one
// entry each (docs/protocol.md §14.2): fragments 0..count−2 of a largest
// message on the reliable channel (ids 0..count−2), then whole units with
// ids count..count+Window−2, the window's rest past the missing last
// fragment (message.Window: 1,023 units, about 1.2 MB, with the 1024-unit
// window; 255 with the 256-unit window of before).
func holdPayloads(size, payload int) [][]byte {
	cnt := holdFragments(size, payload)
	var out [][]byte
	for i := range cnt - 1 {
		out = append(out, holdEntry(uint16(i), uint16(i), uint16(cnt), payload-9))
	}
	for id := cnt; id < cnt-1+message.Window; id++ {
		out = append(out, holdEntry(uint16(id), 0, 0, payload-5))
	}
	return out
}

// holdEntry encodes a reliable entry of n zero bytes: a fragment with cnt
// ≥ 2, a whole unit with cnt 0.
func holdEntry(id, idx, cnt uint16, n int) []byte {
	b := []byte{byte(msgcfg.Reliable)}
	b = binary.LittleEndian.AppendUint16(b, id)
	if cnt != 0 {
		b[0] |= 1 << 5 // F
		b = binary.LittleEndian.AppendUint16(b, idx)
		b = binary.LittleEndian.AppendUint16(b, cnt)
	}
	if n < 0x80 {
		b = append(b, byte(n))
	} else {
		b = append(b, byte(n)|0x80, byte(n>>7))
	}
	return append(b, make([]byte, n)...)
}
