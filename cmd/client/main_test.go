package main

import (
	"strings"
	"testing"

	"github.com/udpgate/udpgate/internal/testkit/conntest"
)

// runCmd runs the command as main does, with stdin, and returns the exit
// status and what it printed.
func runCmd(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb conntest.SyncBuffer
	code = run(args, strings.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

func TestUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string // in stdout+stderr
	}{
		{nil, exitUsage, "Commands:"},
		{[]string{"bogus"}, exitUsage, `unknown command "bogus"`},
		{[]string{"help"}, exitOK, "connect"},
		{[]string{"-h"}, exitOK, "Exit status"},
		{[]string{"-version"}, exitOK, "udpgate client "},
		{[]string{"version"}, exitOK, "udpgate client "},
		{[]string{"connect", "-h"}, exitOK, "-wait"},
		{[]string{"flood", "-h"}, exitOK, "-mix"},
		{[]string{"token", "-h"}, exitOK, "-client-id"},
		{[]string{"connect", "-nope"}, exitUsage, "flag provided but not defined"},
		{[]string{"connect", "stray"}, exitUsage, `unexpected argument "stray"`},
		{[]string{"connect", "-server", "127.0.0.1"}, exitUsage, "not a host:port"},
		{[]string{"connect", "-magic", "12"}, exitUsage, "-magic"},
		{[]string{"connect", "-network-version", "5000000000"}, exitUsage, "-network-version"},
		{[]string{"connect", "-network-features", "70000"}, exitUsage, "-network-features"},
	} {
		code, out, errb := runCmd(t, "", tc.args...)
		if code != tc.code || !strings.Contains(out+errb, tc.want) {
			t.Errorf("client %q: status %d, output\n%s%s\nwant status %d and %q", tc.args, code, out, errb, tc.code, tc.want)
		}
	}
	// Every subcommand is named in the usage text.
	_, out, _ := runCmd(t, "", "help")
	for _, cmd := range []string{"connect", "load", "flood", "token", "version"} {
		if !strings.Contains(out, "  "+cmd+" ") {
			t.Errorf("usage does not list %s:\n%s", cmd, out)
		}
	}
}

// TestRefusesNonLoopback: no subcommand of this file sends to another host.
func TestRefusesNonLoopback(t *testing.T) {
	for _, cmd := range []string{"connect", "flood"} {
		for _, server := range []string{"192.0.2.1:7777", "[2001:db8::1]:7777", "[::ffff:10.0.0.1]:7777"} {
			code, _, errb := runCmd(t, "hello\n", cmd, "-server", server)
			if code != exitUsage || !strings.Contains(errb, "not a loopback address") {
				t.Errorf("client %s -server %s: status %d, stderr %q; want a refusal", cmd, server, code, errb)
			}
		}
	}
}
