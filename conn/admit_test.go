package conn

import (
	"encoding/binary"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/udpgate/udpgate/internal/protocol"
)

// Admissions of different networks run in parallel (one admission lock
// per prefix shard), yet MaxClients and the per-prefix limit stay exact:
// many workers promoting at once never make one connection too many.
func TestAdmitParallelCapsExact(t *testing.T) {
	const prefixes, perPrefix, workers = 20, 100, 8
	for _, tc := range []struct {
		name           string
		max, maxPrefix int
		want, wantEach int // connections made, and per prefix (0: any)
	}{
		{"MaxClients", 1000, 64, 1000, 0},
		{"prefix", 100_000, 64, prefixes * 64, 64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := listen(t, Config{Sockets: 1, MaxClients: tc.max, MaxClientsPerPrefix: tc.maxPrefix,
				KeepAlive: time.Hour, Timeout: 2 * time.Hour})
			now := s.st.Now()
			var mu sync.Mutex
			made := map[netip.Prefix]int{}
			total := 0
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					// The connections' packets (their Disconnects when
					// the server closes) go to a transport that only
					// counts them.
					sock := &replaySock{}
					// Each worker takes every client in its own order,
					// so workers race for the same prefixes.
					for j := range prefixes * perPrefix {
						i := (j*7 + w*prefixes*perPrefix/workers) % (prefixes * perPrefix)
						if i%workers != w {
							continue
						}
						var p promotion
						p.addr = netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 9, byte(i / perPrefix), byte(i % perPrefix)}), 5000)
						binary.LittleEndian.PutUint64(p.cookie[:], uint64(i)*0x9e3779b97f4a7c15+1)
						p.to.ClientID = 1
						p.ts = seconds(now)
						v := s.tab.admit(&p, func() *Conn { return s.newConn(&p, sock, now) })
						if v.made == nil {
							continue
						}
						s.timers.add(v.made)
						v.made.announce()
						mu.Lock()
						made[netip.PrefixFrom(p.addr.Addr(), 24).Masked()]++
						total++
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			if total != tc.want || s.Len() != tc.want {
				t.Fatalf("%d connections made, %d in the table, want %d", total, s.Len(), tc.want)
			}
			for px, n := range made {
				if n > tc.maxPrefix || (tc.wantEach != 0 && n != tc.wantEach) {
					t.Errorf("%v holds %d connections, limit %d", px, n, tc.maxPrefix)
				}
			}
		})
	}
}

// A full server refuses exactly at MaxClients however many workers promote
// at once through the whole promotion path (promoteBatch: the lock-free
// full check, the count's reservation, the admission, the replies): every
// client gets one reply, MaxClients of them an Ack and a connection, the
// rest Denied (server full).
func TestPromoteParallelMaxClientsExact(t *testing.T) {
	const max, clients, workers = 1000, 1600, 4
	s := listen(t, Config{Sockets: 1, MaxClients: max, KeepAlive: time.Hour, Timeout: 2 * time.Hour})
	now := s.st.Now()
	to := benchReplyTo(t, s, now)
	var next atomic.Uint64
	var sent atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			pb := newPromoBatch()
			sock := &replaySock{}
			pb.sock = sock
			for {
				i := next.Add(1)
				if i > clients {
					break
				}
				// Every client in a /24 of its own: only MaxClients
				// refuses.
				var p promotion
				p.addr = netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, byte(i >> 8), byte(i), 1}), 5000)
				binary.LittleEndian.PutUint64(p.cookie[:], i*0x9e3779b97f4a7c15+1)
				p.to, p.ts = to, seconds(now)
				pb.items = append(pb.items, p)
				// Small batches, so that the workers' batches interleave.
				if len(pb.items) == 16 {
					s.promoteBatch(pb)
				}
			}
			if len(pb.items) > 0 {
				s.promoteBatch(pb)
			}
			sent.Add(int64(sock.sent))
		})
	}
	wg.Wait()
	acks, full := s.ev.acks.Load(), s.ev.denied[protocol.DeniedServerFull].Load()
	if s.Len() != max || acks != max || full != clients-max || sent.Load() != clients {
		t.Fatalf("%d connections, %d Acks, %d Denied (full), %d replies; want %d, %d, %d, %d",
			s.Len(), acks, full, sent.Load(), max, max, clients-max, clients)
	}
}
