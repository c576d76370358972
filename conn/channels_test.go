package conn

import (
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/udpgate/udpgate/internal/msgcfg"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/message"
	"github.com/udpgate/udpgate/netsim"
)

// Channel layouts are agreed at connect (docs/protocol.md §3.7): a client
// whose message channels, largest message or largest datagram differ from
// the server's fails Dial after one round trip, with a VersionError whose
// Layout names the difference, and the server counts a LayoutMismatch and
// makes no connection. Clients that declare no layout (no channels) and
// clients that agree connect.
func TestChannelLayoutAgreed(t *testing.T) {
	stock := message.Config{Channels: msgcfg.Channels()}
	chans := func(kinds ...message.Kind) message.Config {
		var c message.Config
		for _, k := range kinds {
			c.Channels = append(c.Channels, message.ChannelConfig{Kind: k})
		}
		return c
	}
	rel, unrel, seq := message.ReliableOrdered, message.Unreliable, message.Sequenced
	for _, tc := range []struct {
		name           string
		server, client Config
		want           string // a substring of VersionError.Layout; "" connects
	}{
		{"same", Config{Messages: stock}, Config{Messages: stock}, ""},
		// Bulk is the sender's own business: not compared.
		{"bulk differs", Config{Messages: stock}, Config{Messages: chans(rel, unrel, seq, rel)}, ""},
		{"client without channels", Config{Messages: stock}, Config{}, ""},
		{"count", Config{Messages: stock}, Config{Messages: chans(rel, unrel, seq)},
			"the server has 4 channels (reliable-ordered, unreliable, sequenced, reliable-ordered), this client 3 channels (reliable-ordered, unreliable, sequenced)"},
		{"kind", Config{Messages: chans(rel, unrel)}, Config{Messages: chans(rel, seq)},
			"channel 1 is unreliable on the server, sequenced on this client"},
		{"order", Config{Messages: chans(rel, unrel, seq)}, Config{Messages: chans(rel, seq, unrel)},
			"channel 1 is unreliable on the server, sequenced on this client"},
		{"max message", Config{Messages: stock}, Config{Messages: message.Config{Channels: msgcfg.Channels(), MaxMessageSize: 1 << 20}},
			"MaxMessageSize is 262144 on the server, 1048576 on this client"},
		{"max datagram", Config{Messages: stock}, Config{Messages: stock, MaxDatagram: 1400},
			"MaxDatagram is 1200 on the server, 1400 on this client"},
		{"server without channels", Config{}, Config{Messages: stock},
			"the server has no message channels, this client 4 channels"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const oneWay = 10 * time.Millisecond
				nw := netsim.New()
				nw.SetLink(netsim.Link{Latency: oneWay})
				tc.server.Handler = simEcho{}
				srv := simListen(t, nw, tc.server)
				start := time.Now()
				cli, err := simDial(t, nw, tc.client)
				if tc.want == "" {
					if err != nil {
						t.Fatalf("Dial: %v", err)
					}
					cli.Close()
					return
				}
				var ve *VersionError
				if !errors.As(err, &ve) || !strings.Contains(ve.Layout, tc.want) {
					t.Fatalf("Dial: %v, want a VersionError whose Layout says %q", err, tc.want)
				}
				if !strings.Contains(err.Error(), "Config.Messages") {
					t.Errorf("the error %q does not name the fix", err)
				}
				if d := time.Since(start); d != 2*oneWay {
					t.Errorf("Dial failed after %v, want one round trip, %v", d, 2*oneWay)
				}
				st := srv.Stats()
				if st.HandshakeOut[protocol.TypeLayoutMismatch] != 1 || st.HandshakeOut[protocol.TypeChallenge] != 0 || srv.Len() != 0 {
					t.Errorf("server: sent %v, holds %d connections; want one LayoutMismatch, no Challenge, none", st.HandshakeOut, srv.Len())
				}
			})
		})
	}
}
