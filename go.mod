module github.com/udpgate/udpgate

go 1.26.0

require (
	github.com/cespare/xxhash/v2 v2.3.0
	github.com/panjf2000/ants/v2 v2.12.1
	golang.org/x/net v0.62.0
	golang.org/x/sys v0.49.0
)

require golang.org/x/sync v0.11.0 // indirect
