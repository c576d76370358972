package main

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/udpgate/udpgate/internal/traffic/loadgen"
	"github.com/udpgate/udpgate/token"
)

// The sealed scenarios (sealed-data-N, sealed-storm-N) run udpgate in
// sealed mode (docs/protocol.md §11): the harness draws a private key and a
// protocol id per run, hands them to the udpgate child in sealedEnv, and
// the load generator makes a connect token per client with them. The raw
// echo in sealed-data-N gets raw datagrams of the sealed Data packet's size,
// so its ratio is the cost of the protocol and the seal together.

// sealedEnv carries a sealed run's key to the child: 64 hex digits, a
// colon, the protocol id in hex.
const sealedEnv = "UDPGATE_BENCH_SEALED"

// sealedKeys are one sealed run's private key and protocol id.
type sealedKeys struct {
	key        [token.KeyBytes]byte
	protocolID uint64
}

// keys returns fresh keys for a sealed scenario run by udpgate, and the
// child's environment entry that carries them; nil for any other run.
func (sc scenario) keys(v variant) (*sealedKeys, []string, error) {
	if !sc.Sealed || v.Kind != kindUdpgate {
		return nil, nil, nil
	}
	var b [token.KeyBytes + 8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, nil, err
	}
	k := &sealedKeys{key: [token.KeyBytes]byte(b[:token.KeyBytes]), protocolID: binary.LittleEndian.Uint64(b[token.KeyBytes:])}
	return k, []string{sealedEnv + "=" + k.String()}, nil
}

func (k *sealedKeys) String() string {
	return hex.EncodeToString(k.key[:]) + ":" + strconv.FormatUint(k.protocolID, 16)
}

// parseSealedKeys reads what String wrote; "" is no keys.
func parseSealedKeys(s string) (*sealedKeys, error) {
	if s == "" {
		return nil, nil
	}
	kh, ph, ok := strings.Cut(s, ":")
	b, err := hex.DecodeString(kh)
	if !ok || err != nil || len(b) != token.KeyBytes {
		return nil, fmt.Errorf("%s: want 64 hex digits, a colon and a protocol id in hex", sealedEnv)
	}
	pid, err := strconv.ParseUint(ph, 16, 64)
	if err != nil {
		return nil, fmt.Errorf("%s: protocol id %q: %v", sealedEnv, ph, err)
	}
	return &sealedKeys{key: [token.KeyBytes]byte(b), protocolID: pid}, nil
}

// apply makes the load generator's clients sealed-mode clients of k's
// server (nothing for nil k).
func (k *sealedKeys) apply(c *loadgen.Config) {
	if k == nil {
		return
	}
	c.PrivateKey = &k.key
	c.ProtocolID = k.protocolID
}
