package batchio

import (
	"fmt"

	"golang.org/x/net/bpf"
)

// Steer sorts a group's datagrams between two disjoint sets of its sockets
// by one bit of their payload, in the kernel, before they are queued. With
// the bit udpgate's handshake packets set and its connection packets clear
// (docs/protocol.md §2: HandshakeBit), a flood of handshake packets fills only
// the queues of the sockets for set bits, and a connected peer's datagrams
// never wait, or get dropped, behind it.
//
// Within each set, every datagram of one source (address and port) goes to
// the same socket, as without steering, so per-source state kept by a
// socket's loop stays whole.
//
// Linux only, through a classic BPF program on the SO_REUSEPORT group
// (SO_ATTACH_REUSEPORT_CBPF, Linux 4.5). Where the kernel refuses it, the
// Group runs unsteered with Config.Sockets sockets and says so to
// Config.Logger; Group.Steered and Socket.Class tell which happened.
type Steer struct {
	// Enabled turns steering on.
	Enabled bool

	// Bit is the payload bit that sorts a datagram, counted from the
	// first bit of the UDP payload in the order of docs/protocol.md §1: bit n
	// is in byte n/8 under mask 1<<(n%8). udpgate's HandshakeBit is bit
	// M+5, M being the length of the magic header in bits. At most
	// 65507*8 − 1, the last bit of the largest UDP payload over IPv4.
	Bit int

	// SetSockets is the number of sockets for datagrams whose bit is 1,
	// and for datagrams too short to hold the bit: for udpgate those are
	// malformed, and they belong with the flood rather than with
	// connected peers. ClearSockets is the number for datagrams whose bit
	// is 0. 0 means Config.Sockets; each is capped at MaxSockets/2, so
	// the group stays within MaxSockets.
	SetSockets   int
	ClearSockets int

	// SetRecvBuffer, if not 0, is the receive buffer of the sockets for
	// set bits instead of Config.RecvBuffer. udpgate's handshake sockets
	// take a login storm's burst all at once, while its connection
	// sockets see a steady flow: the first want the deeper queue.
	SetRecvBuffer int

	// Spread, if set, starts the group spreading bit-clear datagrams over
	// every socket, the bit-set sockets included; bit-set datagrams keep
	// to the bit-set sockets either way. Group.SetSpread switches between
	// the two while the group runs. udpgate spreads its connection packets
	// over every loop while no handshake flood backs up the handshake
	// sockets, and keeps them apart while one does.
	Spread bool

	// Match, if its Len is not 0, also sends to the bit-set sockets the
	// datagrams that match it, whatever their bit. udpgate's sealed mode
	// uses it for proofs (docs/protocol.md §11.3): connection packets by
	// their bit, but each opens a token, so a flood of them belongs with
	// the handshakes, not ahead of connected peers.
	Match SteerMatch
}

// SteerMatch picks datagrams by length and one 32-bit word of payload: a
// datagram of exactly Len bytes whose four bytes at Off, read big-endian
// (network order), equal Word.
type SteerMatch struct {
	Len  int
	Off  int
	Word uint32
}

// maxSteerBit is the largest Steer.Bit: the last bit of the largest UDP
// payload over IPv4 (65507 bytes).
const maxSteerBit = 65507*8 - 1

// Class is which datagrams a socket of a Group receives.
type Class uint8

const (
	// ClassAll: any datagram the kernel's hash of its source hands the
	// socket; the group is not steered.
	ClassAll Class = iota
	// ClassBitSet: datagrams whose Steer.Bit is 1, or that are too short
	// to hold it (udpgate: handshake packets and malformed ones), and,
	// while the group spreads (Group.Spreading), bit-clear datagrams too.
	ClassBitSet
	// ClassBitClear: only datagrams whose Steer.Bit is 0 (udpgate:
	// connection packets).
	ClassBitClear
)

// String returns the class's name as used in logs.
func (c Class) String() string {
	return enumName([]string{ClassAll: "all", ClassBitSet: "bit-set", ClassBitClear: "bit-clear"}, "Class", uint8(c))
}

// steerWarning is the warning of a group that could not be steered.
func steerWarning(bit int, err error, sockets int) string {
	return fmt.Sprintf("cannot steer datagrams by payload bit %d (%v): the group runs unsteered, its %d sockets taking every kind of datagram, "+
		"so a flood of one kind can fill the queues the other kind needs; steering needs Linux 4.5 or later and, under seccomp, "+
		"a policy that allows setsockopt SO_ATTACH_REUSEPORT_CBPF; turn steering off to run unsteered without this warning",
		bit, err, sockets)
}

// steerCounts returns the number of sockets of each class for cfg, which
// has Sockets normalized.
func steerCounts(cfg Config) (set, clear int) {
	set, clear = cfg.Steer.SetSockets, cfg.Steer.ClearSockets
	if set <= 0 {
		set = cfg.Sockets
	}
	if clear <= 0 {
		clear = cfg.Sockets
	}
	return min(set, MaxSockets/2), min(clear, MaxSockets/2)
}

// The steering program. The kernel runs it for every datagram that reaches
// the group, with the UDP header already pulled: offset 0 is the first
// byte of the payload and the length (ExtLen) is the payload's. Its return
// value is the index of the socket, in the order the sockets joined the
// group (the order of Group.Sockets); an index past the last socket makes
// the kernel fall back to its own hash over every socket, mixing the
// classes, so every path returns a valid index. A load beyond the data
// aborts the program with 0; the length test keeps the payload load from
// aborting, and index 0 is a bit-set socket in any case.
//
// The source's hash. Within its class a datagram goes to socket hash mod
// n. The hash must be the same for every datagram of one source address
// and port. The kernel's receive hash (ExtRXHash) is not: on loopback it is
// the sending socket's random transmit hash, which differs for two sockets
// bound one after the other to the same port (verified on Linux 6.18), and
// from a NIC it is whatever the NIC's RSS computes, for UDP often the
// addresses alone, or nothing. So the program hashes the source itself,
// from the network header (SKF_NET_OFF loads): the IPv4 or IPv6 source
// address word by word, then the UDP source port, each mixed in by
// h = (h ^ w) * golden; h ^= h >> 15, and a final avalanche. The UDP
// header sits just before the payload; its offset from the network header
// is the IP length minus the payload length minus 8 (IPv4: total length −
// len − 8; IPv6: 40 + payload length − len − 8), which also steps over
// IPv4 options and IPv6 extension headers. seed, drawn per group, keeps
// the mapping from being known in advance. Steering is no defense against
// a flood of bit-clear datagrams, which still reach the bit-clear sockets;
// it only keeps the two classes apart.

const (
	skfNetOff  = 0xfff00000 // SKF_NET_OFF (-0x100000) as the uint32 of a load's offset
	hashMul    = 0x9e3779b1 // 2^32 / golden ratio, odd
	hashFinMul = 0x85ebca6b // murmur3's fmix32 constant
)

// steerProgram returns the program for the given bit and socket counts.
// Sockets 0..set-1 take the bit-set class, set..set+clear-1 the bit-clear
// class.
func steerProgram(bit, set, clear int, seed uint32) ([]bpf.RawInstruction, error) {
	return steerProgramMatch(bit, set, clear, false, seed, SteerMatch{})
}

// steerProgramMatch is steerProgram with m (Steer.Match) sending its
// datagrams to the bit-set sockets too and, if spread, the bit-clear class
// going to all set+clear sockets (Steer.Spread).
func steerProgramMatch(bit, set, clear int, spread bool, seed uint32, m SteerMatch) ([]bpf.RawInstruction, error) {
	var a bpfAsm
	// mix finishes mixing a word into the hash: A holds h ^ w; it leaves
	// (h ^ w) * hashMul, folded by its own upper bits.
	mix := func() {
		a.op(bpf.ALUOpConstant{Op: bpf.ALUOpMul, Val: hashMul})
		a.op(bpf.TAX{})
		a.op(bpf.ALUOpConstant{Op: bpf.ALUOpShiftRight, Val: 15})
		a.op(bpf.ALUOpX{Op: bpf.ALUOpXor})
	}
	// word loads a 32-bit word of the network header and mixes it into
	// the hash kept in scratch 0.
	word := func(off uint32) {
		a.op(bpf.LoadAbsolute{Off: skfNetOff + off, Size: 4})
		a.op(bpf.LoadScratch{Dst: bpf.RegX, N: 0})
		a.op(bpf.ALUOpX{Op: bpf.ALUOpXor})
		mix()
		a.op(bpf.StoreScratch{Src: bpf.RegA, N: 0})
	}

	// IP version.
	a.op(bpf.LoadAbsolute{Off: skfNetOff, Size: 1})
	a.op(bpf.ALUOpConstant{Op: bpf.ALUOpShiftRight, Val: 4})
	a.jumpIf(bpf.JumpEqual, 6, "v6", "")

	// IPv4 (also the peers of a dual-stack socket): the source address,
	// then X = offset of the UDP header.
	a.op(bpf.LoadConstant{Dst: bpf.RegA, Val: seed})
	a.op(bpf.StoreScratch{Src: bpf.RegA, N: 0})
	word(12)
	a.op(bpf.LoadExtension{Num: bpf.ExtLen})
	a.op(bpf.TAX{})
	a.op(bpf.LoadAbsolute{Off: skfNetOff + 2, Size: 2}) // total length
	a.op(bpf.ALUOpX{Op: bpf.ALUOpSub})
	a.op(bpf.ALUOpConstant{Op: bpf.ALUOpSub, Val: 8})
	a.op(bpf.TAX{})
	a.jump("port")

	// IPv6: the source address, then X = offset of the UDP header.
	a.label("v6")
	a.op(bpf.LoadConstant{Dst: bpf.RegA, Val: seed})
	a.op(bpf.StoreScratch{Src: bpf.RegA, N: 0})
	for off := uint32(8); off < 24; off += 4 {
		word(off)
	}
	a.op(bpf.LoadExtension{Num: bpf.ExtLen})
	a.op(bpf.TAX{})
	a.op(bpf.LoadAbsolute{Off: skfNetOff + 4, Size: 2}) // payload length
	a.op(bpf.ALUOpConstant{Op: bpf.ALUOpAdd, Val: 40 - 8})
	a.op(bpf.ALUOpX{Op: bpf.ALUOpSub})
	a.op(bpf.TAX{})

	// The UDP source port, then the final avalanche.
	a.label("port")
	a.op(bpf.LoadIndirect{Off: skfNetOff, Size: 2})
	a.op(bpf.LoadScratch{Dst: bpf.RegX, N: 0})
	a.op(bpf.ALUOpX{Op: bpf.ALUOpXor})
	mix()
	a.op(bpf.TAX{})
	a.op(bpf.ALUOpConstant{Op: bpf.ALUOpShiftRight, Val: 16})
	a.op(bpf.ALUOpX{Op: bpf.ALUOpXor})
	a.op(bpf.ALUOpConstant{Op: bpf.ALUOpMul, Val: hashFinMul})
	a.op(bpf.TAX{})
	a.op(bpf.ALUOpConstant{Op: bpf.ALUOpShiftRight, Val: 13})
	a.op(bpf.ALUOpX{Op: bpf.ALUOpXor})
	a.op(bpf.StoreScratch{Src: bpf.RegA, N: 0})

	// The class: too short for the bit, or the bit set, goes to the
	// bit-set sockets.
	a.op(bpf.LoadExtension{Num: bpf.ExtLen})
	a.jumpIf(bpf.JumpGreaterOrEqual, uint32(bit/8+1), "", "set")
	if m.Len > 0 && m.Off >= 0 && m.Off+4 <= m.Len {
		// A matching datagram is set, whatever its bit. A holds the
		// length; the word is within it.
		a.jumpIf(bpf.JumpEqual, uint32(m.Len), "", "bit")
		a.op(bpf.LoadAbsolute{Off: uint32(m.Off), Size: 4})
		a.jumpIf(bpf.JumpEqual, m.Word, "set", "")
		a.label("bit")
	}
	a.op(bpf.LoadAbsolute{Off: uint32(bit / 8), Size: 1})
	a.jumpIf(bpf.JumpBitsSet, 1<<(bit%8), "set", "")
	a.op(bpf.LoadScratch{Dst: bpf.RegA, N: 0})
	if spread {
		a.op(bpf.ALUOpConstant{Op: bpf.ALUOpMod, Val: uint32(set + clear)})
	} else {
		a.op(bpf.ALUOpConstant{Op: bpf.ALUOpMod, Val: uint32(clear)})
		a.op(bpf.ALUOpConstant{Op: bpf.ALUOpAdd, Val: uint32(set)})
	}
	a.op(bpf.RetA{})
	a.label("set")
	a.op(bpf.LoadScratch{Dst: bpf.RegA, N: 0})
	a.op(bpf.ALUOpConstant{Op: bpf.ALUOpMod, Val: uint32(set)})
	a.op(bpf.RetA{})
	return a.assemble()
}

// bpfAsm assembles a classic BPF program with named jump targets, so the
// program above reads without hand-counted skips.
type bpfAsm struct {
	insts  []bpf.Instruction
	labels map[string]int
	fixups []bpfFixup
}

// bpfFixup is a jump whose targets are resolved by assemble. An empty
// label is the next instruction.
type bpfFixup struct {
	at              int
	ifTrue, ifFalse string
	conditional     bool
	cond            bpf.JumpTest
	val             uint32
}

func (a *bpfAsm) op(i bpf.Instruction) { a.insts = append(a.insts, i) }

func (a *bpfAsm) label(name string) {
	if a.labels == nil {
		a.labels = make(map[string]int)
	}
	a.labels[name] = len(a.insts)
}

func (a *bpfAsm) jumpIf(cond bpf.JumpTest, val uint32, ifTrue, ifFalse string) {
	a.fixups = append(a.fixups, bpfFixup{at: len(a.insts), ifTrue: ifTrue, ifFalse: ifFalse, conditional: true, cond: cond, val: val})
	a.insts = append(a.insts, nil)
}

func (a *bpfAsm) jump(to string) {
	a.fixups = append(a.fixups, bpfFixup{at: len(a.insts), ifTrue: to})
	a.insts = append(a.insts, nil)
}

func (a *bpfAsm) assemble() ([]bpf.RawInstruction, error) {
	skip := func(from int, label string) (int, error) {
		if label == "" {
			return 0, nil
		}
		to, ok := a.labels[label]
		if !ok || to <= from {
			return 0, fmt.Errorf("batchio: steering program: jump to %q is not forward", label)
		}
		return to - from - 1, nil
	}
	for _, f := range a.fixups {
		t, err := skip(f.at, f.ifTrue)
		if err != nil {
			return nil, err
		}
		if !f.conditional {
			a.insts[f.at] = bpf.Jump{Skip: uint32(t)}
			continue
		}
		e, err := skip(f.at, f.ifFalse)
		if err != nil {
			return nil, err
		}
		if t > 255 || e > 255 {
			return nil, fmt.Errorf("batchio: steering program: conditional jump too long")
		}
		a.insts[f.at] = bpf.JumpIf{Cond: f.cond, Val: f.val, SkipTrue: uint8(t), SkipFalse: uint8(e)}
	}
	return bpf.Assemble(a.insts)
}
