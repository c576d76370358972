package conn

import (
	"sync/atomic"

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
type Stats struct {
	Connections int    // open now
	Accepted    uint64 // connections created
	// Handshake packets received, by type, and replies sent by the
	// receive loops, by type (Acks sent by promotion workers are in
	// PromotionAcks).
	HandshakeIn   [protocol.NumPacketTypes]uint64
	HandshakeOut  [protocol.NumPacketTypes]uint64
	PromotionAcks uint64
	DeniedFull    uint64
	DeniedRefused uint64
	// DeniedAddressLimit: refused because their IP or network held
	// MaxClientsPerIP or MaxClientsPerPrefix connections.
	DeniedAddressLimit uint64
	Migrations         uint64
	// ConnPacketsIn: connection packets accepted for connections.
	ConnPacketsIn uint64
	// Drops by reason; index with DropReason.
	Drops [protocol.NumDropReasons]uint64
	// Disconnects by DisconnectReason (index 1..4).
	Disconnects [protocol.NumDisconnectReasons]uint64
	// PromotionRejected: proven clients the promotion pool had no room for.
	PromotionRejected uint64
	PromotionPanics   uint64
	// PromotionsRunning: promotion workers busy now; PromotionsQueued:
	// proven clients waiting for one.
	PromotionsRunning int
	PromotionsQueued  int
	// OverloadLevel is the current overload level; OverloadChanges counts
	// level changes since Listen.
	OverloadLevel   OverloadLevel
	OverloadChanges uint64
	// Connectionless: datagrams from addresses holding no connection.
	Connectionless uint64
	// Sealed mode: Proofs counts tokens proven, each one a connection
	// created (there is no connection before its proof).
	Proofs uint64
	// Messages (Config.Messages): message entries and packets the message
	// layer dropped, by message.DropReason, and the bytes it holds now for
	// out-of-order and partly reassembled messages (within
	// Config.Messages.ReceiveBudget).
	MessageDrops [message.NumDropReasons]uint64
	MessageHeld  int64
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
// once per receive batch, so it costs the receive path nothing.
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
	}
	st.Accepted = s.ev.accepted.Load()
	st.PromotionAcks = s.ev.acks.Load()
	st.DeniedFull = s.ev.denied[protocol.DeniedServerFull].Load()
	st.DeniedRefused = s.ev.denied[protocol.DeniedRefused].Load()
	st.DeniedAddressLimit = s.ev.denied[protocol.DeniedAddressLimit].Load()
	st.Drops[protocol.DropReplayedCookie] += s.ev.replays.Load()
	st.Drops[protocol.DropSealedHeld] += s.ev.held.Load()
	st.Migrations = s.ev.migrations.Load()
	if m := s.st.msgs; m != nil {
		st.MessageDrops = m.Drops()
		st.MessageHeld = m.Held()
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
	st.OverloadLevel = OverloadLevel(s.ov.level.Load())
	st.OverloadChanges = s.ov.changes.Load()
	st.Sockets = socketStats(s.group.Stats())
	return st
}
