//go:build race

package ratelimit

import "sync/atomic"

// In race builds a FlowState's words are atomic (see FlowState).

func flowLoad(p *int64) int64     { return atomic.LoadInt64(p) }
func flowStore(p *int64, v int64) { atomic.StoreInt64(p, v) }
