package seal

import (
	"bytes"
	"testing"
)

// FuzzOpen feeds an Opener hostile packets, seeded with real sealed ones so
// the fuzzer mutates valid packets. Nothing may panic; a packet that opens
// must give a plaintext of the right length and then be refused as a replay.
func FuzzOpen(f *testing.F) {
	var s Sealer
	s.Init(key(1), nil)
	for _, hdr := range []int{8, 13, 17} {
		b, _ := s.Seal(packet(hdr, seq(0x30, 40)), hdr)
		f.Add(b, hdr)
	}
	f.Add([]byte{}, 8)
	f.Add(make([]byte, 30), 0)
	f.Fuzz(func(t *testing.T, b []byte, hdr int) {
		var o Opener
		o.Init(key(1), nil)
		keep := bytes.Clone(b)
		plain, c, err := o.Open(b, hdr)
		if err != nil {
			return
		}
		if len(plain) != len(b)-hdr-TagBytes || c != o.Newest() {
			t.Fatalf("opened %d bytes from %d, hdr %d", len(plain), len(b), hdr)
		}
		if _, _, err := o.Open(keep, hdr); err != ErrReplay {
			t.Fatalf("second open: %v", err)
		}
	})
}
