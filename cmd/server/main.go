// Command server is the dedicated server: it accepts clients through the
// stateless cookie handshake and serves an echo (or discard) application.
//
//	go run ./cmd/server                       # 0.0.0.0:7777, echo
//	go run ./cmd/server -listen 127.0.0.1:9000 -app discard
//	UDPGATE_MAGIC=1011 go run ./cmd/server    # every flag has an environment variable
//	go run ./cmd/server -config server.toml   # ... and a config file key
//	go run ./cmd/server -print-config > server.toml
//	go run ./cmd/server -metrics 127.0.0.1:9100   # Prometheus /metrics, /healthz, /readyz, pprof
//	go run ./cmd/server -version
//
// Settings apply in the order defaults < config file < environment <
// command-line flags (config.go). SIGTERM or Ctrl-C stops the server:
// with -drain-timeout it first stops admitting clients and serves the
// connected ones until they leave or the timeout passes; then every client
// is told (Disconnect, reason 2). SIGHUP re-reads the config file and
// applies what can change live (reload.go). docs/operations.md has the
// details.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/udpgate/udpgate/cmd/internal/agones"
	"github.com/udpgate/udpgate/cmd/internal/sealflag"
	"github.com/udpgate/udpgate/cmd/internal/version"
	"github.com/udpgate/udpgate/conn"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/metrics"
)

func main() {
	if err := run(context.Background(), os.Args[1:], osEnviron(), os.Stdout, os.Stderr); err != nil {
		// Validation reports every bad setting, one per line.
		for line := range strings.Lines(err.Error()) {
			fmt.Fprint(os.Stderr, "server: ", line)
		}
		fmt.Fprintln(os.Stderr)
		os.Exit(1)
	}
}

// run serves with the process's signals: SIGINT and SIGTERM stop, SIGHUP
// reloads. Once the shutdown has begun for good, the signals get their
// default action back, so one more kills the process.
func run(ctx context.Context, args []string, env environ, stdout, stderr io.Writer) error {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	return serve(ctx, args, env, stdout, stderr, sigs, func() { signal.Stop(sigs) })
}

// errDraining is /readyz's answer while the server drains.
var errDraining = errors.New("draining: new clients are refused until the server stops")

// server is a running server and what hangs off it.
type server struct {
	o      *options
	args   []string
	env    environ
	logger *slog.Logger
	level  *slog.LevelVar
	srv    *conn.Server
	ev     *events
	ep     *metrics.Endpoint
	agent  *agones.Agent
}

// serve loads the settings and serves until ctx ends or a stop signal
// arrives on sigs, then drains and shuts down. releaseSignals is called
// when the shutdown is final (no more signals are handled).
func serve(ctx context.Context, args []string, env environ, stdout, stderr io.Writer, sigs <-chan os.Signal, releaseSignals func()) error {
	o, err := load(args, env, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if o.printVersion {
		_, err := fmt.Fprintln(stdout, "udpgate server", version.Get())
		return err
	}
	if o.printConfig {
		return o.writeConfig(stdout)
	}
	s := &server{o: o, args: args, env: env, level: new(slog.LevelVar)}
	s.level.Set(o.level())
	s.logger = newLogger(o.logFormat, stderr, s.level)
	s.ev = newEvents(s.logger)

	var sdk *agones.SDK
	if o.agones {
		if sdk, err = agones.FromEnv(env.lookup); err != nil {
			return err
		}
		if o.privateKey != nil && o.publicAddrs == nil {
			if stopped, err := s.agonesAddress(ctx, sdk, sigs); err != nil || stopped {
				return err
			}
		}
	}
	s.srv, err = conn.Listen(o.listen, o.config(s.logger, s.ev.handler(o.app)))
	if err != nil {
		return fmt.Errorf("cannot start the server on %s: %w", o.where("listen"), err)
	}
	v := version.Get()
	attrs := []any{"addr", s.srv.Addr(), "version", v.Version, "app", o.app, "magic", o.magic,
		"network_version", o.networkVersion, "session_id", o.sessionID, "max_clients", o.maxClients,
		"messages", o.messages}
	if o.configPath != "" {
		attrs = append(attrs, "config", o.configPath)
	}
	attrs = append(attrs, o.sealedAttrs(s.srv.Addr())...)
	s.logger.Info("listening", attrs...)
	o.warnKeyFile(s.logger)

	if o.metrics != "" {
		if err := s.serveMetrics(); err != nil {
			_ = s.srv.Close()
			return err
		}
	}
	if sdk != nil {
		// The agent outlives ctx: health pings go on while the server
		// drains, and Shutdown is said at the very end.
		s.agent = agones.NewAgent(sdk, agones.Options{
			Players:  o.agonesPlayers,
			Capacity: int64(o.maxClients),
			Logger:   s.logger,
		})
		s.ev.agent.Store(s.agent)
		s.agent.Start(context.WithoutCancel(ctx))
		s.logger.Info("agones: talking to the SDK sidecar", "sdk", sdk.URL(), "players", o.agonesPlayers)
	}

	var tick <-chan time.Time
	if o.summary > 0 {
		t := time.NewTicker(o.summary)
		defer t.Stop()
		tick = t.C
	}
	prev := s.srv.Stats()
	summary := func() {
		cur := s.srv.Stats()
		logSummary(s.logger, prev, cur, o.summary)
		prev = cur
	}
	for {
		select {
		case <-ctx.Done():
			return s.stop(nil, tick, summary, releaseSignals, &prev)
		case sig := <-sigs:
			if sig == syscall.SIGHUP {
				s.reload()
				continue
			}
			s.logger.Info("signal: stopping", "signal", sig.String())
			return s.stop(sigs, tick, summary, releaseSignals, &prev)
		case <-tick:
			summary()
		}
	}
}

// agonesAddress sets sealed mode's public address from the GameServer:
// the node's address and the host port of -agones-port-name (or the first
// port). In a fleet only Agones knows it, and the controller writes it
// once the pod is scheduled, which may be after the server starts; so it
// waits up to agonesAddressTimeout. A stop signal meanwhile ends the wait
// and the server (stopped).
func (s *server) agonesAddress(ctx context.Context, sdk *agones.SDK, sigs <-chan os.Signal) (stopped bool, err error) {
	wctx, cancel := context.WithTimeout(ctx, agonesAddressTimeout)
	defer cancel()
	type result struct {
		ap  netip.AddrPort
		gs  agones.GameServer
		err error
	}
	done := make(chan result, 1)
	go func() {
		ap, gs, err := sdk.WaitPublicAddress(wctx, s.o.agonesPortName, s.logger)
		done <- result{ap, gs, err}
	}()
	for {
		select {
		case r := <-done:
			switch {
			case ctx.Err() != nil:
				return true, nil
			case errors.Is(r.err, context.DeadlineExceeded):
				return false, fmt.Errorf("sealed mode needs the public address clients are sent to, and with -agones it comes from the GameServer, but the Agones sidecar did not give one within %v: %w: check that the SDK sidecar runs (%s) and that the GameServer gets scheduled (kubectl describe gameserver), or give -public-addresses IP:port",
					agonesAddressTimeout, r.err, sdk.URL())
			case r.err != nil:
				return false, fmt.Errorf("sealed mode needs the public address clients are sent to, and with -agones it comes from the GameServer, which has none usable: %w: name the GameServer's UDP port with -agones-port-name, or give -public-addresses IP:port", r.err)
			}
			port := s.o.agonesPortName
			if port == "" {
				port = r.gs.Ports[0].Name
			}
			s.o.publicAddrs = []netip.AddrPort{r.ap}
			s.logger.Info("agones: public address from the GameServer", "gameserver", r.gs.Name, "state", r.gs.State,
				"address", r.gs.Address, "port_name", port, "public_addresses", r.ap.String())
			return false, nil
		case sig := <-sigs:
			if sig == syscall.SIGHUP {
				s.logger.Info("signal: SIGHUP ignored while waiting for the GameServer's address: nothing runs yet to reload")
				continue
			}
			s.logger.Info("signal: stopping while waiting for the GameServer's address", "signal", sig.String())
			cancel()
			<-done
			return true, nil
		}
	}
}

// rateGauge is a rate setting as a gauge: a negative one, unlimited, is
// +Inf.
func rateGauge(r float64) float64 {
	if r < 0 {
		return math.Inf(1)
	}
	return r
}

// serveMetrics starts the -metrics endpoint.
func (s *server) serveMetrics() error {
	o := s.o
	reg := metrics.NewRegistry(s.srv)
	v := version.Get()
	reg.MustRegister(
		metrics.NewBuildInfo(v.Version, v.GoVersion, v.Revision),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Name: "max_clients",
			Help: "The max-clients setting (live: SIGHUP changes it): connections beyond it are denied.",
		}, func() float64 { return float64(s.srv.MaxClients()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Name: "inbound_packet_rate",
			Help: "The inbound-packet-rate setting: datagrams per second one proven connection may send before they are dropped as inbound_limited (+Inf: unlimited).",
		}, func() float64 { return rateGauge(s.srv.Config().InboundPacketRate) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Name: "inbound_byte_rate",
			Help: "The inbound-byte-rate setting: bytes per second of datagrams one proven connection may send before they are dropped as inbound_limited (+Inf: unlimited).",
		}, func() float64 { return rateGauge(s.srv.Config().InboundByteRate) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Name: "draining",
			Help: "1 while the server drains (refuses new clients before stopping), else 0.",
		}, func() float64 { return b2f(s.srv.Draining()) }),
	)
	h := metrics.Handler(reg, metrics.HandlerOpts{
		Logger:  s.logger,
		Live:    s.srv.Healthy,
		Ready:   s.ready,
		NoPprof: !o.pprof,
	})
	ep, err := metrics.Listen(o.metrics, h, s.logger)
	if err != nil {
		return fmt.Errorf("%s: %w: choose a free address, or leave -metrics empty to turn metrics off", o.where("metrics"), err)
	}
	s.ep = ep
	attrs := []any{"addr", ep.Addr().String(), "metrics", ep.URL() + "/metrics",
		"healthz", ep.URL() + "/healthz", "readyz", ep.URL() + "/readyz"}
	if o.pprof {
		attrs = append(attrs, "pprof", ep.URL()+"/debug/pprof/")
	}
	s.logger.Info("serving metrics and health checks", attrs...)
	if o.pprof && !isLoopback(ep.Addr()) {
		s.logger.Warn("the metrics address is reachable from other hosts, and pprof shows the command line and memory: prefer a loopback address such as 127.0.0.1:9100, firewall it, or set -pprof=false",
			"addr", ep.Addr().String())
	}
	return nil
}

// ready is /readyz: listening, every receive loop running, and taking
// new clients.
func (s *server) ready() error {
	if err := s.srv.Healthy(); err != nil {
		return err
	}
	if s.srv.Draining() {
		return errDraining
	}
	return nil
}

// stop drains (with -drain-timeout and clients connected), then shuts
// down. sigs is nil when ctx ended rather than a signal arriving.
func (s *server) stop(sigs <-chan os.Signal, tick <-chan time.Time, summary func(), releaseSignals func(), prev *conn.Stats) error {
	if n := s.srv.Len(); s.o.drainTimeout > 0 && n > 0 {
		s.srv.Drain()
		s.logger.Info("draining: refusing new clients, serving the connected ones until they leave",
			"connections", n, "drain_timeout", s.o.drainTimeout)
		s.drain(sigs, tick, summary)
	}
	releaseSignals() // from now on a signal kills
	s.logger.Info("shutting down: disconnecting clients", "connections", s.srv.Len())
	ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	if s.agent != nil {
		_ = s.agent.Close(ctx) // logged by the agent
	}
	if s.ep != nil {
		// After the server, so a last scrape sees the shutdown.
		if merr := s.ep.Shutdown(ctx); err == nil && merr != nil {
			err = fmt.Errorf("metrics endpoint: %w", merr)
		}
	}
	logSummary(s.logger, *prev, s.srv.Stats(), 0)
	return err
}

// drain waits until every client has left, the drain timeout passes or a
// second stop signal arrives, reloading on SIGHUP meanwhile.
func (s *server) drain(sigs <-chan os.Signal, tick <-chan time.Time, summary func()) {
	start := time.Now()
	timeout := time.NewTimer(s.o.drainTimeout)
	defer timeout.Stop()
	for s.srv.Len() > 0 {
		select {
		case <-s.ev.left:
			// Checked by the loop condition.
		case <-timeout.C:
			s.logger.Info("drain timeout: disconnecting the clients still connected",
				"connections", s.srv.Len(), "drained_for", time.Since(start).Round(time.Millisecond))
			return
		case sig := <-sigs:
			if sig == syscall.SIGHUP {
				s.reload()
				continue
			}
			s.logger.Info("second signal: ending the drain now", "signal", sig.String(), "connections", s.srv.Len())
			return
		case <-tick:
			summary()
		}
	}
	s.logger.Info("drained: every client has left", "drained_for", time.Since(start).Round(time.Millisecond))
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// newLogger returns the server's logger in the -log-format, at a level
// SIGHUP can change.
func newLogger(format string, w io.Writer, level *slog.LevelVar) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// isLoopback reports whether a listening address is reachable only from
// this host.
func isLoopback(a net.Addr) bool {
	t, ok := a.(*net.TCPAddr)
	return ok && t.IP.IsLoopback()
}

// config is the conn.Config of the settings.
func (o *options) config(logger *slog.Logger, h conn.Handler) conn.Config {
	cfg := conn.Config{
		Magic:               o.magic,
		SessionID:           uint8(o.sessionID),
		NetworkVersion:      uint32(o.networkVersion),
		NetworkFeatures:     uint16(o.networkFeatures),
		Sockets:             o.sockets,
		BatchSize:           o.batch,
		MaxClients:          o.maxClients,
		MaxClientsPerIP:     o.maxClientsPerIP,
		MaxClientsPerPrefix: o.maxClientsPerPrefix,
		MaxDatagram:         o.maxDatagram,
		DSCP:                o.dscp,
		Timeout:             o.timeout,
		// The same meaning in both: 0 the protocol default, negative
		// unlimited.
		ChallengeRate:          o.challengeRate,
		ChallengeRatePerIP:     o.challengeRateIP,
		ChallengeRatePerPrefix: o.challengeRatePrefix,
		InboundPacketRate:      o.inboundPacketRate,
		InboundByteRate:        o.inboundByteRate,
		NoSteering:             !o.steer,
		Overload:               conn.OverloadConfig{Enabled: o.overload},
		Handler:                h,
		Logger:                 logger,
		Messages:               o.messageConfig(),
		EgressRate:             int64(o.egressRate),
	}
	// Sealed mode; conn refuses its settings without a key.
	if o.privateKey != nil {
		cfg.PrivateKey = o.privateKey
		cfg.ProtocolID = uint64(o.protocolID)
		cfg.PublicAddresses = o.publicAddrs
	}
	return cfg
}

// logSummary logs one line: connections, handshakes, packets and drops by
// reason over the last interval.
func logSummary(logger *slog.Logger, prev, cur conn.Stats, every time.Duration) {
	attrs := []any{
		"connections", cur.Connections,
		"accepted", cur.Accepted - prev.Accepted,
		"initials", cur.HandshakeIn[protocol.TypeInitial] - prev.HandshakeIn[protocol.TypeInitial],
		"challenges", cur.HandshakeOut[protocol.TypeChallenge] - prev.HandshakeOut[protocol.TypeChallenge],
		"responses", cur.HandshakeIn[protocol.TypeResponse] - prev.HandshakeIn[protocol.TypeResponse],
		"denied", cur.DeniedFull + cur.DeniedRefused + cur.DeniedAddressLimit - prev.DeniedFull - prev.DeniedRefused - prev.DeniedAddressLimit,
		"migrations", cur.Migrations - prev.Migrations,
		"pkts_in", cur.Sockets.RxPackets - prev.Sockets.RxPackets,
		"pkts_out", cur.Sockets.TxPackets - prev.Sockets.TxPackets,
		"kernel_drops", cur.Sockets.RxDrops - prev.Sockets.RxDrops,
	}
	var drops []string
	for r := range cur.Drops {
		if n := cur.Drops[r] - prev.Drops[r]; n > 0 {
			drops = append(drops, conn.DropReason(r).String()+"="+strconv.FormatUint(n, 10))
		}
	}
	attrs = append(attrs, "drops", strings.Join(drops, ","))
	msg := "summary"
	if every == 0 {
		msg = "final"
	}
	logger.Info(msg, attrs...)
}

// sealedAttrs describe sealed mode for the startup line: on or off and,
// when on, what a backend must match. The key is named by its file (or
// variable) and a fingerprint, never by its value.
func (o *options) sealedAttrs(listening netip.AddrPort) []any {
	if o.privateKey == nil {
		return []any{"sealed", false}
	}
	public := listening.String()
	if o.publicAddrs != nil {
		public = sealflag.FormatAddrs(o.publicAddrs)
	}
	from := "environment " + envPrivateKey
	if o.privateKeyFile != "" {
		from = o.privateKeyFile
	}
	return []any{"sealed", true, "protocol_id", o.protocolID.String(), "public_addresses", public,
		"key_from", from, "key_id", sealflag.KeyID(o.privateKey)}
}

// warnKeyFile warns when other users can read the private key's file:
// whoever reads it can make tokens and read every sealed packet.
func (o *options) warnKeyFile(logger *slog.Logger) {
	if o.privateKey == nil || o.privateKeyFile == "" {
		return
	}
	if fi, err := os.Stat(o.privateKeyFile); err == nil && fi.Mode().Perm()&0o007 != 0 {
		logger.Warn("the private key file is readable by every user of this host: whoever reads it can make connect tokens and read sealed traffic; chmod o-rwx it (600 or 400)",
			"file", o.privateKeyFile, "mode", fi.Mode().Perm().String())
	}
}
