package main

import (
	"time"

	"github.com/udpgate/udpgate/internal/traffic/loadgen"
)

// loadReport is load's -json output: the settings, each phase's results,
// how clients ended, and the verdict. Durations are in seconds.
type loadReport struct {
	Server          string  `json:"server"`
	Clients         int     `json:"clients"`
	Sources         int     `json:"sources"`
	Sockets         int     `json:"sockets"`
	Rate            float64 `json:"rate_per_client"` // 0: closed loop
	PayloadBytes    int     `json:"payload_bytes"`
	DurationSeconds float64 `json:"duration_seconds"`
	Sealed          bool    `json:"sealed"`
	// Messages: "reliable" or "unreliable" when the clients sent messages
	// instead of Data (absent otherwise), with their size and rate.
	Messages     string  `json:"messages,omitempty"`
	MessageBytes int     `json:"message_bytes,omitempty"`
	MessageRate  float64 `json:"message_rate_per_client,omitempty"`
	// BulkBytes and BulkRate: -bulk-size and -bulk-rate, when the clients
	// sent a bulk stream (absent otherwise). MessageMaxBytes: the largest
	// reliable message (-message-max-size) with messages or bulk.
	BulkBytes       int     `json:"bulk_bytes,omitempty"`
	BulkRate        float64 `json:"bulk_rate_per_client,omitempty"`
	MessageMaxBytes int     `json:"message_max_bytes,omitempty"`

	Connect           loadConnectJSON `json:"connect"`
	Run               *loadRunJSON    `json:"run,omitempty"` // absent when no client connected
	DisconnectPackets int             `json:"disconnect_packets"`

	// Ended counts clients that ended other than by this command's own
	// Disconnect; Endings says how, by cause.
	Ended   uint64           `json:"ended"`
	Endings []loadEndingJSON `json:"endings"`

	// OK is the exit status 0; Error says why not.
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
}

type loadEndingJSON struct {
	What  string `json:"what"`
	Count uint64 `json:"count"`
}

type loadQuantilesJSON struct {
	N    uint64  `json:"n"`
	P50  float64 `json:"p50_seconds"`
	P90  float64 `json:"p90_seconds"`
	P99  float64 `json:"p99_seconds"`
	P999 float64 `json:"p999_seconds"`
	Max  float64 `json:"max_seconds"`
}

func newLoadQuantilesJSON(q loadgen.Quantiles) loadQuantilesJSON {
	return loadQuantilesJSON{N: q.N, P50: q.P50.Seconds(), P90: q.P90.Seconds(), P99: q.P99.Seconds(),
		P999: q.P999.Seconds(), Max: q.Max.Seconds()}
}

type loadConnectJSON struct {
	Clients        int               `json:"clients"`
	Connected      int               `json:"connected"`
	Failed         int               `json:"failed"`
	DeniedFull     int               `json:"denied_server_full"`
	DeniedRefused  int               `json:"denied_refused"`
	DeniedOther    int               `json:"denied_other"`
	TimedOut       int               `json:"timed_out"`
	WrongVersion   int               `json:"wrong_version"`
	WrongLayout    int               `json:"wrong_layout"`
	Resent         int               `json:"resent"`
	ElapsedSeconds float64           `json:"elapsed_seconds"`
	PerSecond      float64           `json:"per_second"`
	Packets        uint64            `json:"packets"`
	Latency        loadQuantilesJSON `json:"latency"`
}

func newLoadConnectJSON(r *loadgen.ConnectResult) loadConnectJSON {
	return loadConnectJSON{
		Clients: r.Clients, Connected: r.Connected, Failed: r.Failed,
		DeniedFull: r.DeniedFull, DeniedRefused: r.DeniedRefused, DeniedOther: r.DeniedOther,
		TimedOut: r.TimedOut, WrongVersion: r.WrongVersion, WrongLayout: r.WrongLayout, Resent: r.Resent,
		ElapsedSeconds: r.Elapsed.Seconds(), PerSecond: r.PerSecond(), Packets: r.Packets,
		Latency: newLoadQuantilesJSON(r.Latency),
	}
}

type loadRunJSON struct {
	ElapsedSeconds float64 `json:"elapsed_seconds"`
	// StoppedEarly: every client was gone before -duration.
	StoppedEarly   bool              `json:"stopped_early"`
	Sent           uint64            `json:"sent"`
	RoundTrips     uint64            `json:"round_trips"`
	PerSecond      float64           `json:"round_trips_per_second"`
	Lost           uint64            `json:"lost"`
	Late           uint64            `json:"late"`
	Unanswered     int               `json:"unanswered"`
	ServerSeqLost  uint64            `json:"server_reported_lost"`
	Unexpected     uint64            `json:"unexpected"`
	KeepAlivesSent uint64            `json:"keepalives_sent"`
	KeepAlivesRecv uint64            `json:"keepalives_received"`
	Closed         uint64            `json:"closed_by_server"`
	Latency        loadQuantilesJSON `json:"latency"`
	// Messages, with -messages only (the fields are left out otherwise).
	*loadMessagesJSON
	// Bulk messages, with -bulk-size only (likewise).
	*loadBulkJSON
}

// loadMessagesJSON is a message run's part of the run object: totals of
// the whole run, the drain's echoes included; round trips in
// milliseconds, from each message's first send.
type loadMessagesJSON struct {
	Sent       uint64  `json:"messages_sent"`
	Delivered  uint64  `json:"messages_delivered"`
	OutOfOrder uint64  `json:"messages_out_of_order"`
	Duplicated uint64  `json:"messages_duplicated"`
	Unanswered int     `json:"messages_unanswered"`
	Refused    uint64  `json:"messages_refused"`
	Resent     uint64  `json:"messages_resent"`
	Copies     uint64  `json:"messages_copied"`
	Dropped    uint64  `json:"messages_dropped"`
	Packets    uint64  `json:"message_packets"`
	Stalled    uint64  `json:"messages_stalled"`
	RTTP50     float64 `json:"message_rtt_p50_ms"`
	RTTP99     float64 `json:"message_rtt_p99_ms"`
	RTTMax     float64 `json:"message_rtt_max_ms"`
}

// loadBulkJSON is a bulk stream's part of the run object, counted apart
// from the other messages: totals of the whole run, the drain's echoes
// included; the goodput is the bulk payload bytes echoed per second of
// the whole run, drain included (a bulk echo may take longer than
// -duration); round trips in milliseconds, from each bulk message's first
// send to its echo's last byte. Refused: bulk messages skipped because the client's bulk queue was
// full. Resends, packets and stalls are counted with the other messages'
// (messages_resent, message_packets, messages_stalled; those fields are
// there with bulk alone too).
type loadBulkJSON struct {
	Sent           uint64    `json:"bulk_sent"`
	Delivered      uint64    `json:"bulk_delivered"`
	DeliveredBytes uint64    `json:"bulk_delivered_bytes"`
	OutOfOrder     uint64    `json:"bulk_out_of_order"`
	Duplicated     uint64    `json:"bulk_duplicated"`
	Unanswered     int       `json:"bulk_unanswered"`
	Refused        uint64    `json:"bulk_refused"`
	Goodput        float64   `json:"bulk_goodput_bytes_per_second"`
	PerClient      [3]uint64 `json:"bulk_delivered_per_client_min_median_max"`
	RTTP50         float64   `json:"bulk_rtt_p50_ms"`
	RTTP99         float64   `json:"bulk_rtt_p99_ms"`
	RTTMax         float64   `json:"bulk_rtt_max_ms"`
}

func newLoadRunJSON(r *loadgen.RunResult, cfg *loadgen.Config) *loadRunJSON {
	c := r.Window
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	var m *loadMessagesJSON
	if cfg.Messages != loadgen.MessagesOff || cfg.BulkSize > 0 {
		t, q := r.Total, r.MessageLatency
		m = &loadMessagesJSON{
			Sent: t.MessagesSent, Delivered: t.MessagesDelivered, OutOfOrder: t.MessagesOutOfOrder,
			Duplicated: t.MessagesDuplicated, Unanswered: r.MessagesUnanswered, Refused: t.MessagesRefused,
			Resent: r.MessagesResent, Copies: r.MessagesCopies, Dropped: t.MessagesDropped, Packets: t.MessagePackets, Stalled: t.MessagesStalled,
			RTTP50: ms(q.P50), RTTP99: ms(q.P99), RTTMax: ms(q.Max),
		}
	}
	var b *loadBulkJSON
	if cfg.BulkSize > 0 {
		t, q := r.Total, r.BulkLatency
		b = &loadBulkJSON{
			Sent: t.BulkSent, Delivered: t.BulkDelivered, DeliveredBytes: t.BulkBytes, OutOfOrder: t.BulkOutOfOrder,
			Duplicated: t.BulkDuplicated, Unanswered: r.BulkUnanswered, Refused: t.BulkRefused, Goodput: r.BulkGoodput(),
			PerClient: r.BulkPerClient,
			RTTP50:    ms(q.P50), RTTP99: ms(q.P99), RTTMax: ms(q.Max),
		}
	}
	return &loadRunJSON{
		ElapsedSeconds: r.Elapsed.Seconds(), Sent: c.Sent, RoundTrips: c.Replies, PerSecond: r.PerSecond(),
		Lost: c.Lost, Late: c.Late, Unanswered: r.Unanswered, ServerSeqLost: c.SeqLost, Unexpected: c.Unexpected,
		KeepAlivesSent: c.KeepAlivesOut, KeepAlivesRecv: c.KeepAlivesIn, Closed: r.Total.Closed,
		Latency:          newLoadQuantilesJSON(r.Latency),
		loadMessagesJSON: m,
		loadBulkJSON:     b,
	}
}
