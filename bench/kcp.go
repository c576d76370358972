package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"runtime/debug"
	"sync/atomic"

	kcp "github.com/xtaci/kcp-go/v5"
)

// kcp-go (github.com/xtaci/kcp-go/v5), the peer udpgate's messages are
// compared with, in the profile the issue fixes: nodelay 1, a 10 ms
// interval, fast resend after 2 duplicate acks, no congestion window,
// 1024-segment windows both ways, message mode, writes flushed at once,
// acks sent at once; no FEC, no encryption. The bottleneck scenarios
// (bottleneck.go) also run variant kcp/cc, kcp-go's normal mode with its
// congestion window on (kcpCCProfile).

// kcpProfile sets the benchmark's kcp-go profile on a session.
func kcpProfile(s *kcp.UDPSession) {
	s.SetNoDelay(1, 10, 2, 1)
	s.SetWindowSize(1024, 1024)
	s.SetStreamMode(false)
	s.SetWriteDelay(false)
	s.SetACKNoDelay(true)
}

// kcpCCProfile is kcp-go's normal mode with its congestion window on:
// SetNoDelay(0, 40, 0, 0) (no nodelay, a 40 ms interval, no fast resend,
// nc 0), acks at kcp-go's default pace; the flow windows are the fast
// profile's 1024 segments, so that the congestion window, not kcp-go's
// default 32-segment send window, is what limits it; message mode, writes
// flushed at once.
func kcpCCProfile(s *kcp.UDPSession) {
	s.SetNoDelay(0, 40, 0, 0)
	s.SetWindowSize(1024, 1024)
	s.SetStreamMode(false)
	s.SetWriteDelay(false)
}

// kcpProfileFor is variant v's profile.
func kcpProfileFor(v variant) func(*kcp.UDPSession) {
	if v.KCPCC {
		return kcpCCProfile
	}
	return kcpProfile
}

// kcpReadBuf holds any message kcp-go delivers: its session cuts writes
// into messages of at most one segment (mss, under 1400 bytes), and a
// Read shorter than a message would split it.
const kcpReadBuf = 64 << 10

// kcpEchoBatch bounds the messages the server echoes with one
// WriteBuffers (one flush), as udpgate's echoes of one packet share one.
const kcpEchoBatch = 64

// startKCPServer is the kcp-go child: every session's messages are echoed
// (those that were ready together, together), and a bulk message is
// counted (kcp-go delivers it in pieces of at most mss bytes) and answered
// with bulkReply once complete.
func startKCPServer(profile func(*kcp.UDPSession)) (*server, error) {
	l, err := kcp.ListenWithOptions("127.0.0.1:0", nil, 0, 0)
	if err != nil {
		return nil, err
	}
	// The socket buffers udpgate's server has by default.
	l.SetReadBuffer(msgSocketBuffer)
	l.SetWriteBuffer(msgSocketBuffer)
	var sessions, in, out atomic.Uint64
	go func() {
		for {
			s, err := l.AcceptKCP()
			if err != nil {
				return
			}
			sessions.Add(1)
			profile(s)
			go serveKCP(s, &in, &out)
		}
	}()
	addr := l.Addr().(*net.UDPAddr).AddrPort()
	return &server{addr: addr, close: func() { l.Close() }, stats: func() string {
		return fmt.Sprintf("sessions=%d messages_in=%d messages_out=%d", sessions.Load(), in.Load(), out.Load())
	}}, nil
}

func serveKCP(s *kcp.UDPSession, in, out *atomic.Uint64) {
	defer s.Close()
	bufs := make([][]byte, kcpEchoBatch)
	for i := range bufs {
		bufs[i] = make([]byte, kcpReadBuf)
	}
	var batch [][]byte
	var bulkLeft int
	var bulkHead [msgHeader]byte
	for {
		n, err := s.Read(bufs[0])
		if err != nil {
			return
		}
		batch = batch[:0]
		for k := 0; ; {
			b := bufs[k][:n]
			in.Add(1)
			switch {
			case bulkLeft > 0:
				bulkLeft -= n
				if bulkLeft <= 0 {
					batch = append(batch, bulkReply(bulkHead[:], int(binary.LittleEndian.Uint32(bulkHead[offTotal:]))-bulkLeft))
					bulkLeft = 0
				}
			case n >= msgHeader && b[0] == tagBulk:
				copy(bulkHead[:], b)
				bulkLeft = int(binary.LittleEndian.Uint32(b[offTotal:])) - n
				if bulkLeft <= 0 {
					batch = append(batch, bulkReply(b, n))
					bulkLeft = 0
				}
			case n > 0 && b[0] == tagEcho:
				batch = append(batch, b)
				k++
			}
			if k == len(bufs) {
				break
			}
			n, err = s.TryRead(bufs[k])
			if err != nil || n == 0 {
				break
			}
		}
		if len(batch) > 0 {
			if _, err := s.WriteBuffers(batch); err != nil {
				return
			}
			out.Add(uint64(len(batch)))
		}
	}
}

// kcpClient is a kcp-go session with a reader goroutine.
type kcpClient struct {
	s       *kcp.UDPSession
	done    chan struct{}
	readErr error // set before done closes
}

func dialKCP(ctx context.Context, addr netip.AddrPort, _ msgServerSpec, on func([]byte)) (msgClient, error) {
	return dialKCPWith(addr, kcpProfile, on)
}

// dialKCPWith opens a session to addr with profile, reading its messages
// into on.
func dialKCPWith(addr netip.AddrPort, profile func(*kcp.UDPSession), on func([]byte)) (*kcpClient, error) {
	s, err := kcp.DialWithOptions(addr.String(), nil, 0, 0)
	if err != nil {
		return nil, err
	}
	profile(s)
	s.SetReadBuffer(msgSocketBuffer)
	s.SetWriteBuffer(msgSocketBuffer)
	c := &kcpClient{s: s, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		buf := make([]byte, kcpReadBuf)
		for {
			n, err := s.Read(buf)
			if err != nil {
				c.readErr = err
				return
			}
			on(buf[:n])
		}
	}()
	return c, nil
}

func (c *kcpClient) send(msgs [][]byte) error {
	if len(msgs) == 1 {
		_, err := c.s.Write(msgs[0])
		return err
	}
	_, err := c.s.WriteBuffers(msgs)
	return err
}

// resent: kcp-go counts resent segments per process only (kcpRetrans).
func (c *kcpClient) resent() int64 { return -1 }

// kcpRetrans is kcp-go's count of segments resent by this process
// (DefaultSnmp.RetransSegs: timeouts, fast and early resends).
func kcpRetrans() int64 { return int64(kcp.DefaultSnmp.Copy().RetransSegs) }

func (c *kcpClient) close() {
	c.s.Close()
	<-c.done
}

// depVersion is module path's version in this binary's build info.
func depVersion(path string) string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	for _, d := range bi.Deps {
		if d.Path == path {
			if d.Replace != nil {
				return d.Replace.Version
			}
			return d.Version
		}
	}
	return ""
}
