package conn

import (
	"sync/atomic"
	"time"

	"github.com/udpgate/udpgate/batchio"
	"github.com/udpgate/udpgate/internal/handshake"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/message"
)

// eventCounters count rare server events (promotions, closes): plain
// shared atomics are fine off the per-packet path.
type eventCounters struct {
	accepted atomic.Uint64
	// Sealed mode: tokens proven (each one a connection created).
	proofs atomic.Uint64
	acks   atomic.Uint64
	// denied counts promotion workers' Denied replies by reason
	// (protocol.Denied*; the loops count theirs by reply type).
	denied [handshake.DeniedUnknownConnection + 1]atomic.Uint64
	// replays: Responses dropped as replays by promotion workers
	// (protocol.DropReplayedCookie in Stats.Drops).
	replays atomic.Uint64
	// held: Responses dropped by promotion workers because a proven
	// sealed connection holds their address (DropSealedHeld).
	held              atomic.Uint64
	migrations        atomic.Uint64
	promotionRejected atomic.Uint64
	promotionPanics   atomic.Uint64
	disconnects       [protocol.NumDisconnectReasons]atomic.Uint64
}

// Stats is a snapshot of a server's counters, summed over its sockets.
//
// Stats is also the table of the server's metrics: a field's tags are its
// Prometheus metric (package metrics reads them, so a new counter is a field
// here and its use). metric is the name after "udpgate_" (a name ending in
// _total is a counter, any other a gauge), help its help text, and label
// either the label of an array's series, whose values come from the index
// type's table (values: drop, packet, disconnect, message_drop; index 0 of
// a reason is none and is not exported), or name=value, a fixed label of a
// field that shares its metric with others. A field without a metric tag
// is not exported (Sockets have their own table in package metrics).
type Stats struct {
	Connections int    `metric:"connections" help:"Connections open now."`
	Accepted    uint64 `metric:"connections_accepted_total" help:"Connections created by the handshake."`
	// Handshake packets received, and sent (by the receive loops and the
	// promotion workers), by type.
	HandshakeIn  [protocol.NumPacketTypes]uint64 `metric:"handshake_received_total" label:"type" values:"packet" help:"Handshake packets received, by type."`
	HandshakeOut [protocol.NumPacketTypes]uint64 `metric:"handshake_sent_total" label:"type" values:"packet" help:"Handshake packets sent, by type, from the receive loops and the promotion workers (acks of new connections, denials)."`
	// PromotionAcks: the Acks in HandshakeOut that promotion workers sent.
	PromotionAcks uint64
	// Proven clients answered Denied, by reason: server full (MaxClients,
	// or draining), refused by Config.Accept, and over MaxClientsPerIP or
	// MaxClientsPerPrefix.
	DeniedFull         uint64 `metric:"denied_total" label:"reason=server_full" help:"Proven clients answered Denied, by reason: server_full (max-clients, or draining), refused (the application), address_limit (max-clients-per-ip or -prefix)."`
	DeniedRefused      uint64 `metric:"denied_total" label:"reason=refused"`
	DeniedAddressLimit uint64 `metric:"denied_total" label:"reason=address_limit"`
	Migrations         uint64 `metric:"migrations_total" help:"Connections moved to a new client address (RestartResponse)."`
	// ConnPacketsIn: connection packets accepted for connections.
	ConnPacketsIn uint64 `metric:"connection_packets_received_total" help:"Connection packets accepted for connections (Data, KeepAlive, Disconnect)."`
	// Drops by reason; index with DropReason.
	Drops [protocol.NumDropReasons]uint64 `metric:"drops_total" label:"reason" values:"drop" help:"Datagrams the server dropped, by reason (conn.DropReason)."`
	// Disconnects by DisconnectReason.
	Disconnects [protocol.NumDisconnectReasons]uint64 `metric:"disconnects_total" label:"reason" values:"disconnect" help:"Connections ended, by reason (timed_out counts timeouts; a sealed server's refusals of a token are counted as drops instead)."`
	// PromotionRejected: proven clients the promotion pool had no room for.
	PromotionRejected uint64 `metric:"promotions_rejected_total" help:"Proven clients the promotion pool had no room for (they retry their Response)."`
	PromotionPanics   uint64 `metric:"promotion_panics_total" help:"Promotion workers that panicked (a bug in an Accept or OnConnect hook)."`
	// PromotionsRunning: promotion workers busy now; PromotionsQueued:
	// proven clients waiting for one.
	PromotionsRunning int `metric:"promotions_running" help:"Promotion workers busy now."`
	PromotionsQueued  int `metric:"promotions_queued" help:"Proven clients waiting for a promotion worker now."`
	// OverloadLevel is the current overload level; OverloadChanges counts
	// level changes since Listen.
	OverloadLevel   OverloadLevel `metric:"overload_level" help:"Overload control level: 0 normal, 1 burst (no RestartHandshake/VersionUpgrade), 2 flood and 3 severe (Challenge replies capped per socket)."`
	OverloadChanges uint64        `metric:"overload_level_changes_total" help:"Overload level changes."`
	// Connectionless: datagrams from addresses holding no connection.
	Connectionless uint64 `metric:"connectionless_received_total" help:"Datagrams from addresses that hold no connection (handshakes, strays, attacks): what overload control watches."`
	// Shared: handshake datagrams that a steered server's connection
	// loops took from the handshake sockets during a login storm, while
	// their own were empty and had no players.
	Shared uint64 `metric:"shared_received_total" help:"Steered server: handshake-socket datagrams taken by connection loops without players of their own (a login storm shared across cores)."`
	// Sealed mode: Proofs counts tokens proven, each one a connection
	// created (there is no connection before its proof).
	Proofs uint64 `metric:"token_proofs_total" help:"Sealed mode: connect tokens proven (connections admitted)."`
	// Messages (Config.Messages): message entries and packets the message
	// layer dropped, by message.DropReason, and the bytes it holds now for
	// out-of-order and partly reassembled messages (within
	// Config.Messages.ReceiveBudget).
	MessageDrops [message.NumDropReasons]uint64 `metric:"message_drops_total" label:"reason" values:"message_drop" help:"Message entries and Messages packets the message layer dropped, by reason (message.DropReason; over_budget packets are left unacknowledged and resent)."`
	MessageHeld  int64                          `metric:"message_receive_held_bytes" help:"Bytes held now for out-of-order and partly reassembled messages, over all connections (bounded by the messages receive budget)."`
	// MessageHolders: connections holding receive storage now; while
	// the pool is contended each may hold ReceiveBudget / MessageHolders
	// of out-of-order units (docs/protocol.md §14.5).
	MessageHolders int64 `metric:"message_receive_holders" help:"Connections holding receive storage for messages now: the receive budget's fair share is the budget over this, while more than half of it is held."`
	// MessageQueued: bytes held for sending (queued, and reliable ones
	// unacknowledged), over all connections; CongestionEvents: the
	// congestion controllers' window cuts for loss (Conn.PathStats).
	MessageQueued    int64  `metric:"message_send_queued_bytes" help:"Bytes of messages held for sending now (queued, and reliable ones not yet acknowledged), over all connections."`
	CongestionEvents uint64 `metric:"message_congestion_events_total" help:"Window cuts for loss by the connections' congestion controllers (a queue overflowing, or heavy loss); random loss is not counted."`
	// The send budget (Config.Messages.SendBudget): bytes reserved now,
	// and sends refused over the budget or a connection's share;
	// MessageTimeouts: retransmission timeouts (a peer that acknowledged
	// nothing for a whole timeout, which backs its sending off until it
	// acknowledges, or stalls: Config.Messages.StallSilence).
	MessageSendReserved int64  `metric:"message_send_reserved_bytes" help:"Bytes of the messages send budget reserved now by connections for queued and unacknowledged messages beyond each one's floor of eight packets' storage (in grants of eight packets; at most the budget)."`
	MessageSendRefused  uint64 `metric:"message_send_refused_total" help:"Message sends refused because the server-wide send budget was spent or the connection held its share of it (message.ErrSendShare, an ErrQueueFull)."`
	MessageTimeouts     uint64 `metric:"message_timeouts_total" help:"Retransmission timeouts: a peer acknowledged no packet for a whole timeout while reliable messages were in flight; it then gets one probe per doubled timeout until it acknowledges or is ended as stalled."`
	// The egress budget (Config.EgressRate; all zero without one): the
	// budget; what of it the bulk may use now, the game's traffic taken
	// out (EgressBulkBudget); the ceiling of each connection's bulk now,
	// its share (EgressShare); the total egress rate last measured (every
	// 5 ms, the sent bytes of all sockets: Sockets.TxBytes counts them);
	// the bulk bytes sent (message payload); and what the budget holds:
	// connection-time of bulk waiting on it, the bytes the held
	// connections hold for sending, and how many they are.
	EgressBudget     int64         `metric:"egress_budget_bytes_per_second" help:"The server's egress budget (-egress-rate; 0: none)."`
	EgressBulkBudget int64         `metric:"egress_bulk_budget_bytes_per_second" help:"What of the egress budget the connections' bulk may use now: the budget less the game's traffic, steered so that the total meets the budget."`
	EgressShare      int64         `metric:"egress_bulk_share_bytes_per_second" help:"The ceiling of each connection's bulk rate now: its max-min fair share of the bulk budget."`
	EgressRate       int64         `metric:"egress_bytes_per_second" help:"The server's total egress rate last measured by the egress budget (every 5 ms; the bytes are udpgate_sent_bytes_total)."`
	EgressBulkBytes  int64         `metric:"egress_bulk_bytes_total" help:"Bulk message bytes the connections sent under the egress budget (message payload, resends included)."`
	EgressHeld       time.Duration `metric:"egress_held_seconds_total" help:"Connection-seconds of bulk sending held by the egress budget (each connection that waited on its share counts the interval)."`
	EgressHeldBytes  int64         `metric:"egress_held_bytes" help:"Bytes held for sending by the connections whose bulk the egress budget holds now."`
	EgressHeldConns  int64         `metric:"egress_held_connections" help:"Connections whose bulk the egress budget holds now (they want more than their share)."`
	// Sockets: packets, bytes, batches and kernel drops, summed.
	Sockets SocketStats
}

// SocketStats are a socket's counters, or the sum over a server's sockets,
// since Listen.
type SocketStats struct {
	// RxPackets and RxBytes count datagrams received, truncated (too
	// large) ones included; RxBatches counts the receive calls that
	// returned them, so RxPackets/RxBatches is the average batch.
	RxPackets, RxBytes, RxBatches uint64
	// RxTruncated counts datagrams larger than MaxDatagram.
	RxTruncated uint64
	// RxDrops counts datagrams the kernel dropped because the socket's
	// receive buffer was full (Linux 4.12 and later; 0 elsewhere).
	RxDrops uint64
	// RxErrors counts receive errors that were retried.
	RxErrors uint64
	// TxPackets and TxBytes count datagrams handed to the kernel; TxCalls
	// counts the send calls that carried them.
	TxPackets, TxBytes, TxCalls uint64
	// TxErrors counts datagrams the kernel refused for a reason of their
	// own (no route, a firewall, too large); TxPartial counts send calls
	// that sent only part of their batch.
	TxErrors, TxPartial uint64
	// TxWaits counts waits for a full socket send buffer; QueueWaits,
	// waits for a socket's full queue of sends from outside its loop.
	TxWaits, QueueWaits uint64
}

func socketStats(b batchio.Stats) SocketStats {
	return SocketStats{
		RxPackets: b.RxPackets, RxBytes: b.RxBytes, RxBatches: b.RxBatches,
		RxTruncated: b.RxTruncated, RxDrops: b.RxDrops, RxErrors: b.RxErrors,
		TxPackets: b.TxPackets, TxBytes: b.TxBytes, TxCalls: b.TxCalls,
		TxErrors: b.TxErrors, TxPartial: b.TxPartial, TxWaits: b.TxWaits, QueueWaits: b.QueueWaits,
	}
}

// SocketStats returns each socket's counters, in socket order.
func (s *Server) SocketStats() []SocketStats {
	socks := s.socks
	out := make([]SocketStats, len(socks))
	for i, so := range socks {
		out[i] = socketStats(so.Stats())
	}
	return out
}

// Stats returns the server's counters. It reads per-loop counters published
// once per receive batch, so it costs the receive path nothing; with
// messages configured it also visits every connection, under its lock, to
// sum MessageQueued (8-13 ms at 100k connections with endpoints, Intel
// Xeon): read it every few seconds, as the summary line and a Prometheus
// scrape do, not per packet.
func (s *Server) Stats() Stats {
	var st Stats
	st.Connections = s.Len()
	for _, l := range s.loops {
		c := &l.cnt.shared
		for i := range st.Drops {
			st.Drops[i] += c[cDrop+i].Load()
		}
		for i := range int(protocol.NumPacketTypes) {
			st.HandshakeIn[i] += c[cRequest+i].Load()
			st.HandshakeOut[i] += c[cReply+i].Load()
		}
		st.ConnPacketsIn += c[cConnIn].Load()
		st.Connectionless += c[cConnless].Load()
		st.Shared += c[cShared].Load()
	}
	st.Accepted = s.ev.accepted.Load()
	st.PromotionAcks = s.ev.acks.Load()
	st.DeniedFull = s.ev.denied[protocol.DeniedServerFull].Load()
	st.DeniedRefused = s.ev.denied[protocol.DeniedRefused].Load()
	st.DeniedAddressLimit = s.ev.denied[protocol.DeniedAddressLimit].Load()
	st.HandshakeOut[protocol.TypeAck] += st.PromotionAcks
	st.HandshakeOut[protocol.TypeDenied] += st.DeniedFull + st.DeniedRefused + st.DeniedAddressLimit
	st.Drops[protocol.DropReplayedCookie] += s.ev.replays.Load()
	st.Drops[protocol.DropSealedHeld] += s.ev.held.Load()
	st.Migrations = s.ev.migrations.Load()
	if m := s.st.msgs; m != nil {
		st.MessageDrops = m.Drops()
		st.MessageHeld = m.Held()
		st.MessageHolders = m.Holders()
		// Summed here, not counted as messages come and go: a count
		// every connection's sends and acks changed would be one cache
		// line all cores write.
		s.Range(func(c *Conn) bool {
			c.mu.Lock()
			if c.msg != nil {
				st.MessageQueued += int64(c.msg.Queued())
			}
			c.mu.Unlock()
			return true
		})
		st.CongestionEvents = m.CongestionEvents()
		st.MessageSendReserved, st.MessageSendRefused, st.MessageTimeouts = m.SendReserved(), m.SendRefused(), m.Timeouts()
	}
	st.Proofs = s.ev.proofs.Load()
	st.PromotionRejected = s.ev.promotionRejected.Load()
	st.PromotionPanics = s.ev.promotionPanics.Load()
	for i := range st.Disconnects {
		st.Disconnects[i] = s.ev.disconnects[i].Load()
	}
	st.PromotionsRunning = s.pool.Running()
	for _, l := range s.loops {
		l.queue.mu.Lock()
		st.PromotionsQueued += l.queue.waiting()
		l.queue.mu.Unlock()
	}
	if b := s.egress; b != nil {
		e := b.Stats()
		st.EgressBudget, st.EgressBulkBudget, st.EgressShare, st.EgressRate = e.Rate, e.BulkBudget, e.Level, e.Egress
		st.EgressBulkBytes, st.EgressHeld = e.BulkBytes, time.Duration(e.HeldNs)
		st.EgressHeldBytes, st.EgressHeldConns = e.HeldBytes, e.Held
	}
	st.OverloadLevel = OverloadLevel(s.ov.level.Load())
	st.OverloadChanges = s.ov.changes.Load()
	st.Sockets = socketStats(s.group.Stats())
	return st
}
