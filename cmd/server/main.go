// Command server is the dedicated server: it accepts clients through the
// stateless cookie handshake and serves an echo (or discard) application.
//
//	go run ./cmd/server                       # 0.0.0.0:7777, echo
//	go run ./cmd/server -listen 127.0.0.1:9000 -app discard
//	UDPGATE_MAGIC=1011 go run ./cmd/server    # every flag has an environment variable
//	go run ./cmd/server -config server.toml   # ... and a config file key
//	go run ./cmd/server -print-config > server.toml
//	go run ./cmd/server -metrics 127.0.0.1:9100   # Prometheus /metrics and pprof
//
// Settings apply in the order defaults < config file < environment <
// command-line flags (config.go). Stop the server with Ctrl-C or SIGTERM:
// every client is told (Disconnect, reason 2). docs/operations.md has the
// details.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/udpgate/udpgate/conn"
	"github.com/udpgate/udpgate/fastpath"
	"github.com/udpgate/udpgate/metrics"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr); err != nil {
		// Validation reports every bad setting, one per line.
		for line := range strings.Lines(err.Error()) {
			fmt.Fprint(os.Stderr, "server: ", line)
		}
		fmt.Fprintln(os.Stderr)
		os.Exit(1)
	}
}

// run loads the settings, serves until ctx ends or SIGINT/SIGTERM arrives,
// then shuts down gracefully. A second signal during the shutdown kills the
// process (the default action is restored after the first).
func run(ctx context.Context, args []string, lookupEnv func(string) (string, bool), stdout, stderr io.Writer) error {
	o, err := load(args, lookupEnv, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if o.printConfig {
		return o.writeConfig(stdout)
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: o.level()}))

	srv, err := conn.Listen(o.listen, o.config(logger))
	if err != nil {
		return fmt.Errorf("cannot start the server on %s: %w", o.where("listen"), err)
	}
	attrs := []any{"addr", srv.Addr(), "app", o.app, "magic", o.magic,
		"network_version", o.networkVersion, "session_id", o.sessionID, "max_clients", o.maxClients}
	if o.configPath != "" {
		attrs = append(attrs, "config", o.configPath)
	}
	logger.Info("listening", attrs...)

	var ep *metrics.Endpoint
	if o.metrics != "" {
		reg := metrics.NewRegistry(srv)
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Name: "max_clients",
			Help: "The -max-clients setting: connections beyond it are denied.",
		}, func() float64 { return float64(o.maxClients) }))
		ep, err = metrics.Listen(o.metrics, metrics.Handler(reg, logger), logger)
		if err != nil {
			_ = srv.Close()
			return fmt.Errorf("%s: %w: choose a free address, or leave -metrics empty to turn metrics off", o.where("metrics"), err)
		}
		logger.Info("serving metrics and pprof", "addr", ep.Addr().String(),
			"metrics", ep.URL()+"/metrics", "pprof", ep.URL()+"/debug/pprof/")
		if !isLoopback(ep.Addr()) {
			logger.Warn("the metrics address is reachable from other hosts, and pprof shows the command line and memory: prefer a loopback address such as 127.0.0.1:9100, or firewall it",
				"addr", ep.Addr().String())
		}
	}

	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	var tick <-chan time.Time
	if o.summary > 0 {
		t := time.NewTicker(o.summary)
		defer t.Stop()
		tick = t.C
	}
	prev := srv.Stats()
	for {
		select {
		case <-ctx.Done():
			stop() // a second signal kills
			logger.Info("shutting down: disconnecting clients", "connections", srv.Len())
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := srv.Shutdown(sctx)
			if ep != nil {
				// After the server, so a last scrape sees the shutdown.
				if merr := ep.Shutdown(sctx); err == nil && merr != nil {
					err = fmt.Errorf("metrics endpoint: %w", merr)
				}
			}
			cancel()
			logSummary(logger, prev, srv.Stats(), 0)
			return err
		case <-tick:
			cur := srv.Stats()
			logSummary(logger, prev, cur, o.summary)
			prev = cur
		}
	}
}

// isLoopback reports whether a listening address is reachable only from
// this host.
func isLoopback(a net.Addr) bool {
	t, ok := a.(*net.TCPAddr)
	return ok && t.IP.IsLoopback()
}

// config is the conn.Config of the settings.
func (o *options) config(logger *slog.Logger) conn.Config {
	rate := o.challengeRate
	if rate == 0 {
		rate = -1 // unlimited
	}
	var h conn.Handler = discard{}
	if o.app == "echo" {
		h = echo{}
	}
	return conn.Config{
		Magic:           o.magic,
		SessionID:       uint8(o.sessionID),
		NetworkVersion:  uint32(o.networkVersion),
		NetworkFeatures: uint16(o.networkFeatures),
		Sockets:         o.sockets,
		BatchSize:       o.batch,
		MaxClients:      o.maxClients,
		MaxDatagram:     o.maxDatagram,
		Timeout:         o.timeout,
		ChallengeRate:   rate,
		Overload:        conn.OverloadConfig{Enabled: o.overload},
		Handler:         h,
		Logger:          logger,
	}
}

// logSummary logs one line: connections, handshakes, packets and drops by
// reason over the last interval.
func logSummary(logger *slog.Logger, prev, cur conn.Stats, every time.Duration) {
	attrs := []any{
		"connections", cur.Connections,
		"accepted", cur.Accepted - prev.Accepted,
		"initials", cur.HandshakeIn[fastpath.TypeInitial] - prev.HandshakeIn[fastpath.TypeInitial],
		"challenges", cur.HandshakeOut[fastpath.TypeChallenge] - prev.HandshakeOut[fastpath.TypeChallenge],
		"responses", cur.HandshakeIn[fastpath.TypeResponse] - prev.HandshakeIn[fastpath.TypeResponse],
		"denied", cur.DeniedFull + cur.DeniedRefused - prev.DeniedFull - prev.DeniedRefused,
		"migrations", cur.Migrations - prev.Migrations,
		"pkts_in", cur.Sockets.RxPackets - prev.Sockets.RxPackets,
		"pkts_out", cur.Sockets.TxPackets - prev.Sockets.TxPackets,
		"kernel_drops", cur.Sockets.RxDrops - prev.Sockets.RxDrops,
	}
	var drops []string
	for r := range cur.Drops {
		if n := cur.Drops[r] - prev.Drops[r]; n > 0 {
			drops = append(drops, fastpath.DropReason(r).String()+"="+strconv.FormatUint(n, 10))
		}
	}
	attrs = append(attrs, "drops", strings.Join(drops, ","))
	msg := "summary"
	if every == 0 {
		msg = "final"
	}
	logger.Info(msg, attrs...)
}

// echo sends every Data payload back to its sender.
type echo struct{ conn.NopHandler }

func (echo) OnPacket(c *conn.Conn, payload []byte) { _, _ = c.Send(payload) }

type discard struct{ conn.NopHandler }
