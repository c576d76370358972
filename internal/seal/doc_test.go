package seal

import (
	"encoding/hex"
	"os"
	"strings"
	"testing"

	"golang.org/x/crypto/chacha20"
)

// TestHChaCha20Vectors checks the HChaCha20 vectors docs/protocol.md §11.2
// gives: the draft's §2.2.1 vector, and the subkey of the salted key that
// testdata/netcode_aead.txt's xaead vectors use.
func TestHChaCha20Vectors(t *testing.T) {
	for _, v := range []struct{ key, in, want string }{
		{"000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f", "000000090000004a0000000031415927",
			"82413b4227b27bfed30e42508a877d73a0f9e4d58a74a853c12ec41326d3ecdc"},
		{"808182838485868788898a8b8c8d8e8f909192939495969798999a9b9c9d9e9f", "c0c1c2c3c4c5c6c7c8c9cacbcccdcecf",
			"b01b0219ff6c8afa5bf09cd92c16f4573cf6de348ec26bd945ed3702bf922a04"},
	} {
		key, _ := hex.DecodeString(v.key)
		in, _ := hex.DecodeString(v.in)
		out, err := chacha20.HChaCha20(key, in)
		if err != nil {
			t.Fatal(err)
		}
		if got := hex.EncodeToString(out); got != v.want {
			t.Errorf("HChaCha20(%s, %s) = %s, want %s", v.key, v.in, got, v.want)
		}
	}
}

// TestSealedExampleInDoc: docs/protocol.md §11.2 holds the worked example
// of testdata/sealed_example.txt (without its first line) verbatim.
func TestSealedExampleInDoc(t *testing.T) {
	doc, err := os.ReadFile("../../docs/protocol.md")
	if err != nil {
		t.Fatal(err)
	}
	ex, err := os.ReadFile("testdata/sealed_example.txt")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(doc), "<!-- sealed-example begin -->\n```\n")
	block, _, ok2 := strings.Cut(after, "```\n<!-- sealed-example end -->")
	if !ok || !ok2 {
		t.Fatal("docs/protocol.md has no sealed-example block")
	}
	_, want, _ := strings.Cut(string(ex), "\n")
	if block != want {
		t.Error("docs/protocol.md's sealed example differs from testdata/sealed_example.txt: copy the file (without its first line) into the block")
	}
}
