// Package congestion finds how fast a connection's path is and keeps the
// queue at its narrowest hop short: a delay-target window controller with
// a pacer, in the shape of quic-go's internal/congestion (the sender tells
// it of sends, acks and losses; it answers with a window and a pacing
// rate). It does no I/O and reads no clock: every time is Unix
// nanoseconds passed in, as package message keeps them.
//
// # The controller
//
// The window grows until the path starts queueing, then holds the queue
// near a target delay (TargetDelay) instead of filling it:
//
//   - Slow start doubles the window each round trip until the queueing
//     delay passes half the target (or 4 acks in a row half of it
//     above the base, each ack judged by its newest packet's sample, an
//     ack of fewer than four packets allowed the peer's AckDelay);
//     the window then falls back to what the path delivered (the delay
//     that shows a queue is a round trip old). The acks of a flight's
//     tail still grow it, up to twice the most in flight in the round,
//     so that the next flight (a second large message) finds it.
//   - Below the target, each acknowledged packet grows the window by up
//     to a velocity of packets a round trip (halved in the upper half of
//     the target; doubled after three rounds of growth, up to 16 and an
//     eighth of the window; below eight packets an eighth of the window,
//     and below four only on an ack whose sample is within the target of
//     the standing round trip). Above it, once a round trip and once the
//     standing delay holds samples taken after the last cut, the window
//     is cut in proportion to the excess: at least 1/8, at most half.
//     Connections through one bottleneck see the same queue: they grow
//     alike and cut the same fraction, which converges to equal shares.
//   - The window may fall below MinWindow packets, to an eighth of a
//     packet: MinWindow then bounds only what is in flight, and the
//     pacing rate follows the window, below two packets a round trip.
//     Many connections through a slow link need that (ten through 2
//     Mbit/s: about one packet each a 50 ms round trip). When the queue
//     stays above the target for a second all the same, the floor goes
//     back to MinWindow: the queue is another flow's.
//   - A loss is congestion only when the queue is far above the target
//     (twice it: a drop-tail queue overflowing) or when more than a
//     quarter of at least 16 reported packets were lost; other losses are
//     the path's noise (radio, a policer) and do not shrink the window. A
//     loss-based controller (Reno, CUBIC) collapses on 5 % random loss;
//     this one does not. A cut for loss is undone when every loss of its
//     event is acknowledged after all (OnLateAck).
//   - Four rounds in a row far above the target (3 ×), cutting each
//     time, the queue not falling, mean another flow fills the queue (a
//     loss-based TCP or QUIC flow), unless none of this connection's
//     packets was lost meanwhile: then the queue is as likely connections
//     of ours that started into one another's queue and hold it on bases
//     too high, and the connection first drains in the next whole-second
//     slot, where theirs drain too (below), and goes on counting after it.
//     The controller then competes, loss-based as that flow is:
//     a slow start from the window it had before it yielded until the
//     first loss, then 2 packets a round trip and 0.7 of the window at a
//     loss (AIMD(2, 0.7), CUBIC's β), until the queue is seen near empty
//     again (four rounds under half the target, or a drain). Competing
//     connections drain when the Unix time crosses a multiple of 10 s,
//     all of a host's at once, so that two of ours left competing with
//     each other both see the queue empty; for 30 s after it stopped
//     competing a connection competes again once the queue stays above
//     the target (not three targets) through four cuts, without that
//     first drain. A connection that stops competing in a drain climbs
//     back to the window it last held at the target, not to the one
//     competing built.
//   - The base round trip is the smallest sample of the last 30–60 s. A
//     connection with no sample near it for 10 s drains (half its window,
//     at most two packets, for two round trips), so that a late one, which
//     took the queue it found for the path, sees the base again. Its first
//     drain comes when the Unix time crosses a whole second at least two
//     round trips after its first slow start ended, whatever its samples,
//     so that connections started near one another drain together and a
//     latecomer sees the path's base within a second or two (LEDBAT++'s
//     initial slowdown, on a clock they share); until then a queue three
//     targets deep does not count toward competing.
//
// The queueing delay is the standing round trip (the smallest sample of
// the last half round trip, at least four samples, which filters out the
// peer's ack delay and a burst's own queue) less the base round trip.
//
// # The pacer
//
// Packets leave at PacingRate: 1.5 × window ÷ RTT in slow start, 1.25 ×
// window ÷ RTT after (the RTT at least the standing one; the window the
// controller's, which may be below MinWindow; while a drain runs half of
// it, at most MinWindow), never above a ceiling the operator sets. The pacer
// is a token bucket whose depth is 5 ms of the rate (Quantum, at least two
// packets), the granularity of the sender's timer, so a window never
// leaves in one burst.
//
// docs/decisions.md, "Congestion control", says why this design and not
// BBR, Copa, LEDBAT or a loss-based one.
package congestion
