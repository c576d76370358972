package agones

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/udpgate/udpgate/internal/testkit/conntest"
)

// sidecar is a local stand-in for the Agones SDK sidecar: it serves the
// REST endpoints this package uses as the SDK's OpenAPI description
// documents them (method, path, JSON body, JSON answer), checks every
// request against it, and records the calls in order.
type sidecar struct {
	t  *testing.T
	mu sync.Mutex
	// calls are "POST /ready", "PUT /alpha/player/capacity 10",
	// "POST /alpha/player/connect p1", ...
	calls []string
	ev    conntest.Signal // fired at each call
	// readyFailures: how many Ready calls to answer 503 first (the sidecar
	// is not up yet).
	readyFailures int
	// refuseReady: answer Ready 503 until cleared.
	refuseReady bool
	players     map[string]bool
	// gameServers are the answers of GET /gameserver in turn, the last
	// one repeated; "" answers 503 (the sidecar is not up yet).
	gameServers []string
	*httptest.Server
}

func newSidecar(t *testing.T) *sidecar {
	s := &sidecar{t: t, players: map[string]bool{}}
	mux := http.NewServeMux()
	empty := func(name string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			var body map[string]any
			if !s.decode(w, r, &body) {
				return
			}
			s.mu.Lock()
			fail := name == "/ready" && (s.refuseReady || s.readyFailures > 0)
			if name == "/ready" && s.readyFailures > 0 {
				s.readyFailures--
			}
			s.calls = append(s.calls, r.Method+" "+name)
			s.mu.Unlock()
			if fail {
				http.Error(w, `{"code":14,"message":"not yet"}`, http.StatusServiceUnavailable)
				return
			}
			io.WriteString(w, "{}")
		}
	}
	mux.HandleFunc("POST /ready", empty("/ready"))
	mux.HandleFunc("POST /health", empty("/health"))
	mux.HandleFunc("POST /shutdown", empty("/shutdown"))
	mux.HandleFunc("PUT /alpha/player/capacity", func(w http.ResponseWriter, r *http.Request) {
		var body struct{ Count string }
		if !s.decode(w, r, &body) {
			return
		}
		s.record(r.Method + " " + r.URL.Path + " " + body.Count)
		io.WriteString(w, "{}")
	})
	player := func(connect bool) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			var body struct {
				PlayerID string `json:"playerID"`
			}
			if !s.decode(w, r, &body) {
				return
			}
			if body.PlayerID == "" {
				t.Errorf("%s without a playerID", r.URL.Path)
			}
			s.mu.Lock()
			s.calls = append(s.calls, r.Method+" "+r.URL.Path+" "+body.PlayerID)
			changed := s.players[body.PlayerID] != connect
			s.players[body.PlayerID] = connect
			s.mu.Unlock()
			json.NewEncoder(w).Encode(map[string]bool{"bool": changed})
		}
	}
	mux.HandleFunc("POST /alpha/player/connect", player(true))
	mux.HandleFunc("POST /alpha/player/disconnect", player(false))
	mux.HandleFunc("GET /gameserver", func(w http.ResponseWriter, r *http.Request) {
		if n, _ := io.Copy(io.Discard, r.Body); n != 0 {
			t.Errorf("GET /gameserver with a body of %d bytes", n)
		}
		s.mu.Lock()
		s.calls = append(s.calls, r.Method+" "+r.URL.Path)
		answer := `{"object_meta":{},"spec":{},"status":{}}`
		if len(s.gameServers) > 0 {
			answer = s.gameServers[0]
			if len(s.gameServers) > 1 {
				s.gameServers = s.gameServers[1:]
			}
		}
		s.mu.Unlock()
		if answer == "" {
			http.Error(w, `{"code":14,"message":"not yet"}`, http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, answer)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("undocumented call %s %s", r.Method, r.URL.Path)
		http.NotFound(w, r)
	})
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mux.ServeHTTP(w, r)
		s.ev.Fire() // after the handler recorded the call
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *sidecar) decode(w http.ResponseWriter, r *http.Request, v any) bool {
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		s.t.Errorf("%s %s: Content-Type %q, want application/json", r.Method, r.URL.Path, ct)
	}
	if err := json.NewDecoder(r.Body).Decode(v); err != nil {
		s.t.Errorf("%s %s: body is not JSON: %v", r.Method, r.URL.Path, err)
		http.Error(w, "bad body", http.StatusBadRequest)
		return false
	}
	return true
}

func (s *sidecar) record(call string) {
	s.mu.Lock()
	s.calls = append(s.calls, call)
	s.mu.Unlock()
}

func (s *sidecar) log() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

// waitFor waits until the sidecar has seen call.
func (s *sidecar) waitFor(t *testing.T, call string) {
	t.Helper()
	if !s.ev.Await(10*time.Second, func() bool { return slices.Contains(s.log(), call) }) {
		t.Fatalf("no %q among the calls %q", call, s.log())
	}
}

// TestLifecycleOrder: Ready (retried while the sidecar is not up), the
// capacity, health pings, players as they come and go, then Shutdown as
// the last call.
func TestLifecycleOrder(t *testing.T) {
	sc := newSidecar(t)
	sc.readyFailures = 2
	a := Start(context.Background(), New(sc.URL), Options{
		HealthInterval: 5 * time.Millisecond,
		RetryInterval:  time.Millisecond,
		Players:        true,
		Capacity:       10,
	})
	select {
	case <-a.Ready():
	case <-time.After(10 * time.Second):
		t.Fatalf("never Ready; calls %q", sc.log())
	}
	a.PlayerConnected("p1")
	sc.waitFor(t, "POST /alpha/player/connect p1")
	a.PlayerConnected("p2")
	a.PlayerDisconnected("p1")
	sc.waitFor(t, "POST /alpha/player/disconnect p1")
	a.SetCapacity(20)
	sc.waitFor(t, "PUT /alpha/player/capacity 20")
	if !sc.ev.Await(10*time.Second, func() bool {
		n := 0
		for _, c := range sc.log() {
			if c == "POST /health" {
				n++
			}
		}
		return n >= 2
	}) {
		t.Fatalf("fewer than 2 health pings: %q", sc.log())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	calls := sc.log()

	// Order: the first three calls are the Ready attempts, health only
	// after Ready, capacity before any player, and Shutdown last.
	if !slices.Equal(calls[:4], []string{"POST /ready", "POST /ready", "POST /ready", "PUT /alpha/player/capacity 10"}) {
		t.Errorf("calls start %q, want three Ready attempts then the capacity", calls[:4])
	}
	if calls[len(calls)-1] != "POST /shutdown" || slices.Index(calls, "POST /shutdown") != len(calls)-1 {
		t.Errorf("calls %q: want exactly one Shutdown, the last call", calls)
	}
	at := func(c string) int { return slices.Index(calls, c) }
	if !(at("POST /alpha/player/connect p1") < at("POST /alpha/player/connect p2") &&
		at("POST /alpha/player/connect p2") < at("POST /alpha/player/disconnect p1") &&
		at("POST /alpha/player/disconnect p1") < at("POST /shutdown")) {
		t.Errorf("player calls out of order: %q", calls)
	}
	// No call for four health intervals: the pings stopped with Close.
	if sc.ev.Await(20*time.Millisecond, func() bool { return len(sc.log()) != len(calls) }) {
		t.Errorf("calls after Close: %q", sc.log()[len(calls):])
	}
}

// TestPlayersBeforeReady: events wait for Ready, and a player gone before
// its connect was sent is never reported.
func TestPlayersBeforeReady(t *testing.T) {
	sc := newSidecar(t)
	sc.refuseReady = true
	a := Start(context.Background(), New(sc.URL), Options{RetryInterval: time.Millisecond, Players: true})
	a.PlayerConnected("gone")
	a.PlayerConnected("stays")
	a.PlayerDisconnected("gone")
	sc.waitFor(t, "POST /ready")
	sc.mu.Lock()
	sc.refuseReady = false
	sc.mu.Unlock()
	<-a.Ready()
	sc.waitFor(t, "POST /alpha/player/connect stays")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for _, c := range sc.log() {
		if strings.HasSuffix(c, " gone") {
			t.Errorf("the player who left before Ready was reported: %q", c)
		}
		if strings.HasPrefix(c, "POST /alpha") && !strings.HasSuffix(c, " stays") {
			t.Errorf("unexpected call %q", c)
		}
	}
}

// TestNoPlayers: without Options.Players, no player tracking call is made
// (the alpha API may be off in the cluster).
func TestNoPlayers(t *testing.T) {
	sc := newSidecar(t)
	a := Start(context.Background(), New(sc.URL), Options{Capacity: 5})
	<-a.Ready()
	a.PlayerConnected("x")
	a.SetCapacity(7)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got := sc.log(); !slices.Equal(got, []string{"POST /ready", "POST /shutdown"}) {
		t.Errorf("calls %q, want Ready and Shutdown only", got)
	}
}

// TestCloseBeforeReady: a server that stops before the sidecar answered
// still says Shutdown, and Close does not wait for Ready.
func TestCloseBeforeReady(t *testing.T) {
	sc := newSidecar(t)
	sc.refuseReady = true
	a := Start(context.Background(), New(sc.URL), Options{RetryInterval: time.Millisecond})
	sc.waitFor(t, "POST /ready")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got := sc.log(); got[len(got)-1] != "POST /shutdown" {
		t.Errorf("calls %q, want Shutdown last", got)
	}
}

// TestErrors: a refused call names the endpoint and carries the sidecar's
// message; no sidecar names the variable to check.
func TestErrors(t *testing.T) {
	sc := newSidecar(t)
	sc.refuseReady = true
	err := New(sc.URL).Ready(context.Background())
	if err == nil || !strings.Contains(err.Error(), "/ready") || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), "not yet") {
		t.Errorf("refused Ready: %v", err)
	}
	sc.Close()
	err = New(sc.URL).Health(context.Background())
	if err == nil || !strings.Contains(err.Error(), PortEnv) {
		t.Errorf("Health without a sidecar: %v, want an error naming %s", err, PortEnv)
	}
}

func TestFromEnv(t *testing.T) {
	env := func(kv ...string) func(string) (string, bool) {
		return func(k string) (string, bool) {
			if len(kv) == 2 && kv[0] == k {
				return kv[1], true
			}
			return "", false
		}
	}
	for _, c := range []struct {
		env  []string
		want string
	}{
		{nil, "http://localhost:9358"},
		{[]string{PortEnv, "59358"}, "http://localhost:59358"},
		{[]string{PortEnv, ""}, "http://localhost:9358"},
	} {
		s, err := FromEnv(env(c.env...))
		if err != nil || s.URL() != c.want {
			t.Errorf("FromEnv(%q) = %v, %v; want %s", c.env, s, err, c.want)
		}
	}
	for _, bad := range []string{"http", "0", "70000", "-1"} {
		if _, err := FromEnv(env(PortEnv, bad)); err == nil || !strings.Contains(err.Error(), PortEnv) {
			t.Errorf("%s=%q: %v, want an error naming the variable", PortEnv, bad, err)
		}
	}
}
