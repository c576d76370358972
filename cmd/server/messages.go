package main

import (
	"strings"

	"github.com/udpgate/udpgate/conn"
	"github.com/udpgate/udpgate/internal/msgcfg"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/wire"
	"github.com/udpgate/udpgate/message"
)

// Messages (docs/protocol.md §14). The server configures the tools'
// channel layout (internal/msgcfg) unless -messages=false: a client that
// sends only Data never notices the channels, so on is the safe default,
// and client connect -reliable and client load -messages need them.

// The applications answer messages as they answer Data: echo sends each
// one back on the channel it came on, discard drops it.
var (
	_ conn.MessageHandler = echo{}
	_ conn.MessageHandler = discard{}
)

// OnMessage echoes msg on its channel. A full send queue (a client that
// does not read its echoes) drops the echo: the client sees it missing.
func (echo) OnMessage(c *conn.Conn, ch int, msg []byte) { _ = c.SendMessage(ch, msg) }

// OnMessage drops the message.
func (discard) OnMessage(*conn.Conn, int, []byte) {}

// messageConfig is conn.Config.Messages for the settings: the layout, or
// nothing with -messages=false.
func (o *options) messageConfig() message.Config {
	if !o.messages {
		return message.Config{}
	}
	return msgcfg.Config(o.messageMaxSize, o.messageSendRate)
}

// validateMessages checks the message settings: the message package
// judges the layout with the sizes given (as conn.Listen would), and the
// sizes without -messages are an error rather than ignored.
func (o *options) validateMessages(bad func(name, format string, args ...any)) {
	if !o.messages {
		for _, name := range []string{"message-max-size", "message-send-rate", "egress-rate"} {
			if f := o.fs.Lookup(name); f.Value.String() != f.DefValue {
				bad(name, "is a message setting, but -messages is off: turn -messages on, or remove %s", name)
			}
		}
		return
	}
	if o.messageMaxSize < 0 {
		bad("message-max-size", "must not be negative: use bytes (default %d), or 0 for the message package's default", message.DefaultMaxMessageSize)
		return
	}
	if o.egressRate < 0 {
		bad("egress-rate", "must not be negative: use the server's egress budget in bytes per second, or 0 for none")
		return
	}
	if o.messageSendRate < 0 {
		bad("message-send-rate", "must not be negative: use bytes per second (default %d), or 0 for the message package's default", message.DefaultSendRate)
		return
	}
	m, err := wire.ParseMagic(o.magic)
	if err != nil || o.maxDatagram > protocol.MaxDatagramLimit {
		return // reported for -magic or -max-datagram
	}
	payload := o.maxDatagram - wire.ConnLen(m, protocol.KindMessages, 0)
	if payload < 1 {
		return // -max-datagram is reported
	}
	if _, err := message.NewLayer(o.messageConfig(), payload); err != nil {
		bad("message-max-size", "with message-send-rate %d: %s", o.messageSendRate, strings.TrimPrefix(err.Error(), "message: "))
	}
}
