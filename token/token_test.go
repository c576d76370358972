package token

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"net/netip"
	"testing"
	"testing/iotest"
	"time"

	"golang.org/x/crypto/chacha20poly1305"
)

func TestSizes(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want int
	}{
		{"VersionInfo", len(VersionInfo), VersionInfoBytes},
		{"RequestBytes", RequestBytes, 1077},
		{"RequestPacketBytes", RequestPacketBytes, 1078},
		{"PrivatePlainBytes", PrivatePlainBytes, 1008},
		{"associatedBytes", associatedBytes, 29},
		{"tokAddrs", tokAddrs, 1093},
		{"reqSealed", reqSealed, 53},
	} {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.name, c.got, c.want)
		}
	}
	// The largest address lists fit both layouts, so no writer can overrun.
	if n := tokAddrs + MaxServerAddresses*addrIPv6Bytes + 2*KeyBytes; n > TokenBytes {
		t.Errorf("32 IPv6 addresses need %d token bytes", n)
	}
	if n := privAddrs + MaxServerAddresses*addrIPv6Bytes + 2*KeyBytes + UserDataBytes; n > PrivatePlainBytes {
		t.Errorf("32 IPv6 addresses need %d private bytes", n)
	}
}

// TestTokenLayout checks every field of a token at its offset, written out by
// hand from STANDARD.md and netcode.c rather than by this package's writers.
func TestTokenLayout(t *testing.T) {
	tok, err := Generate(&refKey, refParams())
	if err != nil {
		t.Fatal(err)
	}
	b, _ := tok.MarshalBinary()
	if len(b) != TokenBytes {
		t.Fatalf("%d bytes", len(b))
	}
	addrs := concat(
		[]byte{1, 127, 0, 0, 1, 0x40, 0x9c}, // 127.0.0.1:40000
		[]byte{2, 0x01, 0x20, 0xb8, 0x0d, 0x01, 0x00, 0x02, 0x00, 0x03, 0x00, 0x04, 0x00, 0x05, 0x00, 0x06, 0x00, 0x41, 0x9c},
		[]byte{2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0x42, 0x9c}, // ::1 ends 01 00
	)
	fields := []layoutField{
		{"version", 0, []byte("NETCODE 1.02\x00")},
		{"protocol id", 13, le64(refProtocolID)},
		{"create", 21, le64(refCreate)},
		{"expire", 29, le64(refExpire)},
		{"nonce", 37, seq(0, 24)},
		{"sealed private", 61, tok.SealedPrivate[:]},
		{"timeout", 1085, []byte{10, 0, 0, 0}},
		{"address count", 1089, []byte{3, 0, 0, 0}},
		{"addresses", 1093, addrs},
		{"client→server key", 1093 + 45, seq(0x40, 32)},
		{"server→client key", 1093 + 45 + 32, seq(0x80, 32)},
		{"padding", 1093 + 45 + 64, make([]byte, TokenBytes-(1093+45+64))},
	}
	checkFields(t, b, fields)
}

func TestPrivateLayout(t *testing.T) {
	var plain [PrivatePlainBytes]byte
	p := refPrivate(t)
	p.TimeoutSeconds = -1
	p.put(&plain)
	checkFields(t, plain[:], []layoutField{
		{"client id", 0, le64(refClientID)},
		{"timeout", 8, []byte{0xff, 0xff, 0xff, 0xff}},
		{"address count", 12, []byte{3, 0, 0, 0}},
		{"first address", 16, []byte{1, 127, 0, 0, 1, 0x40, 0x9c}},
		{"client→server key", 16 + 45, seq(0x40, 32)},
		{"server→client key", 16 + 45 + 32, seq(0x80, 32)},
		{"user data", 16 + 45 + 64, seq(0, 256)},
		{"padding", 16 + 45 + 64 + 256, make([]byte, PrivatePlainBytes-(16+45+64+256))},
	})
}

func TestRequestLayout(t *testing.T) {
	tok, err := Generate(&refKey, refParams())
	if err != nil {
		t.Fatal(err)
	}
	r := tok.Request()
	b, _ := r.AppendBinary(nil)
	if len(b) != RequestBytes {
		t.Fatalf("%d bytes", len(b))
	}
	checkFields(t, b, []layoutField{
		{"version", 0, []byte("NETCODE 1.02\x00")},
		{"protocol id", 13, le64(refProtocolID)},
		{"expire", 21, le64(refExpire)},
		{"nonce", 29, seq(0, 24)},
		{"sealed private", 53, tok.SealedPrivate[:]},
	})
	if mac := r.MAC(); !bytes.Equal(mac[:], tok.SealedPrivate[1008:]) || RequestMAC(b) != mac {
		t.Error("MAC is not the last 16 bytes of the sealed private part")
	}
	var back Request
	if err := back.UnmarshalBinary(b); err != nil || back != r {
		t.Fatalf("round trip: %v %+v", err, back)
	}
}

// layoutField is one field of a layout: its bytes at off.
type layoutField struct {
	name string
	off  int
	want []byte
}

func checkFields(t *testing.T, b []byte, fields []layoutField) {
	t.Helper()
	for _, f := range fields {
		if got := b[f.off : f.off+len(f.want)]; !bytes.Equal(got, f.want) {
			t.Errorf("%s at %d: % x, want % x", f.name, f.off, got, f.want)
		}
	}
}

func TestAddressEncoding(t *testing.T) {
	for _, c := range []struct {
		addr string
		want []byte
	}{
		{"1.2.3.4:258", []byte{1, 1, 2, 3, 4, 2, 1}},
		{"[::ffff:1.2.3.4]:1", []byte{2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 2, 1, 4, 3, 1, 0}},
		{"[fe80::1234]:65535", []byte{2, 0x80, 0xfe, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x34, 0x12, 0xff, 0xff}},
	} {
		a := netip.MustParseAddrPort(c.addr)
		b := make([]byte, addrIPv6Bytes)
		n := putAddr(b, a)
		if n != len(c.want) || n != addrLen(a) || !bytes.Equal(b[:n], c.want) {
			t.Errorf("%s: % x, want % x", c.addr, b[:n], c.want)
		}
		back, m, ok := readAddr(b[:n])
		if !ok || m != n || back != a {
			t.Errorf("%s read back as %v %d %v", c.addr, back, m, ok)
		}
		if _, _, ok := readAddr(b[:n-1]); ok {
			t.Errorf("%s: truncated address accepted", c.addr)
		}
	}
	for _, typ := range []byte{0, 3, 255} {
		if _, _, ok := readAddr([]byte{typ, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18}); ok {
			t.Errorf("address type %d accepted", typ)
		}
	}
	if err := checkAddr(netip.MustParseAddrPort("[fe80::1%eth0]:1")); err == nil {
		t.Error("zone accepted")
	}
	if err := checkAddr(netip.AddrPort{}); err == nil {
		t.Error("invalid address accepted")
	}
}

func TestHasServerAddress(t *testing.T) {
	var p Private
	if err := p.SetServerAddresses([]netip.AddrPort{
		netip.MustParseAddrPort("10.0.0.1:7777"), netip.MustParseAddrPort("[2001:db8::1]:7777"),
	}); err != nil {
		t.Fatal(err)
	}
	for addr, want := range map[string]bool{
		"10.0.0.1:7777":           true,
		"[::ffff:10.0.0.1]:7777":  true, // a dual-stack socket's view of the same address
		"10.0.0.1:7778":           false,
		"10.0.0.2:7777":           false,
		"[2001:db8::1]:7777":      true,
		"[2001:db8::1%eth0]:7777": true,
		"[2001:db8::2]:7777":      false,
	} {
		if got := p.HasServerAddress(netip.MustParseAddrPort(addr)); got != want {
			t.Errorf("%s: %v, want %v", addr, got, want)
		}
	}
	if err := p.SetServerAddresses(nil); err == nil {
		t.Error("empty list accepted")
	}
}

// randomToken generates a token with r's choice of every field.
func randomToken(t testing.TB, r *rand.Rand) (*ConnectToken, *Params) {
	n := 1 + r.IntN(MaxServerAddresses)
	addrs := make([]netip.AddrPort, n)
	for i := range addrs {
		var ip netip.Addr
		if r.IntN(2) == 0 {
			ip = netip.AddrFrom4([4]byte{byte(r.Uint32()), byte(r.Uint32()), byte(r.Uint32()), byte(r.Uint32())})
		} else {
			var b [16]byte
			for k := range b {
				b[k] = byte(r.Uint32())
			}
			ip = netip.AddrFrom16(b)
		}
		addrs[i] = netip.AddrPortFrom(ip, uint16(r.Uint32()))
	}
	ud := make([]byte, r.IntN(UserDataBytes+1))
	for i := range ud {
		ud[i] = byte(r.Uint32())
	}
	now := time.Unix(int64(r.Uint32()), 0)
	p := &Params{
		ProtocolID: r.Uint64(), ClientID: r.Uint64(), ServerAddresses: addrs,
		Expire: time.Duration(1+r.IntN(3600)) * time.Second, Timeout: time.Duration(1+r.IntN(60)) * time.Second,
		UserData: ud, Now: func() time.Time { return now },
	}
	tok, err := Generate(&refKey, p)
	if err != nil {
		t.Fatal(err)
	}
	return tok, p
}

func TestRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		tok, p := randomToken(t, r)
		b, err := tok.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		var back ConnectToken
		if err := back.UnmarshalBinary(b); err != nil {
			t.Fatal(err)
		}
		b2, _ := back.MarshalBinary()
		if !bytes.Equal(b, b2) || !equalAddrs(back.ServerAddresses, p.ServerAddresses) {
			t.Fatal("token does not round-trip")
		}
		// The server's view of the same token.
		req := back.Request()
		body, _ := req.AppendBinary(nil)
		var priv Private
		if err := NewOpener(&refKey, p.ProtocolID).OpenRequest(&priv, body, p.Now()); err != nil {
			t.Fatal(err)
		}
		if priv.ClientID != p.ClientID || priv.TimeoutSeconds != back.TimeoutSeconds ||
			!equalAddrs(priv.ServerAddresses(), p.ServerAddresses) ||
			priv.ClientToServerKey != back.ClientToServerKey || priv.ServerToClientKey != back.ServerToClientKey ||
			!bytes.Equal(priv.UserData[:len(p.UserData)], p.UserData) ||
			!bytes.Equal(priv.UserData[len(p.UserData):], make([]byte, UserDataBytes-len(p.UserData))) {
			t.Fatalf("opened %+v for %+v", priv, p)
		}
	}
}

func TestGenerateOptions(t *testing.T) {
	p := refParams()
	p.Timeout = -time.Second
	internal := []netip.AddrPort{netip.MustParseAddrPort("10.0.0.1:1"), netip.MustParseAddrPort("10.0.0.2:2"), netip.MustParseAddrPort("10.0.0.3:3")}
	p.InternalServerAddresses = internal
	tok, err := Generate(&refKey, p)
	if err != nil {
		t.Fatal(err)
	}
	if tok.TimeoutSeconds != -1 || !equalAddrs(tok.ServerAddresses, refAddrs) {
		t.Errorf("public part %+v", tok)
	}
	priv, err := OpenPrivate(&refKey, refProtocolID, tok.ExpireTimestamp, &tok.Nonce, &tok.SealedPrivate, time.Unix(refCreate, 0))
	if err != nil {
		t.Fatal(err)
	}
	if priv.TimeoutSeconds != -1 || !equalAddrs(priv.ServerAddresses(), internal) {
		t.Errorf("private part %+v", priv)
	}
	// The defaults: crypto/rand and the wall clock.
	tok2, err := Generate(&refKey, &Params{ServerAddresses: refAddrs, Expire: time.Minute, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(time.Unix(int64(tok2.CreateTimestamp), 0)); d < -time.Second || d > time.Minute {
		t.Errorf("create timestamp %d is not now", tok2.CreateTimestamp)
	}
	if tok2.ExpireTimestamp != tok2.CreateTimestamp+60 || tok2.Nonce == tok.Nonce || tok2.ClientToServerKey == tok2.ServerToClientKey {
		t.Errorf("defaults: %+v", tok2)
	}
}

func TestGenerateRefuses(t *testing.T) {
	many := make([]netip.AddrPort, MaxServerAddresses+1)
	for i := range many {
		many[i] = netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 0, byte(i)}), 1)
	}
	for name, mod := range map[string]func(*Params){
		"no address":        func(p *Params) { p.ServerAddresses = nil },
		"33 addresses":      func(p *Params) { p.ServerAddresses = many },
		"zone":              func(p *Params) { p.ServerAddresses = []netip.AddrPort{netip.MustParseAddrPort("[fe80::1%lo]:1")} },
		"invalid address":   func(p *Params) { p.ServerAddresses = []netip.AddrPort{{}} },
		"internal mismatch": func(p *Params) { p.InternalServerAddresses = refAddrs[:1] },
		"bad internal":      func(p *Params) { p.InternalServerAddresses = []netip.AddrPort{{}, {}, {}} },
		"expire 0":          func(p *Params) { p.Expire = 0 },
		"expire 999ms":      func(p *Params) { p.Expire = 999 * time.Millisecond },
		"timeout 0":         func(p *Params) { p.Timeout = 0 },
		"timeout 2^31 s":    func(p *Params) { p.Timeout = (1 << 31) * time.Second },
		"user data 257":     func(p *Params) { p.UserData = make([]byte, 257) },
		"short random":      func(p *Params) { p.Rand = bytes.NewReader(make([]byte, 79)) },
		"random error":      func(p *Params) { p.Rand = iotest.ErrReader(errors.New("no entropy")) },
	} {
		p := refParams()
		mod(p)
		if tok, err := Generate(&refKey, p); err == nil {
			t.Errorf("%s: accepted: %+v", name, tok)
		}
	}
	var tok ConnectToken
	if _, err := tok.MarshalBinary(); err == nil {
		t.Error("token without addresses marshalled")
	}
}

func TestUnmarshalRefuses(t *testing.T) {
	good, _ := Generate(&refKey, refParams())
	b, _ := good.MarshalBinary()
	for name, c := range map[string]struct {
		mod  func([]byte) []byte
		want error
	}{
		"short":            {func(b []byte) []byte { return b[:TokenBytes-1] }, ErrMalformed},
		"long":             {func(b []byte) []byte { return append(b, 0) }, ErrMalformed},
		"version":          {func(b []byte) []byte { b[11] = '1'; return b }, ErrVersion},
		"no NUL":           {func(b []byte) []byte { b[12] = ' '; return b }, ErrVersion},
		"create > expire":  {func(b []byte) []byte { b[tokCreate+7] = 0xff; return b }, ErrMalformed},
		"0 addresses":      {func(b []byte) []byte { b[tokNumAddrs] = 0; return b }, ErrMalformed},
		"33 addresses":     {func(b []byte) []byte { b[tokNumAddrs] = 33; return b }, ErrMalformed},
		"2^32-1 addresses": {func(b []byte) []byte { copy(b[tokNumAddrs:], []byte{0xff, 0xff, 0xff, 0xff}); return b }, ErrMalformed},
		"address type 0":   {func(b []byte) []byte { b[tokAddrs] = 0; return b }, ErrMalformed},
		"address type 3":   {func(b []byte) []byte { b[tokAddrs+7] = 3; return b }, ErrMalformed},
	} {
		var tok ConnectToken
		if err := tok.UnmarshalBinary(c.mod(bytes.Clone(b))); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
	}
	var r Request
	for name, c := range map[string]struct {
		b    []byte
		want error
	}{
		"empty":   {nil, ErrMalformed},
		"packet":  {make([]byte, RequestPacketBytes), ErrMalformed},
		"version": {make([]byte, RequestBytes), ErrVersion},
	} {
		if err := r.UnmarshalBinary(c.b); err != c.want {
			t.Errorf("request %s: %v, want %v", name, err, c.want)
		}
	}
}

// testRequest returns the reference token's request body and a clock at its
// creation.
func testRequest(t testing.TB) ([]byte, time.Time) {
	tok, err := Generate(&refKey, refParams())
	if err != nil {
		t.Fatal(err)
	}
	r := tok.Request()
	b, _ := r.AppendBinary(nil)
	return b, time.Unix(refCreate, 0)
}

func TestOpenRefuses(t *testing.T) {
	body, now := testRequest(t)
	o := NewOpener(&refKey, refProtocolID)
	otherKey := refKey
	otherKey[31] ^= 1
	sentinel := Private{ClientID: 42}
	for name, c := range map[string]struct {
		o    *Opener
		b    []byte
		now  time.Time
		want error
	}{
		"valid":                 {o, body, now, nil},
		"valid 1 s before":      {o, body, time.Unix(refExpire-1, 999e6), nil},
		"expires now":           {o, body, time.Unix(refExpire, 0), ErrExpired},
		"expired":               {o, body, time.Unix(refExpire+1, 0), ErrExpired},
		"wrong key":             {NewOpener(&otherKey, refProtocolID), body, now, ErrInvalid},
		"wrong protocol id":     {NewOpener(&refKey, refProtocolID+1), body, now, ErrProtocolID},
		"truncated":             {o, body[:RequestBytes-1], now, ErrMalformed},
		"with netcode's prefix": {o, append([]byte{0}, body...), now, ErrMalformed},
		"bad version":           {o, flip(body, 9*8), now, ErrVersion},
		// A changed expire timestamp passes the clear check but not the AEAD.
		"later expire": {o, put64(body, reqExpire, refExpire+3600), now, ErrInvalid},
		// So does a protocol id changed on both sides, as by an attacker
		// who can also choose the server (the associated data covers it).
		"other protocol": {NewOpener(&refKey, 7), put64(body, reqProtocol, 7), now, ErrInvalid},
		"nonce":          {o, flip(body, reqNonce*8), now, ErrInvalid},
		"ciphertext":     {o, flip(body, (reqSealed+100)*8+3), now, ErrInvalid},
		"MAC":            {o, flip(body, (RequestBytes-1)*8+7), now, ErrInvalid},
	} {
		p := sentinel
		err := c.o.OpenRequest(&p, c.b, c.now)
		if err != c.want {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
		if err != nil && p != sentinel {
			t.Errorf("%s: dst written on error", name)
		}
	}
}

// TestOpenBitFlips flips every bit of a request body: none may open.
func TestOpenBitFlips(t *testing.T) {
	body, now := testRequest(t)
	o := NewOpener(&refKey, refProtocolID)
	var p Private
	for bit := range len(body) * 8 {
		err := o.OpenRequest(&p, flip(body, bit), now)
		var want []error
		switch off := bit / 8; {
		case off < reqProtocol:
			want = []error{ErrVersion}
		case off < reqExpire:
			want = []error{ErrProtocolID}
		case off < reqNonce: // an earlier expire may be in the past
			want = []error{ErrInvalid, ErrExpired}
		default:
			want = []error{ErrInvalid}
		}
		if err != want[0] && (len(want) == 1 || err != want[1]) {
			t.Fatalf("bit %d (byte %d): %v, want %v", bit, bit/8, err, want)
		}
	}
}

// TestOpenAuthenticatedGarbage: a private part that decrypts but whose layout
// is wrong (a backend's bug, or a key that leaked) is malformed, not a crash.
func TestOpenAuthenticatedGarbage(t *testing.T) {
	aead, _ := chacha20poly1305.NewX(refKey[:])
	var nonce [NonceBytes]byte
	for name, mod := range map[string]func(*[PrivatePlainBytes]byte){
		"0 addresses":    func(b *[PrivatePlainBytes]byte) { b[privNumAddrs] = 0 },
		"33 addresses":   func(b *[PrivatePlainBytes]byte) { b[privNumAddrs] = 33 },
		"address type 9": func(b *[PrivatePlainBytes]byte) { b[privAddrs] = 9 },
	} {
		var plain [PrivatePlainBytes]byte
		refPrivate(t).put(&plain)
		mod(&plain)
		var ad [associatedBytes]byte
		putAssociated(&ad, refProtocolID, refExpire)
		var sealed [PrivateBytes]byte
		aead.Seal(sealed[:0], nonce[:], plain[:], ad[:])
		p := Private{ClientID: 42}
		err := NewOpener(&refKey, refProtocolID).Open(&p, refExpire, &nonce, &sealed, time.Unix(refCreate, 0))
		if err != ErrMalformed || p.ClientID != 42 {
			t.Errorf("%s: %v, dst %d", name, err, p.ClientID)
		}
	}
	if _, err := OpenPrivate(&refKey, refProtocolID, refExpire, &nonce, &[PrivateBytes]byte{}, time.Unix(refCreate, 0)); err != ErrInvalid {
		t.Errorf("zero private part: %v", err)
	}
}

// TestOpenAllocs: the server checks every token packet, hostile ones
// included, without allocating.
func TestOpenAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under the race detector")
	}
	body, now := testRequest(t)
	bad := flip(body, (reqSealed+5)*8)
	o := NewOpener(&refKey, refProtocolID)
	p := new(Private)
	for name, b := range map[string][]byte{"valid": body, "forged": bad, "short": body[:100]} {
		if n := testing.AllocsPerRun(100, func() { _ = o.OpenRequest(p, b, now) }); n != 0 {
			t.Errorf("%s: %v allocations per OpenRequest", name, n)
		}
	}
	var r Request
	if n := testing.AllocsPerRun(100, func() { _ = r.UnmarshalBinary(body) }); n != 0 {
		t.Errorf("%v allocations per Request.UnmarshalBinary", n)
	}
}

// BenchmarkOpenRequest is the server's cost of checking one valid token
// (tuning.md: "cost of checking one token").
func BenchmarkOpenRequest(b *testing.B) {
	body, now := testRequest(b)
	o := NewOpener(&refKey, refProtocolID)
	var p Private
	b.ReportAllocs()
	b.SetBytes(RequestBytes)
	for b.Loop() {
		if err := o.OpenRequest(&p, body, now); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkOpenRequestForged is the cost of refusing a forged one.
func BenchmarkOpenRequestForged(b *testing.B) {
	body, now := testRequest(b)
	body = flip(body, (RequestBytes-1)*8)
	o := NewOpener(&refKey, refProtocolID)
	var p Private
	b.ReportAllocs()
	for b.Loop() {
		if err := o.OpenRequest(&p, body, now); err != ErrInvalid {
			b.Fatal(err)
		}
	}
}

func BenchmarkGenerate(b *testing.B) {
	p := refParams()
	p.Rand = nil
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Generate(&refKey, p); err != nil {
			b.Fatal(err)
		}
	}
}

func flip(b []byte, bit int) []byte {
	c := bytes.Clone(b)
	c[bit/8] ^= 1 << (bit % 8)
	return c
}

func put64(b []byte, off int, v uint64) []byte {
	c := bytes.Clone(b)
	binary.LittleEndian.PutUint64(c[off:], v)
	return c
}

func le64(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }

func concat(bs ...[]byte) []byte {
	var out []byte
	for _, b := range bs {
		out = append(out, b...)
	}
	return out
}
