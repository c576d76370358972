package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/udpgate/udpgate/cmd/internal/sealflag"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/traffic/loadgen"
	"github.com/udpgate/udpgate/internal/wire"
	"github.com/udpgate/udpgate/message"
)

const loadSynopsis = `Run -clients simulated clients against a server on this host. Each client
has its own source address and port: -sources addresses from 127.1.0.1 up,
each hosting one client per load socket, all over a few batched sockets.
Every client connects (the full handshake), sends Data packets at -rate per
second for -duration (each echoed by the server's echo application; the
first 8 payload bytes carry the send time), then sends -disconnect
Disconnect packets.

The report gives the handshake rate and latency (first Initial to Ack,
resends included), Data round trips per second, their latency, and losses
(requests unanswered for -loss-timeout). A live progress line is shown when
standard output is a terminal.

Sending stops after -duration or -count Data packets, whichever comes first,
or as soon as every client is gone (closed by the server, timed out after
hearing nothing from it for 5 s, or lost in a failed restart). Use the server's echo application (cmd/server -app echo,
the default).

With -messages reliable (or unreliable) the clients send messages instead of
Data: -message-rate messages per second per client, each -message-size bytes
(the first 16 carry the first-send time and a number), on the server's
reliable-ordered channel 0 (or unreliable channel 1) of the tools' channel
layout (cmd/server -messages, on by default). The report counts the echoes:
delivered, out of order, duplicated, and their round trips from the first
send, resends included. At the end the clients wait up to 5 s for the
echoes of reliable messages still in flight; a reliable message without
its echo then, or one out of order, fails the command. -count bounds the
messages sent.

With -bulk-size N every client also sends a bulk stream: N-byte
reliable-ordered messages at -bulk-rate a second (it may be fractional:
0.5 is one every 2 s; each load socket sends its first at once) on the
bulk channel 3, whose entries the message layer sends after the other
channels' in every packet and within its send rate: a download beside the
game's messages. It goes beside -messages traffic or alone (the clients
then send only bulk messages); -count bounds both together. Bulk messages
carry the same header, are numbered apart and are reported apart: sent,
delivered, goodput (bulk bytes echoed per second of the run, the wait for
the last echoes included) and round trips from the first send to the
echo's last byte. A bulk message that finds the client's queue full (the
server or the send rate does not keep up) is skipped and counted as
refused. A message above -message-max-size (256 KiB by default, at most
8 MiB) is refused: raise it here and the server's -message-max-size for
larger bulk messages (or -messages reliable ones). Each client may queue
up to 2 × -message-max-size, so -clients × (2 × -message-max-size +
2 × -bulk-size) must stay within 4 GiB (128 clients of 8 MiB bulk
messages). The end of the run waits longer for bulk echoes, by the time
the queued bulk bytes take to go and come back; a bulk message without
its echo then, or one out of order, fails the command.

With -private-key-file and -protocol-id the clients run in sealed mode
against a server with the same key (cmd/server -private-key-file): the
command makes a netcode.io connect token for each client, as a backend
would, each client proves it after the handshake, and every Data packet is
sealed both ways. Refused tokens are reported by reason.

The exit status is 0 only when every client connected, lasted to the end
and got answers; otherwise 1, and the report lists how clients ended
(denied and why, timed out, closed by the server and why). -json prints the
report as one JSON object on standard output instead of the text.`

// Bounds of the load command's settings.
const (
	loadMaxDuration = 10 * time.Minute
	loadMaxCount    = 1_000_000_000
	// loadProgressEvery: how often the live progress line is redrawn.
	loadProgressEvery = 250 * time.Millisecond
	// loadMaxBulkMemory bounds what the clients' bulk streams may hold
	// (loadBulkMemory): the server under test holds about as much again,
	// on the same machine.
	loadMaxBulkMemory = 4 << 30
)

// loadBulkMemory is about the most memory the clients' bulk streams can
// hold: each client's message queue takes up to 2 × the largest message
// (the message layer's default, at least 2 × 64 KiB) when the server
// does not keep up, and it reassembles an echo into a copy of its own.
func loadBulkMemory(clients, bulkSize, maxSize int) int64 {
	return int64(clients) * (2*int64(max(maxSize, 64<<10)) + 2*int64(bulkSize))
}

func runLoad(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("load", loadSynopsis, stderr)
	clients := fs.Int("clients", 1000, fmt.Sprintf("simulated clients, 1..%d", loadgen.MaxClients))
	sources := fs.Int("sources", 0, "distinct source `addresses` (127.1.0.1 and up); 0: clients ÷ -sockets. Fewer sources mean more load sockets, one port per client at each address")
	sockets := fs.Int("sockets", loadgen.DefaultSockets, "load sockets (ignored when -sources is set)")
	rate := fs.Float64("rate", 10, "Data packets per second per client; 0 sends as fast as answers come back (closed loop, at most -window outstanding per socket)")
	duration := fs.Duration("duration", 10*time.Second, fmt.Sprintf("how long to exchange Data, at most %v", loadMaxDuration))
	count := fs.Int64("count", 10_000_000, fmt.Sprintf("stop after this many Data packets, at most %d", loadMaxCount))
	payload := fs.Int("payload", loadgen.DefaultPayloadSize, "Data payload `bytes` (8 or more carry the send time)")
	window := fs.Int("window", loadgen.DefaultWindow, "most requests (and, while connecting, handshakes) outstanding per socket")
	batch := fs.Int("batch", loadgen.DefaultBatch, "datagrams per sendmmsg/recvmmsg, 1..1024")
	connectTimeout := fs.Duration("connect-timeout", loadgen.DefaultConnectTimeout, "a handshake that makes no progress this long fails")
	lossTimeout := fs.Duration("loss-timeout", loadgen.DefaultLossTimeout, "a Data packet unanswered this long counts as lost")
	disconnect := fs.Int("disconnect", 5, "Disconnect packets each client sends at the end (the protocol says 5); 0 leaves the connections to time out")
	messages := fs.String("messages", "", "send messages instead of Data: reliable (channel 0, reliable-ordered) or unreliable (channel 1); the server needs -messages (its default). Empty or off: Data")
	msgSize := fs.Int("message-size", loadgen.DefaultMessageSize, fmt.Sprintf("with -messages: message `bytes`, at least %d (first-send time and number); reliable ones may span packets", loadgen.MinMessageSize))
	msgRate := fs.Float64("message-rate", loadgen.DefaultMessageRate, "with -messages: messages per second per client")
	msgMax := fs.Int("message-max-size", message.DefaultMaxMessageSize, fmt.Sprintf("with -messages or -bulk-size: the largest reliable message in `bytes`, at most %d; as the server's -message-max-size, which must allow it too", message.MaxMessageSizeLimit))
	bulkSize := fs.Int("bulk-size", 0, fmt.Sprintf("add a bulk stream to every client: reliable-ordered messages of this many `bytes` (at least %d, at most -message-max-size) on the bulk channel 3, beside -messages or alone; 0: none", loadgen.MinMessageSize))
	bulkRate := fs.Float64("bulk-rate", loadgen.DefaultBulkRate, "with -bulk-size: bulk messages per second per client (may be fractional: 0.5 is one every 2 s)")
	jsonOut := fs.Bool("json", false, "print the report as one JSON object on standard output (no text, no progress line)")
	tf := addTrafficFlags(fs, "the clients' tokens are made with it")
	t, err := tf.parse(fs, args, true)
	if err != nil {
		return err
	}
	key, protocolID, server, wc := t.key, t.protocol, t.server, t.wire
	if err := loadgen.CheckServer(server); err != nil {
		return usagef("-server %v: the load generator needs an IPv4 loopback server (127.0.0.0/8): its many source addresses exist only there", server)
	}
	magic, _ := wire.ParseMagic(wc.Magic) // checked by config
	switch {
	case *clients < 1 || *clients > loadgen.MaxClients:
		return usagef("-clients %d is out of range: use 1..%d", *clients, loadgen.MaxClients)
	case *sources < 0:
		return usagef("-sources %d is negative: use a count of addresses, or 0 for clients ÷ -sockets", *sources)
	case *sockets < 1 || *sockets > loadgen.MaxSockets:
		return usagef("-sockets %d is out of range: use 1..%d", *sockets, loadgen.MaxSockets)
	case !(*rate >= 0) || *rate > 1e6:
		return usagef("-rate %v is out of range: use packets per second per client (0..1000000), 0 for closed loop", *rate)
	case *duration <= 0 || *duration > loadMaxDuration:
		return usagef("-duration %v is out of range: use more than 0 and at most %v", *duration, loadMaxDuration)
	case *count < 1 || *count > loadMaxCount:
		return usagef("-count %d is out of range: use 1..%d", *count, loadMaxCount)
	case *payload < 1 || loadDataLen(magic, *payload, key != nil) > protocol.DefaultMaxDatagram:
		return usagef("-payload %d is out of range: use 1 byte up to what fits a %d-byte datagram, %d bytes of header%s", *payload,
			protocol.DefaultMaxDatagram, loadDataLen(magic, 0, key != nil), loadSealedText(key != nil))
	case *window < 1 || *window > 1<<16:
		return usagef("-window %d is out of range: use 1..65536", *window)
	case *batch < 1 || *batch > 1024:
		return usagef("-batch %d is out of range: use 1..1024", *batch)
	case *connectTimeout <= 0 || *connectTimeout > time.Minute:
		return usagef("-connect-timeout %v is out of range: use more than 0 and at most 1m", *connectTimeout)
	case *lossTimeout <= 0 || *lossTimeout > 10*time.Second:
		return usagef("-loss-timeout %v is out of range: use more than 0 and at most 10s", *lossTimeout)
	case *disconnect < 0 || *disconnect > 10:
		return usagef("-disconnect %d is out of range: use 0..10", *disconnect)
	}
	msgMode, err := loadgen.ParseMessageMode(*messages)
	if err != nil {
		return usagef("-messages %q: use reliable or unreliable (or off, the default: Data)", *messages)
	}
	if msgMode == loadgen.MessagesOff {
		for _, name := range []string{"message-size", "message-rate"} {
			if isSetOnCommandLine(fs, name) {
				return usagef("-%s needs -messages reliable or unreliable", name)
			}
		}
		if *bulkSize == 0 && isSetOnCommandLine(fs, "message-max-size") {
			return usagef("-message-max-size needs -messages reliable or -bulk-size")
		}
	}
	if *bulkSize == 0 && isSetOnCommandLine(fs, "bulk-rate") {
		return usagef("-bulk-rate needs -bulk-size")
	}
	switch {
	case *msgSize < loadgen.MinMessageSize:
		return usagef("-message-size %d is too small: use at least %d bytes (the first-send time and the message's number)", *msgSize, loadgen.MinMessageSize)
	case !(*msgRate > 0) || *msgRate > 1e6:
		return usagef("-message-rate %v is out of range: use messages per second per client, more than 0 and at most 1000000", *msgRate)
	case *msgMax < 1 || *msgMax > message.MaxMessageSizeLimit:
		return usagef("-message-max-size %d is out of range: use 1..%d bytes, as the server's -message-max-size", *msgMax, message.MaxMessageSizeLimit)
	case msgMode == loadgen.MessagesReliable && *msgSize > *msgMax:
		return usagef("-message-size %d is above -message-max-size %d: raise -message-max-size (up to %d), here and the server's -message-max-size", *msgSize, *msgMax, message.MaxMessageSizeLimit)
	case *bulkSize < 0 || *bulkSize > 0 && *bulkSize < loadgen.MinMessageSize:
		return usagef("-bulk-size %d is out of range: use at least %d bytes (the first-send time and the message's number), or 0 for no bulk stream", *bulkSize, loadgen.MinMessageSize)
	case *bulkSize > *msgMax:
		return usagef("-bulk-size %d is above -message-max-size %d, the largest reliable message: raise -message-max-size to at least %d (at most %d), both here and the server's (cmd/server -message-max-size), which must allow it too",
			*bulkSize, *msgMax, *bulkSize, message.MaxMessageSizeLimit)
	case !(*bulkRate > 0) || *bulkRate > 1e6:
		return usagef("-bulk-rate %v is out of range: use bulk messages per second per client, more than 0 (fractions allowed, e.g. 0.5) and at most 1000000", *bulkRate)
	case *bulkSize > 0 && *clients > 0 && loadBulkMemory(*clients, *bulkSize, *msgMax) > loadMaxBulkMemory:
		return usagef("-clients %d with -bulk-size %d and -message-max-size %d: the clients' bulk queues and echoes could hold %d MiB (each client queues up to 2 × -message-max-size when the server does not keep up, and reassembles each echo), above the %d MiB allowed: use fewer -clients (at most %d) or smaller messages",
			*clients, *bulkSize, *msgMax, loadBulkMemory(*clients, *bulkSize, *msgMax)>>20, loadMaxBulkMemory>>20,
			loadMaxBulkMemory/loadBulkMemory(1, *bulkSize, *msgMax))
	}
	if *sources > 0 && (*clients+*sources-1)/(*sources) > loadgen.MaxSockets {
		return usagef("-sources %d is too few for %d clients: each address can host at most %d clients (one per load socket)", *sources, *clients, loadgen.MaxSockets)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	gen, err := loadgen.New(loadgen.Config{
		Server:          server,
		Mode:            loadgen.ModeData,
		Clients:         *clients,
		Sockets:         *sockets,
		Sources:         *sources,
		Batch:           *batch,
		Window:          *window,
		PayloadSize:     *payload,
		Rate:            *rate,
		Magic:           magic,
		NetworkVersion:  wc.NetworkVersion,
		NetworkFeatures: wc.NetworkFeatures,
		LossTimeout:     *lossTimeout,
		ConnectTimeout:  *connectTimeout,
		MaxPackets:      uint64(*count),
		PrivateKey:      key,
		ProtocolID:      protocolID,
		Messages:        msgMode,
		MessageSize:     *msgSize,
		MessageRate:     *msgRate,
		MessageConfig:   message.Config{MaxMessageSize: *msgMax},
		BulkSize:        *bulkSize,
		BulkRate:        *bulkRate,
	})
	if err != nil {
		return err
	}
	defer gen.Close()
	cfg := gen.Config()
	rep := &loadReport{
		Server: server.String(), Clients: cfg.Clients, Sources: cfg.SourcesUsed(), Sockets: cfg.Sockets,
		Rate: *rate, PayloadBytes: cfg.PayloadSize, DurationSeconds: duration.Seconds(),
		Sealed: key != nil,
	}
	if msgMode != loadgen.MessagesOff {
		rep.Messages, rep.MessageBytes, rep.MessageRate = msgMode.String(), cfg.MessageSize, cfg.MessageRate
	}
	if cfg.BulkSize > 0 {
		rep.BulkBytes, rep.BulkRate = cfg.BulkSize, cfg.BulkRate
	}
	if msgMode != loadgen.MessagesOff || cfg.BulkSize > 0 {
		rep.MessageMaxBytes = *msgMax
	}
	text := stdout
	if *jsonOut {
		text = io.Discard
	}
	mode := ""
	if cfg.BulkSize > 0 && msgMode != loadgen.MessagesOff {
		mode = fmt.Sprintf(", and %g bulk messages/s per client of %d bytes", cfg.BulkRate, cfg.BulkSize)
	}
	if key != nil {
		mode += fmt.Sprintf(", sealed (protocol id %s, key %s)", sealflag.FormatProtocolID(protocolID), sealflag.KeyID(key))
	}
	if msgMode != loadgen.MessagesOff {
		fmt.Fprintf(text, "load: %d clients from %d addresses (127.1.0.1 up) × %d sockets → %v, %g %s messages/s per client, %d bytes each, for %v%s\n",
			cfg.Clients, cfg.SourcesUsed(), cfg.Sockets, server, cfg.MessageRate, msgMode, cfg.MessageSize, *duration, mode)
	} else if cfg.BulkSize > 0 {
		fmt.Fprintf(text, "load: %d clients from %d addresses (127.1.0.1 up) × %d sockets → %v, %g bulk messages/s per client, %d bytes each, for %v%s\n",
			cfg.Clients, cfg.SourcesUsed(), cfg.Sockets, server, cfg.BulkRate, cfg.BulkSize, *duration, mode)
	} else {
		fmt.Fprintf(text, "load: %d clients from %d addresses (127.1.0.1 up) × %d sockets → %v, %s, %d-byte payloads, for %v%s\n",
			cfg.Clients, cfg.SourcesUsed(), cfg.Sockets, server, loadRateText(*rate), cfg.PayloadSize, *duration, mode)
	}

	live := newLoadProgress(text)
	live.start(func() string {
		c := gen.Counters()
		return fmt.Sprintf("connecting: %d/%d connected, %d failed", c.Handshakes, cfg.Clients, c.HandshakeFailures)
	})
	cres, cerr := gen.Connect(ctx)
	live.stop()
	loadPrintConnect(text, &cres)
	rep.Connect = newLoadConnectJSON(&cres)

	var runErr error
	switch {
	case cres.Connected == 0:
		// Nobody to run with; the endings below say why.
		runErr = cerr
	case ctx.Err() != nil:
		runErr = errors.New("interrupted while connecting")
	case cerr != nil:
		runErr = cerr
	default:
		runErr = loadRun(ctx, gen, cres.Connected, *duration, server, text, rep)
	}
	if cres.Connected > 0 {
		runErr = errors.Join(runErr, loadDisconnect(gen, *disconnect, text, rep))
	}

	c := gen.Counters()
	rep.Ended = c.Ended()
	for _, e := range c.Endings() {
		rep.Endings = append(rep.Endings, loadEndingJSON{What: e.What, Count: e.Count})
	}
	if c.Ended() > 0 {
		fmt.Fprintf(text, "ended: %d of %d clients did not last to the end:\n", c.Ended(), cfg.Clients)
		for _, e := range c.Endings() {
			fmt.Fprintf(text, "  %-50s %d\n", e.What+":", e.Count)
		}
		// The endings say more than a generic error.
		if cres.Connected == 0 && cerr != nil {
			runErr = fmt.Errorf("%w; how they ended: %s", cerr, loadEndingsText(c.Endings()))
		} else {
			runErr = fmt.Errorf("%d of %d clients failed or were closed by the server: %s%s", c.Ended(), cfg.Clients, loadEndingsText(c.Endings()), loadBulkHint(&c, &cfg))
		}
	}
	if runErr != nil {
		rep.Error = runErr.Error()
	}
	rep.OK = runErr == nil
	if *jsonOut {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return errors.Join(runErr, err)
		}
	}
	return runErr
}

// loadRun exchanges Data for the window, stopping early when every client
// is gone, and reports it.
func loadRun(ctx context.Context, gen *loadgen.Generator, clients int, duration time.Duration, server fmt.Stringer, text io.Writer, rep *loadReport) error {
	// gone: every client that connected has ended (closed by the server,
	// timed out by its silence, or lost in a failed restart).
	gone := func(c *loadgen.Counters) bool { return c.Handshakes <= c.Ended()-c.HandshakeFailures }

	runStart := time.Now()
	var prev loadgen.Counters
	prevAt := runStart
	live := newLoadProgress(text)
	cfg := gen.Config()
	msgs := cfg.Messages != loadgen.MessagesOff || cfg.BulkSize > 0
	live.start(func() string {
		c, now := gen.Counters(), time.Now()
		if msgs {
			secs := now.Sub(prevAt).Seconds()
			rt := float64(c.MessagesDelivered-prev.MessagesDelivered) / secs
			bulk := ""
			if cfg.BulkSize > 0 {
				bulk = fmt.Sprintf("  bulk %s B/s echoed  sent %d  echoed %d  refused %d",
					loadThousands(float64(c.BulkBytes-prev.BulkBytes)/secs), c.BulkSent, c.BulkDelivered, c.BulkRefused)
			}
			prev, prevAt = c, now
			return fmt.Sprintf("[%5.1fs/%v] %s messages echoed/s  sent %d  echoed %d  refused %d%s  closed by server %d",
				now.Sub(runStart).Seconds(), duration, loadThousands(rt), c.MessagesSent, c.MessagesDelivered, c.MessagesRefused, bulk, c.Closed)
		}
		rt := float64(c.Replies-prev.Replies) / now.Sub(prevAt).Seconds()
		prev, prevAt = c, now
		return fmt.Sprintf("[%5.1fs/%v] %s round trips/s  sent %d  answered %d  lost %d  closed by server %d",
			now.Sub(runStart).Seconds(), duration, loadThousands(rt), c.Sent, c.Replies, c.Lost, c.Closed)
	})
	rres, err := gen.Run(ctx, loadgen.RunSpec{Window: duration, Until: gone})
	live.stop()
	if err != nil {
		return err
	}
	if msgs {
		loadPrintMessages(text, &rres, clients, &cfg)
	} else {
		loadPrintRun(text, &rres, clients)
	}
	rep.Run = newLoadRunJSON(&rres, &cfg)
	switch {
	case rres.Stopped:
		fmt.Fprintf(text, "stopped after %v: every client is gone\n", rres.Elapsed.Round(time.Millisecond))
		rep.Run.StoppedEarly = true
		return errors.New("every client was gone before the end of -duration")
	case ctx.Err() != nil:
		return errors.New("interrupted")
	case msgs:
		return loadMessagesVerdict(&rres, &cfg, server)
	case rres.Window.Replies == 0:
		return fmt.Errorf("no Data came back from %v: is it running the echo application?", server)
	}
	return nil
}

// loadMessagesVerdict fails a message run that got no echo and a reliable
// one (small or bulk) that missed or misordered any.
func loadMessagesVerdict(r *loadgen.RunResult, cfg *loadgen.Config, server fmt.Stringer) error {
	t := r.Total
	var errs []error
	switch mode := cfg.Messages; {
	case mode == loadgen.MessagesOff:
	case t.MessagesDelivered == 0:
		errs = append(errs, fmt.Errorf("no message echoes came back from %v: does it run with -messages (its default) and the echo application?", server))
	case mode != loadgen.MessagesReliable:
	case r.MessagesUnanswered > 0:
		errs = append(errs, fmt.Errorf("%d reliable messages had no echo at the end (of %d sent)", r.MessagesUnanswered, t.MessagesSent))
	case t.MessagesOutOfOrder > 0 || t.MessagesDuplicated > 0:
		errs = append(errs, fmt.Errorf("reliable-ordered messages came back %d times out of order and %d times duplicated", t.MessagesOutOfOrder, t.MessagesDuplicated))
	}
	switch {
	case cfg.BulkSize == 0:
	case t.BulkDelivered == 0:
		errs = append(errs, fmt.Errorf("no bulk message echoes came back from %v (%d sent): does it run with -messages (its default), the echo application, and a -message-max-size of at least %d?",
			server, t.BulkSent, cfg.BulkSize))
	case r.BulkUnanswered > 0:
		errs = append(errs, fmt.Errorf("%d bulk messages had no echo at the end (of %d sent)", r.BulkUnanswered, t.BulkSent))
	case t.BulkOutOfOrder > 0 || t.BulkDuplicated > 0:
		errs = append(errs, fmt.Errorf("bulk messages came back %d times out of order and %d times duplicated", t.BulkOutOfOrder, t.BulkDuplicated))
	}
	return errors.Join(errs...)
}

// loadBulkHint explains clients that ended without one bulk echo: a
// server whose -message-max-size is below -bulk-size drops every packet
// of a bulk message, hears nothing else from the client and times it out
// (or the client stalls). Empty when bulk echoes came back, or none went.
func loadBulkHint(c *loadgen.Counters, cfg *loadgen.Config) string {
	if cfg.BulkSize == 0 || c.BulkSent == 0 || c.BulkDelivered > 0 {
		return ""
	}
	return fmt.Sprintf("; no bulk message came back: does the server's -message-max-size allow %d bytes (-bulk-size)?", cfg.BulkSize)
}

// loadPrintMessages reports a message run, from its totals: the drain's
// echoes count. Goodput is of the window alone.
func loadPrintMessages(w io.Writer, r *loadgen.RunResult, clients int, cfg *loadgen.Config) {
	t := r.Total
	if mode := cfg.Messages; mode != loadgen.MessagesOff {
		q := r.MessageLatency
		fmt.Fprintf(w, "messages: %d clients for %v, %s: %d sent, %d delivered (echoed), %d out of order, %d duplicated, %d unanswered at the end\n",
			clients, r.Elapsed.Round(time.Millisecond), mode, t.MessagesSent, t.MessagesDelivered, t.MessagesOutOfOrder, t.MessagesDuplicated, r.MessagesUnanswered)
		fmt.Fprintf(w, "message round trips (from the first send): p50 %v p90 %v p99 %v max %v; %d entries resent (lost or late), %d copied ahead of loss, %d sends refused (queue full), %d Messages packets, %d ack-only KeepAlives\n",
			loadRound(q.P50), loadRound(q.P90), loadRound(q.P99), loadRound(q.Max), r.MessagesResent, r.MessagesCopies, t.MessagesRefused, t.MessagePackets, t.MessageAcks)
	}
	if cfg.BulkSize > 0 {
		q := r.BulkLatency
		fmt.Fprintf(w, "bulk: %d clients for %v, %d-byte messages: %d sent, %d delivered (echoed), %d refused (queue full), %d out of order, %d duplicated, %d unanswered at the end; goodput %s bytes/s over %v (the drain included)\n",
			clients, r.Elapsed.Round(time.Millisecond), cfg.BulkSize, t.BulkSent, t.BulkDelivered, t.BulkRefused, t.BulkOutOfOrder, t.BulkDuplicated, r.BulkUnanswered,
			loadThousands(r.BulkGoodput()), r.Ran.Round(time.Millisecond))
		fmt.Fprintf(w, "bulk round trips (from the first send to the echo's last byte): p50 %v p90 %v p99 %v max %v\n",
			loadRound(q.P50), loadRound(q.P90), loadRound(q.P99), loadRound(q.Max))
		fmt.Fprintf(w, "bulk messages delivered per client: min %d median %d max %d\n", r.BulkPerClient[0], r.BulkPerClient[1], r.BulkPerClient[2])
		if cfg.Messages == loadgen.MessagesOff {
			fmt.Fprintf(w, "message packets: %d entries resent (lost or late), %d copied ahead of loss, %d Messages packets, %d ack-only KeepAlives\n",
				r.MessagesResent, r.MessagesCopies, t.MessagePackets, t.MessageAcks)
		}
	}
	if t.MessagesDropped+t.MessagesUnexpected+t.Unexpected > 0 {
		fmt.Fprintf(w, "dropped: %d Messages packets refused by the message layer, %d unexpected messages, %d unexpected datagrams\n",
			t.MessagesDropped, t.MessagesUnexpected, t.Unexpected)
	}
	if t.KeepAlivesIn+t.KeepAlivesOut+t.Closed > 0 {
		fmt.Fprintf(w, "connections: %d KeepAlives sent, %d received, %d closed by the server\n", t.KeepAlivesOut, t.KeepAlivesIn, t.Closed)
	}
}

// loadDisconnect closes the clients' connections.
func loadDisconnect(gen *loadgen.Generator, copies int, stdout io.Writer, rep *loadReport) error {
	if copies == 0 {
		fmt.Fprintln(stdout, "disconnect: skipped (-disconnect 0); the server times the connections out")
		return nil
	}
	// A fresh context: an interrupt ends the run, but the server should
	// still hear that the clients are gone.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := gen.Disconnect(ctx, copies, 0)
	rep.DisconnectPackets = n
	fmt.Fprintf(stdout, "disconnect: %d Disconnect packets (%d per client)\n", n, copies)
	return err
}

// loadDataLen is the size of a Data packet with n payload bytes.
func loadDataLen(m wire.Magic, n int, sealed bool) int {
	if sealed {
		return wire.SealedConnLen(m, n)
	}
	return wire.ConnLen(m, protocol.KindData, n)
}

func loadSealedText(sealed bool) string {
	if sealed {
		return " and seal"
	}
	return ""
}

// loadEndingsText is the endings on one line, for the error message.
func loadEndingsText(es []loadgen.Ending) string {
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = fmt.Sprintf("%s %d", e.What, e.Count)
	}
	return strings.Join(parts, "; ")
}

func loadPrintConnect(w io.Writer, r *loadgen.ConnectResult) {
	fmt.Fprintf(w, "handshakes: %d/%d connected in %v (%s/s), latency p50 %v p99 %v max %v; %d failed; %d handshake packets sent\n",
		r.Connected, r.Clients, r.Elapsed.Round(time.Millisecond), loadThousands(r.PerSecond()),
		loadRound(r.Latency.P50), loadRound(r.Latency.P99), loadRound(r.Latency.Max), r.Failed, r.Packets)
}

func loadPrintRun(w io.Writer, r *loadgen.RunResult, clients int) {
	c := r.Window
	lossPct := 0.0
	if c.Sent > 0 {
		lossPct = 100 * float64(c.Lost) / float64(c.Sent)
	}
	fmt.Fprintf(w, "data: %d clients for %v: %d sent, %d round trips (%s/s), latency p50 %v p99 %v max %v\n",
		clients, r.Elapsed.Round(time.Millisecond), c.Sent, c.Replies, loadThousands(r.PerSecond()),
		loadRound(r.Latency.P50), loadRound(r.Latency.P99), loadRound(r.Latency.Max))
	fmt.Fprintf(w, "losses: %d lost (%.3f%%), %d late, %d unanswered at the end; server-reported client→server losses %d; %d unexpected datagrams\n",
		c.Lost, lossPct, c.Late, r.Unanswered, c.SeqLost, c.Unexpected)
	if c.KeepAlivesIn+c.KeepAlivesOut+c.Closed > 0 {
		fmt.Fprintf(w, "connections: %d KeepAlives sent, %d received, %d closed by the server\n", c.KeepAlivesOut, c.KeepAlivesIn, c.Closed)
	}
}

func loadRateText(rate float64) string {
	if rate == 0 {
		return "closed loop"
	}
	return fmt.Sprintf("%g Data/s per client", rate)
}

// loadRound rounds a latency for display.
func loadRound(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}

// loadThousands formats x rounded, with a comma between thousands.
func loadThousands(x float64) string {
	s := fmt.Sprintf("%.0f", x)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 && s[i-1] != '-' {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// loadProgress redraws one status line on a terminal while a phase runs;
// on anything else it does nothing, so logs and pipes get only the
// summary.
type loadProgress struct {
	w    io.Writer
	on   bool
	done chan struct{}
	quit chan struct{}
}

func newLoadProgress(w io.Writer) *loadProgress {
	return &loadProgress{w: w, on: loadIsTerminal(w)}
}

func (p *loadProgress) start(line func() string) {
	if !p.on {
		return
	}
	p.quit, p.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(p.done)
		t := time.NewTicker(loadProgressEvery)
		defer t.Stop()
		for {
			select {
			case <-p.quit:
				fmt.Fprint(p.w, "\r\033[K") // clear the line for the summary
				return
			case <-t.C:
				fmt.Fprintf(p.w, "\r\033[K%s", line())
			}
		}
	}()
}

func (p *loadProgress) stop() {
	if !p.on || p.quit == nil {
		return
	}
	close(p.quit)
	<-p.done
	p.quit = nil
}

// loadIsTerminal reports whether w is a terminal. A character device is
// taken for one: that test is portable (cmd/client builds everywhere),
// and the only other character device one writes to, /dev/null, does not
// mind a progress line.
func loadIsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok || os.Getenv("TERM") == "dumb" {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
