package loadgen

import (
	"crypto/rand"
	"encoding/binary"
	"time"

	"golang.org/x/crypto/chacha20"

	"github.com/udpgate/udpgate/token"
)

// tokenSource makes the sealed-mode clients' connect tokens. Client i's
// token is a function of i and a secret drawn at New: its nonce and keys are
// ChaCha20's keystream under the secret with nonce i, and its create time is
// New's. A client therefore makes the same token again for every proof it
// resends, and the generator stores no token (2 KiB a client) while the
// keys stay as unpredictable as a backend's.
type tokenSource struct {
	key    [token.KeyBytes]byte // the server's private key
	secret [chacha20.KeySize]byte
	params token.Params
	// idBase: client i's id is idBase + i, so that two generators against
	// one server do not replace each other's connections.
	idBase uint64
}

func newTokenSource(cfg *Config) (*tokenSource, error) {
	ts := &tokenSource{key: *cfg.PrivateKey}
	var seed [chacha20.KeySize + 8]byte
	if _, err := rand.Read(seed[:]); err != nil {
		return nil, err
	}
	copy(ts.secret[:], seed[:])
	ts.idBase = binary.LittleEndian.Uint64(seed[chacha20.KeySize:]) &^ (1<<32 - 1)
	created := time.Now()
	ts.params = token.Params{
		ProtocolID:      cfg.ProtocolID,
		ServerAddresses: cfg.TokenAddresses,
		Expire:          cfg.TokenExpire,
		Timeout:         cfg.TokenTimeout,
		Now:             func() time.Time { return created },
	}
	// A first token checks the settings, so New reports what is wrong.
	if _, err := ts.token(0); err != nil {
		return nil, err
	}
	return ts, nil
}

// token returns client i's connect token. It allocates (a handshake-time
// cost, never per packet).
func (ts *tokenSource) token(i int) (*token.ConnectToken, error) {
	var nonce [chacha20.NonceSize]byte
	binary.LittleEndian.PutUint64(nonce[:], uint64(i))
	c, err := chacha20.NewUnauthenticatedCipher(ts.secret[:], nonce[:])
	if err != nil {
		return nil, err
	}
	p := ts.params
	p.ClientID = ts.idBase + uint64(i)
	p.Rand = keystream{c}
	return token.Generate(&ts.key, &p)
}

// clientID is client i's id in its token.
func (ts *tokenSource) clientID(i int) uint64 { return ts.idBase + uint64(i) }

// keystream reads a ChaCha20 keystream.
type keystream struct{ c *chacha20.Cipher }

func (k keystream) Read(p []byte) (int, error) {
	clear(p)
	k.c.XORKeyStream(p, p)
	return len(p), nil
}
