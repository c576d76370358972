package wire

import (
	"bytes"
	"testing"

	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/wire/wiretest"
)

func TestVectorPackets(t *testing.T) {
	v := wiretest.LoadVectors(t)
	types := map[protocol.PacketType]bool{}
	kinds := map[protocol.Kind]bool{}
	for _, p := range v.Packets {
		f := wiretest.NewFields(t, p.Name, p.Fields)
		wire := wiretest.Hex(t, p.Hex)
		m, err := ParseMagic(f.Str("magic"))
		if err != nil {
			t.Fatalf("%s: %v", p.Name, err)
		}
		switch {
		case f.Has("type"):
			h := wiretest.VectorHandshake(f)
			types[h.Type] = true
			codecCheckHandshakeVector(t, p.Name, m, &h, wire)
		case f.Has("kind"):
			h, payload := wiretest.VectorConn(f)
			kinds[h.Kind] = true
			codecCheckConnVector(t, p.Name, m, &h, payload, wire)
		default:
			t.Fatalf("%s: neither a handshake (type) nor a connection packet (kind)", p.Name)
		}
		f.Done()
	}
	for typ := range protocol.NumPacketTypes {
		if !types[typ] {
			t.Errorf("no vector for handshake type %v", typ)
		}
	}
	for _, k := range []protocol.Kind{protocol.KindData, protocol.KindKeepAlive, protocol.KindDisconnect} {
		if !kinds[k] {
			t.Errorf("no vector for connection kind %d", k)
		}
	}
}

func codecCheckHandshakeVector(t *testing.T, name string, m Magic, h *protocol.Handshake, wire []byte) {
	t.Helper()
	buf := make([]byte, 128)
	n := EncodeHandshake(buf, m, h)
	if !bytes.Equal(buf[:n], wire) {
		t.Errorf("%s: encode\n got %x\nwant %x", name, buf[:n], wire)
	}
	if want := HandshakeLen(m, h.Type, int(h.RandomLen)); len(wire) != want {
		t.Errorf("%s: %d bytes, HandshakeLen says %d", name, len(wire), want)
	}
	got := wiretest.Garbage()
	if r := DecodeHandshake(m, wire, &got); r != protocol.DropNone {
		t.Errorf("%s: decode: %v", name, r)
	} else if !codecHandshakeEqual(&got, h) {
		t.Errorf("%s: decode\n got %+v\nwant %+v", name, got, *h)
	}
	if p, r := DecodePrefix(m, wire); r != protocol.DropNone || p != (Prefix{h.SessionID, h.ClientID, true}) {
		t.Errorf("%s: DecodePrefix = %+v, %v", name, p, r)
	}
	var c protocol.ConnHeader
	if _, r := DecodeConn(m, wire, &c); r != protocol.DropUnexpectedType {
		t.Errorf("%s: DecodeConn of a handshake: %v", name, r)
	}
}

func codecCheckConnVector(t *testing.T, name string, m Magic, h *protocol.ConnHeader, payload, wire []byte) {
	t.Helper()
	buf := make([]byte, 128)
	n := EncodeConn(buf, m, h, payload)
	if !bytes.Equal(buf[:n], wire) {
		t.Errorf("%s: encode\n got %x\nwant %x", name, buf[:n], wire)
	}
	if want := ConnLen(m, h.Kind, len(payload)); len(wire) != want {
		t.Errorf("%s: %d bytes, ConnLen says %d", name, len(wire), want)
	}
	var got protocol.ConnHeader
	gotPayload, r := DecodeConn(m, wire, &got)
	if r != protocol.DropNone || got != *h || !bytes.Equal(gotPayload, payload) {
		t.Errorf("%s: decode %+v payload %x %v\nwant %+v payload %x", name, got, gotPayload, r, *h, payload)
	}
	codecCheckConnPrefix(t, name, m, wire, h)
}

// codecCheckConnPrefix checks what the other decoders make of connection
// packet pkt with header h: its prefix, and a refusal as a handshake. It
// reports whether both were right.
func codecCheckConnPrefix(t *testing.T, name string, m Magic, pkt []byte, h *protocol.ConnHeader) bool {
	t.Helper()
	ok := true
	if p, r := DecodePrefix(m, pkt); r != protocol.DropNone || p != (Prefix{h.SessionID, h.ClientID, false}) {
		t.Errorf("%s: DecodePrefix = %+v, %v", name, p, r)
		ok = false
	}
	var hs protocol.Handshake
	if r := DecodeHandshake(m, pkt, &hs); r != protocol.DropUnexpectedType {
		t.Errorf("%s: DecodeHandshake of a connection packet: %v", name, r)
		ok = false
	}
	return ok
}

func TestVectorTerminator(t *testing.T) {
	v := wiretest.LoadVectors(t)
	for _, tc := range v.Terminator {
		b := wiretest.Hex(t, tc.Hex)
		bits, ok := payloadBits(b)
		if ok != tc.Valid {
			t.Errorf("%q: valid = %v, want %v", tc.Hex, ok, tc.Valid)
			continue
		}
		if tc.Valid {
			if tc.PayloadBits == nil {
				t.Fatalf("%q: valid vector without payload_bits", tc.Hex)
			}
			if bits != *tc.PayloadBits {
				t.Errorf("%q: payload bits %d, want %d", tc.Hex, bits, *tc.PayloadBits)
			}
		}
		r, rok := newBitReader(b)
		if rok != tc.Valid || (rok && r.Left() != bits) {
			t.Errorf("%q: newBitReader ok=%v left=%d", tc.Hex, rok, r.Left())
		}
	}
}
