package shard_test

import (
	"fmt"
	"net/netip"

	"github.com/udpgate/udpgate/shard"
)

// A server keeps its connections in a Map: found by the address a datagram
// comes from, and by the cookie a client proves itself with when its address
// changes.
func ExampleMap() {
	type conn struct{ id int }
	m := shard.NewMap[conn](0) // 0: DefaultShards

	home := netip.MustParseAddrPort("192.0.2.1:7777")
	cookie := [20]byte{1, 2, 3}
	m.Insert(home, cookie, &conn{id: 1})

	// The client's NAT gives it a new port; its cookie proves who it is.
	moved := netip.MustParseAddrPort("192.0.2.1:40000")
	if c, from, _, ok := m.Move(&cookie, moved); ok {
		fmt.Println("moved", c.id, "from", from)
	}
	_, atHome := m.Get(home)
	c, _ := m.Get(moved)
	fmt.Println("at home:", atHome, "at", moved, "->", c.id)

	// Housekeeping sweeps one shard at a time and deletes as it goes.
	for i := range m.NumShards() {
		m.RangeShard(i, func(a netip.AddrPort, c *conn) shard.Action {
			fmt.Println("timed out", c.id, "at", a)
			return shard.Remove
		})
	}
	_, _, ok := m.GetByCookie(&cookie)
	fmt.Println("cookie still known:", ok)
	// Output:
	// moved 1 from 192.0.2.1:7777
	// at home: false at 192.0.2.1:40000 -> 1
	// timed out 1 at 192.0.2.1:40000
	// cookie still known: false
}

// HashAddr places addresses in a fixed table of one's own, here a table
// of counters per address, as the maps place them.
func ExampleHashAddr() {
	const seed = 0x9e3779b97f4a7c15 // draw it from crypto/rand in a server
	var hits [1024]uint32
	v4 := netip.MustParseAddrPort("192.0.2.1:7777")
	mapped := netip.MustParseAddrPort("[::ffff:192.0.2.1]:7777")
	hits[shard.HashAddr(seed, v4)%1024]++
	hits[shard.HashAddr(seed, mapped)%1024]++
	// An IPv4 address and its IPv4-mapped form share a slot.
	fmt.Println(hits[shard.HashAddr(seed, v4)%1024])
	// Output: 2
}
