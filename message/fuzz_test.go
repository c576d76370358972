package message

import "testing"

// FuzzReceive feeds arbitrary packets through Check, Receive and Next of
// one endpoint. The input is a sequence of packets, each preceded by its
// length byte. Nothing may panic; the endpoint never holds more than its
// budget, and Release returns everything.
func FuzzReceive(f *testing.F) {
	kinds := []Kind{ReliableOrdered, Unreliable, Sequenced, ReliableOrdered}
	pkt := func(es ...entry) []byte {
		p := payloadOf(kinds, es...)
		return append([]byte{byte(len(p))}, p...)
	}
	cat := func(ps ...[]byte) []byte {
		var b []byte
		for _, p := range ps {
			b = append(b, p...)
		}
		return b
	}
	f.Add(pkt(entry{ch: 0, id: 0, data: []byte("hello")}, entry{ch: 1, data: []byte("pos")}))
	f.Add(cat(pkt(frag(1, 1, 2, "b")), pkt(frag(0, 0, 2, "a"))))
	f.Add(cat(pkt(frag(0, 0, 3, "a")), pkt(frag(1, 2, 3, "c")), pkt(entry{ch: 3, id: 0, data: []byte("x")})))
	f.Add(cat(pkt(entry{ch: 2, id: 9, data: []byte("new")}), pkt(entry{ch: 2, id: 8, data: []byte("old")})))
	f.Add(cat(pkt(entry{ch: 0, id: 255, data: []byte("edge")}), pkt(entry{ch: 0, id: 256, data: []byte("far")})))
	f.Add([]byte{3, 0x40, 1, 0})
	f.Add([]byte{5, 0x20, 0, 0, 0xff, 0xff})
	l := fuzzLayer(f, kinds)
	f.Fuzz(func(t *testing.T, data []byte) { fuzzReceiveBody(t, l, data) })
}

func fuzzLayer(t testing.TB, kinds []Kind) *Layer {
	cfg := Config{MaxMessageSize: 2000, ConnReceiveBudget: 12000}
	for _, k := range kinds {
		cfg.Channels = append(cfg.Channels, ChannelConfig{Kind: k})
	}
	l, err := NewLayer(cfg, 200)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// fuzzReceiveBody runs one input; l must hold nothing before.
func fuzzReceiveBody(t *testing.T, l *Layer, data []byte) {
	{
		e := l.NewEndpoint()
		for len(data) > 0 {
			n := int(data[0])
			data = data[1:]
			if n == 0 || n > len(data) {
				n = len(data)
			}
			p := data[:n]
			data = data[n:]
			if e.Check(p) == DropNone {
				e.Receive(p, t0)
			}
			for {
				_, m, ok := e.Next()
				if !ok {
					break
				}
				if len(m) > l.maxMsg {
					t.Fatalf("message of %d bytes", len(m))
				}
			}
			if e.held > l.connBudget || l.Held() != e.held {
				t.Fatalf("held %d (layer %d), budget %d", e.held, l.Held(), l.connBudget)
			}
		}
		releaseAll(t, l, e)
	}
}
