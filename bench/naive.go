package main

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha1"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/udpgate/udpgate/cookie"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/seqwin"
	"github.com/udpgate/udpgate/internal/wire"
)

// naiveServer is the baseline a first implementation of the same handshake
// would be: it speaks the same wire format (fastpath's codec and SeqState,
// so the load generator cannot tell the difference) but does everything the
// straightforward way:
//
//   - one ReadFromUDPAddrPort and one WriteToUDPAddrPort system call per
//     datagram, from GOMAXPROCS goroutines sharing one socket (so it can
//     use every core; it also measured cheaper per handshake packet than a
//     single reader, whose idle P spins: see tuning.md);
//   - hmac.New(sha1.New, secret) for every cookie it makes or checks;
//   - one sync.Mutex around one map[netip.AddrPort]*naiveConn.
//
// It leaves out what costs nothing per packet in the measured paths (secret
// rotation, VersionUpgrade, RestartHandshake, rate limits, timeouts,
// keepalives), so it is, if anything, flattered. Its socket buffers are
// the same 4 MiB as the other servers', so it is not penalised by drops.
type naiveServer struct {
	pc         *net.UDPConn
	magic      wire.Magic
	netVersion uint32
	secret     [cookie.SecretSize]byte

	mu    sync.Mutex
	conns map[netip.AddrPort]*naiveConn

	packets atomic.Uint64
	replies atomic.Uint64
}

type naiveConn struct {
	clientID uint8
	cookie   cookie.Cookie
	tag      uint32
	seq      seqwin.SeqState
}

func newNaive(magic wire.Magic, netVersion uint32) *naiveServer {
	s := &naiveServer{magic: magic, netVersion: netVersion, conns: make(map[netip.AddrPort]*naiveConn)}
	rand.Read(s.secret[:])
	return s
}

// listen binds 127.0.0.1:0 and starts the readers: goroutines of them, or
// GOMAXPROCS for 0.
func (s *naiveServer) listen(buffer, goroutines int) (netip.AddrPort, error) {
	pc, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return netip.AddrPort{}, err
	}
	if buffer > 0 {
		pc.SetReadBuffer(buffer)
		pc.SetWriteBuffer(buffer)
	}
	s.pc = pc
	if goroutines <= 0 {
		goroutines = runtime.GOMAXPROCS(0)
	}
	for range goroutines {
		go s.serve()
	}
	return pc.LocalAddr().(*net.UDPAddr).AddrPort(), nil
}

func (s *naiveServer) close() { s.pc.Close() }

func (s *naiveServer) serve() {
	buf := make([]byte, 2048)
	out := make([]byte, 2048)
	rnd := wire.NewRand(0)
	rep := new(seqwin.AckReport)
	for {
		n, from, err := s.pc.ReadFromUDPAddrPort(buf)
		if err != nil {
			return
		}
		s.packets.Add(1)
		if k := s.handle(buf[:n], from, out, &rnd, rep, time.Now()); k > 0 {
			s.pc.WriteToUDPAddrPort(out[:k], from)
			s.replies.Add(1)
		}
	}
}

// mac makes a cookie the plain way: a new HMAC per call.
func (s *naiveServer) mac(ts float64, from netip.AddrPort) (c cookie.Cookie) {
	var msg [cookie.InputSize]byte
	cookie.Input(&msg, ts, from)
	m := hmac.New(sha1.New, s.secret[:])
	m.Write(msg[:])
	copy(c[:], m.Sum(nil))
	return c
}

// handle answers one datagram into out and returns the reply's length (0:
// no reply).
func (s *naiveServer) handle(pkt []byte, from netip.AddrPort, out []byte, rnd *wire.Rand, rep *seqwin.AckReport, now time.Time) int {
	p, r := wire.DecodePrefix(s.magic, pkt)
	if r != protocol.DropNone {
		return 0
	}
	ts := float64(now.UnixNano()) / 1e9
	if !p.Handshake {
		return s.connPacket(pkt, from, out, rep, ts)
	}
	var h protocol.Handshake
	if wire.DecodeHandshake(s.magic, pkt, &h) != protocol.DropNone ||
		h.MinVersion < protocol.MinHandshakeVersion || h.MinVersion > protocol.CurHandshakeVersion || h.MinVersion > h.CurVersion {
		return 0
	}
	reply := protocol.Handshake{
		ClientID: h.ClientID, MinVersion: protocol.MinHandshakeVersion,
		CurVersion: min(protocol.CurHandshakeVersion, h.CurVersion), SentCount: h.SentCount,
		NetworkVersion: s.netVersion,
	}
	switch h.Type {
	case protocol.TypeInitial:
		if h.NetworkVersion != s.netVersion || h.NetworkFeatures != 0 {
			return 0
		}
		reply.Type = protocol.TypeChallenge
		reply.Timestamp = ts
		reply.Cookie = s.mac(ts, from)
	case protocol.TypeResponse:
		if h.SessionID != 0 || h.SecretID != 0 {
			return 0
		}
		if age := ts - h.Timestamp; !(age >= 0 && age < cookie.MaxLifetime) {
			return 0
		}
		want := s.mac(h.Timestamp, from)
		if !hmac.Equal(want[:], h.Cookie[:]) {
			return 0
		}
		s.mu.Lock()
		c := s.conns[from]
		if c == nil || c.clientID != h.ClientID {
			c = &naiveConn{clientID: h.ClientID, cookie: h.Cookie, tag: cookie.SessionTag(&h.Cookie)}
			ss, cs := cookie.Sequences(&h.Cookie)
			c.seq.Init(ss, cs, ts)
			s.conns[from] = c
		}
		reply.Cookie = c.cookie
		s.mu.Unlock()
		reply.Type = protocol.TypeAck
		reply.SecretID = 1
		reply.Timestamp = -1
	default:
		return 0
	}
	// A Challenge or Ack has the body size of the Initial or Response it
	// answers, so no more random bytes than the request's keeps it no
	// larger.
	reply.RandomLen = uint8(protocol.MinRandomBytes + rnd.Intn(int(h.RandomLen)-protocol.MinRandomBytes+1))
	rnd.Fill(reply.Random[:reply.RandomLen])
	return wire.EncodeHandshake(out, s.magic, &reply)
}

// connPacket handles a connection packet: Data is echoed, Disconnect ends
// the connection.
func (s *naiveServer) connPacket(pkt []byte, from netip.AddrPort, out []byte, rep *seqwin.AckReport, ts float64) int {
	var h protocol.ConnHeader
	payload, r := wire.DecodeConn(s.magic, pkt, &h)
	if r != protocol.DropNone || h.SessionID != 0 {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.conns[from]
	if c == nil || c.clientID != h.ClientID || c.tag != h.Tag {
		return 0
	}
	if c.seq.Receive(h.Seq, h.Ack, h.AckBits, ts, rep) != protocol.DropNone {
		return 0
	}
	switch h.Kind {
	case protocol.KindData:
		seq, ack, bits, _, _ := c.seq.Send(ts)
		rh := protocol.ConnHeader{ClientID: c.clientID, Tag: c.tag, Seq: seq, Ack: ack, AckBits: bits, Kind: protocol.KindData}
		return wire.EncodeConn(out, s.magic, &rh, payload)
	case protocol.KindDisconnect:
		delete(s.conns, from)
	}
	return 0
}
