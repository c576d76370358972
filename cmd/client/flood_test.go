package main

import (
	"strings"
	"testing"

	"github.com/udpgate/udpgate/conn"
	"github.com/udpgate/udpgate/internal/protocol"
)

// TestFloodCommand floods a real server briefly and checks the report the
// command prints, and that the server made no connection.
func TestFloodCommand(t *testing.T) {
	srv, _ := startServer(t, conn.Config{NetworkVersion: 1})
	code, out, errb := runCmd(t, "", "flood", "-server", srv.Addr().String(),
		"-count", "20000", "-duration", "10s", "-sources", "50", "-top", "3")
	if code != exitOK {
		t.Fatalf("status %d; stderr:\n%s\nstdout:\n%s", code, errb, out)
	}
	// The report is a table: compare with single spaces.
	flat := strings.Join(strings.Fields(out), " ")
	for _, want := range []string{
		"bytes out (sent to server) 20000 datagrams",
		"bytes in (server replies)",
		"amplification overall",
		"amplification worst source",
		"sources that received more than they sent none",
		"replies by type",
		"challenge",
		"sources by amplification (3 of 50)",
	} {
		if !strings.Contains(flat, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	if st := srv.Stats(); srv.Len() != 0 || st.Accepted != 0 || st.Drops[protocol.DropBadCookie] == 0 {
		t.Errorf("server after the flood: %d connections, %d accepted, %d bad cookies", srv.Len(), st.Accepted, st.Drops[protocol.DropBadCookie])
	}
}

// TestFloodNoServer: with nothing listening the probe fails and the
// command says what to check.
func TestFloodNoServer(t *testing.T) {
	srv, _ := startServer(t, conn.Config{Magic: "1"})
	code, _, errb := runCmd(t, "", "flood", "-server", srv.Addr().String(), "-sources", "1")
	if code != exitFailure || !strings.Contains(errb, "no Challenge") || !strings.Contains(errb, "-magic") {
		t.Errorf("status %d, stderr:\n%s", code, errb)
	}
}

// TestFloodSealed floods a sealed server with hostile proofs and sealed
// packets (-mix proof=...,sealed=...) with its protocol id and key: the
// proofs reach the server's token checks, none is proven, and no source
// gets more bytes back than it sent.
func TestFloodSealed(t *testing.T) {
	srv, h := startSealed(t, nil)
	keyFile := writeTestFile(t, "key", testKeyHex+"\n")
	code, out, errb := runCmd(t, "", "flood", "-server", srv.Addr().String(), "-network-version", "1",
		"-mix", "initial=1,proof=4,sealed=1", "-protocol-id", "0x1122334455667788", "-private-key-file", keyFile,
		"-count", "5000", "-duration", "10s", "-sources", "20", "-top", "1")
	if code != exitOK {
		t.Fatalf("status %d; stderr:\n%s\nstdout:\n%s", code, errb, out)
	}
	flat := strings.Join(strings.Fields(out), " ")
	if !strings.Contains(flat, "sources that received more than they sent none") {
		t.Errorf("report:\n%s", out)
	}
	st := srv.Stats()
	if st.Proofs != 0 || len(h.identities()) != 0 {
		t.Fatalf("%d tokens proven by a flood", st.Proofs)
	}
	if st.Drops[protocol.DropTokenExpired]+st.Drops[protocol.DropTokenInvalid]+st.Drops[protocol.DropProofForged] == 0 {
		t.Errorf("no hostile proof reached the token checks: drops %v", st.Drops)
	}
}

func TestFloodSealedFlags(t *testing.T) {
	code, _, errb := runCmd(t, "", "flood", "-private-key-file", "/nonexistent")
	if code != exitUsage || !strings.Contains(errb, "sealed mode needs -protocol-id too") {
		t.Errorf("status %d, stderr %q", code, errb)
	}
}
