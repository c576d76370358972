// Command client is udpgate's test client: it talks to a server as one
// interactive client, as many clients, or as an attacker.
//
//	go run ./cmd/client connect                    # type lines; see the echoes and the RTT
//	go run ./cmd/client load -h                    # many clients at once
//	go run ./cmd/client flood -count 1000000       # hostile traffic; prints the amplification report
//	go run ./cmd/client noack -clients 500         # receivers that never acknowledge; prints the server's egress to them
//	go run ./cmd/client hold -clients 2000         # proven clients holding receive memory (issue 29)
//	go run ./cmd/client token -h                   # a connect token for a sealed server; connect -token uses it
//	go run ./cmd/client -version
//
// Every subcommand takes -server (default 127.0.0.1:7777), -magic,
// -network-version (default 1) and -network-features (default 0), which
// must match the server's. The client only ever targets loopback
// addresses: it is a test tool, and flood in particular must never reach
// another host.
//
// Exit status: 0 success, 1 failure, 2 bad usage, 3 when flood finds that a
// source received more bytes than it sent.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"syscall"

	"github.com/udpgate/udpgate/cmd/internal/version"
	"github.com/udpgate/udpgate/conn"
	"github.com/udpgate/udpgate/internal/wire"
)

// Exit statuses.
const (
	exitOK        = 0
	exitFailure   = 1
	exitUsage     = 2
	exitAmplified = 3
)

const usageText = `Usage: client <command> [flags]

A test client for udpgate servers. Commands:

  connect   connect, send each line of standard input as a Data packet
            (-reliable: as a reliable message), print what comes back with
            its round-trip time, close cleanly at end of input or Ctrl-C
  load      run many clients against a server and report what they measured
  flood     send hostile traffic (forged, replayed, malformed) from many
            source addresses and report the server's amplification
  spray     make one connection and send from it, open loop, at a rate
            (malformed Messages packets, valid Data, or both): one client
            at full speed against the server's inbound budget
  noack     connections that receive reliable echoes and never acknowledge
            them (an attack on the server's send memory and rate)
  hold      hold a server's receive memory for messages from many proven
            connections (issue 29's attack), to measure its defence
  token     make a netcode.io connect token for a server in sealed mode
            (connect -token FILE connects with it)
  version   print the version (also -version)

Every command but token takes:

  -server host:port       the server (default 127.0.0.1:7777); loopback only
  -magic bits             magic header, up to 32 '0'/'1' characters (default none)
  -network-version n      must equal the server's (default 1)
  -network-features n     must equal the server's (default 0)

Run "client <command> -h" for the command's own flags.

Exit status: 0 success; 1 failure (no connection, denied, timed out,
disconnected, ...); 2 bad usage; 3 flood found a source that received more
bytes than it sent (the server amplifies).
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run dispatches to a subcommand and turns its error into an exit status.
// connect and flood stop cleanly on SIGINT/SIGTERM through their context;
// load installs its own handling.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usageText)
		return exitUsage
	}
	cmd, rest := args[0], args[1:]
	var err error
	switch cmd {
	case "connect":
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err = runConnect(ctx, rest, stdin, stdout, stderr)
		stop()
	case "load":
		err = runLoad(rest, stdout, stderr)
	case "hold":
		err = runHold(rest, stdout, stderr)
	case "token":
		err = runToken(rest, stderr)
	case "flood":
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err = runFlood(ctx, rest, stdout, stderr)
		stop()
	case "spray":
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err = runSpray(ctx, rest, stdout, stderr)
		stop()
	case "noack":
		err = runNoAck(rest, stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usageText)
		return exitOK
	case "version", "-version", "--version":
		fmt.Fprintln(stdout, "udpgate client", version.Get())
		return exitOK
	default:
		fmt.Fprintf(stderr, "client: unknown command %q: use connect, load, flood, spray, noack, hold, token or version\n\n%s", cmd, usageText)
		return exitUsage
	}
	return exitStatus(cmd, err, stderr)
}

// exitStatus prints err, if it has something to say, and maps it to the
// exit status.
func exitStatus(cmd string, err error, stderr io.Writer) int {
	var ue *usageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.As(err, &ue):
		if ue.msg != "" {
			fmt.Fprintf(stderr, "client %s: %s\n", cmd, ue.msg)
		}
		return exitUsage
	case errors.Is(err, errAmplified):
		fmt.Fprintf(stderr, "client %s: %v\n", cmd, err)
		return exitAmplified
	}
	fmt.Fprintf(stderr, "client %s: %v\n", cmd, err)
	return exitFailure
}

// usageError is a mistake on the command line (exit status 2). An empty msg
// means the flag package already printed it, with the usage.
type usageError struct{ msg string }

func (e *usageError) Error() string {
	if e.msg == "" {
		return "bad usage"
	}
	return e.msg
}

func usagef(format string, a ...any) error { return &usageError{msg: fmt.Sprintf(format, a...)} }

// newFlagSet returns a subcommand's flag set, printing errors and usage to
// stderr rather than exiting, so run decides the status.
func newFlagSet(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: client %s [flags]\n\n%s\n\nFlags:\n", name, synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args and refuses positional arguments, which no
// subcommand of this file takes (a stray word is usually a flag without
// its dash).
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return &usageError{} // the flag package printed it
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q: every setting is a flag (see client %s -h)", fs.Arg(0), fs.Name())
	}
	return nil
}

// wireFlags are the settings every subcommand shares: where the server is
// and the wire settings that must match it.
type wireFlags struct {
	server          string
	magic           string
	networkVersion  uint64
	networkFeatures uint64
}

func addWireFlags(fs *flag.FlagSet) *wireFlags {
	w := new(wireFlags)
	fs.StringVar(&w.server, "server", "127.0.0.1:7777", "server `host:port`; must be a loopback address (127.0.0.0/8, ::1, localhost)")
	fs.StringVar(&w.magic, "magic", "", "magic header, up to 32 '0'/'1' `bits`, as the server's -magic")
	fs.Uint64Var(&w.networkVersion, "network-version", 1, "network `version`, as the server's -network-version")
	fs.Uint64Var(&w.networkFeatures, "network-features", 0, "network `features`, as the server's -network-features")
	return w
}

// target resolves -server and refuses anything but loopback: this tool
// sends test and attack traffic, which must stay on this host.
func (w *wireFlags) target() (netip.AddrPort, error) {
	ap, err := netip.ParseAddrPort(w.server)
	if err != nil {
		ua, rerr := net.ResolveUDPAddr("udp", w.server)
		if rerr != nil {
			return netip.AddrPort{}, usagef("-server %q is not a host:port: %v (e.g. -server 127.0.0.1:7777)", w.server, rerr)
		}
		ap = ua.AddrPort()
	}
	ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	if ap.Port() == 0 {
		return netip.AddrPort{}, usagef("-server %q has no port: give the server's port, e.g. -server 127.0.0.1:7777", w.server)
	}
	if !ap.Addr().IsLoopback() {
		return netip.AddrPort{}, usagef("-server %s is not a loopback address: this client only talks to servers on this host (127.0.0.0/8 or ::1)", ap)
	}
	return ap, nil
}

// config returns the wire part of a conn.Config, validated with the flag
// names in the messages.
func (w *wireFlags) config() (conn.Config, error) {
	if _, err := wire.ParseMagic(w.magic); err != nil {
		return conn.Config{}, usagef("-magic %q: use up to 32 characters of '0' and '1' (the server's -magic), or leave it out", w.magic)
	}
	if w.networkVersion > math.MaxUint32 {
		return conn.Config{}, usagef("-network-version %d is too large: use 0..%d, the server's -network-version", w.networkVersion, uint64(math.MaxUint32))
	}
	if w.networkFeatures > math.MaxUint16 {
		return conn.Config{}, usagef("-network-features %d is too large: use 0..%d, the server's -network-features", w.networkFeatures, math.MaxUint16)
	}
	return conn.Config{
		Magic:           w.magic,
		NetworkVersion:  uint32(w.networkVersion),
		NetworkFeatures: uint16(w.networkFeatures),
	}, nil
}
