// Package loadgen is a closed-loop UDP load generator for udpgate servers: it
// simulates thousands of clients, each at its own source address in
// 127.0.0.0/8, over a few batched sockets, and measures what comes back.
// The benchmark harness (bench/) and `client load` (cmd/client) share it.
//
// # Many sources over few sockets
//
// A server tells clients apart by address and port, so N simulated clients
// need N distinct source addresses. Binding a socket per client does not
// scale (and costs the generator a system call per socket), so each load
// socket is bound to 0.0.0.0 on one port and chooses every datagram's source
// address itself: an IP_PKTINFO control message with ipi_spec_dst set to
// 127.a.b.c makes Linux send from that address (every 127/8 address is
// local on the loopback interface). Replies to 127.a.b.c reach the same
// socket, and the IP_PKTINFO the kernel attaches on receive names the
// address they were sent to, which is the simulated client. Client i uses
// socket i mod S and the (i div S)-th address, so S sockets serve N clients
// from ⌈N/S⌉ addresses and a reply is mapped back to its client by
// arithmetic, without a table.
//
// # Measurement discipline
//
// The generator shares the machine with the server it measures, so it keeps
// its own cost per packet low and constant: one goroutine per socket on a
// locked thread, sendmmsg/recvmmsg batches, no allocation per packet, one
// clock read per batch. It is closed-loop: each socket keeps at most Window
// requests outstanding (and each client at most one, unless a rate is set),
// so the offered load follows the server's pace and nothing queues without
// bound. A request unanswered for LossTimeout is written off as lost, so a
// drop never wedges the window. Every phase is bounded by a deadline and a
// packet budget and stops by itself.
//
// Counters are cumulative and published once per batch through atomics, so a
// caller may sample them at any moment (Generator.Counters): the harness
// reads them in the same instant as the server's CPU time, at the edges of
// the measuring window.
//
// # Modes
//
//   - ModeEcho: fixed raw datagrams; any reply counts. Against a raw echo
//     server this is the floor: the same socket work with no protocol.
//   - ModeInitial: Initials; a Challenge is the answer (the stateless half of
//     the handshake: decode, cookie, encode).
//   - ModeResponse: after Connect, each connected client repeats the valid
//     Response that connected it; the server verifies the cookie and answers
//     with the connection's Ack again (docs/protocol.md §5, "a valid Response gets
//     the Ack again"). This measures Response→Ack with cookie verification
//     at a steady rate without creating a connection per packet. The cookie
//     stays valid until the server's second secret rotation after the
//     Challenge (at least 15 s), so a run must end within 15 s of Connect.
//   - ModeData: after Connect, Data packets with real sequence numbers and
//     acks (seqwin.SeqState); the server's echo application answers each
//     with a Data packet carrying the same payload, whose first 8 bytes hold
//     the send time.
//
// # Messages
//
// In ModeData with Config.Messages (reliable or unreliable), Run sends
// messages (package message, docs/protocol.md §14) instead of Data: each
// connected client has a message.Endpoint from its worker's
// message.Layer, configured with the tools' channel layout
// (internal/msgcfg), and sends MessageRate messages a second over
// Messages packets, its endpoint's entries packed by WritePayload under
// the sequence number seqwin.SeqState gives the packet. The packet
// layer's acks and losses go to the endpoint, which resends; the server's
// echo application sends each message back on its channel, and the
// counters say how many came back, out of order or twice, with each
// echo's round trip from the message's first send (messages.go). Still
// no allocation per message.
//
// Config.BulkSize adds a bulk stream to every client, beside those
// messages or alone: BulkSize-byte reliable messages at BulkRate per
// client on the layout's bulk channel (msgcfg.Bulk), whose entries the
// endpoint packs after the other channels' and paces as it decides. Bulk
// messages carry the same header (first-send time and number), are
// numbered and counted apart (Counters.Bulk*, RunResult.BulkLatency and
// BulkGoodput), and one the bulk queue refuses is skipped and counted
// (BulkRefused), not retried. A client sends at most msgMaxBurst packets
// at a time, so a bulk backlog does not hold its worker; between polls,
// the acks that arrive let it send more.
//
// # Connecting, storms and restarts
//
// Connect runs each client's handshake with handshake.ClientHandshake, at
// most Window per socket at a time; Storm starts every client at once (a
// login storm). Both report how many connected, how fast, and why the others
// failed (Denied by reason, timed out, wrong version). In ModeData a
// connected client keeps its handshake and follows the server's
// RestartHandshake as docs/protocol.md §6 says; a restart that times out loses
// the connection. Counters say why clients ended (Counters.Endings): denied,
// timed out, closed by the server (by Disconnect reason), timed out by the
// server's silence (nothing accepted from it for the connection timeout:
// it is gone, or every Disconnect it sent was lost), restart failed.
//
// # Sealed mode
//
// With Config.PrivateKey (ModeData), the clients are sealed-mode clients
// (docs/protocol.md §11): the generator makes a netcode.io connect token
// per client with the server's key, each client proves it right after its
// Ack (resending the proof every ResendInterval) and is connected when the
// server's first sealed packet opens; from then on it seals every Data,
// KeepAlive and Disconnect and opens every answer, still without
// allocating per packet. Refused tokens are counted by the server's reason
// (Counters.RefusedExpired …), answers that do not open by why
// (SealedReplay, SealedForged).
//
// Only IPv4 loopback servers are accepted: the generator never sends
// anywhere else.
package loadgen
