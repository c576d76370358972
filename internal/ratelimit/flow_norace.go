//go:build !race

package ratelimit

// A FlowState's words are plain (see FlowState).

func flowLoad(p *uint32) uint32     { return *p }
func flowStore(p *uint32, v uint32) { *p = v }
