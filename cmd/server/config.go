package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/udpgate/udpgate/batchio"
	"github.com/udpgate/udpgate/cmd/internal/sealflag"
	"github.com/udpgate/udpgate/internal/defaults"
	"github.com/udpgate/udpgate/internal/handshake"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/ratelimit"
	"github.com/udpgate/udpgate/internal/wire"
	"github.com/udpgate/udpgate/message"
	"github.com/udpgate/udpgate/token"
)

// Every setting is a flag, an environment variable (envName) and a key of
// the optional TOML config file (the flag's name). One flag.FlagSet is the
// registry: each source sets values through the same flag.Value.Set, so a
// value is parsed the same way wherever it comes from. Sources are applied
// from the weakest to the strongest:
//
//	defaults < config file < environment < command-line flags
//
// and validate runs once on the result, naming where each bad value came
// from.

// values are the server's settings.
type values struct {
	listen              string
	sockets             int
	batch               int
	maxClients          int
	maxClientsPerIP     int
	maxClientsPerPrefix int
	maxDatagram         int
	dscp                int
	magic               string
	sessionID           uint
	networkVersion      uint
	networkFeatures     uint
	timeout             time.Duration
	challengeRate       float64
	challengeRateIP     float64
	challengeRatePrefix float64
	inboundPacketRate   float64
	inboundByteRate     float64
	steer               bool
	overload            bool
	app                 string
	messages            bool
	messageMaxSize      int
	messageSendRate     int
	messageSendBudget   int
	messageStallTimeout time.Duration
	messageStallSilence time.Duration
	messageStallRTTs    int
	// messageRecvBudget, messageConnRecvBudget: the receive budgets
	// (message.Config.ReceiveBudget, ConnReceiveBudget).
	messageRecvBudget     int
	messageConnRecvBudget int
	egressRate            int
	logLevel              string
	logFormat             string
	summary               time.Duration
	metrics               string
	pprof                 bool
	drainTimeout          time.Duration
	agones                bool
	agonesPlayers         bool
	agonesPortName        string
	privateKeyFile        string
	protocolID            protocolID
	publicAddresses       string
}

// options are the loaded settings and where each came from.
type options struct {
	values
	configPath   string // -config or UDPGATE_CONFIG; "" for none
	printConfig  bool
	printVersion bool

	fs     *flag.FlagSet
	origin map[string]source

	// Sealed mode, set by validate. privateKey is nil when it is off.
	// envKey is UDPGATE_PRIVATE_KEY, which is not a flag: a key on the
	// command line would show in ps and /debug/pprof/cmdline.
	envKey      string
	envKeySet   bool
	privateKey  *[token.KeyBytes]byte
	publicAddrs []netip.AddrPort // nil: the listen address
}

// Flags that are not settings: they steer loading, so they have no config
// file key (and print-config and version no environment variable either:
// an exported UDPGATE_PRINT_CONFIG would turn every later start into a
// print).
const (
	flagConfig      = "config"
	flagPrintConfig = "print-config"
	flagVersion     = "version"
)

// defaultListen is where the dedicated server listens by default.
const defaultListen = "0.0.0.0:7777"

// environ is the process environment, name to value.
type environ map[string]string

// osEnviron reads the process environment.
func osEnviron() environ {
	env := environ{}
	for _, kv := range os.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	return env
}

// lookup is os.LookupEnv over env.
func (env environ) lookup(name string) (string, bool) {
	v, ok := env[name]
	return v, ok
}

// envPrefix starts the name of every environment variable of a setting.
const envPrefix = "UDPGATE_"

// envPrivateKey holds the private key itself, in hex: the other way, beside
// -private-key-file, to give it (for a systemd EnvironmentFile or a
// Kubernetes Secret). It is the one variable that is not a flag's.
const envPrivateKey = envPrefix + "PRIVATE_KEY"

// maxBatch is the kernel's UIO_MAXIOV, the most datagrams one recvmmsg or
// sendmmsg moves.
const maxBatch = 1024

// source says where a setting's value came from.
type source struct {
	kind sourceKind
	file string // kind == fromFile
	line int    // kind == fromFile; 0 if unknown
}

type sourceKind uint8

const (
	fromDefault sourceKind = iota
	fromFile
	fromEnv
	fromFlag
)

// newFlagSet binds o's settings to a new flag set, with their defaults.
func (o *options) newFlagSet() *flag.FlagSet {
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	fs.StringVar(&o.listen, "listen", defaultListen, "UDP address to listen on (host:port; [::]:port for dual stack)")
	fs.IntVar(&o.sockets, "sockets", 0, fmt.Sprintf("SO_REUSEPORT sockets, one receive loop each, up to %d (0: one per CPU, GOMAXPROCS)", batchio.MaxSockets))
	fs.IntVar(&o.batch, "batch", batchio.DefaultBatchSize, fmt.Sprintf("datagrams per recvmmsg/sendmmsg batch, 1..%d", maxBatch))
	fs.IntVar(&o.maxClients, "max-clients", defaults.MaxClients, "maximum connections; beyond it clients are denied (server full); changes on SIGHUP")
	fs.IntVar(&o.maxClientsPerIP, "max-clients-per-ip", defaults.MaxClientsPerIP, "maximum connections from one IP address (-1: unlimited)")
	fs.IntVar(&o.maxClientsPerPrefix, "max-clients-per-prefix", defaults.MaxClientsPerPrefix, "maximum connections from one /24 (IPv4) or /64 (IPv6) network (-1: unlimited)")
	fs.IntVar(&o.maxDatagram, "max-datagram", protocol.DefaultMaxDatagram, "largest datagram accepted, in bytes; longer ones are dropped as too large (clients must agree)")
	fs.IntVar(&o.dscp, "dscp", 0, "DSCP code point marking every datagram sent, 0..63 (0: unmarked; 46: Expedited Forwarding, for networks that prioritise game traffic)")
	fs.StringVar(&o.magic, "magic", "", "magic header: up to 32 characters of 0 and 1 (empty: none)")
	fs.UintVar(&o.sessionID, "session-id", 0, "session ID 0..3; change it to invalidate clients of an earlier run")
	fs.UintVar(&o.networkVersion, "network-version", 1, "network version clients must match")
	fs.UintVar(&o.networkFeatures, "network-features", 0, "network features clients must match (0..65535)")
	fs.DurationVar(&o.timeout, "timeout", defaults.Timeout, "close a connection silent for this long (longer than the 1s keepalive)")
	fs.Float64Var(&o.challengeRate, "challenge-rate", defaultChallengeRate, "Challenge replies per second per source address (0: the protocol default, 32; -1: unlimited, for load tests from one host); changes on SIGHUP")
	fs.Float64Var(&o.challengeRateIP, "challenge-rate-per-ip", handshake.DefaultChallengeIPRate, "Challenge replies per second to one IP address, all its ports, for the whole server; bursts twice that (0: the default; -1: unlimited)")
	fs.Float64Var(&o.challengeRatePrefix, "challenge-rate-per-prefix", handshake.DefaultChallengePrefixRate, "Challenge replies per second to one /24 (IPv4) or /64 (IPv6) network, for the whole server; bursts twice that (0: the default; -1: unlimited)")
	fs.Float64Var(&o.inboundPacketRate, "inbound-packet-rate", ratelimit.DefaultInboundPacketRate, "packets per second one proven connection may send; beyond it (bursts of 100 ms of it) they are dropped before parsing, as inbound_limited (0: the default; -1: unlimited)")
	fs.Float64Var(&o.inboundByteRate, "inbound-byte-rate", ratelimit.DefaultInboundByteRate, "bytes per second of datagrams one proven connection may send; beyond it (bursts of 100 ms of it) they are dropped before parsing, as inbound_limited (0: the default; -1: unlimited)")
	fs.BoolVar(&o.steer, "steer", true, "steer handshake packets and connection packets to separate sockets in the kernel, so a handshake flood never queues ahead of players (Linux 4.5+; falls back with a warning)")
	fs.BoolVar(&o.overload, "overload", false, "overload control: under connectionless floods shed RestartHandshake/VersionUpgrade, then cap Challenges per socket (off: the protocol default, replies limited per source only); changes on SIGHUP")
	fs.StringVar(&o.app, "app", "echo", "application: echo (send each Data payload, and each message on its channel, back) or discard")
	fs.BoolVar(&o.messages, "messages", true, "message channels (docs/protocol.md §14) in the tools' layout: 0 reliable-ordered, 1 unreliable, 2 sequenced, as client connect -reliable and client load -messages use; clients that send only Data are served either way")
	fs.IntVar(&o.messageMaxSize, "message-max-size", message.DefaultMaxMessageSize, fmt.Sprintf("with -messages: the largest reliable message in bytes, fragmented over packets, at most %d; clients must not send larger", message.MaxMessageSizeLimit))
	fs.IntVar(&o.messageSendRate, "message-send-rate", message.DefaultSendRate, "with -messages: the ceiling of one connection's message bytes per second, resends and fragments included; below it each connection's congestion controller paces at what its path carries")
	fs.IntVar(&o.messageSendBudget, "message-send-budget", message.DefaultSendBudget, "with -messages: the bytes of queued and unacknowledged messages all connections may hold; while more than half is in use, no connection holds more than its share (the budget over the connections holding some) beyond a floor of eight packets, and a send past it fails as a full queue")
	fs.DurationVar(&o.messageStallTimeout, "message-stall-timeout", message.DefaultStallTimeout, "with -messages: end a connection whose oldest reliable message stays unacknowledged this long, though the peer acknowledges other packets")
	fs.DurationVar(&o.messageStallSilence, "message-stall-silence", message.DefaultStallSilence, "with -messages: end a connection that acknowledges no packet while reliable messages are in flight after the larger of this and -message-stall-rtts round trips (meanwhile it gets one probe per doubled retransmission timeout)")
	fs.IntVar(&o.messageStallRTTs, "message-stall-rtts", message.DefaultStallRTTs, "with -messages: see -message-stall-silence: the silence bound in round trips of the connection")
	fs.IntVar(&o.messageRecvBudget, "message-receive-budget", message.DefaultReceiveBudget, "with -messages: bytes all connections may hold for out-of-order and partly reassembled messages; over half of it held, each connection gets at most its fair share, and when it is full the connections holding the most are ended (disconnect reason over_budget)")
	fs.IntVar(&o.messageConnRecvBudget, "message-conn-receive-budget", 0, "with -messages: bytes one connection may hold for out-of-order and partly reassembled messages (0: a full window of 1024 packets plus one largest message and 32 packets, about 1.5 MB at the defaults; at least one largest message and 33 packets)")
	fs.IntVar(&o.egressRate, "egress-rate", 0, "with -messages: the server's egress budget in bytes per second, all connections together (0: none); the game's traffic is never held by it, and each connection's bulk (channel 3, large messages) goes at the smaller of its path's rate and its fair share of what the game leaves")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: debug (adds a line per connection), info, warn or error; changes on SIGHUP")
	fs.StringVar(&o.logFormat, "log-format", "text", "log format: text (key=value) or json (one object per line)")
	fs.DurationVar(&o.summary, "summary", 10*time.Second, "interval of the summary log line (0: off)")
	fs.StringVar(&o.metrics, "metrics", "", "TCP address serving Prometheus /metrics, /healthz, /readyz and /debug/pprof, e.g. 127.0.0.1:9100 (empty: off)")
	fs.BoolVar(&o.pprof, "pprof", true, "serve /debug/pprof/ on the -metrics address (turn it off when other hosts can reach that address)")
	fs.DurationVar(&o.drainTimeout, "drain-timeout", 0, "on SIGTERM, refuse new clients but serve connected ones for up to this long before disconnecting them (0: disconnect at once)")
	fs.BoolVar(&o.agones, "agones", false, "run as an Agones GameServer: Ready, Health and Shutdown to the SDK sidecar at localhost:$AGONES_SDK_HTTP_PORT")
	fs.BoolVar(&o.agonesPlayers, "agones-players", true, "with -agones, report players as they connect and leave (Agones' alpha player tracking; needs the PlayerTracking feature gate)")
	fs.StringVar(&o.agonesPortName, "agones-port-name", "", "with -agones in sealed mode without -public-addresses: the GameServer port (spec.ports name) whose host port, with the node's address, is the public address (empty: the first port)")
	fs.StringVar(&o.privateKeyFile, "private-key-file", "", "turns sealed mode on: a file holding the 32-byte private key shared with the game's backend, as 64 hex characters (make one with: "+sealflag.MakeKey+"); or give the hex in "+envPrivateKey+". Empty: unsealed (UE-compatible)")
	fs.Var(&o.protocolID, "protocol-id", "sealed mode: the game's protocol id, a 64-bit number in `hex` (with or without 0x), the same the backend puts in its connect tokens; required with a private key")
	fs.StringVar(&o.publicAddresses, "public-addresses", "", "sealed mode: the IP:port addresses clients are sent to, comma-separated, as the backend lists them in its tokens (empty: the -listen address, or with -agones the GameServer's address and port; required otherwise when -listen is 0.0.0.0 or [::])")
	fs.StringVar(&o.configPath, flagConfig, "", "TOML config file to load (settings as keys named like the flags, e.g. max-clients = 5000); re-read on SIGHUP")
	fs.BoolVar(&o.printConfig, flagPrintConfig, false, "print the effective configuration as a config file and exit")
	fs.BoolVar(&o.printVersion, flagVersion, false, "print the version and exit")
	return fs
}

// defaultChallengeRate is the protocol's Challenge limit per source
// (conn.Config.ChallengeRate 0 takes it too), spelt out so -h and
// -print-config show it.
const defaultChallengeRate = handshake.DefaultChallengeRate

// envName is the environment variable of a flag.
func envName(flagName string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// isSetting reports whether a flag is a setting (has a config file key).
func isSetting(name string) bool {
	return name != flagConfig && name != flagPrintConfig && name != flagVersion
}

// hasEnv reports whether a flag can be set from the environment.
func hasEnv(name string) bool { return isSetting(name) || name == flagConfig }

// load reads the settings from the command line (args), the environment
// (env) and the config file they name, and validates them. Flag syntax
// errors and -h are written to stderr by the flag package.
func load(args []string, env environ, stderr io.Writer) (*options, error) {
	// First pass, command line only: syntax errors, -h and -config.
	first := &options{}
	fs := first.newFlagSet()
	fs.SetOutput(stderr)
	fs.Usage = func() { usage(fs) }
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q: the server takes flags only (see -h)", fs.Arg(0))
	}

	o := &options{origin: map[string]source{}}
	o.fs = o.newFlagSet()
	o.fs.SetOutput(io.Discard) // the first pass reported syntax errors
	path := first.configPath
	if !isSetOnCommandLine(fs, flagConfig) {
		path = env[envName(flagConfig)]
	}
	// A value that cannot be parsed leaves the setting as it was, so the
	// sources go on and validation still runs: one start reports every
	// problem.
	var fileErr error
	if path != "" {
		fileErr = o.loadFile(path)
	}
	envErr := o.applyEnv(env)
	if err := o.fs.Parse(args); err != nil {
		return nil, err // unreachable: the first pass parsed the same args
	}
	// The first pass knows which flags the command line set (o.fs counts
	// those set from the environment and the file too).
	fs.Visit(func(f *flag.Flag) { o.origin[f.Name] = source{kind: fromFlag} })
	o.configPath = path
	if err := errors.Join(fileErr, envErr, o.validate()); err != nil {
		return nil, err
	}
	return o, nil
}

func isSetOnCommandLine(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// applyEnv sets flags from their environment variables. A UDPGATE_
// variable that names no setting is an error, as an unknown key of the
// config file is: UDPGATE_MAX_CLIENT=10 must not be silently ignored.
func (o *options) applyEnv(env environ) error {
	byEnv := map[string]*flag.Flag{}
	o.fs.VisitAll(func(f *flag.Flag) {
		if hasEnv(f.Name) {
			byEnv[envName(f.Name)] = f
		}
	})
	var names []string
	for name := range env {
		if strings.HasPrefix(name, envPrefix) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	var errs []error
	for _, name := range names {
		v := env[name]
		f, ok := byEnv[name]
		switch {
		case name == envPrivateKey:
			o.envKey, o.envKeySet = v, true
			continue
		case name == envName(flagPrintConfig) || name == envName(flagVersion):
			errs = append(errs, fmt.Errorf("environment %s: -%s is a command-line flag only (an exported variable would turn every start into a print): unset it",
				name, strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(name, envPrefix), "_", "-"))))
			continue
		case !ok:
			errs = append(errs, fmt.Errorf("environment %s: unknown setting%s", name, suggestEnv(byEnv, name)))
			continue
		case f.Name == flagConfig:
			continue // read by load
		}
		if err := setKeeping(o.fs, f, v); err != nil {
			errs = append(errs, fmt.Errorf("environment %s=%q: %v: %s", name, v, cause(err), hint(f)))
			continue
		}
		o.origin[f.Name] = source{kind: fromEnv}
	}
	return errors.Join(errs...)
}

// setKeeping sets a flag from a string; when the string does not parse it
// leaves the flag as it was (the flag package stores a zero on some parse
// errors), so validation judges the value that will be used and does not
// report a second, wrong problem about the zero.
func setKeeping(fs *flag.FlagSet, f *flag.Flag, v string) error {
	prev := f.Value.String()
	if err := fs.Set(f.Name, v); err != nil {
		_ = f.Value.Set(prev)
		return err
	}
	return nil
}

// suggestEnv names the variable closest to a misspelt one.
func suggestEnv(byEnv map[string]*flag.Flag, name string) string {
	best, bestD := "", 3 // at most two edits away
	for _, known := range slices.Sorted(maps.Keys(byEnv)) {
		if d := editDistance(name, known); d < bestD {
			best, bestD = known, d
		}
	}
	if best != "" {
		return fmt.Sprintf(": did you mean %s?", best)
	}
	return ": the variables are " + envPrefix + " and a flag's name in upper case with - as _ (see -h); unset this one"
}

// loadFile applies a TOML config file: top-level keys named like the flags.
func (o *options) loadFile(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config file: %v: check the -config path (or UDPGATE_CONFIG)", err)
	}
	var raw map[string]any
	md, err := toml.Decode(string(data), &raw)
	if err != nil {
		return fmt.Errorf("config file %s: %v: fix the TOML syntax (a setting is a line like max-clients = 5000)", path, err)
	}
	var errs []error
	for _, key := range md.Keys() {
		if len(key) > 1 {
			continue // inside a table: the table's name is reported as unknown
		}
		name := key[0]
		at := source{kind: fromFile, file: path, line: lineOf(data, name)}
		where := "config file " + path
		if at.line > 0 {
			where += fmt.Sprintf(", line %d", at.line)
		}
		f := o.fs.Lookup(name)
		if f == nil || !isSetting(name) {
			errs = append(errs, fmt.Errorf("%s: unknown setting %q%s", where, name, suggest(o.fs, name)))
			continue
		}
		s, err := tomlToFlag(f, raw[name])
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %s: %v", where, name, err))
			continue
		}
		if err := setKeeping(o.fs, f, s); err != nil {
			errs = append(errs, fmt.Errorf("%s: %s = %s: %v: %s", where, name, s, cause(err), hint(f)))
			continue
		}
		o.origin[name] = at
	}
	return errors.Join(errs...)
}

// tomlToFlag checks a file value's TOML type against the flag's and returns
// it as flag syntax. Strict on purpose: max-clients = "5000" is more likely
// a mistake than a wish.
func tomlToFlag(f *flag.Flag, v any) (string, error) {
	want := f.Value.(flag.Getter).Get()
	example := fmt.Sprintf("e.g. %s = %s", f.Name, tomlValue(want))
	switch want.(type) {
	case protocolID:
		if s, ok := v.(string); ok {
			return s, nil
		}
		// protocol-id = 0x10 is a TOML integer: its value is right, but the
		// flag reads "10" as hex, so only a string is unambiguous.
		if n, ok := v.(int64); ok {
			return "", fmt.Errorf("want the id in hex, in quotes, e.g. %s = %s", f.Name, tomlValue(protocolID(n)))
		}
		return "", fmt.Errorf("want the id in hex, in quotes, %s", example)
	case string:
		if s, ok := v.(string); ok {
			return s, nil
		}
		// magic = 1011 is a number to TOML: show it quoted.
		return "", fmt.Errorf("want a string in quotes, e.g. %s = %s", f.Name, tomlValue(fmt.Sprint(v)))
	case time.Duration:
		if s, ok := v.(string); ok {
			return s, nil
		}
		return "", fmt.Errorf("want a duration in quotes, %s", example)
	case int, uint:
		if n, ok := v.(int64); ok {
			return strconv.FormatInt(n, 10), nil
		}
		return "", fmt.Errorf("want an integer, %s", example)
	case float64:
		switch n := v.(type) {
		case int64:
			return strconv.FormatInt(n, 10), nil
		case float64:
			return strconv.FormatFloat(n, 'g', -1, 64), nil
		}
		return "", fmt.Errorf("want a number, %s", example)
	case bool:
		if b, ok := v.(bool); ok {
			return strconv.FormatBool(b), nil
		}
		return "", fmt.Errorf("want true or false, %s", example)
	}
	return "", fmt.Errorf("cannot be set from a file")
}

// lineOf finds the line of a top-level "key = value" in a TOML file, for
// error messages; 0 if not found.
func lineOf(data []byte, key string) int {
	for i, l := range bytes.Split(data, []byte("\n")) {
		l = bytes.TrimSpace(l)
		l = bytes.Trim(l, `"'`) // a quoted key: "max-clients" = 5
		if rest, ok := bytes.CutPrefix(l, []byte(key)); ok {
			rest = bytes.TrimLeft(rest, "\"' \t")
			if len(rest) > 0 && rest[0] == '=' {
				return i + 1
			}
		}
	}
	return 0
}

// suggest names the setting closest to a misspelt one, and where tables
// are: the file is flat.
func suggest(fs *flag.FlagSet, name string) string {
	best, bestD := "", 3 // at most two edits away
	fs.VisitAll(func(f *flag.Flag) {
		if d := editDistance(name, f.Name); isSetting(f.Name) && d < bestD {
			best, bestD = f.Name, d
		}
	})
	if best != "" {
		return fmt.Sprintf(": did you mean %s?", best)
	}
	return ": the settings are the server's flags without the dash (see -h), at the top level of the file, not in [tables]"
}

// editDistance is the Levenshtein distance of two short strings.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// cause rewords the flag package's terse Set errors.
func cause(err error) string {
	switch err.Error() {
	case "parse error":
		return "not a valid value"
	case "value out of range":
		return "out of range"
	}
	return err.Error()
}

// hint says what a setting of the flag's type looks like.
func hint(f *flag.Flag) string {
	switch f.Value.(flag.Getter).Get().(type) {
	case time.Duration:
		return "use a duration like 5s, 1m or 500ms"
	case int:
		return "use a whole number"
	case uint:
		return "use a whole number, 0 or more"
	case float64:
		return "use a number like 32 or 0.5"
	case bool:
		return "use true or false"
	case protocolID:
		return "the backend's tokens carry the same id"
	}
	return "see -h"
}

// where describes a setting's value and its source, for error messages:
// "-max-clients -5", "environment UDPGATE_SESSION_ID=9",
// "config file a.toml, line 3: max-clients = -5".
func (o *options) where(name string) string {
	f := o.fs.Lookup(name)
	v := f.Value.String()
	if _, ok := f.Value.(flag.Getter).Get().(string); ok {
		v = strconv.Quote(v)
	}
	src := o.origin[name]
	switch src.kind {
	case fromFlag:
		return fmt.Sprintf("-%s %s", name, v)
	case fromEnv:
		return fmt.Sprintf("environment %s=%s", envName(name), v)
	case fromFile:
		at := "config file " + src.file
		if src.line > 0 {
			at += fmt.Sprintf(", line %d", src.line)
		}
		return fmt.Sprintf("%s: %s = %s", at, name, tomlValue(f.Value.(flag.Getter).Get()))
	}
	return fmt.Sprintf("%s %s (default)", name, v)
}

// validate checks every setting and reports all problems at once, each
// naming the setting, where its value came from and how to fix it.
func (o *options) validate() error {
	var errs []error
	bad := func(name, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", o.where(name), fmt.Sprintf(format, args...)))
	}
	if err := checkHostPort(o.listen); err != nil {
		bad("listen", "%v: use host:port, e.g. 0.0.0.0:7777, or [::]:7777 for dual stack", err)
	}
	if o.sockets < 0 || o.sockets > batchio.MaxSockets {
		bad("sockets", "must be 0..%d (0 takes one per CPU)", batchio.MaxSockets)
	}
	if o.batch < 1 || o.batch > maxBatch {
		bad("batch", "must be 1..%d datagrams (default %d)", maxBatch, batchio.DefaultBatchSize)
	}
	if o.maxClients < 1 {
		bad("max-clients", "must be at least 1")
	}
	if o.maxClientsPerIP == 0 || o.maxClientsPerIP < -1 {
		bad("max-clients-per-ip", "must be at least 1, or -1 for unlimited (default %d)", defaults.MaxClientsPerIP)
	}
	if o.maxClientsPerPrefix == 0 || o.maxClientsPerPrefix < -1 {
		bad("max-clients-per-prefix", "must be at least 1, or -1 for unlimited (default %d)", defaults.MaxClientsPerPrefix)
	}
	if o.maxDatagram < wire.MinConnLen(wire.Magic{})+1 || o.maxDatagram > protocol.MaxDatagramLimit {
		bad("max-datagram", "must be %d..%d bytes (default %d)", wire.MinConnLen(wire.Magic{})+1, protocol.MaxDatagramLimit, protocol.DefaultMaxDatagram)
	}
	if o.dscp < 0 || o.dscp > 63 {
		bad("dscp", "must be 0..63: a DSCP code point, e.g. 46 (Expedited Forwarding), or 0 to leave datagrams unmarked")
	}
	if _, err := wire.ParseMagic(o.magic); err != nil {
		// fastpath's message says what is wrong and what to use.
		bad("magic", "%s", strings.TrimPrefix(err.Error(), "fastpath: "))
	}
	if o.sessionID > 3 {
		bad("session-id", "must be 0, 1, 2 or 3")
	}
	if o.networkVersion > math.MaxUint32 {
		bad("network-version", "must fit 32 bits (0..%d)", uint64(math.MaxUint32))
	}
	if o.networkFeatures > math.MaxUint16 {
		bad("network-features", "must be 0..65535")
	}
	if o.timeout <= defaults.KeepAlive {
		bad("timeout", "must be longer than the %v keepalive interval, or idle connections time out: use e.g. %v (the default)", defaults.KeepAlive, defaults.Timeout)
	}
	if math.IsNaN(o.challengeRate) || math.IsInf(o.challengeRate, 0) {
		bad("challenge-rate", "must be a number: replies per second like 32 (0 takes the protocol default, 32; -1 means unlimited)")
	}
	for _, r := range []struct {
		name string
		v    float64
		def  int
	}{{"challenge-rate-per-ip", o.challengeRateIP, handshake.DefaultChallengeIPRate}, {"challenge-rate-per-prefix", o.challengeRatePrefix, handshake.DefaultChallengePrefixRate}} {
		if math.IsNaN(r.v) || math.IsInf(r.v, 0) {
			bad(r.name, "must be a number: replies per second like %d (0 takes the default, %d; -1 means unlimited)", r.def, r.def)
		}
	}
	for _, r := range []struct {
		name string
		v    float64
		def  int
	}{{"inbound-packet-rate", o.inboundPacketRate, ratelimit.DefaultInboundPacketRate}, {"inbound-byte-rate", o.inboundByteRate, ratelimit.DefaultInboundByteRate}} {
		if math.IsNaN(r.v) || math.IsInf(r.v, 0) || (r.v > 0 && r.v < 1) {
			bad(r.name, "must be a rate of at least 1 per second, like %d (0 takes the default, %d; -1 means unlimited)", r.def, r.def)
		}
	}
	if o.app != "echo" && o.app != "discard" {
		bad("app", "use echo or discard")
	}
	o.validateMessages(bad)
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		bad("log-level", "use debug, info, warn or error")
	}
	if o.logFormat != "text" && o.logFormat != "json" {
		bad("log-format", "use text or json")
	}
	if o.drainTimeout < 0 {
		bad("drain-timeout", "must not be negative: use a duration like 30s, or 0 to disconnect clients at once")
	}
	if o.summary < 0 {
		bad("summary", "must not be negative: use a duration like 10s, or 0 to turn the summary off")
	}
	if o.metrics != "" {
		if err := checkHostPort(o.metrics); err != nil {
			bad("metrics", "%v: use host:port, e.g. 127.0.0.1:9100, or empty to turn metrics off", err)
		}
	}
	if o.agonesPortName != "" && !o.agones {
		bad("agones-port-name", "is an Agones setting, but -agones is off: turn -agones on, or remove agones-port-name")
	}
	errs = append(errs, o.validateSealed(bad)...)
	return errors.Join(errs...)
}

// validateSealed reads the private key and checks the settings of sealed
// mode. Sealed settings without a key are an error rather than ignored: a
// forgotten key would otherwise start an unsealed server that admits any
// client.
func (o *options) validateSealed(bad func(name, format string, args ...any)) []error {
	var errs []error
	keyFile := o.privateKeyFile != ""
	switch {
	case keyFile && o.envKeySet:
		errs = append(errs, fmt.Errorf("%s and environment %s both give a private key: keep one of them (unset %s, or remove -private-key-file)",
			o.where("private-key-file"), envPrivateKey, envPrivateKey))
	case keyFile:
		k, err := sealflag.ReadKeyFile(o.privateKeyFile)
		if err != nil {
			bad("private-key-file", "%v", err)
		}
		o.privateKey = k
	case o.envKeySet:
		k, err := sealflag.ParseKey(o.envKey)
		if err != nil {
			// Never the value: it is the key, or most of it.
			errs = append(errs, fmt.Errorf("environment %s: %v (or unset the variable to run unsealed)", envPrivateKey, err))
		}
		o.privateKey = k
	}
	if !keyFile && !o.envKeySet {
		for _, name := range []string{"protocol-id", "public-addresses"} {
			if f := o.fs.Lookup(name); f.Value.String() != f.DefValue {
				bad(name, "is a sealed-mode setting, but sealed mode is off: give the private key (-private-key-file, or %s) to turn it on, or remove %s", envPrivateKey, name)
			}
		}
		return errs
	}
	if _, set := o.origin["protocol-id"]; !set {
		errs = append(errs, fmt.Errorf("sealed mode needs the protocol id: give -protocol-id (hex, e.g. 0x1122334455667788), the one the backend's connect tokens carry"))
	}
	if o.publicAddresses != "" {
		addrs, err := sealflag.ParseAddrs(o.publicAddresses)
		if err != nil {
			bad("public-addresses", "%v", err)
		}
		o.publicAddrs = addrs
	} else if o.agones {
		// serve asks the Agones sidecar for the GameServer's address.
	} else if ap, err := netip.ParseAddrPort(o.listen); err == nil && ap.Addr().IsUnspecified() || err != nil && checkHostPort(o.listen) == nil {
		bad("listen", "sealed mode needs -public-addresses when the server listens on all addresses or a host name: a connect token lists the IP:port addresses clients send to, and the server admits only tokens that list one of its own; give them, e.g. -public-addresses 203.0.113.7:7777")
	}
	return errs
}

// checkHostPort checks the syntax of a host:port address (the host may be
// empty: all addresses).
func checkHostPort(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return errors.New("not host:port")
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || (n == 0 && port != "0") {
		return fmt.Errorf("port %q is not a number from 0 to 65535", port)
	}
	return nil
}

// level is the validated log level.
func (o *options) level() slog.Level {
	var l slog.Level
	_ = l.UnmarshalText([]byte(o.logLevel))
	return l
}

// writeConfig writes the effective settings as a TOML config file that
// -config loads back to the same settings.
func (o *options) writeConfig(w io.Writer) error {
	var b bytes.Buffer
	b.WriteString("# udpgate server configuration (TOML), printed by -print-config.\n")
	b.WriteString("# Load it with -config FILE. Each key is a flag without its dash.\n")
	b.WriteString("# Precedence: defaults < this file < UDPGATE_* environment < command-line flags.\n")
	for _, name := range settingOrder(o.fs) {
		f := o.fs.Lookup(name)
		fmt.Fprintf(&b, "\n# %s\n%s = %s\n", f.Usage, name, tomlValue(f.Value.(flag.Getter).Get()))
	}
	_, err := w.Write(b.Bytes())
	return err
}

// settingOrder lists the settings in the order they were defined, which
// groups related ones (VisitAll sorts by name).
func settingOrder(fs *flag.FlagSet) []string {
	var names []string
	for _, n := range definitionOrder {
		if fs.Lookup(n) != nil {
			names = append(names, n)
		}
	}
	return names
}

// definitionOrder is the order of -print-config and -h's settings.
var definitionOrder = []string{
	"listen", "sockets", "batch", "max-clients", "max-clients-per-ip", "max-clients-per-prefix", "max-datagram",
	"dscp", "magic", "session-id", "network-version", "network-features",
	"private-key-file", "protocol-id", "public-addresses",
	"timeout", "challenge-rate", "challenge-rate-per-ip", "challenge-rate-per-prefix", "inbound-packet-rate", "inbound-byte-rate", "steer", "overload", "app", "messages", "message-max-size", "message-send-rate", "message-send-budget", "message-stall-timeout", "message-stall-silence", "message-stall-rtts", "message-receive-budget", "message-conn-receive-budget", "egress-rate", "log-level", "log-format", "summary",
	"metrics", "pprof", "drain-timeout", "agones", "agones-players", "agones-port-name",
}

// tomlValue formats a setting's value as TOML.
func tomlValue(v any) string {
	var b bytes.Buffer
	if err := toml.NewEncoder(&b).Encode(map[string]any{"k": v}); err != nil {
		return fmt.Sprint(v)
	}
	s := strings.TrimSpace(b.String())
	return strings.TrimPrefix(s, "k = ")
}

// usage is -h: the flags, then how environment and file relate to them.
func usage(fs *flag.FlagSet) {
	out := fs.Output()
	fmt.Fprintf(out, "Usage: server [flags]\n\nThe dedicated udpgate server.\n\nFlags:\n")
	fs.PrintDefaults()
	fmt.Fprintf(out, `
Every setting can also be given as an environment variable, UDPGATE_ and the
flag's name in upper case with - as _ (UDPGATE_MAX_CLIENTS=5000), and as a key
of the TOML file named by -config (max-clients = 5000). Precedence:
defaults < config file < environment < command-line flags.
-print-config prints the effective settings in the file's format.

Sealed mode (connect tokens, encrypted packets) is on when a private key is
given: -private-key-file, or the key's 64 hex characters in
UDPGATE_PRIVATE_KEY (never a flag: it would show in ps). It needs
-protocol-id, and -public-addresses unless -listen names one IP address
(with -agones, the GameServer's address and port stand in for them).

Signals: SIGTERM or SIGINT stops the server (after -drain-timeout, if set; a
second signal ends the drain at once). SIGHUP re-reads the config file and
applies max-clients, challenge-rate, overload and log-level live; other
changes, the private key's among them, are logged as needing a restart.
`)
}

// protocolID is -protocol-id: a u64 written in hex, with or without 0x, as
// netcode.io configurations write it. In the config file it is a quoted
// string (protocol-id = "0x1122334455667788").
type protocolID uint64

func (p *protocolID) Set(s string) error {
	v, err := sealflag.ParseProtocolID(s)
	if err != nil {
		return err
	}
	*p = protocolID(v)
	return nil
}

func (p protocolID) String() string { return sealflag.FormatProtocolID(uint64(p)) }

func (p protocolID) Get() any { return p }

// MarshalText makes -print-config write the id as a quoted hex string.
func (p protocolID) MarshalText() ([]byte, error) { return []byte(p.String()), nil }
