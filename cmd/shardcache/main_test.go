package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// runCmd runs the command line and returns its exit status and output.
func runCmd(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestHelp(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"help"}, "simulate"},
		{[]string{"--help"}, "plan"},
		{[]string{"help", "plan"}, "-hit-rate"},
		{[]string{"plan", "-h"}, "[NAME=]HOST:PORT[*WEIGHT]"},
		{[]string{"simulate", "--help"}, "-real-step"},
		{[]string{"help", "simulate"}, "-zipf-s"},
	} {
		code, out, errOut := runCmd(t, tc.args...)
		if code != exitOK || !strings.Contains(out, tc.want) {
			t.Errorf("%q: exit %d, stdout lacks %q:\n%s%s", tc.args, code, tc.want, out, errOut)
		}
	}
}

// TestBadInput checks that bad command lines end with a message on stderr
// and exit status 2, without a panic and without output on stdout.
func TestBadInput(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // in stderr
	}{
		{nil, "Usage"},
		{[]string{"replan"}, `unknown command "replan"`},
		{[]string{"plan", "--nope"}, "flag provided but not defined"},
		{[]string{"plan", "extra"}, `unexpected argument "extra"`},
		{[]string{"plan", "--vnodes", "x"}, "invalid value"},
		{[]string{"plan", "--from", "a=cache-a"}, "want HOST:PORT"},
		{[]string{"plan", "--from", "a=cache-a:6379*0"}, "weight"},
		{[]string{"plan", "--from", "a=cache-a:6379*two"}, "weight"},
		{[]string{"plan", "--from", "=cache-a:6379"}, "empty name"},
		{[]string{"plan", "--from", "a=h:1,,b=h:2"}, "empty node"},
		{[]string{"plan", "--from", ""}, "empty node list"},
		{[]string{"plan", "--from", "a=h:99999"}, "port"},
		{[]string{"plan", "--to", "a=h:1,a=h:2"}, "duplicate node name"},
		{[]string{"plan", "--to", "a=h:1,b=h:1"}, "duplicate node address"},
		{[]string{"plan", "--from", "@/nonexistent/nodes.json"}, "no such file"},
		{[]string{"plan", "--hit-rate", "1"}, "--hit-rate"},
		{[]string{"plan", "--vnodes", "0"}, "vnode"},
		{[]string{"simulate", "--keys", "0"}, "--keys 0"},
		{[]string{"simulate", "--zipf-s", "1"}, "--zipf-s"},
		{[]string{"simulate", "--zipf-v", "0.5"}, "--zipf-v"},
		{[]string{"simulate", "--writes", "1"}, "--writes"},
		{[]string{"simulate", "--steps", "1"}, "--steps"},
		{[]string{"simulate", "--reshard-at", "0"}, "--reshard-at"},
		{[]string{"simulate", "--steps", "10", "--reshard-at", "10"}, "--reshard-at"},
		{[]string{"simulate", "--ttl", "0s"}, "--ttl"},
		{[]string{"simulate", "--step", "-1s"}, "--step"},
		{[]string{"simulate", "--window", "0s"}, "--window"},
		{[]string{"simulate", "--workers", "0"}, "--workers"},
		{[]string{"simulate", "--every", "0"}, "--every"},
		{[]string{"simulate", "--modes", "ring,hash"}, `"hash"`},
		{[]string{"simulate", "--modes", "ring,ring"}, "twice"},
		{[]string{"simulate", "--redis", "h:1", "--memcached", "h:2"}, "not with --redis"},
		{[]string{"simulate", "--redis", "localhost"}, "want HOST:PORT"},
		{[]string{"simulate", "--redis", "127.0.0.1:1,127.0.0.1:2"}, "2 servers for 8 node addresses"},
	} {
		code, out, errOut := runCmd(t, tc.args...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) || out != "" {
			t.Errorf("%q: exit %d, want %d with %q on stderr; stderr:\n%s\nstdout:\n%s", tc.args, code, exitUsage, tc.want, errOut, out)
		}
	}
}
