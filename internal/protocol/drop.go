package protocol

// DropReason says why a datagram was dropped. Every drop on the server and the
// client is counted by reason, so the set is closed and small enough to index
// a fixed array of counters ([NumDropReasons]uint64) without a map.
type DropReason uint8

const (
	DropNone DropReason = iota
	// DropMalformed: empty datagram, last byte zero, or fields run past the
	// terminator (docs/protocol.md §1).
	DropMalformed
	// DropTooLarge: longer than the configured maximum datagram size (§7).
	DropTooLarge
	// DropBadMagic: the magic header does not match (§2).
	DropBadMagic
	// DropBadSize: the bits after the base are not body + 8..16 random bytes (§3),
	// or a connection packet is shorter than its header, or its terminator is
	// not the byte 0x01 (§7).
	DropBadSize
	// DropUnknownType: a handshake type outside 0..7.
	DropUnknownType
	// DropUnexpectedType: a type this side does not accept (server: 0, 2, 5;
	// client: 1, 3, 4, 6, 7), or a packet that makes no sense in the current
	// state.
	DropUnexpectedType
	// DropBadVersion: the handshake version window does not overlap (§3).
	DropBadVersion
	// DropNetworkVersion: NetworkVersion or NetworkFeatures differ and the
	// peer is too old for a VersionUpgrade reply (§3).
	DropNetworkVersion
	// DropBadBody: an Initial whose body is not all zero, a restart bit that
	// does not fit the type, a Challenge with Timestamp ≤ 0, an Ack with
	// Timestamp ≥ 0, a connection packet with an unknown kind or a payload
	// that does not fit its kind, a sequence number above 16383.
	DropBadBody
	// DropSessionMismatch: SessionID differs where it must match (§5).
	DropSessionMismatch
	// DropBadCookie: the recomputed cookie differs (§4 rule 3).
	DropBadCookie
	// DropExpiredCookie: the cookie is older than 40 s or from the future
	// (§4 rule 1).
	DropExpiredCookie
	// DropWrongSecret: SecretId and Timestamp disagree with the rotation
	// history (§4 rule 2): a cookie under a rotated-out secret.
	DropWrongSecret
	// DropRateLimited: a per-source or global reply budget is exhausted (§5).
	DropRateLimited
	// DropAmplification: even the smallest reply would be larger than the
	// request (§5 no-amplification rule).
	DropAmplification
	// DropRecentlyDisconnected: a connection packet from an address whose
	// connection closed in the last 120 s (§5).
	DropRecentlyDisconnected
	// DropUnknownConnection: a RestartResponse whose OrigCookie/ClientID
	// matches no connection, or a Response replayed after its connection
	// moved (§5).
	DropUnknownConnection
	// DropClientIDMismatch: a connection packet whose ClientID differs from
	// its connection's (§5).
	DropClientIDMismatch
	// DropBadTag: a connection packet whose session tag differs (§5, §7).
	DropBadTag
	// DropStaleSequence: a duplicate or a packet older than the 64-packet
	// window (§7).
	DropStaleSequence
	// DropOverload: shed by overload control before any protocol work.
	DropOverload
	// DropPromotionFull: the promotion pool refused the hand-off.
	DropPromotionFull
	// DropWrongClientID: a server packet for another ClientID (client side).
	DropWrongClientID
	// DropWrongCookie: an Ack or Denied whose cookie is not the one the client
	// answered with (client side).
	DropWrongCookie
	// DropReplayedCookie: a Response whose cookie already made a connection,
	// or is older than the newest cookie proven at its address: a replay.
	// The server remembers spent cookies for the cookie lifetime (§5).
	DropReplayedCookie
	// DropSuspectSequence: a connection packet whose sequence fields are not
	// believable: more than seqMaxJump ahead of the newest received and not
	// yet confirmed by a second packet, or an Ack that names a packet never
	// sent or goes back behind the newest packet's (a replay from 16384
	// packets earlier, or a forgery). See SeqState.Receive.
	DropSuspectSequence
	// DropRestartUnneeded: a RestartHandshake while the connection still
	// hears the server (client side; ClientConfig.RestartSilence).
	DropRestartUnneeded

	// Sealed mode (docs/protocol.md §11).

	// DropNotProof: a proof packet (ProofLen bytes with netcode's
	// version info) whose cookie part is not a Response's: a SecretId
	// other than 0 or 1, or a Cookie whose Tag is not the packet's.
	DropNotProof
	// DropTokenMalformed: a proof whose request body does not parse (its
	// size, version info or private part's fields).
	DropTokenMalformed
	// DropTokenProtocol: a token for another protocol id.
	DropTokenProtocol
	// DropTokenExpired: a token past its expire timestamp.
	DropTokenExpired
	// DropTokenInvalid: a token that does not open under the server's
	// private key (forged, modified, or made with another key).
	DropTokenInvalid
	// DropTokenForeignServer: a valid token that does not list this
	// server's public address.
	DropTokenForeignServer
	// DropProofForged: a proof whose inner seal does not authenticate under
	// its token's client-to-server key: whoever sent it does not hold the
	// token's keys (an observer replaying a request body).
	DropProofForged
	// DropTokenInUse: a valid proof with a token already proven from
	// another address.
	DropTokenInUse
	// DropLateProof: a proof repeated after its connection was proven.
	DropLateProof
	// DropSealedReplay: a sealed packet whose counter was received already
	// or is older than the replay window.
	DropSealedReplay
	// DropSealedForged: a sealed packet that does not authenticate under
	// its connection's key: forged, modified, sealed for another connection,
	// or not sealed at all.
	DropSealedForged
	// DropMessageRefused: a Messages packet the message layer refused
	// before the sequence window accepted it (malformed entries, or over a
	// receive budget: docs/protocol.md §14); the message layer counts the
	// precise reason. The packet is not acknowledged, so a sender resends
	// its reliable messages.
	DropMessageRefused
	// DropSealedHeld (sealed mode): a handshake packet that would replace
	// or close a proven sealed connection at its address (a Response with
	// another ClientID), or a valid proof from that address for another
	// token client id: only a proof of the same client id or a sealed
	// packet touches one.
	DropSealedHeld
	// DropTokenRequired (sealed mode): a connection packet in clear from
	// an address no connection holds: a client without a token. It is
	// answered, statelessly, with a Disconnect in clear, reason 11, when
	// it is no Disconnect and at least as long as the answer, within the
	// source's RestartHandshake budget.
	DropTokenRequired
	// DropProofLimited (sealed mode): a proof over its source's proof
	// budget, or the same proof (inner Poly1305 tag) seen again by this
	// receive loop: shed before any token is opened.
	DropProofLimited
	// DropInboundLimited (server): a packet from a proven connection's
	// address beyond that connection's inbound budget of packets and bytes
	// per second, dropped right after the address lookup, before any
	// parsing, decryption or counting.
	DropInboundLimited

	NumDropReasons
)

var dropNames = [NumDropReasons]string{
	DropNone:                 "none",
	DropMalformed:            "malformed",
	DropTooLarge:             "too_large",
	DropBadMagic:             "bad_magic",
	DropBadSize:              "bad_size",
	DropUnknownType:          "unknown_type",
	DropUnexpectedType:       "unexpected_type",
	DropBadVersion:           "bad_version",
	DropNetworkVersion:       "network_version",
	DropBadBody:              "bad_body",
	DropSessionMismatch:      "session_mismatch",
	DropBadCookie:            "bad_cookie",
	DropExpiredCookie:        "expired_cookie",
	DropWrongSecret:          "wrong_secret",
	DropRateLimited:          "rate_limited",
	DropAmplification:        "amplification",
	DropRecentlyDisconnected: "recently_disconnected",
	DropUnknownConnection:    "unknown_connection",
	DropClientIDMismatch:     "client_id_mismatch",
	DropBadTag:               "bad_tag",
	DropStaleSequence:        "stale_sequence",
	DropOverload:             "overload",
	DropPromotionFull:        "promotion_full",
	DropWrongClientID:        "wrong_client_id",
	DropWrongCookie:          "wrong_cookie",
	DropReplayedCookie:       "replayed_cookie",
	DropSuspectSequence:      "suspect_sequence",
	DropRestartUnneeded:      "restart_unneeded",
	DropNotProof:             "not_proof",
	DropTokenMalformed:       "token_malformed",
	DropTokenProtocol:        "token_wrong_protocol",
	DropTokenExpired:         "token_expired",
	DropTokenInvalid:         "token_invalid",
	DropTokenForeignServer:   "token_foreign_server",
	DropProofForged:          "proof_forged",
	DropTokenInUse:           "token_in_use",
	DropLateProof:            "late_proof",
	DropSealedReplay:         "sealed_replay",
	DropSealedForged:         "sealed_forged",
	DropMessageRefused:       "message_refused",
	DropSealedHeld:           "sealed_held",
	DropTokenRequired:        "token_required",
	DropProofLimited:         "proof_limited",
	DropInboundLimited:       "inbound_limited",
}

// String returns the reason's metric label (snake_case, stable).
func (r DropReason) String() string {
	if r < NumDropReasons {
		return dropNames[r]
	}
	return "unknown"
}
