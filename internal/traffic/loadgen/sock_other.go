//go:build !linux

package loadgen

import (
	"errors"
	"net/netip"
	"time"
)

// The generator chooses each datagram's source address with IP_PKTINFO on
// sendmmsg, which only Linux offers; elsewhere New fails with errNoLinux.
var errNoLinux = errors.New("loadgen: load generation needs Linux (sendmmsg with IP_PKTINFO source addresses)")

type sock struct{ port uint16 }

func openSock(rcvbuf, sndbuf int, tick time.Duration) (*sock, error) { return nil, errNoLinux }

func (s *sock) close() error                                    { return nil }
func (s *sock) flush(b *txBatch) (sent, refused int, err error) { b.n = 0; return 0, 0, errNoLinux }
func (s *sock) recv(b *rxBatch) (int, error)                    { return 0, errNoLinux }
func (s *sock) recvNow(b *rxBatch) (int, error)                 { return 0, errNoLinux }

type txBatch struct {
	slots []byte
	n     int
	size  int
}

func newTxBatch(size int, _ netip.AddrPort) *txBatch {
	return &txBatch{slots: make([]byte, 2048), size: size}
}
func (b *txBatch) add(p []byte, src [4]byte) { b.n++ }
func (b *txBatch) full() bool                { return b.n == b.size }
func (b *txBatch) next() []byte              { return b.slots }

type rxBatch struct{}

type rawAddr struct{ Addr [4]byte }

func newRxBatch(size int) *rxBatch { return &rxBatch{} }
func (b *rxBatch) msg(i int) (p []byte, from rawAddr, to [4]byte, ok bool) {
	return nil, from, to, false
}
func rawPort(sa *rawAddr) uint16 { return 0 }
