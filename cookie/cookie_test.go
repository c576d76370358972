package cookie

import (
	"crypto/hmac"
	"crypto/sha1"
	"encoding/binary"
	"encoding/hex"
	"math"
	"net/netip"
	"testing"
)

// The "secrets" and "cookies" of fastpath/testdata/vectors.json (docs/protocol.md §9).
var (
	vecSecrets = [2]string{
		"000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f",
		"404142434445464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f606162636465666768696a6b6c6d6e6f707172737475767778797a7b7c7d7e7f",
	}
	vecCookies = []struct {
		addr                 string
		secretID             uint8
		ts                   float64
		input, cookie        string
		serverSeq, clientSeq uint16
		tag                  uint32
	}{
		{"127.0.0.1:7777", 0, 1795000000.25,
			"000010b061bfda4100000000000000000000ffff7f000001611e",
			"30e4dfdfbcabc556b51fc2c41933b4237531c81b", 9264, 8159, 1455795132},
		{"127.0.0.1:7777", 1, 1795000000.25,
			"000010b061bfda4100000000000000000000ffff7f000001611e",
			"46051861e5d33c8f248c0119dcdc6f036f28840e", 1350, 8472, 2403128293},
		{"[2001:db8::42]:50000", 0, 1795000000.25,
			"000010b061bfda4120010db800000000000000000000004250c3",
			"66192d15b92b9252e465cea64b3362b6fad3599a", 6502, 5421, 1385311161},
	}
)

// vecSnapshot holds the vector secrets, secret 0 active since vecT0.
const vecT0 = 1795000000.0

func vecSnapshot(t testing.TB) Snapshot {
	t.Helper()
	snap := Snapshot{LastUpdate: vecT0, NextRotate: vecT0 + rotateInterval}
	for i, s := range vecSecrets {
		b, err := hex.DecodeString(s)
		if err != nil || len(b) != SecretSize {
			t.Fatalf("secret %d: %v", i, err)
		}
		copy(snap.Secrets[i][:], b)
	}
	return snap
}

// refCookie is the textbook HMAC, to check Signer against.
func refCookie(secret *[SecretSize]byte, ts float64, addr netip.AddrPort) (c Cookie) {
	var msg [InputSize]byte
	Input(&msg, ts, addr)
	m := hmac.New(sha1.New, secret[:])
	m.Write(msg[:])
	copy(c[:], m.Sum(nil))
	return c
}

func TestVectors(t *testing.T) {
	g := NewSigner(NewSecretsFrom(vecSnapshot(t)))
	for _, v := range vecCookies {
		addr := netip.MustParseAddrPort(v.addr)
		var in [InputSize]byte
		Input(&in, v.ts, addr)
		if got := hex.EncodeToString(in[:]); got != v.input {
			t.Errorf("%s: input %s, want %s", v.addr, got, v.input)
		}
		c := g.GenerateWith(v.secretID, v.ts, addr)
		if got := hex.EncodeToString(c[:]); got != v.cookie {
			t.Errorf("%s secret %d: cookie %s, want %s", v.addr, v.secretID, got, v.cookie)
		}
		if s, cl := Sequences(&c); s != v.serverSeq || cl != v.clientSeq {
			t.Errorf("%s secret %d: sequences %d, %d, want %d, %d", v.addr, v.secretID, s, cl, v.serverSeq, v.clientSeq)
		}
		if tag := SessionTag(&c); tag != v.tag {
			t.Errorf("%s secret %d: tag %d, want %d", v.addr, v.secretID, tag, v.tag)
		}
	}
}

func TestInputAddressForms(t *testing.T) {
	v4 := netip.MustParseAddrPort("127.0.0.1:7777")
	mapped := netip.MustParseAddrPort("[::ffff:127.0.0.1]:7777")
	zoned := netip.AddrPortFrom(netip.MustParseAddr("fe80::1%eth0"), 9)
	plain := netip.AddrPortFrom(netip.MustParseAddr("fe80::1"), 9)
	var a, b [InputSize]byte
	Input(&a, 1, v4)
	Input(&b, 1, mapped)
	if a != b {
		t.Errorf("IPv4 and its mapped form differ:\n%x\n%x", a, b)
	}
	Input(&a, 1, zoned)
	Input(&b, 1, plain)
	if a != b {
		t.Errorf("zone changed the input:\n%x\n%x", a, b)
	}
}

// TestInputAs16: Input's IPv4 shortcut writes what the 16-byte form does,
// for every kind of address.
func TestInputAs16(t *testing.T) {
	for _, s := range []string{"127.0.0.1:7777", "0.0.0.0:0", "255.255.255.255:65535", "[::ffff:10.1.2.3]:9",
		"[::ffff:10.1.2.3%eth0]:9", "[2001:db8::42]:50000", "[::]:1", "[::1]:2", "[fe80::1%lo]:3",
		"[::fffe:10.1.2.3]:4", "[0:0:0:0:1:ffff:a01:203]:5"} {
		addr := netip.MustParseAddrPort(s)
		var got, want [InputSize]byte
		Input(&got, 1.25, addr)
		binary.LittleEndian.PutUint64(want[0:8], math.Float64bits(1.25))
		a16 := addr.Addr().As16()
		copy(want[8:24], a16[:])
		binary.LittleEndian.PutUint16(want[24:26], addr.Port())
		if got != want {
			t.Errorf("%s:\n got %x\nwant %x", s, got, want)
		}
	}
	var zero, want [InputSize]byte
	Input(&zero, 0, netip.AddrPort{})
	if zero != want {
		t.Errorf("zero AddrPort: %x", zero)
	}
}

func TestResultString(t *testing.T) {
	for r, want := range map[Result]string{Valid: "valid", Expired: "expired",
		WrongSecret: "wrong_secret", Mismatch: "mismatch", 9: "unknown"} {
		if r.String() != want {
			t.Errorf("%d: %q, want %q", r, r.String(), want)
		}
	}
}
