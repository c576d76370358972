package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/udpgate/udpgate/cmd/internal/sealflag"
	"github.com/udpgate/udpgate/conn"
	"github.com/udpgate/udpgate/internal/defaults"
	"github.com/udpgate/udpgate/internal/msgcfg"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/wire"
	"github.com/udpgate/udpgate/message"
	"github.com/udpgate/udpgate/token"
)

const connectSynopsis = `Connect to a server, send each line of standard input as one Data packet and
print each payload that comes back on its own line of standard output. With
an echo server (the default -app of cmd/server) every line comes back; its
round-trip time goes to standard error (-quiet leaves that out).

At end of input the client waits up to -wait for replies still on their way,
then closes the connection cleanly (Disconnect, as Ctrl-C does).

UDP is unreliable and this client does not resend: a line or its echo may be
lost. Lines with no echo by the end are reported as unanswered. Empty lines
are skipped (a Data packet carries at least one byte).

With -reliable each line is one message on the reliable-ordered channel 0
of the tools' channel layout (the server's -messages, on by default), up to
the largest message (the server's -message-max-size): the message layer
resends what is lost, so every line comes back, in order, and its echo is
printed as it comes. At end of input the client waits up to -wait (10s by
default with -reliable) for the echoes still awaited; the exit status is 0
only when every line came back, else 1, saying how many did not.

With -token FILE the client connects to a server in sealed mode with a
netcode.io connect token (from the game's backend, or "client token"): it
tries the token's servers in order (-server is not used), proves the token
after the handshake, and every packet is sealed. A refused token ends the
command with the reason: token expired, token invalid (wrong key or protocol
id), this server is not in the token, token in use from another address.`

func runConnect(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := newFlagSet("connect", connectSynopsis, stderr)
	w := addWireFlags(fs)
	timeout := fs.Duration("timeout", defaults.ConnectTimeout, "give up connecting after this long without an answer from the server")
	wait := fs.Duration("wait", time.Second, "at end of input, wait up to this long for outstanding replies (default 10s with -reliable)")
	quiet := fs.Bool("quiet", false, "print only the replies: no status or RTT lines on standard error")
	reliable := fs.Bool("reliable", false, "send each line as a reliable-ordered message (channel 0; the server needs -messages, its default) instead of a Data packet: every line comes back, in order, or the exit status is 1")
	msgMax := fs.Int("message-max-size", message.DefaultMaxMessageSize, "with -reliable: the largest message, so the longest line, in `bytes`; as the server's -message-max-size")
	tokenFile := fs.String("token", "", "connect in sealed mode with the connect token in `file` (client token -h); the servers are the token's, so leave -server out")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	var tok *token.ConnectToken
	var servers []netip.AddrPort
	if *tokenFile != "" {
		if isSetOnCommandLine(fs, "server") {
			return usagef("-server and -token: the token names the servers to connect to; leave -server out")
		}
		var err error
		if tok, err = readTokenFile(*tokenFile); err != nil {
			return err
		}
		servers = tok.ServerAddresses
	} else {
		server, err := w.target()
		if err != nil {
			return err
		}
		servers = []netip.AddrPort{server}
	}
	server := sealflag.FormatAddrs(servers)
	cfg, err := w.config()
	if err != nil {
		return err
	}
	if *timeout <= 0 || *wait < 0 {
		return usagef("-timeout must be positive and -wait not negative")
	}
	if *reliable && !isSetOnCommandLine(fs, "wait") {
		*wait = reliableWait
	}
	if *msgMax < 1 || *msgMax > message.MaxMessageSizeLimit {
		return usagef("-message-max-size %d is out of range: use 1..%d bytes, as the server's -message-max-size", *msgMax, message.MaxMessageSizeLimit)
	}
	cfg.ConnectTimeout = *timeout
	// The servers are on this host: bind the loopback address of their
	// family, so the local address printed is the one the server sees.
	// (A token may list both families: then the client binds per server.)
	switch {
	case allAddrs(servers, netip.Addr.Is4):
		cfg.LocalAddr = "127.0.0.1:0"
	case allAddrs(servers, netip.Addr.Is6):
		cfg.LocalAddr = "[::1]:0"
	}
	m, _ := wire.ParseMagic(cfg.Magic) // checked by config
	maxPayload := protocol.DefaultMaxDatagram - wire.ConnLen(m, protocol.KindData, 0)
	if tok != nil {
		maxPayload = protocol.DefaultMaxDatagram - wire.SealedConnLen(m, 0)
	}

	s := &session{out: stdout, status: stderr, got: make(chan struct{}, 1)}
	if *quiet {
		s.status = io.Discard
	}
	cfg.Handler = s
	var rs *reliableSession
	if *reliable {
		cfg.Messages = msgcfg.Config(*msgMax, 0)
		rs = &reliableSession{session: s}
		cfg.Handler = rs
	}
	var cli *conn.Client
	dialStart := time.Now()
	if tok != nil {
		s.statusf("connecting to %s with the token in %s (sealed) ...", server, *tokenFile)
		cli, err = conn.DialToken(ctx, tok, cfg)
	} else {
		s.statusf("connecting to %s ...", server)
		cli, err = conn.Dial(ctx, server, cfg)
	}
	if err != nil {
		return explainDial(err, server, &cfg, tok != nil)
	}
	defer cli.Close() // a second Close after the clean one is harmless
	// Without a token, a sealed server says so in its Ack, and Dial
	// failed above (conn.ErrTokenRequired). A sealed server older than
	// that Ack says so a round trip later instead: before giving up at
	// the end of input, wait that long (the dial took two round trips).
	settle := min(max(time.Since(dialStart), 20*time.Millisecond), time.Second)
	if tok != nil {
		settle = 0
	}
	s.statusf("connected from %s; type lines to send, end with Ctrl-D (or Ctrl-C)", cli.LocalAddr())
	if rs != nil {
		return runReliable(ctx, cli, rs, stdin, *wait, server)
	}

	lines := make(chan string)
	readErr := make(chan error, 1)
	done := make(chan struct{})
	defer close(done)
	go readLines(stdin, lines, readErr, done)
	n := 0
	for {
		select {
		case <-ctx.Done():
			s.statusf("interrupted: closing")
			return s.finish(cli)
		case <-cli.Done():
			return explainEnd(cli.Err(), server)
		case line, ok := <-lines:
			if !ok {
				if err := <-readErr; err != nil {
					s.finish(cli)
					return fmt.Errorf("reading standard input: %w", err)
				}
				if settled(cli, settle) {
					return explainEnd(cli.Err(), server)
				}
				s.awaitReplies(ctx, cli, *wait)
				if errors.Is(cli.Err(), conn.ErrTokenRequired) {
					return explainEnd(cli.Err(), server)
				}
				return s.finish(cli)
			}
			n++
			if len(line) == 0 {
				continue
			}
			if len(line) > maxPayload {
				s.statusf("line %d not sent: %d bytes, but one packet carries at most %d: split it", n, len(line), maxPayload)
				continue
			}
			s.sending(line)
			if _, err := cli.Send([]byte(line)); err != nil {
				s.finish(cli)
				return fmt.Errorf("sending line %d: %w", n, err)
			}
		}
	}
}

// readLines sends each line of r (without its line ending) to lines, then
// closes lines and reports the read error, nil at end of input. It stops
// when done closes; one blocked in Read (a terminal after Ctrl-C) is
// abandoned, and the process exits without it.
func readLines(r io.Reader, lines chan<- string, errc chan<- error, done <-chan struct{}) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if n := len(line); n > 0 && line[n-1] == '\r' {
			line = line[:n-1]
		}
		select {
		case lines <- line:
		case <-done:
			return
		}
	}
	errc <- sc.Err()
	close(lines)
}

// readTokenFile reads a connect token for connect -token and checks that
// it sends the client only to this host.
func readTokenFile(path string) (*token.ConnectToken, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, usagef("-token: %v: give the file client token -out (or the backend) wrote", err)
	}
	tok := new(token.ConnectToken)
	if err := tok.UnmarshalBinary(b); err != nil {
		return nil, usagef("-token %s: not a connect token: %v (a token file is the %d bytes client token or the backend wrote, unchanged)",
			path, strings.TrimPrefix(err.Error(), "token: "), token.TokenBytes)
	}
	for _, a := range tok.ServerAddresses {
		if !a.Addr().Unmap().IsLoopback() {
			return nil, usagef("-token %s lists server %s, not a loopback address: this client only talks to servers on this host (127.0.0.0/8 or ::1); make a token for those", path, a)
		}
	}
	return tok, nil
}

// allAddrs reports whether every address's IP satisfies f.
func allAddrs(addrs []netip.AddrPort, f func(netip.Addr) bool) bool {
	for _, a := range addrs {
		if !f(a.Addr()) {
			return false
		}
	}
	return true
}

// isSetOnCommandLine reports whether a flag was given.
func isSetOnCommandLine(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// explainDial turns Dial's typed errors into what the user should do. With
// a token (sealed) a refusal is the token's, and silence may be a server
// without sealed mode.
func explainDial(err error, server string, cfg *conn.Config, sealed bool) error {
	var denied *conn.DeniedError
	var version *conn.VersionError
	var unreachable *conn.UnreachableError
	switch {
	case errors.As(err, &unreachable):
		return fmt.Errorf("unreachable: nothing listens on UDP %s (the host answered ICMP port unreachable): check -server's port and that the server runs", server)
	case errors.As(err, &denied):
		switch denied.Reason {
		case protocol.DeniedServerFull:
			return fmt.Errorf("denied: the server at %s is full (its -max-clients are connected): try again later", server)
		case protocol.DeniedRefused:
			return fmt.Errorf("denied: the server at %s refused this client (its application said no)", server)
		case protocol.DeniedAddressLimit:
			return fmt.Errorf("denied: the server at %s holds as many connections from this address or network as it allows (its -max-clients-per-ip / -max-clients-per-prefix): close some, or try later", server)
		}
		return fmt.Errorf("denied by the server at %s (reason %d)", server, denied.Reason)
	case errors.As(err, &version) && version.Layout != "":
		return fmt.Errorf("refused: the server at %s has another message layout: %s: run again with -message-max-size as the server's (this tool declares the stock channels and 1200-byte datagrams)", server, version.Layout)
	case errors.As(err, &version):
		return fmt.Errorf("wrong version: the server at %s runs network version %d, features %d; this client sent version %d, features %d: run again with -network-version %d -network-features %d",
			server, version.ServerNetworkVersion, version.ServerNetworkFeatures, cfg.NetworkVersion, cfg.NetworkFeatures,
			version.ServerNetworkVersion, version.ServerNetworkFeatures)
	case errors.Is(err, conn.ErrTokenExpired):
		return fmt.Errorf("refused: token expired: the server at %s says the token's time to connect is over: get a new token (client token, or the backend), and check that the backend's and the server's clocks agree", server)
	case errors.Is(err, conn.ErrTokenInvalid):
		return fmt.Errorf("refused: token invalid (wrong key or protocol id): the server at %s cannot open it: make the token with the server's private key and -protocol-id", server)
	case errors.Is(err, conn.ErrTokenForeignServer):
		return fmt.Errorf("refused: this server is not in the token: the server at %s does not find its own address among the token's servers: make the token for the server's -public-addresses", server)
	case errors.Is(err, conn.ErrTokenInUse):
		return fmt.Errorf("refused: token in use from another address: the server at %s already admitted this token from another address (one token serves one client): get a new token", server)
	case errors.Is(err, conn.ErrTimedOut) && sealed:
		return fmt.Errorf("timed out: no answer from %s within %v each: check that the server runs there, in sealed mode (-private-key-file; a server without a key does not answer a token), and that -magic matches its -magic",
			server, cfg.ConnectTimeout)
	case errors.Is(err, conn.ErrTimedOut):
		return fmt.Errorf("timed out: no answer from %s within %v: check that the server runs there and that -magic matches its -magic (a server ignores packets with another magic header)",
			server, cfg.ConnectTimeout)
	case errors.Is(err, conn.ErrTokenRequired):
		return errTokenRequired(server)
	case errors.Is(err, context.Canceled):
		return fmt.Errorf("interrupted before the connection to %s was made", server)
	}
	return err
}

// errTokenRequired says that the server is sealed and this run has no
// token.
func errTokenRequired(server string) error {
	return fmt.Errorf("the server at %s is in sealed mode and needs a connect token, and none was given: run again with -token FILE (a token from the game's backend, or one made with client token and the server's private key and protocol id)", server)
}

// settled waits up to d for cli's connection to end, and reports whether
// it did.
func settled(cli *conn.Client, d time.Duration) bool {
	if d <= 0 {
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-cli.Done():
		return true
	case <-t.C:
		return false
	}
}

// explainEnd says why an open connection ended on its own.
func explainEnd(err error, server string) error {
	var de *conn.DisconnectedError
	if errors.As(err, &de) {
		switch {
		case errors.Is(err, conn.ErrTokenRequired):
			return errTokenRequired(server)
		case de.Reason == conn.ReasonShutdown:
			return fmt.Errorf("the server at %s is shutting down", server)
		case de.Reason == conn.ReasonTimedOut && !de.Remote:
			return fmt.Errorf("the connection to %s timed out: nothing came from the server for the connection timeout", server)
		case de.Remote:
			return fmt.Errorf("the server at %s closed the connection: %v", server, de.Reason)
		}
	}
	return fmt.Errorf("the connection to %s ended: %v", server, err)
}

// maxPending bounds the lines remembered for RTT matching; older ones count
// as unanswered.
const maxPending = 1024

// session is the connection's Handler: it prints replies as they come and
// matches echoes to the lines sent for their round-trip time.
type session struct {
	conn.NopHandler
	got chan struct{} // a reply arrived; capacity 1, never blocks

	mu      sync.Mutex
	out     io.Writer // replies
	status  io.Writer // RTT and notices
	pending []pendingLine
	sent    int
	replies int
	dropped int // pending lines forgotten beyond maxPending
	rtts    rttStats
	outErr  error
}

type pendingLine struct {
	text string
	at   time.Time
}

type rttStats struct {
	n             int
	min, max, sum time.Duration
}

func (r *rttStats) add(d time.Duration) {
	if r.n == 0 || d < r.min {
		r.min = d
	}
	r.max = max(r.max, d)
	r.sum += d
	r.n++
}

func (s *session) statusf(format string, a ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintf(s.status, format+"\n", a...)
}

// sending records a line about to be sent, for RTT matching.
func (s *session) sending(line string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sent++
	if len(s.pending) == maxPending {
		s.pending = s.pending[1:]
		s.dropped++
	}
	s.pending = append(s.pending, pendingLine{text: line, at: time.Now()})
}

// OnPacket prints a reply and, when it echoes a pending line, the RTT. It
// runs on the client's receive goroutine; payload is only borrowed.
func (s *session) OnPacket(c *conn.Conn, payload []byte) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.replies++
	if _, err := fmt.Fprintln(s.out, printable(payload)); err != nil && s.outErr == nil {
		s.outErr = err
	}
	for i, p := range s.pending {
		if p.text == string(payload) {
			rtt := now.Sub(p.at)
			s.rtts.add(rtt)
			s.pending = append(s.pending[:i], s.pending[i+1:]...)
			fmt.Fprintf(s.status, "rtt %v (smoothed %v)\n", roundRTT(rtt), roundRTT(c.RTT()))
			break
		}
	}
	select {
	case s.got <- struct{}{}:
	default:
	}
}

// awaitReplies waits until every sent line has its echo, or wait passes, or
// the connection or ctx ends.
func (s *session) awaitReplies(ctx context.Context, cli *conn.Client, wait time.Duration) {
	awaitAll(ctx, cli, wait, s.got, func() int {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.pending)
	})
}

// awaitAll waits until left reports nothing left, checking it again at
// each signal on got, or until wait passes or the connection or ctx ends.
func awaitAll(ctx context.Context, cli *conn.Client, wait time.Duration, got <-chan struct{}, left func() int) {
	if left() == 0 {
		return
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	for left() > 0 {
		select {
		case <-got:
		case <-t.C:
			return
		case <-ctx.Done():
			return
		case <-cli.Done():
			return
		}
	}
}

// finish closes the connection cleanly (Disconnect packets) and prints the
// summary.
func (s *session) finish(cli *conn.Client) error {
	rtt := cli.Conn().RTT()
	cli.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintf(s.status, "closed: sent %d, received %d, unanswered %d", s.sent, s.replies, len(s.pending)+s.dropped)
	if r := s.rtts; r.n > 0 {
		fmt.Fprintf(s.status, "; rtt min %v avg %v max %v, smoothed %v",
			roundRTT(r.min), roundRTT(r.sum/time.Duration(r.n)), roundRTT(r.max), roundRTT(rtt))
	}
	fmt.Fprintln(s.status)
	if s.outErr != nil {
		return fmt.Errorf("writing replies: %w", s.outErr)
	}
	return nil
}

// roundRTT keeps three significant figures or so.
func roundRTT(d time.Duration) time.Duration {
	switch {
	case d >= 100*time.Millisecond:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}

// printable returns a payload as one line: as is when it is text without
// control characters, else quoted, so binary replies cannot break lines or
// the terminal.
func printable(p []byte) string {
	if utf8.Valid(p) {
		clean := true
		for _, r := range string(p) {
			if unicode.IsControl(r) && r != '\t' {
				clean = false
				break
			}
		}
		if clean {
			return string(p)
		}
	}
	return strconv.Quote(string(p))
}
