package agones

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"
)

// scheduled is a GameServer as GET /gameserver answers it once its pod is
// scheduled: the protobuf JSON mapping with the proto field names and
// unset fields written out, as the SDK's gateway sends it.
const scheduled = `{"object_meta":{"name":"udpgate-x7k2p","namespace":"default","uid":"8b0e","resource_version":"1234",` +
	`"generation":"3","creation_timestamp":"1700000000","deletion_timestamp":"0","annotations":{},` +
	`"labels":{"app.kubernetes.io/name":"udpgate"}},` +
	`"spec":{"health":{"disabled":false,"period_seconds":5,"failure_threshold":3,"initial_delay_seconds":5}},` +
	`"status":{"state":"Scheduled","address":"203.0.113.7","ports":[{"name":"default","port":7314},{"name":"query","port":7315}],` +
	`"players":null,"counters":{},"lists":{},` +
	`"addresses":[{"type":"InternalIP","address":"10.0.0.7"},{"type":"ExternalIP","address":"203.0.113.7"},{"type":"Hostname","address":"node-1"}]}}`

// creating is the same GameServer before its pod is scheduled.
const creating = `{"object_meta":{"name":"udpgate-x7k2p"},"spec":{},"status":{"state":"Creating","address":"","ports":[],"players":null}}`

// TestGameServer: GET /gameserver, without a body, decoded into the
// fields the package reads.
func TestGameServer(t *testing.T) {
	sc := newSidecar(t)
	sc.gameServers = []string{scheduled}
	gs, err := New(sc.URL).GameServer(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := GameServer{Name: "udpgate-x7k2p", State: "Scheduled", Address: "203.0.113.7",
		Addresses: []NodeAddress{{"InternalIP", "10.0.0.7"}, {"ExternalIP", "203.0.113.7"}, {"Hostname", "node-1"}},
		Ports:     []Port{{"default", 7314}, {"query", 7315}}}
	if fmt.Sprint(gs) != fmt.Sprint(want) {
		t.Errorf("GameServer\n %+v\nwant\n %+v", gs, want)
	}
	if got := sc.log(); !slices.Equal(got, []string{"GET /gameserver"}) {
		t.Errorf("calls %q", got)
	}

	sc.gameServers = []string{`{"status":`}
	if _, err := New(sc.URL).GameServer(context.Background()); err == nil || !strings.Contains(err.Error(), "not the documented JSON") {
		t.Errorf("a truncated answer: %v", err)
	}
	sc.gameServers = []string{`{"status":{"address":"` + strings.Repeat("x", maxGameServer) + `"}}`}
	if _, err := New(sc.URL).GameServer(context.Background()); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("an answer beyond the bound: %v", err)
	}
}

// TestPublicAddress: the node's IP and the named (or first) port's host
// port; what is only missing until the pod is scheduled is told apart
// from what will never do.
func TestPublicAddress(t *testing.T) {
	ports := []Port{{"default", 7314}, {"query", 7315}}
	for _, c := range []struct {
		name    string
		gs      GameServer
		port    string
		want    string
		notYet  bool
		wantErr []string
	}{
		{name: "first port", gs: GameServer{Address: "203.0.113.7", Ports: ports}, want: "203.0.113.7:7314"},
		{name: "named port", gs: GameServer{Address: "203.0.113.7", Ports: ports}, port: "query", want: "203.0.113.7:7315"},
		{name: "IPv6", gs: GameServer{Address: "2001:db8::7", Ports: ports}, want: "[2001:db8::7]:7314"},
		{name: "IPv4-mapped", gs: GameServer{Address: "::ffff:203.0.113.7", Ports: ports}, want: "203.0.113.7:7314"},
		{name: "host name, external IP listed", gs: GameServer{Address: "node-1.example", Ports: ports,
			Addresses: []NodeAddress{{"Hostname", "node-1"}, {"InternalIP", "10.0.0.7"}, {"ExternalIP", "203.0.113.7"}}}, want: "203.0.113.7:7314"},
		{name: "not scheduled", gs: GameServer{Name: "gs", State: "Creating"}, notYet: true, wantErr: []string{`"gs"`, `"Creating"`, "status.address", "scheduled"}},
		{name: "no host port yet", gs: GameServer{Address: "203.0.113.7", Ports: []Port{{"default", 0}}}, notYet: true, wantErr: []string{`"default"`}},
		{name: "host name only", gs: GameServer{Name: "gs", Address: "node-1.example", Ports: ports,
			Addresses: []NodeAddress{{"InternalIP", "10.0.0.7"}}}, wantErr: []string{`"node-1.example"`, "not an IP address", "no ExternalIP"}},
		{name: "unspecified", gs: GameServer{Address: "0.0.0.0", Ports: ports}, wantErr: []string{"not an IP address"}},
		{name: "no such port", gs: GameServer{Name: "gs", Address: "203.0.113.7", Ports: ports}, port: "game",
			wantErr: []string{`no port named "game"`, `"default", "query"`}},
		{name: "no ports", gs: GameServer{Name: "gs", Address: "203.0.113.7"}, wantErr: []string{"no ports", "spec.ports"}},
		{name: "bad port", gs: GameServer{Address: "203.0.113.7", Ports: []Port{{"default", 70000}}}, wantErr: []string{"70000"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ap, err := c.gs.PublicAddress(c.port)
			if c.wantErr == nil {
				if err != nil || ap != netip.MustParseAddrPort(c.want) {
					t.Errorf("%v, %v; want %s", ap, err, c.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("%v, want an error", ap)
			}
			if errors.Is(err, errNotYet) != c.notYet {
				t.Errorf("%v: retried %v, want %v", err, errors.Is(err, errNotYet), c.notYet)
			}
			for _, w := range c.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%v: lacks %q", err, w)
				}
			}
		})
	}
}

// TestWaitPublicAddress: asked again while the sidecar is not up and while
// the GameServer has no address, until it has one.
func TestWaitPublicAddress(t *testing.T) {
	sc := newSidecar(t)
	sc.gameServers = []string{"", creating, scheduled}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ap, gs, err := New(sc.URL).WaitPublicAddress(ctx, "query", nil)
	if err != nil {
		t.Fatal(err)
	}
	if ap != netip.MustParseAddrPort("203.0.113.7:7315") || gs.Name != "udpgate-x7k2p" || gs.State != "Scheduled" {
		t.Errorf("%v from %+v", ap, gs)
	}
	if got := sc.log(); len(got) != 3 {
		t.Errorf("calls %q, want three GETs", got)
	}
}

// TestWaitPublicAddressGivesUp: a GameServer whose address will never do
// ends the wait at once; one never scheduled ends it with ctx, naming the
// last cause.
func TestWaitPublicAddressGivesUp(t *testing.T) {
	sc := newSidecar(t)
	sc.gameServers = []string{scheduled}
	_, _, err := New(sc.URL).WaitPublicAddress(context.Background(), "game", nil)
	if err == nil || !strings.Contains(err.Error(), `no port named "game"`) {
		t.Errorf("no such port: %v", err)
	}
	if n := len(sc.log()); n != 1 {
		t.Errorf("%d calls for a port that is not there, want 1", n)
	}

	sc.gameServers = []string{creating}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, _, err = New(sc.URL).WaitPublicAddress(ctx, "", nil)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "status.address is not set yet") {
		t.Errorf("never scheduled: %v", err)
	}
	if n := len(sc.log()); n < 2 {
		t.Errorf("%d calls within 300ms, want retries", n)
	}
}
