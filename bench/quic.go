package main

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
)

// quic-go (github.com/quic-go/quic-go), the peer a game would get from a
// general-purpose transport: its defaults (NewReno with its pacer, flow
// control windows that grow, path MTU discovery), TLS 1.3 with a
// self-signed certificate made in process. Only the bottleneck scenarios
// (bottleneck.go) run it. A connection carries two streams, each opened by
// the client and named by its first byte:
//
//   - 'S', the small stream: the game's small messages, each framed with a
//     2-byte big-endian length; the server echoes every tagEcho message on
//     the same stream;
//   - 'B', the bulk stream: bulk messages back to back, each starting with
//     the benchmark's header (tagBulk, its total size); the server answers
//     each complete one with a framed bulkReply on the same stream's
//     return direction, so the return path carries no second bulk.

const (
	kindQUIC      = "quic"
	quicALPN      = "udpgate-bench"
	quicSmallType = 'S'
	quicBulkType  = 'B'
)

func init() {
	// quic-go logs when the kernel caps its socket buffers: noise in a
	// benchmark's output, where every process would say it.
	os.Setenv("QUIC_GO_DISABLE_RECEIVE_BUFFER_WARNING", "true")
}

// quicConfig is quic-go's configuration on both sides: its defaults, with
// room for the streams the benchmark opens.
func quicConfig() *quic.Config {
	return &quic.Config{MaxIncomingStreams: 16}
}

// selfSignedTLS is a server TLS configuration with a fresh self-signed
// ECDSA certificate for 127.0.0.1.
func selfSignedTLS() (*tls.Config, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "udpgate-bench"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
		NextProtos:   []string{quicALPN},
	}, nil
}

// quicClientTLS trusts any certificate: the server's is made per process,
// and the benchmark measures transport, not authentication.
func quicClientTLS() *tls.Config {
	return &tls.Config{InsecureSkipVerify: true, NextProtos: []string{quicALPN}}
}

// writeFrame writes b with its 2-byte big-endian length.
func writeFrame(w io.Writer, b []byte) error {
	if len(b) > 0xffff {
		return fmt.Errorf("frame of %d bytes", len(b))
	}
	f := make([]byte, 2+len(b))
	binary.BigEndian.PutUint16(f, uint16(len(b)))
	copy(f[2:], b)
	_, err := w.Write(f)
	return err
}

// readFrame reads one frame into buf (64 KiB holds any) and returns it.
func readFrame(r *bufio.Reader, buf []byte) ([]byte, error) {
	var h [2]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint16(h[:]))
	if _, err := io.ReadFull(r, buf[:n]); err != nil {
		return nil, err
	}
	return buf[:n], nil
}

// startQUICServer is the quic-go child: it accepts connections and serves
// their streams as the comment above says.
func startQUICServer() (*server, error) {
	tc, err := selfSignedTLS()
	if err != nil {
		return nil, err
	}
	ln, err := quic.ListenAddr("127.0.0.1:0", tc, quicConfig())
	if err != nil {
		return nil, err
	}
	var conns, echoed, bulks atomic.Uint64
	var bulkBytes atomic.Uint64
	go func() {
		for {
			c, err := ln.Accept(context.Background())
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				for {
					s, err := c.AcceptStream(context.Background())
					if err != nil {
						return
					}
					go serveQUICStream(s, &echoed, &bulks, &bulkBytes)
				}
			}()
		}
	}()
	return &server{addr: ln.Addr().(*net.UDPAddr).AddrPort(), close: func() { ln.Close() }, stats: func() string {
		return fmt.Sprintf("conns=%d echoed=%d bulk_messages=%d bulk_bytes=%d", conns.Load(), echoed.Load(), bulks.Load(), bulkBytes.Load())
	}}, nil
}

func serveQUICStream(s *quic.Stream, echoed, bulks, bulkBytes *atomic.Uint64) {
	defer s.Close()
	r := bufio.NewReaderSize(s, 64<<10)
	typ, err := r.ReadByte()
	if err != nil {
		return
	}
	switch typ {
	case quicSmallType:
		buf := make([]byte, 64<<10)
		for {
			m, err := readFrame(r, buf)
			if err != nil {
				return
			}
			if len(m) > 0 && m[0] == tagEcho {
				if writeFrame(s, m) != nil {
					return
				}
				echoed.Add(1)
			}
		}
	case quicBulkType:
		var head [msgHeader]byte
		for {
			if _, err := io.ReadFull(r, head[:]); err != nil {
				return
			}
			total := int(binary.LittleEndian.Uint32(head[offTotal:]))
			if head[0] != tagBulk || total < msgHeader {
				return
			}
			n, err := io.CopyN(io.Discard, r, int64(total-msgHeader))
			bulkBytes.Add(uint64(n) + msgHeader)
			if err != nil {
				return
			}
			bulks.Add(1)
			if writeFrame(s, bulkReply(head[:], total)) != nil {
				return
			}
		}
	}
}

// quicConn is a quic-go client connection of the bottleneck scenarios.
type quicConn struct {
	c     *quic.Conn
	on    func([]byte)
	mu    sync.Mutex // the small stream's writers
	small *quic.Stream
	bulkS *quic.Stream // opened by the first bulk message
	wg    sync.WaitGroup
}

func dialQUIC(ctx context.Context, addr netip.AddrPort, on func([]byte)) (*quicConn, error) {
	c, err := quic.DialAddr(ctx, addr.String(), quicClientTLS(), quicConfig())
	if err != nil {
		return nil, err
	}
	q := &quicConn{c: c, on: on}
	if q.small, err = q.open(ctx, quicSmallType); err != nil {
		c.CloseWithError(0, "")
		return nil, err
	}
	return q, nil
}

// open opens a stream of type typ and reads its frames into q.on.
func (q *quicConn) open(ctx context.Context, typ byte) (*quic.Stream, error) {
	s, err := q.c.OpenStreamSync(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := s.Write([]byte{typ}); err != nil {
		return nil, err
	}
	q.wg.Add(1)
	go func() {
		defer q.wg.Done()
		r := bufio.NewReaderSize(s, 64<<10)
		buf := make([]byte, 64<<10)
		for {
			m, err := readFrame(r, buf)
			if err != nil {
				return
			}
			q.on(m)
		}
	}()
	return s, nil
}

func (q *quicConn) sendSmall(_ bool, b []byte) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	return writeFrame(q.small, b)
}

// sendBulk writes one bulk message on the bulk stream, blocking while
// quic-go holds earlier data (its send buffer, flow control and congestion
// window); ctx's end interrupts it.
func (q *quicConn) sendBulk(ctx context.Context, b []byte, _ <-chan struct{}) error {
	if q.bulkS == nil {
		s, err := q.open(ctx, quicBulkType)
		if err != nil {
			return err
		}
		q.bulkS = s
	}
	stop := context.AfterFunc(ctx, func() { q.bulkS.SetWriteDeadline(time.Now()) })
	defer stop()
	_, err := q.bulkS.Write(b)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

func (q *quicConn) ended() string {
	select {
	case <-q.c.Context().Done():
		if err := context.Cause(q.c.Context()); err != nil && !errors.Is(err, context.Canceled) {
			return err.Error()
		}
		return "closed"
	default:
		return ""
	}
}

// resent: quic-go's packets declared lost (each one's data is sent again).
func (q *quicConn) resent() int64 { return int64(q.c.ConnectionStats().PacketsLost) }

func (q *quicConn) port() uint16 { return addrPort(q.c.LocalAddr()) }

func (q *quicConn) close() {
	q.c.CloseWithError(0, "")
	q.wg.Wait()
}

// quicVersion is the quic-go module version built in.
func quicVersion() string {
	if v := depVersion("github.com/quic-go/quic-go"); v != "" {
		return v
	}
	return "?"
}
