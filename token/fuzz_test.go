package token

import (
	"bytes"
	"testing"
	"time"
)

// Every decoder has a fuzz target: none may panic, and whatever one accepts
// must encode back to bytes that decode to the same value.

func FuzzConnectTokenUnmarshal(f *testing.F) {
	good, _ := Generate(&refKey, refParams())
	b, _ := good.MarshalBinary()
	f.Add(b)
	f.Add(b[:TokenBytes-1])
	f.Add(make([]byte, TokenBytes))
	f.Fuzz(func(t *testing.T, b []byte) {
		var tok ConnectToken
		if tok.UnmarshalBinary(b) != nil {
			return
		}
		out, err := tok.MarshalBinary()
		if err != nil {
			t.Fatalf("accepted token does not marshal: %v", err)
		}
		// Equal up to the end of the keys; the reader ignores the padding.
		end := tokNumAddrs + 4 + 2*KeyBytes
		for _, a := range tok.ServerAddresses {
			end += addrLen(a)
		}
		if !bytes.Equal(out[:end], b[:end]) || !bytes.Equal(out[end:], make([]byte, TokenBytes-end)) {
			t.Fatalf("re-marshalled token differs at byte %d", firstDiff(out, b))
		}
	})
}

func FuzzRequestUnmarshal(f *testing.F) {
	body, _ := testRequest(f)
	f.Add(body)
	f.Add(body[:10])
	f.Fuzz(func(t *testing.T, b []byte) {
		var r Request
		if r.UnmarshalBinary(b) != nil {
			return
		}
		if out, _ := r.AppendBinary(nil); !bytes.Equal(out, b) {
			t.Fatal("request does not round-trip")
		}
	})
}

// FuzzOpenRequest feeds the server's token check hostile bodies. Seeds
// include the valid body, so the fuzzer mutates a real token.
func FuzzOpenRequest(f *testing.F) {
	body, now := testRequest(f)
	f.Add(body, int64(0))
	f.Add(body, int64(30))
	f.Add(body[:RequestBytes-1], int64(0))
	o := NewOpener(&refKey, refProtocolID)
	f.Fuzz(func(t *testing.T, b []byte, dt int64) {
		var p Private
		err := o.OpenRequest(&p, b, now.Add(time.Duration(dt)*time.Second))
		if err == nil && (len(b) != RequestBytes || p.numServers < 1 || p.numServers > MaxServerAddresses) {
			t.Fatalf("accepted %d bytes with %d servers", len(b), p.numServers)
		}
	})
}

// FuzzPrivateParse reads arbitrary plaintext as the private part (as if a
// backend had sealed garbage under the right key).
func FuzzPrivateParse(f *testing.F) {
	var plain [PrivatePlainBytes]byte
	refPrivate(f).put(&plain)
	f.Add(plain[:])
	f.Add(plain[:20])
	f.Fuzz(func(t *testing.T, b []byte) {
		var in [PrivatePlainBytes]byte
		copy(in[:], b)
		var p Private
		if p.parse(&in) != nil {
			return
		}
		var out [PrivatePlainBytes]byte
		p.put(&out)
		var q Private
		if err := q.parse(&out); err != nil || q != p {
			t.Fatalf("re-parsed %v %+v, want %+v", err, q, p)
		}
		// put writes what parse read, and zeros after the user data.
		n := privAddrs + 2*KeyBytes + UserDataBytes
		for _, a := range p.ServerAddresses() {
			n += addrLen(a)
		}
		if !bytes.Equal(out[:n], in[:n]) || !bytes.Equal(out[n:], make([]byte, PrivatePlainBytes-n)) {
			t.Fatal("private part does not round-trip")
		}
	})
}
