package conn

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/udpgate/udpgate/cookie"
	"github.com/udpgate/udpgate/internal/handshake"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/testkit/conntest"
	"github.com/udpgate/udpgate/internal/wire"
)

// silent asserts the server answers nothing within a short wait.
func (p *rawPeer) silent(what string) {
	p.t.Helper()
	if b, ok := p.recv(200 * time.Millisecond); ok {
		p.t.Fatalf("%s: the server answered %x", what, b)
	}
}

func TestReplayAndForgery(t *testing.T) {
	clk := &clock{}
	s := listen(t, Config{Now: clk.Now})
	drops := func(r protocol.DropReason) uint64 { return s.Stats().Drops[r] }

	t.Run("replayed after 40 s", func(t *testing.T) {
		p := newRawPeer(t, s, "127.0.0.1:0")
		resp := p.response(p.challenge())
		clk.Advance(40*time.Second + time.Millisecond)
		before := drops(protocol.DropExpiredCookie)
		p.send(resp)
		p.silent("expired Response")
		conntest.Eventually(t, "expired drop counted", func() bool { return drops(protocol.DropExpiredCookie) > before })
	})
	t.Run("from another address", func(t *testing.T) {
		p := newRawPeer(t, s, "127.0.0.1:0")
		resp := p.response(p.challenge())
		q := newRawPeer(t, s, "127.0.0.2:0")
		before := drops(protocol.DropBadCookie)
		q.send(resp)
		q.silent("Response from another address")
		conntest.Eventually(t, "bad cookie counted", func() bool { return drops(protocol.DropBadCookie) > before })
	})
	t.Run("under a rotated-out secret", func(t *testing.T) {
		p := newRawPeer(t, s, "127.0.0.1:0")
		resp := p.response(p.challenge())
		now := seconds(clk.Now())
		// Rotation keeps the previous secret; the one after drops it.
		if err := s.secrets.Rotate(now + 1); err != nil {
			t.Fatal(err)
		}
		if err := s.secrets.Rotate(now + 2); err != nil {
			t.Fatal(err)
		}
		clk.Advance(3 * time.Second)
		before := drops(protocol.DropWrongSecret) + drops(protocol.DropBadCookie)
		p.send(resp)
		p.silent("Response under a rotated-out secret")
		conntest.Eventually(t, "rejection counted", func() bool {
			return drops(protocol.DropWrongSecret)+drops(protocol.DropBadCookie) > before
		})
	})
	if s.Len() != 0 || s.Stats().Accepted != 0 {
		t.Fatalf("%d connections made by replays", s.Len())
	}

	t.Run("RestartResponse that matches no connection", func(t *testing.T) {
		victim := newRawPeer(t, s, "127.0.0.1:0")
		orig := victim.connect()
		conntest.Eventually(t, "victim connected", func() bool { return s.Len() == 1 })
		attacker := newRawPeer(t, s, "127.0.0.3:0")
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
}

// Clients connecting continuously while the secrets rotate many times all
// succeed: a Challenge made just before a rotation still verifies after it.
func TestRotationUnderLoad(t *testing.T) {
	clk := &clock{}
	// No Challenge budgets: every dial comes from 127.0.0.1, and the
	// budgets refill with the server's clock, which waits below when a
	// dial stalls; this test is about rotation.
	s := listen(t, Config{Now: clk.Now, Timeout: time.Hour, ChallengeRate: -1})
	gen0 := s.secrets.Load().Gen
	stop := make(chan struct{})
	var ticker sync.WaitGroup
	ticker.Add(1)
	// The server's clock runs 10× fast: a rotation every 1.5–2 s of real
	// time. A Response must still reach the server before the second
	// rotation after its Challenge, as in production, where that is at
	// least 15 s. A round trip that a loaded machine (the race pass beside
	// other packages) stalls for a second would see more than that here,
	// and prove nothing about rotation: so the fast clock waits while a
	// dial has been under way for more than 1 s of real time, 10 s of the
	// server's: less than one rotation (15–20 s), and a Challenge outlives
	// two.
	var dialing [8]atomic.Int64 // per worker: when its dial started (Unix ns), or 0
	stalled := func() bool {
		now := time.Now().UnixNano()
		for i := range dialing {
			if at := dialing[i].Load(); at != 0 && now-at > int64(time.Second) {
				return true
			}
		}
		return false
	}
	go func() {
		defer ticker.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
				if !stalled() {
					clk.Advance(100 * time.Millisecond)
				}
			}
		}
	}()
	var ok, failed atomic.Int64
	var wg sync.WaitGroup
	// Until three rotations have happened (about 6 s when the machine is
	// idle), bounded: a loaded machine runs the fast clock slower.
	deadline := time.Now().Add(60 * time.Second)
	more := func() bool {
		return time.Now().Before(deadline) && s.secrets.Load().Gen-gen0 < 3
	}
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; more(); i++ {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				// The client keeps real time: only the server's secrets
				// need to rotate fast.
				dialing[w].Store(time.Now().UnixNano())
				c, err := Dial(ctx, s.Addr().String(), Config{})
				dialing[w].Store(0)
				cancel()
				if err != nil {
					failed.Add(1)
					t.Errorf("worker %d dial %d: %v", w, i, err)
					return
				}
				ok.Add(1)
				c.Close()
				// Paced: a worker dialing flat out under the race
				// detector, beside other packages' tests, turned the
				// test into its own overload, and a Response that waits
				// past two rotations (1.5 s here) fails its dial.
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	if failed.Load() > 0 {
		t.Logf("server stats: %+v", s.Stats())
	}
	close(stop)
	ticker.Wait()
	rotations := s.secrets.Load().Gen - gen0
	t.Logf("%d clients connected across %d rotations", ok.Load(), rotations)
	if rotations < 3 {
		t.Fatalf("only %d rotations happened", rotations)
	}
	if ok.Load() < 50 || failed.Load() != 0 {
		t.Fatalf("%d connected, %d failed", ok.Load(), failed.Load())
	}
}
