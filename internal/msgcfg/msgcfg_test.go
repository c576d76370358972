package msgcfg

import (
	"testing"

	"github.com/udpgate/udpgate/message"
)

// TestLayout: the layout has NumChannels channels, each named, of the
// kinds the constants say, and the message package accepts it.
func TestLayout(t *testing.T) {
	chs := Channels()
	if len(chs) != NumChannels {
		t.Fatalf("%d channels, NumChannels %d", len(chs), NumChannels)
	}
	want := [NumChannels]message.ChannelConfig{
		Reliable:   {Kind: message.ReliableOrdered},
		Unreliable: {Kind: message.Unreliable},
		Sequenced:  {Kind: message.Sequenced},
		Bulk:       {Kind: message.ReliableOrdered, Bulk: true},
	}
	seen := map[string]bool{}
	for i, c := range chs {
		if c.Kind != want[i].Kind || c.Bulk != want[i].Bulk {
			t.Errorf("channel %d is %+v, want %+v", i, c, want[i])
		}
		name := ChannelName(i)
		if name == "unknown" || seen[name] {
			t.Errorf("channel %d is named %q", i, name)
		}
		seen[name] = true
	}
	if ChannelName(NumChannels) != "unknown" {
		t.Errorf("channel %d is named %q", NumChannels, ChannelName(NumChannels))
	}
	cfg := Config(message.MaxMessageSizeLimit, 0)
	if _, err := message.NewLayer(cfg, 1100); err != nil || cfg.MaxMessageSize != message.MaxMessageSizeLimit {
		t.Errorf("Config(%d, 0) = %+v: %v", message.MaxMessageSizeLimit, cfg, err)
	}
}
