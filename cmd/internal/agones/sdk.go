// Package agones speaks to the Agones SDK sidecar over its REST interface,
// so a udpgate server can run as an Agones GameServer: it says Ready once
// it listens, sends Health pings while it runs, reports players as they
// connect and leave, and says Shutdown when it exits.
//
// Agones (agones.dev) runs a sidecar next to every game server and serves
// its SDK as gRPC and, through a gateway, as HTTP/JSON on
// localhost:$AGONES_SDK_HTTP_PORT (default 9358). The Agones Go SDK module
// is not among the project's dependencies, and the few calls needed are
// plain POSTs, so this package implements them with net/http, following
// the SDK's published OpenAPI description (sdks/swagger/sdk.swagger.json
// and alpha.swagger.json in the Agones repository):
//
//	POST /ready                   {}                      lifecycle
//	POST /health                  {}                      one ping
//	POST /shutdown                {}                      lifecycle
//	PUT  /alpha/player/capacity   {"count": "N"}          player tracking (alpha)
//	POST /alpha/player/connect    {"playerID": "..."}     → {"bool": true|false}
//	POST /alpha/player/disconnect {"playerID": "..."}     → {"bool": true|false}
//	GET  /gameserver                                      → the GameServer (address.go)
//
// Its tests run against a local HTTP server that implements those
// endpoints as documented; no test here runs against a real sidecar.
package agones

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
)

// PortEnv is the environment variable Agones sets to the sidecar's HTTP
// port; DefaultPort is the port when it is unset.
const (
	PortEnv     = "AGONES_SDK_HTTP_PORT"
	DefaultPort = 9358
)

// requestTimeout bounds one call: the sidecar is on the same host, so a
// call that takes longer means it is not there (yet).
const requestTimeout = 3 * time.Second

// SDK is a client of the sidecar's REST interface. Its methods are safe for
// concurrent use.
type SDK struct {
	base string
	hc   *http.Client
}

// New returns a client of the sidecar at baseURL, e.g.
// "http://localhost:9358".
func New(baseURL string) *SDK {
	return &SDK{base: baseURL, hc: &http.Client{Timeout: requestTimeout}}
}

// FromEnv returns a client of the sidecar on this host, at the port named
// by AGONES_SDK_HTTP_PORT (lookupEnv is os.LookupEnv in production), or
// 9358.
func FromEnv(lookupEnv func(string) (string, bool)) (*SDK, error) {
	port := DefaultPort
	if v, ok := lookupEnv(PortEnv); ok && v != "" {
		n, err := strconv.ParseUint(v, 10, 16)
		if err != nil || n == 0 {
			return nil, fmt.Errorf("agones: environment %s=%q is not a port number (1..65535): Agones sets it in the GameServer's pod; unset it to use %d", PortEnv, v, DefaultPort)
		}
		port = int(n)
	}
	return New("http://localhost:" + strconv.Itoa(port)), nil
}

// URL is the sidecar's base URL.
func (s *SDK) URL() string { return s.base }

// Ready tells Agones the game server can take players: the GameServer
// moves to Ready and gets its public address and port.
func (s *SDK) Ready(ctx context.Context) error {
	return s.call(ctx, http.MethodPost, "/ready", struct{}{}, nil)
}

// Health sends one health ping. Agones marks the GameServer Unhealthy when
// pings stop for its health.periodSeconds × failureThreshold.
func (s *SDK) Health(ctx context.Context) error {
	return s.call(ctx, http.MethodPost, "/health", struct{}{}, nil)
}

// Shutdown tells Agones the game server is ending: the GameServer moves to
// Shutdown and its pod is deleted.
func (s *SDK) Shutdown(ctx context.Context) error {
	return s.call(ctx, http.MethodPost, "/shutdown", struct{}{}, nil)
}

// SetPlayerCapacity sets GameServer.Status.Players.Capacity (alpha player
// tracking: the PlayerTracking feature gate must be on).
func (s *SDK) SetPlayerCapacity(ctx context.Context, n int64) error {
	// int64 travels as a JSON string in the protobuf JSON mapping.
	return s.call(ctx, http.MethodPut, "/alpha/player/capacity", count{Count: strconv.FormatInt(n, 10)}, nil)
}

// PlayerConnect adds a player ID to GameServer.Status.Players (alpha). It
// reports false when the ID was already there.
func (s *SDK) PlayerConnect(ctx context.Context, id string) (bool, error) {
	var r boolResult
	err := s.call(ctx, http.MethodPost, "/alpha/player/connect", playerID{ID: id}, &r)
	return r.Bool, err
}

// PlayerDisconnect removes a player ID from GameServer.Status.Players
// (alpha). It reports false when the ID was not there.
func (s *SDK) PlayerDisconnect(ctx context.Context, id string) (bool, error) {
	var r boolResult
	err := s.call(ctx, http.MethodPost, "/alpha/player/disconnect", playerID{ID: id}, &r)
	return r.Bool, err
}

// The request and response bodies of the REST interface.
type (
	count struct {
		Count string `json:"count"`
	}
	playerID struct {
		ID string `json:"playerID"`
	}
	boolResult struct {
		Bool bool `json:"bool"`
	}
)

// Bounds of the answers read: the lifecycle and player calls answer a few
// bytes; a GameServer carries its labels, annotations and player IDs.
// A bound keeps a confused peer from feeding us without end.
const (
	maxAnswer     = 64 << 10
	maxGameServer = 1 << 20
)

// call sends one JSON request (in nil: a request without a body, as GET)
// and decodes the answer into out (nil: the answer is ignored).
func (s *SDK) call(ctx context.Context, method, path string, in, out any) error {
	body := io.Reader(http.NoBody)
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, s.base+path, body)
	if err != nil {
		return fmt.Errorf("agones: %s %s: %w", method, path, err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := s.hc.Do(req)
	if err != nil {
		return fmt.Errorf("agones: %s %s%s: %w (is the Agones SDK sidecar running? it serves %s)", method, s.base, path, err, PortEnv)
	}
	defer resp.Body.Close()
	limit := int64(maxAnswer)
	if path == pathGameServer {
		limit = maxGameServer
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return fmt.Errorf("agones: %s %s: reading the answer: %w", method, path, err)
	}
	if int64(len(data)) > limit {
		return fmt.Errorf("agones: %s %s: the answer is larger than %d bytes, more than the SDK sends", method, path, limit)
	}
	if resp.StatusCode/100 != 2 {
		msg := bytes.TrimSpace(data)
		if len(msg) > 200 {
			msg = msg[:200]
		}
		return fmt.Errorf("agones: %s %s: %s: %s", method, path, resp.Status, msg)
	}
	if out != nil && len(bytes.TrimSpace(data)) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("agones: %s %s: the answer is not the documented JSON: %w", method, path, err)
		}
	}
	return nil
}
