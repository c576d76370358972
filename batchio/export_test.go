package batchio

// Test hooks: accessors the tests use that no user of the package needs.

// Mode returns the socket's effective receive mode.
func (s *Socket) Mode() Mode { return s.mode }

// Warnings returns the problems Listen worked around, such as a socket
// buffer capped by a sysctl, each with the fix.
func (g *Group) Warnings() []string { return g.warnings }

// Len returns the number of messages in the batch.
func (b *Batch) Len() int { return len(b.Msgs) }

// MessageSize returns the size of each slot in bytes.
func (b *Batch) MessageSize() int { return b.msgSize }
