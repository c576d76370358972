//go:build race

package ratelimit

import "sync/atomic"

// In race builds a FlowState's words are atomic (see FlowState).

func flowLoad(p *uint32) uint32     { return atomic.LoadUint32(p) }
func flowStore(p *uint32, v uint32) { atomic.StoreUint32(p, v) }
