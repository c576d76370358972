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
//     delay passes half the target (or a round loses heavily).
//   - Then, on every acknowledged packet, the window moves by the
//     distance from the target: below it, up by at most one packet per
//     round trip, in proportion to the room left; above it, down by up to
//     half a window per round trip, in proportion to the excess. Several
//     connections through one bottleneck see the same queue, so they
//     increase together and decrease in proportion to their windows:
//     additive increase, multiplicative decrease, which converges to equal
//     shares.
//   - A loss is congestion only when the queue is above the target (a
//     drop-tail queue overflowing) or when more than a fifth of a round's
//     packets are lost; other losses are the path's noise (radio, a
//     policer) and do not shrink the window. A loss-based controller
//     (Reno, CUBIC) collapses on 5 % random loss; this one does not.
//
// The queueing delay is the standing round trip (the smallest sample of
// the last half round trip, which filters out the peer's ack delay and
// a burst's own queue) less the path's base round trip (the smallest
// sample of the last minute or two).
//
// # The pacer
//
// Packets leave at PacingRate: 2 × window ÷ RTT in slow start, 1.25 ×
// window ÷ RTT after, never above a ceiling the operator sets. The pacer
// is a token bucket whose depth is a few milliseconds of the rate (at
// least two packets), the granularity of the sender's timer, so a window
// never leaves in one burst.
//
// docs/decisions.md, "Congestion control", says why this design and not
// BBR, Copa, LEDBAT or a loss-based one.
package congestion
