package main

import (
	"errors"
	"flag"
	"fmt"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/shardcache/shardcache/internal/testserver"
)

// TestBadFlagShortUsage: a bad flag or a stray argument ends with the error
// and one line pointing to the help, not the whole help; the error spells
// the flag as the help does.
func TestBadFlagShortUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"plan", "--nope"}, "shardcache plan: flag provided but not defined: --nope\n"},
		{[]string{"plan", "-nope"}, "shardcache plan: flag provided but not defined: --nope\n"},
		{[]string{"simulate", "--steps", "x"}, `shardcache simulate: invalid value "x" for flag --steps: parse error` + "\n"},
		{[]string{"sweep", "--from"}, "shardcache sweep: flag needs an argument: --from\n"},
		{[]string{"plan", "extra"}, `shardcache plan: unexpected argument "extra" (flags come as --name value)` + "\n"},
	} {
		code, out, errOut := runCmd(t, tc.args...)
		cmd := tc.args[0]
		usage := fmt.Sprintf("Usage: shardcache %s [flags]; \"shardcache help %s\" explains them.\n", cmd, cmd)
		if code != exitUsage || out != "" || errOut != tc.want+usage {
			t.Errorf("%q: exit %d, stdout %q; stderr:\n%s\nwant exit 2 and:\n%s%s", tc.args, code, out, errOut, tc.want, usage)
		}
	}
}

// TestHelpSpellsFlagsWithTwoDashes: each command's help lists every flag
// once, as --name (the README's spelling), with its default when it has
// one, and in lines of at most helpWidth.
func TestHelpSpellsFlagsWithTwoDashes(t *testing.T) {
	for _, cmd := range []string{"plan", "simulate", "sweep", "balance", "topology publish", "topology show", "topology status", "topology watch"} {
		code, out, _ := runCmd(t, append([]string{"help"}, strings.Fields(cmd)...)...)
		if code != exitOK {
			t.Fatalf("help %s: exit %d", cmd, code)
		}
		if !strings.HasPrefix(out, "Usage: shardcache "+cmd+" [flags]") {
			t.Fatalf("help %s is not its command's:\n%s", cmd, out)
		}
		flags := regexp.MustCompile(`(?m)^  --([a-z0-9-]+)( [a-z]+)?$`).FindAllStringSubmatch(out, -1)
		if len(flags) < 2 {
			t.Fatalf("help %s: %d flags listed as --name:\n%s", cmd, len(flags), out)
		}
		seen := map[string]bool{}
		for _, f := range flags {
			if seen[f[1]] {
				t.Errorf("help %s: --%s twice", cmd, f[1])
			}
			seen[f[1]] = true
		}
		if m := regexp.MustCompile(`(?m)^\s+-[a-z]`).FindString(out); m != "" {
			t.Errorf("help %s: a flag with one dash, %q:\n%s", cmd, m, out)
		}
		for i, l := range strings.Split(out, "\n") {
			if len([]rune(l)) > helpWidth && strings.HasPrefix(l, "      ") && !strings.Contains(l, "(default ") {
				t.Errorf("help %s: line %d is %d wide: %q", cmd, i+1, len(l), l)
			}
		}
		if nodeLists := cmd == "plan" || cmd == "simulate" || cmd == "sweep"; nodeLists &&
			(!seen["from"] || !seen["to"] || !seen["vnodes"] || !strings.Contains(out, "(default 512)")) {
			t.Errorf("help %s lacks --from, --to or --vnodes with its default 512:\n%s", cmd, out)
		}
	}
	_, out, _ := runCmd(t, "help", "sweep")
	for _, want := range []string{"  --backend string\n", `(default "redis")`, "  --quiet\n", "  --from list\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("help sweep lacks %q:\n%s", want, out)
		}
	}
	_, out, _ = runCmd(t, "help", "simulate")
	if !strings.Contains(out, "  --every int\n") || !strings.Contains(out, "(default 5)") {
		t.Errorf("help simulate lacks --every and its default:\n%s", out)
	}
}

// TestPrintFlagsDefaults: the defaults printed are the flag package's
// choice: none for a zero value, a quoted string, and a default kept whole
// on one line.
func TestPrintFlagsDefaults(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.String("name", "", "a `thing` without a default")
	fs.String("mode", "a,b", "what to run")
	fs.Int("n", 0, "how many")
	fs.Int("m", 3, "how many more")
	fs.Bool("quiet", false, "say less")
	fs.String("long", "x", strings.Repeat("word ", 14)+"end")
	var b strings.Builder
	printFlags(&b, fs)
	want := `  --long string
      word word word word word word word word word word word word word word end
      (default "x")
  --m int
      how many more (default 3)
  --mode string
      what to run (default "a,b")
  --n int
      how many
  --name thing
      a thing without a default
  --quiet
      say less
`
	if b.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", b.String(), want)
	}
}

// TestErrorsSaidOnce: the library's package prefixes, which repeat the
// program's name, are taken out of what the command prints.
func TestErrorsSaidOnce(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"shardcache: sweep on node b (h:2): shardcache: node cannot be swept: lru_crawler metadump: \"ERROR\"",
			"sweep on node b (h:2): node cannot be swept: lru_crawler metadump: \"ERROR\""},
		{"--from: shardcache/ring: unknown hash: \"x\"", "--from: unknown hash: \"x\""},
		{"mod-N: prefill: shardcache: set_multi 3 keys on node a (h:1): EOF\nring: shardcache/ring: duplicate node address",
			"mod-N: prefill: set_multi 3 keys on node a (h:1): EOF\nring: duplicate node address"},
		{"a shardcache: not a prefix", "a shardcache: not a prefix"},
		{"shardcache: sweep on node h:1 (h:1): EOF", "sweep on node h:1: EOF"},
	} {
		if got := errText(errors.New(tc.in)); got != tc.want {
			t.Errorf("errText(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	// A sweep of a server that is down names the node, and the program
	// once (its new node answers: a sweep to a node down does not start).
	live := testserver.Redis(t, 1)[0].Addr
	code, _, errOut := runCmd(t, "sweep", "--quiet", "--from", "a=127.0.0.1:1", "--to", "a="+live)
	if code != exitFail || strings.Count(errOut, "shardcache") != 1 || !strings.HasPrefix(errOut, "shardcache sweep: ") ||
		!strings.Contains(errOut, "127.0.0.1:1") {
		t.Errorf("exit %d, stderr:\n%s\nwant exit 1, the node, and \"shardcache\" once", code, errOut)
	}
	// A node without a name is its address, said once.
	code, _, errOut = runCmd(t, "sweep", "--quiet", "--from", "127.0.0.1:1", "--to", live)
	if code != exitFail || strings.Count(errOut, "127.0.0.1:1") != 2 || !strings.Contains(errOut, "on node 127.0.0.1:1: ") {
		t.Errorf("exit %d, stderr:\n%s\nwant the node's address once, then the dial's", code, errOut)
	}
	code, _, errOut = runCmd(t, "plan", "--from", "a=h:1", "--to", "a=h:1,a=h:2")
	if code != exitUsage || !strings.HasPrefix(errOut, "shardcache plan: --to: duplicate node name: \"a\"\n") {
		t.Errorf("exit %d, stderr:\n%s", code, errOut)
	}
}

func TestCount(t *testing.T) {
	for _, tc := range []struct {
		got, want string
	}{
		{count(0, "node", ""), "0 nodes"},
		{count(1, "node", ""), "1 node"},
		{count(int64(2), "key", ""), "2 keys"},
		{count(1, "node address", "node addresses"), "1 node address"},
		{count(3, "node address", "node addresses"), "3 node addresses"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

// TestGrammar: counts of one are singular wherever the commands print them.
func TestGrammar(t *testing.T) {
	_, out, _ := runCmd(t, "plan", "--from", "a=h:1", "--to", "a=h:1,b=h:2", "--vnodes", "1", "--keys", "1")
	for _, want := range []string{"Plan: 1 node → 2 nodes, 1 vnode per unit of weight", "Sweep of 1 key at", "(1 key to list)"} {
		if !strings.Contains(out, want) {
			t.Errorf("plan lacks %q:\n%s", want, out)
		}
	}
	_, out, _ = runCmd(t, "plan", "--from-kind", "modulo", "--from", "h:1", "--to", "a=h:1,b=h:2")
	if !strings.Contains(out, "1 server → ring, 2 nodes") {
		t.Errorf("plan from mod-N lacks \"1 server → ring, 2 nodes\":\n%s", out)
	}
	_, _, errOut := runCmd(t, "simulate", "--redis", "127.0.0.1:1", "--from", "a=h:1", "--to", "a=h:1,b=h:2")
	if !strings.Contains(errOut, "1 server for 2 node addresses") {
		t.Errorf("simulate lacks \"1 server for 2 node addresses\":\n%s", errOut)
	}
	_, out, _ = runCmd(t, "sweep", "--quiet", "--from", "127.0.0.1:1", "--to", testserver.Redis(t, 1)[0].Addr)
	if !strings.Contains(out, "Swept 0 of 1 old node in") || !strings.Contains(out, ": 0 keys listed") {
		t.Errorf("sweep summary:\n%s", out)
	}
	_, out, errOut = runCmd(t, "simulate", "--keys", "1", "--requests", "1", "--steps", "2", "--reshard-at", "1", "--modes", "ring", "--workers", "1")
	if !strings.Contains(out, "1 key (Zipf") || !strings.Contains(out, "1 request per") || !strings.Contains(errOut, "1 mode × 2 steps in") {
		t.Errorf("simulate:\n%s%s", out, errOut)
	}
}

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}, {"-version"}} {
		code, out, errOut := runCmd(t, args...)
		info, _ := debug.ReadBuildInfo()
		if code != exitOK || errOut != "" || !strings.HasPrefix(out, "shardcache ") || !strings.Contains(out, info.GoVersion) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", args, code, out, errOut)
		}
	}
	if code, _, errOut := runCmd(t, "version", "now"); code != exitUsage || !strings.Contains(errOut, `unexpected argument "now"`) {
		t.Errorf("version now: exit %d, %s", code, errOut)
	}
	if code, out, _ := runCmd(t, "help", "version"); code != exitOK || !strings.Contains(out, "build information") {
		t.Errorf("help version: exit %d, %s", code, out)
	}
	if _, out, _ := runCmd(t, "help"); !strings.Contains(out, "version") {
		t.Errorf("help does not list version:\n%s", out)
	}

	rev := func(settings ...string) []debug.BuildSetting {
		var s []debug.BuildSetting
		for i := 0; i < len(settings); i += 2 {
			s = append(s, debug.BuildSetting{Key: settings[i], Value: settings[i+1]})
		}
		return s
	}
	for _, tc := range []struct {
		info *debug.BuildInfo
		want string
	}{
		{&debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v0.1.0"}}, "shardcache v0.1.0, go1.26.0"},
		{&debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"},
			Settings: rev("vcs", "git", "vcs.revision", "98d2a0d7a7123727596a5e2eacb97df3bd7dfeb7", "vcs.time", "2026-12-01T18:55:21Z", "vcs.modified", "true")},
			"shardcache (devel), commit 98d2a0d7a712 of 2026-12-01T18:55:21Z (modified), go1.26.0"},
		{&debug.BuildInfo{GoVersion: "go1.26.0", Settings: rev("vcs.revision", "abc", "vcs.modified", "false")},
			"shardcache (devel), commit abc, go1.26.0"},
		{&debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v0.0.0-20261201185521-98d2a0d7a712+dirty"},
			Settings: rev("vcs.revision", "98d2a0d7a7123727596a5e2eacb97df3bd7dfeb7", "vcs.modified", "true")},
			"shardcache v0.0.0-20261201185521-98d2a0d7a712+dirty, go1.26.0"},
		{nil, "shardcache (devel), no build information"},
	} {
		if got := versionLine(tc.info, tc.info != nil); got != tc.want {
			t.Errorf("versionLine = %q, want %q", got, tc.want)
		}
	}
}
