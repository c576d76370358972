package conn

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/udpgate/udpgate/cookie"
	"github.com/udpgate/udpgate/internal/handshake"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/wire"
	"github.com/udpgate/udpgate/netsim"
)

// silent asserts the server answers nothing within a short wait.
func (p *rawPeer) silent(what string) {
	p.t.Helper()
	p.silentFor(what, 200*time.Millisecond)
}

// silentFor asserts the server answers nothing for d.
func (p *rawPeer) silentFor(what string, d time.Duration) {
	p.t.Helper()
	if b, ok := p.recv(d); ok {
		p.t.Fatalf("%s: the server answered %x", what, b)
	}
}

// Replayed and forged Responses are dropped silently, counted, and make no
// connection.
func TestReplayAndForgery(t *testing.T) {
	run := func(name string, body func(t *testing.T, n *testNet, s *Server)) {
		t.Run(name, func(t *testing.T) {
			onSim(t, func(t *testing.T, n *testNet) {
				s := n.listen(Config{})
				body(t, n, s)
				if s.Len() != 0 || s.Stats().Accepted != 0 {
					t.Fatalf("%d connections made by replays", s.Len())
				}
			})
		})
	}
	// dropped sends resp from q and asserts that the server answers
	// nothing and counts one more drop among reasons.
	dropped := func(t *testing.T, s *Server, q *rawPeer, resp []byte, what string, reasons ...protocol.DropReason) {
		t.Helper()
		sum := func() (n uint64) {
			st := s.Stats()
			for _, r := range reasons {
				n += st.Drops[r]
			}
			return n
		}
		before := sum()
		q.send(resp)
		q.silent(what)
		if sum() != before+1 {
			t.Fatalf("%s: drop not counted as %v", what, reasons)
		}
	}

	run("replayed after 40 s", func(t *testing.T, n *testNet, s *Server) {
		p := n.peer(s, "127.0.0.1:0")
		resp := p.response(p.challenge())
		p.silentFor("a challenged client", 40*time.Second+time.Millisecond)
		dropped(t, s, p, resp, "expired Response", protocol.DropExpiredCookie)
	})
	run("from another address", func(t *testing.T, n *testNet, s *Server) {
		p := n.peer(s, "127.0.0.1:0")
		resp := p.response(p.challenge())
		q := n.peer(s, "127.0.0.2:0")
		dropped(t, s, q, resp, "Response from another address", protocol.DropBadCookie)
	})
	run("under a rotated-out secret", func(t *testing.T, n *testNet, s *Server) {
		p := n.peer(s, "127.0.0.1:0")
		resp := p.response(p.challenge())
		now := seconds(time.Now())
		// Rotation keeps the previous secret; the one after drops it.
		if err := s.secrets.Rotate(now + 1); err != nil {
			t.Fatal(err)
		}
		if err := s.secrets.Rotate(now + 2); err != nil {
			t.Fatal(err)
		}
		p.silentFor("a challenged client", 3*time.Second)
		dropped(t, s, p, resp, "Response under a rotated-out secret", protocol.DropWrongSecret, protocol.DropBadCookie)
	})

	t.Run("RestartResponse that matches no connection", func(t *testing.T) {
		onSim(t, func(t *testing.T, n *testNet) {
			rec := newRecorder(false)
			s := n.listen(Config{Handler: rec})
			victim := n.peer(s, "127.0.0.1:0")
			orig := victim.connect()
			rec.at(t, 0)
			attacker := n.peer(s, "127.0.0.3:0")
			restart := func(origCookie cookie.Cookie, clientID uint8) {
				attacker.clientID = clientID
				ch := attacker.challenge()
				rr := attacker.handshakePacket(protocol.TypeRestartResponse, func(h *protocol.Handshake) {
					h.Restart = true
					h.SessionID, h.SecretID, h.Timestamp, h.Cookie = ch.SessionID, ch.SecretID, ch.Timestamp, ch.Cookie
					h.OrigCookie = origCookie
				})
				attacker.send(rr)
				// The sender proved its own address only: it is told, in
				// fewer bytes than it sent, that there is no such connection.
				b, ok := attacker.recv(2 * time.Second)
				var h protocol.Handshake
				if !ok || wire.DecodeHandshake(attacker.magic, b, &h) != protocol.DropNone ||
					h.Type != protocol.TypeDenied || h.Reason != handshake.DeniedUnknownConnection || len(b) > len(rr) {
					t.Fatalf("RestartResponse for no connection answered %x, want a Denied(4) of at most %d bytes", b, len(rr))
				}
			}
			unknown := orig
			unknown[0] ^= 0xff
			restart(unknown, victim.clientID)    // unknown OrigCookie
			restart(orig, (victim.clientID+1)%8) // right cookie, other ClientID
			c, ok := s.Conn(victim.addr())
			if !ok || s.Len() != 1 || s.Stats().Migrations != 0 {
				t.Fatalf("connection moved: at victim %v, %d connections, %d migrations", ok, s.Len(), s.Stats().Migrations)
			}
			if c.RemoteAddr() != victim.addr() {
				t.Fatalf("connection at %v", c.RemoteAddr())
			}
		})
	})
}

// Clients connecting continuously while the secrets rotate three times
// (every 15-20 s of virtual time) all succeed: a Challenge made just
// before a rotation still verifies after it. Each dial takes two round
// trips of 100 ms, so Challenges are in flight across every rotation.
func TestRotationUnderLoad(t *testing.T) {
	onSim(t, func(t *testing.T, n *testNet) {
		n.nw.SetLink(netsim.Link{Latency: 50 * time.Millisecond})
		// No Challenge budgets: this test is about rotation.
		s := n.listen(Config{Timeout: time.Hour, ChallengeRate: -1})
		gen0 := s.secrets.Load().Gen
		var ok, failed atomic.Int64
		var wg sync.WaitGroup
		more := func() bool { return s.secrets.Load().Gen-gen0 < 3 }
		for w := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; more(); i++ {
					c, err := n.tryDial(s, Config{LocalAddr: fmt.Sprintf("127.0.1.%d:0", 1+w)})
					if err != nil {
						failed.Add(1)
						t.Errorf("worker %d dial %d: %v", w, i, err)
						return
					}
					ok.Add(1)
					c.Close()
				}
			}()
		}
		wg.Wait()
		rotations := s.secrets.Load().Gen - gen0
		t.Logf("%d clients connected across %d rotations", ok.Load(), rotations)
		if ok.Load() < 50 || failed.Load() != 0 {
			t.Fatalf("%d connected, %d failed", ok.Load(), failed.Load())
		}
	})
}
