package message

import (
	"math/rand/v2"
	"testing"
)

// TestReceiveRandomPackets runs the fuzz body over seeded random
// sequences of mostly well-formed packets (ids near the window, forged
// fragments, flipped bytes).
func TestReceiveRandomPackets(t *testing.T) {
	kinds := []Kind{ReliableOrdered, Unreliable, Sequenced, ReliableOrdered}
	l := fuzzLayer(t, kinds)
	rng := rand.New(rand.NewPCG(1, 2))
	for it := 0; it < 20000; it++ {
		var data []byte
		for p := 0; p < 1+rng.IntN(6); p++ {
			var es []entry
			for k := 0; k < 1+rng.IntN(3); k++ {
				ch := rng.IntN(4)
				en := entry{ch: ch, id: uint16(rng.IntN(8)), data: make([]byte, rng.IntN(5))}
				if kinds[ch] == ReliableOrdered && rng.IntN(2) == 0 {
					en.frag, en.cnt = true, uint16(2+rng.IntN(3))
					en.idx = uint16(rng.IntN(int(en.cnt)))
				}
				if rng.IntN(3) == 0 {
					en.id = uint16(rng.IntN(65536))
				}
				es = append(es, en)
			}
			pl := payloadOf(kinds, es...)
			if rng.IntN(10) == 0 && len(pl) > 0 {
				pl[rng.IntN(len(pl))] ^= byte(rng.IntN(256))
			}
			data = append(data, byte(len(pl)))
			data = append(data, pl...)
		}
		fuzzReceiveBody(t, l, data)
	}
}
