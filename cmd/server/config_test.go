package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/udpgate/udpgate/batchio"
	"github.com/udpgate/udpgate/internal/defaults"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/ratelimit"
	"github.com/udpgate/udpgate/message"
)

// env is an environment for load and run.
func env(kv ...string) environ {
	m := environ{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

// writeFile writes a config file into the test's directory.
func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "server.toml")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDefaults(t *testing.T) {
	o, err := load(nil, env(), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := values{
		listen: "0.0.0.0:7777", batch: batchio.DefaultBatchSize,
		maxClients: defaults.MaxClients, maxClientsPerIP: defaults.MaxClientsPerIP, maxClientsPerPrefix: defaults.MaxClientsPerPrefix,
		maxDatagram:    protocol.DefaultMaxDatagram,
		networkVersion: 1,
		timeout:        defaults.Timeout, challengeRate: 32, app: "echo", logLevel: "info", logFormat: "text",
		messages: true, messageMaxSize: message.DefaultMaxMessageSize, messageSendRate: message.DefaultSendRate,
		messageSendBudget: message.DefaultSendBudget, messageStallTimeout: message.DefaultStallTimeout,
		messageStallSilence: message.DefaultStallSilence, messageStallRTTs: message.DefaultStallRTTs,
		messageRecvBudget: message.DefaultReceiveBudget,
		challengeRateIP:   64, challengeRatePrefix: 256, steer: true,
		inboundPacketRate: ratelimit.DefaultInboundPacketRate, inboundByteRate: ratelimit.DefaultInboundByteRate,
		summary: 10 * time.Second, pprof: true, agonesPlayers: true,
	}
	if o.values != want {
		t.Errorf("defaults %+v, want %+v", o.values, want)
	}
	cfg := o.config(nil, nil)
	if cfg.ChallengeRate != 32 || cfg.MaxClients != defaults.MaxClients || cfg.BatchSize != batchio.DefaultBatchSize || cfg.DSCP != 0 ||
		cfg.MaxClientsPerIP != defaults.MaxClientsPerIP || cfg.MaxClientsPerPrefix != defaults.MaxClientsPerPrefix ||
		cfg.ChallengeRatePerIP != 64 || cfg.ChallengeRatePerPrefix != 256 || cfg.NoSteering || cfg.PrivateKey != nil ||
		cfg.InboundPacketRate != ratelimit.DefaultInboundPacketRate || cfg.InboundByteRate != ratelimit.DefaultInboundByteRate {
		t.Errorf("conn.Config %+v", cfg)
	}
}

// TestChallengeRateMeaning: the flag means what conn.Config.ChallengeRate
// means: 0 the protocol default, negative unlimited.
func TestChallengeRateMeaning(t *testing.T) {
	for _, c := range []struct {
		arg  string
		want float64
	}{{"32", 32}, {"0", 0}, {"-1", -1}, {"0.5", 0.5}} {
		o, err := load([]string{"-challenge-rate", c.arg}, env(), io.Discard)
		if err != nil {
			t.Fatalf("-challenge-rate %s: %v", c.arg, err)
		}
		if got := o.config(nil, nil).ChallengeRate; got != c.want {
			t.Errorf("-challenge-rate %s: conn.Config.ChallengeRate %v, want %v", c.arg, got, c.want)
		}
	}
}

// TestBadSettingFailsFast: run refuses a bad value before listening, with a
// message naming the setting, where the value came from and what to use.
func TestBadSettingFailsFast(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		env  []string
		file string // config file content; -config is added
		want []string
	}{
		{name: "flag magic", args: []string{"-magic", "10x2"},
			want: []string{`-magic "10x2"`, "'0' and '1'"}},
		{name: "flag metrics", args: []string{"-metrics", "localhost"},
			want: []string{`-metrics "localhost"`, "127.0.0.1:9100"}},
		{name: "flag timeout", args: []string{"-timeout", "1s"},
			want: []string{"-timeout 1s", "longer than the 1s keepalive"}},
		{name: "flag challenge-rate NaN", args: []string{"-challenge-rate", "NaN"},
			want: []string{"-challenge-rate NaN", "-1 means unlimited"}},
		{name: "flag inbound-packet-rate", args: []string{"-inbound-packet-rate", "0.5"},
			want: []string{"-inbound-packet-rate 0.5", "at least 1 per second", "-1 means unlimited"}},
		{name: "env inbound-byte-rate", env: []string{"UDPGATE_INBOUND_BYTE_RATE", "+Inf"},
			want: []string{"UDPGATE_INBOUND_BYTE_RATE", "16777216"}},
		{name: "flag timeout 0", args: []string{"-timeout", "0"},
			want: []string{"-timeout 0s", "longer than the 1s keepalive", "5s (the default)"}},
		{name: "flag batch 0", args: []string{"-batch", "0"},
			want: []string{"-batch 0", "1..1024", "default 64"}},
		{name: "flag sockets", args: []string{"-sockets", "65"},
			want: []string{"-sockets 65", "0..64"}},
		{name: "flag per-ip 0", args: []string{"-max-clients-per-ip", "0"},
			want: []string{"-max-clients-per-ip 0", "-1 for unlimited"}},
		{name: "flag per-prefix", args: []string{"-max-clients-per-prefix", "-2"},
			want: []string{"-max-clients-per-prefix -2", "-1 for unlimited"}},
		{name: "flag dscp", args: []string{"-dscp", "64"},
			want: []string{"-dscp 64", "0..63", "46"}},
		{name: "flag log-format", args: []string{"-log-format", "xml"},
			want: []string{`-log-format "xml"`, "text or json"}},
		{name: "flag drain-timeout", args: []string{"-drain-timeout", "-1s"},
			want: []string{"-drain-timeout -1s", "must not be negative"}},
		{name: "env unknown", env: []string{"UDPGATE_MAX_CLIENT", "10"},
			want: []string{"environment UDPGATE_MAX_CLIENT: unknown setting", "did you mean UDPGATE_MAX_CLIENTS?"}},
		{name: "env unknown far", env: []string{"UDPGATE_COLOUR", "blue"},
			want: []string{"environment UDPGATE_COLOUR: unknown setting", "upper case"}},
		{name: "env print-config", env: []string{"UDPGATE_PRINT_CONFIG", "true"},
			want: []string{"UDPGATE_PRINT_CONFIG", "-print-config is a command-line flag only"}},
		{name: "env agones port", args: []string{"-agones"}, env: []string{"AGONES_SDK_HTTP_PORT", "http"},
			want: []string{"AGONES_SDK_HTTP_PORT", "port number"}},
		{name: "flag agones-port-name without agones", args: []string{"-agones-port-name", "game"},
			want: []string{`-agones-port-name "game"`, "-agones is off"}},
		{name: "flag log-level", args: []string{"-log-level", "loud"},
			want: []string{`-log-level "loud"`, "debug, info, warn or error"}},
		{name: "flag listen", args: []string{"-listen", "127.0.0.1"},
			want: []string{`-listen "127.0.0.1"`, "host:port"}},
		{name: "flag syntax", args: []string{"-sockets", "many"},
			want: []string{"-sockets"}},
		{name: "env session-id", env: []string{"UDPGATE_SESSION_ID", "9"},
			want: []string{"environment UDPGATE_SESSION_ID=9", "0, 1, 2 or 3"}},
		{name: "env syntax", env: []string{"UDPGATE_SUMMARY", "10"},
			want: []string{`environment UDPGATE_SUMMARY="10"`, "duration like 5s"}},
		{name: "env config file missing", env: []string{"UDPGATE_CONFIG", "/nonexistent/udpgate.toml"},
			want: []string{"/nonexistent/udpgate.toml", "-config path"}},
		{name: "file max-clients", file: "# limits\nmax-clients = -5\n",
			want: []string{"config file", "line 2", "max-clients = -5", "at least 1"}},
		{name: "file unknown key", file: "max-client = 5000\n",
			want: []string{`unknown setting "max-client"`, "did you mean max-clients?"}},
		{name: "file table", file: "[server]\nlisten = \"127.0.0.1:1\"\n",
			want: []string{`unknown setting "server"`, "top level"}},
		{name: "file type", file: "max-clients = \"5000\"\n",
			want: []string{"max-clients: want an integer", "max-clients = 100000"}},
		{name: "file magic unquoted", file: "magic = 1011\n",
			want: []string{"magic: want a string in quotes", `magic = "1011"`}},
		{name: "file negative uint", file: "session-id = -1\n",
			want: []string{"session-id = -1", "0 or more"}},
		{name: "file syntax", file: "max-clients =\n",
			want: []string{"config file", "line 1", "TOML syntax"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"-listen", "127.0.0.1:0", "-summary", "0"}, c.args...)
			if c.file != "" {
				args = append(args, "-config", writeFile(t, c.file))
			}
			var stderr bytes.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			start := time.Now()
			err := run(ctx, args, env(c.env...), io.Discard, &stderr)
			if err == nil {
				t.Fatalf("run %q (env %q) succeeded, want an error", args, c.env)
			}
			if time.Since(start) > 5*time.Second || strings.Contains(stderr.String(), "listening") {
				t.Errorf("run did not fail fast: it listened first (stderr %q)", stderr.String())
			}
			msg := err.Error()
			for _, w := range c.want {
				if !strings.Contains(msg, w) && !strings.Contains(stderr.String(), w) {
					t.Errorf("error %q (stderr %q) does not contain %q", msg, stderr.String(), w)
				}
			}
		})
	}
}

// TestAllProblemsAtOnce: one start reports every bad setting, from every
// source.
func TestAllProblemsAtOnce(t *testing.T) {
	path := writeFile(t, "max-clients = 0\nnot-a-setting = 1\n")
	_, err := load([]string{"-config", path, "-app", "chat"},
		env("UDPGATE_SESSION_ID", "4", "UDPGATE_TIMEOUT", "soon"), io.Discard)
	for _, w := range []string{"max-clients = 0", `unknown setting "not-a-setting"`,
		"UDPGATE_SESSION_ID=4", `UDPGATE_TIMEOUT="soon"`, `-app "chat"`} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("error %v does not contain %q", err, w)
		}
	}
}

func TestPrecedence(t *testing.T) {
	path := writeFile(t, `
max-clients = 1
sockets = 1
batch = 8
magic = "1"
app = "discard"
`)
	o, err := load(
		[]string{"-config", path, "-max-clients", "3"},
		env("UDPGATE_MAX_CLIENTS", "2", "UDPGATE_SOCKETS", "2", "UDPGATE_TIMEOUT", "7s"),
		io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name      string
		got, want any
		from      sourceKind
	}{
		{"max-clients", o.maxClients, 3, fromFlag}, // flag > env > file
		{"sockets", o.sockets, 2, fromEnv},         // env > file
		{"batch", o.batch, 8, fromFile},            // file > default
		{"magic", o.magic, "1", fromFile},          //
		{"app", o.app, "discard", fromFile},        //
		{"timeout", o.timeout, 7 * time.Second, fromEnv},
		{"listen", o.listen, defaultListen, fromDefault},
	} {
		if c.got != c.want || o.origin[c.name].kind != c.from {
			t.Errorf("%s = %v from source %d, want %v from %d", c.name, c.got, o.origin[c.name].kind, c.want, c.from)
		}
	}

	// The config path itself: -config beats UDPGATE_CONFIG.
	other := writeFile(t, "max-clients = 9\n")
	o, err = load([]string{"-config", path}, env("UDPGATE_CONFIG", other), io.Discard)
	if err != nil || o.maxClients != 1 || o.configPath != path {
		t.Errorf("-config %s with UDPGATE_CONFIG=%s: max-clients %d from %q (%v), want 1 from the flag's file", path, other, o.maxClients, o.configPath, err)
	}
	o, err = load(nil, env("UDPGATE_CONFIG", other), io.Discard)
	if err != nil || o.maxClients != 9 {
		t.Errorf("UDPGATE_CONFIG=%s: max-clients %d (%v), want 9", other, o.maxClients, err)
	}
	// -print-config has no environment variable: it is refused, not obeyed.
	o, err = load(nil, env("UDPGATE_PRINT_CONFIG", "true"), io.Discard)
	if err == nil || o != nil {
		t.Errorf("UDPGATE_PRINT_CONFIG was accepted (%v)", err)
	}
}

// TestBadValueOneError: a value that does not parse is reported once, and
// does not leave a zero behind for validation to report as a second,
// wrong problem ("max-clients 0 (default): must be at least 1").
func TestBadValueOneError(t *testing.T) {
	for _, c := range []struct {
		name string
		env  []string
		file string
		want string
	}{
		{name: "env int", env: []string{"UDPGATE_MAX_CLIENTS", "ten"}, want: `UDPGATE_MAX_CLIENTS="ten"`},
		{name: "env bool", env: []string{"UDPGATE_OVERLOAD", "yes please"}, want: `UDPGATE_OVERLOAD="yes please"`},
		{name: "env duration", env: []string{"UDPGATE_TIMEOUT", "10"}, want: `UDPGATE_TIMEOUT="10"`},
		{name: "file int", file: "batch = 99999999999999999999\n", want: "batch"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var args []string
			if c.file != "" {
				args = []string{"-config", writeFile(t, c.file)}
			}
			_, err := load(args, env(c.env...), io.Discard)
			if err == nil {
				t.Fatal("loaded")
			}
			lines := strings.Split(err.Error(), "\n")
			if len(lines) != 1 || !strings.Contains(lines[0], c.want) {
				t.Errorf("errors:\n%v\nwant exactly one, about %s", err, c.want)
			}
		})
	}
}

// TestVersion: -version prints the build and exits before loading
// anything else.
func TestVersion(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"-version", "-listen", "127.0.0.1:0"}, env(), &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "udpgate server ") || !strings.Contains(out.String(), "go1.") {
		t.Errorf("-version printed %q", out.String())
	}
}

// TestPrintConfigRoundTrip: what -print-config prints loads back to the
// same settings.
func TestPrintConfigRoundTrip(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		env  []string
		file string
	}{
		{name: "defaults"},
		{
			name: "everything set",
			args: []string{"-listen", "[::1]:7000", "-magic", "0101", "-challenge-rate", "0.5", "-timeout", "2m30s", "-dscp", "46"},
			env:  []string{"UDPGATE_METRICS", "127.0.0.1:9100", "UDPGATE_SESSION_ID", "3", "UDPGATE_NETWORK_VERSION", "4294967295"},
			file: "sockets = 2\nbatch = 64\nmax-clients = 5000\nnetwork-features = 65535\napp = \"discard\"\nlog-level = \"debug\"\nsummary = \"0s\"\n",
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := slices.Clone(c.args)
			if c.file != "" {
				args = append(args, "-config", writeFile(t, c.file))
			}
			want, err := load(args, env(c.env...), io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			if err := run(context.Background(), append(args, "-print-config"), env(c.env...), &out, io.Discard); err != nil {
				t.Fatal(err)
			}
			printed := writeFile(t, out.String())
			got, err := load([]string{"-config", printed}, env(), io.Discard)
			if err != nil {
				t.Fatalf("loading the printed config: %v\n%s", err, out.String())
			}
			if got.values != want.values {
				t.Errorf("printed and loaded back:\n%+v\nwant\n%+v\nfile:\n%s", got.values, want.values, out.String())
			}
			// Every setting is in the file, so it is the whole truth.
			for _, name := range definitionOrder {
				if got.origin[name].kind != fromFile {
					t.Errorf("%s not set by the printed file", name)
				}
			}
		})
	}
}

// TestDefinitionOrder: -print-config writes every setting, once.
func TestDefinitionOrder(t *testing.T) {
	o := &options{}
	fs := o.newFlagSet()
	var settings []string
	fs.VisitAll(func(f *flag.Flag) {
		if isSetting(f.Name) {
			settings = append(settings, f.Name)
		}
	})
	got := slices.Sorted(slices.Values(definitionOrder))
	if !slices.Equal(got, settings) {
		t.Errorf("definitionOrder has %q, the flag set's settings are %q", got, settings)
	}
}

func TestHelp(t *testing.T) {
	var stderr bytes.Buffer
	if err := run(context.Background(), []string{"-h"}, env(), io.Discard, &stderr); err != nil {
		t.Fatalf("-h: %v", err)
	}
	for _, w := range []string{"-max-clients", "UDPGATE_", "Precedence", "-print-config"} {
		if !strings.Contains(stderr.String(), w) {
			t.Errorf("-h output lacks %q", w)
		}
	}
	if _, err := load([]string{"stray"}, env(), io.Discard); err == nil || errors.Is(err, flag.ErrHelp) {
		t.Errorf("a stray argument gave %v, want an error", err)
	}
}

func TestEditDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		d    int
	}{{"", "", 0}, {"max-client", "max-clients", 1}, {"listne", "listen", 2}, {"abc", "", 3}, {"kitten", "sitting", 3}} {
		if d := editDistance(c.a, c.b); d != c.d {
			t.Errorf("editDistance(%q, %q) = %d, want %d", c.a, c.b, d, c.d)
		}
	}
}

// TestLiveSettings: each live setting exists and says so in -h.
func TestLiveSettings(t *testing.T) {
	fs := (&options{}).newFlagSet()
	for _, name := range liveSettings {
		f := fs.Lookup(name)
		if f == nil || !slices.Contains(definitionOrder, name) {
			t.Errorf("live setting %q is not a setting", name)
			continue
		}
		if !strings.Contains(f.Usage, "changes on SIGHUP") {
			t.Errorf("-%s's help does not say it changes on SIGHUP: %q", name, f.Usage)
		}
	}
}
