//go:build !race

package ratelimit

// A FlowState's words are plain (see FlowState).

func flowLoad(p *int64) int64     { return *p }
func flowStore(p *int64, v int64) { *p = v }
