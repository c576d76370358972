package deps

import (
	_ "github.com/cespare/xxhash/v2"
	_ "github.com/panjf2000/ants/v2"
	_ "golang.org/x/net/ipv4"
	_ "golang.org/x/net/ipv6"
	_ "golang.org/x/sys/unix"
)
