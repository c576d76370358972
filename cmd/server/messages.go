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
	c := msgcfg.Config(o.messageMaxSize, o.messageSendRate)
	c.SendBudget, c.StallTimeout, c.StallSilence, c.StallRTTs = int64(o.messageSendBudget), o.messageStallTimeout, o.messageStallSilence, o.messageStallRTTs
	c.ReceiveBudget, c.ConnReceiveBudget = int64(o.messageRecvBudget), o.messageConnRecvBudget
	return c
}

// validateMessages checks the message settings: the message package
// judges the layout with the sizes given (as conn.Listen would), and the
// sizes without -messages are an error rather than ignored.
func (o *options) validateMessages(bad func(name, format string, args ...any)) {
	if !o.messages {
		for _, name := range []string{"message-max-size", "message-send-rate", "message-send-budget", "message-stall-timeout", "message-stall-silence", "message-stall-rtts", "message-receive-budget", "message-conn-receive-budget", "egress-rate"} {
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
	if o.messageSendBudget < 0 || o.messageStallTimeout < 0 || o.messageStallSilence < 0 || o.messageStallRTTs < 0 {
		bad("message-send-budget", "-message-send-budget, -message-stall-timeout, -message-stall-silence and -message-stall-rtts must not be negative (0: the message package's default)")
		return
	}
	if o.messageRecvBudget < 0 {
		bad("message-receive-budget", "must not be negative: use bytes (default %d), or 0 for the message package's default", message.DefaultReceiveBudget)
		return
	}
	if o.messageConnRecvBudget < 0 {
		bad("message-conn-receive-budget", "must not be negative: use bytes, or 0 for the default (a window of packets and one largest message)")
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
		if strings.Contains(err.Error(), "ConnReceiveBudget") {
			bad("message-conn-receive-budget", "with message-max-size %d: %s", o.messageMaxSize, strings.TrimPrefix(err.Error(), "message: "))
			return
		}
		bad("message-max-size", "with message-send-rate %d: %s", o.messageSendRate, strings.TrimPrefix(err.Error(), "message: "))
	}
}
