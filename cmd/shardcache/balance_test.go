package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shardcache/shardcache/client"
	"github.com/shardcache/shardcache/cmd/shardcache/internal/balance"
	"github.com/shardcache/shardcache/internal/testserver"
	"github.com/shardcache/shardcache/ring"
)

// The fleet of TestBalanceCommand: three nodes of bigLimit MiB and one of a
// quarter of it, and the keys written: balanceKeys values of balanceValue
// bytes, about 56 MB, so that a quarter of them overflows the small node
// while the proposed weights fit them all at about half of every limit.
const (
	bigLimit     = 32 // MiB
	balanceKeys  = 14000
	balanceValue = 4000
)

// TestBalanceCommand is issue 25's acceptance test, on both backends: four
// real nodes, one with a quarter of the others' memory limit (Redis
// maxmemory with allkeys-lru, memcached -m), filled with keys through the
// client. "shardcache balance" reads them, proposes weights whose
// projected max/mean of memory over limit is within 10%, and writes the
// node list; applied with Reshard and a Sweep (and the moved keys then
// gone from their old nodes, as their TTLs would take them), the measured
// max/mean is within 15%, and the small node, which evicted over a pass
// of writes of every key before, evicts nothing over the same pass after.
func TestBalanceCommand(t *testing.T) {
	for _, backend := range []client.Backend{client.Redis, client.Memcached} {
		t.Run(backend.String(), func(t *testing.T) {
			var servers []*testserver.Server
			if backend == client.Redis {
				lru := []string{"--maxmemory-policy", "allkeys-lru", "--maxmemory"}
				servers = append(testserver.RedisArgs(t, 3, append(lru, strconv.Itoa(bigLimit)+"mb")...),
					testserver.RedisArgs(t, 1, append(lru, strconv.Itoa(bigLimit/4)+"mb")...)...)
			} else {
				servers = append(testserver.MemcachedArgs(t, 3, "-m", strconv.Itoa(bigLimit)),
					testserver.MemcachedArgs(t, 1, "-m", strconv.Itoa(bigLimit/4))...)
			}
			nodes, list := fleet(servers)
			small := nodes[3]
			ctx := context.Background()
			before := newTestClient(t, backend, nodes)
			writeAll(t, before) // fills; the small node evicts
			evicted := evictionsOver(t, before, small, func() { writeAll(t, before) })
			if evicted == 0 {
				t.Fatalf("the small node evicted nothing over a pass of writes: the test's sizes are off")
			}

			file := filepath.Join(t.TempDir(), "nodes.json")
			code, out, errOut := runCmd(t, "balance", "--backend", backend.String(), "--nodes", strings.Join(list, ","), "--json", "--write", file)
			if code != exitOK {
				t.Fatalf("balance: exit %d\n%s%s", code, out, errOut)
			}
			var rep balanceReport
			if err := json.Unmarshal([]byte(out), &rep); err != nil {
				t.Fatalf("balance --json: %v\n%s", err, out)
			}
			_, text, _ := runCmd(t, "balance", "--backend", backend.String(), "--nodes", strings.Join(list, ","))
			t.Logf("balance:\n%s", text)
			if len(rep.Nodes) != 4 || !rep.Nodes[3].Evicting || rep.Nodes[3].Evictions == 0 || rep.Skew < 1.3 {
				t.Errorf("balance read %+v, skew %.3f: want the small node evicting, the fill uneven", rep.Nodes, rep.Skew)
			}
			if rep.ProjectedSkew > 1.10 {
				t.Errorf("projected max/mean of memory over limit %.3f, want within 10%%", rep.ProjectedSkew)
			}
			if w := rep.Nodes[3].ProposedWeight / rep.Nodes[0].ProposedWeight; w > 0.35 || w < 0.15 {
				t.Errorf("the small node's weight: %.3f of the others', want about a quarter", w)
			}
			proposed, err := parseNodes(file)
			if err != nil {
				t.Fatal(err)
			}
			if got := formatNodes(proposed); got != rep.Proposed || rep.Written != file {
				t.Errorf("--write wrote %s, the report proposes %s", got, rep.Proposed)
			}
			if rep.Plan == nil || !(rep.Plan.Moved > 0) || len(rep.Plan.Nodes) != 4 {
				t.Errorf("the plan of the change: %+v", rep.Plan)
			}

			// Apply: Reshard to the written list, Sweep; then a process of
			// the new list alone, as after the window.
			if err := before.Reshard(proposed, time.Hour); err != nil {
				t.Fatal(err)
			}
			if _, err := before.Sweep(ctx, client.SweepOptions{Rate: -1}); err != nil {
				t.Fatal(err)
			}
			dropMoved(t, backend, nodes, proposed)
			after := newTestClient(t, backend, proposed)
			evicted = evictionsOver(t, after, small, func() { writeAll(t, after) })
			usage, err := after.NodeStats(ctx)
			if err != nil {
				t.Fatal(err)
			}
			fills := make([]float64, len(usage))
			for i, u := range usage {
				fills[i] = u.Fill()
				t.Logf("%s: weight %g, %d items, %s of %s (%.1f%%), %d evictions", u.Node.Name, u.Node.Weight, u.Items,
					balance.Bytes(float64(u.Bytes)), balance.Bytes(float64(u.MemoryLimit)), 100*fills[i], u.Evictions)
			}
			skew, cv := balance.Skew(fills)
			t.Logf("max/mean of memory over limit: %.3f before (projected %.3f), %.3f after (CV %.1f%%); the small node evicted %d over the pass after",
				rep.Skew, rep.ProjectedSkew, skew, 100*cv, evicted)
			if skew > 1.15 {
				t.Errorf("measured max/mean of memory over limit %.3f after re-weighting, want within 15%%", skew)
			}
			if evicted != 0 {
				t.Errorf("the small node evicted %d keys over a pass of writes after re-weighting, want none", evicted)
			}
		})
	}
}

// newTestClient is a client of nodes with timeouts for a loaded machine.
func newTestClient(t *testing.T, backend client.Backend, nodes []ring.Node) *client.Client {
	t.Helper()
	c, err := client.New(client.Options{Backend: backend, Nodes: nodes, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// balanceKey is key i of TestBalanceCommand.
func balanceKey(i int) string { return "balance:" + strconv.Itoa(i) }

// writeAll writes every key once, without expiry, in small batches (a
// large one would swell a Redis's query buffer, which its maxmemory counts).
func writeAll(t *testing.T, c *client.Client) {
	t.Helper()
	value := []byte(strings.Repeat("v", balanceValue))
	batch := map[string][]byte{}
	for i := range balanceKeys {
		batch[balanceKey(i)] = value
		if len(batch) == 100 || i == balanceKeys-1 {
			if err := c.SetMulti(context.Background(), batch, 0); err != nil {
				t.Fatal(err)
			}
			clear(batch)
		}
	}
}

// evictionsOver returns the evictions the server of n counts while load
// runs.
func evictionsOver(t *testing.T, c *client.Client, n ring.Node, load func()) int64 {
	t.Helper()
	read := func() int64 {
		usage, err := c.NodeStats(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(usage, func(u client.NodeUsage) bool { return u.Node.Addr == n.Addr })
		return usage[i].Evictions
	}
	start := read()
	load()
	return read() - start
}

// dropMoved deletes every key from its node of from whose node changes in
// to: the sweep copies keys and leaves them behind, where their TTL would
// remove them in production; here they have none.
func dropMoved(t *testing.T, backend client.Backend, from, to []ring.Node) {
	t.Helper()
	oldRing, newRing := mustRing(t, from), mustRing(t, to)
	old := newTestClient(t, backend, from)
	var moved []string
	for i := range balanceKeys {
		if k := balanceKey(i); oldRing.Locate(k).Addr != newRing.Locate(k).Addr {
			moved = append(moved, k)
		}
	}
	for chunk := range slices.Chunk(moved, 500) {
		if err := old.DeleteMulti(context.Background(), chunk); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d of %d keys moved", len(moved), balanceKeys)
}

// TestBalanceBadInput: bad command lines exit 2 with a message naming the
// mistake, before any server is read.
func TestBalanceBadInput(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--backend", "mongo", "--nodes", "a=h:1"}, "--backend"},
		{[]string{"--nodes", "a=h:1*0"}, "weight"},
		{[]string{}, "want --nodes, or one of --etcd"},
		{[]string{"--nodes", "a=h:1", "--file", "x.json"}, "give only one"},
		{[]string{"--nodes", "a=h:1", "--vnodes", "0"}, "--vnodes"},
		{[]string{"--nodes", "a=h:1", "--hit-rate", "1"}, "--hit-rate"},
		{[]string{"--nodes", "a=h:1,a=h:2"}, "a"},
	} {
		code, _, errOut := runCmd(t, append([]string{"balance"}, tc.args...)...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("balance %q: exit %d, %q; want exit 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
}

// TestBalanceUnreadable: a node that does not answer fails the command,
// naming it, with nothing proposed and nothing written.
func TestBalanceUnreadable(t *testing.T) {
	servers := testserver.Redis(t, 2)
	_, list := fleet(servers)
	servers[1].Stop()
	file := filepath.Join(t.TempDir(), "nodes.json")
	code, out, errOut := runCmd(t, "balance", "--nodes", strings.Join(list, ","), "--write", file)
	if code != exitFail || !strings.Contains(errOut, "n1") || out != "" {
		t.Errorf("exit %d, stdout %q, stderr %q; want exit 1 naming n1", code, out, errOut)
	}
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Errorf("--write: %v, want no file", err)
	}
}

// TestBalanceTopologyFile: the nodes from a topology file (--file), one a
// Redis without maxmemory, taken at the machine's memory and said so. They
// hold almost nothing: --allow-low-fill (TestBalanceLowFill).
func TestBalanceTopologyFile(t *testing.T) {
	servers := append(testserver.RedisArgs(t, 1, "--maxmemory", "64mb"), testserver.Redis(t, 1)...)
	nodes, _ := fleet(servers)
	c := newTestClient(t, client.Redis, nodes)
	for i := range 200 {
		if err := c.Set(context.Background(), fmt.Sprintf("k:%d", i), []byte("v"), 0); err != nil {
			t.Fatal(err)
		}
	}
	file := filepath.Join(t.TempDir(), "topology.yaml")
	if err := os.WriteFile(file, []byte(fmt.Sprintf("nodes:\n  - {name: n0, addr: %q}\n  - {name: n1, addr: %q}\n", nodes[0].Addr, nodes[1].Addr)), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCmd(t, "balance", "--file", file, "--json", "--allow-low-fill")
	var rep balanceReport
	if code != exitOK || json.Unmarshal([]byte(out), &rep) != nil {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	if len(rep.Nodes) != 2 || rep.Nodes[0].LimitFrom != "maxmemory" || rep.Nodes[0].MemoryLimit != 64<<20 ||
		rep.Nodes[1].LimitFrom != "system" || rep.Nodes[1].Items == 0 || !strings.Contains(strings.Join(rep.Notes, "\n"), "n1 has no maxmemory") {
		t.Errorf("nodes %+v, notes %q: want n0's maxmemory, n1 at the machine's memory, noted", rep.Nodes, rep.Notes)
	}
}

// TestBalanceLowFill: nodes that hold almost nothing are not balanced
// without a word: balance refuses, saying why and what to do (exit 1, no
// usage line, nothing proposed or written); with --allow-low-fill it
// proposes, warning on stderr and in the output, text and JSON.
func TestBalanceLowFill(t *testing.T) {
	servers := testserver.RedisArgs(t, 3, "--maxmemory", "64mb")
	nodes, list := fleet(servers)
	c := newTestClient(t, client.Redis, nodes)
	for i := range 300 {
		if err := c.Set(context.Background(), fmt.Sprintf("k:%d", i), []byte("v"), 0); err != nil {
			t.Fatal(err)
		}
	}
	file := filepath.Join(t.TempDir(), "nodes.json")
	args := []string{"balance", "--nodes", strings.Join(list, ","), "--write", file}
	code, out, errOut := runCmd(t, args...)
	if code != exitFail || out != "" || strings.Contains(errOut, "Usage:") ||
		!strings.Contains(errOut, "of their memory limits on average") || !strings.Contains(errOut, "under the 10%") ||
		!strings.Contains(errOut, "No proposal") || !strings.Contains(errOut, "--allow-low-fill") {
		t.Fatalf("balance of nearly empty nodes: exit %d, want 1 refusing with the reason and the flag; stdout %q, stderr:\n%s", code, out, errOut)
	}
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Errorf("--write after the refusal: %v, want no file", err)
	}

	code, out, errOut = runCmd(t, append(args, "--allow-low-fill")...)
	if code != exitOK || !strings.Contains(errOut, "WARNING: the nodes fill") || !strings.Contains(out, "WARNING: the nodes fill") ||
		!strings.Contains(out, "--allow-low-fill: proposed anyway") || !strings.Contains(out, "Proposed node list") {
		t.Fatalf("balance --allow-low-fill: exit %d, want the proposal with a warning on stdout and stderr:\n%s%s", code, out, errOut)
	}
	if _, err := os.Stat(file); err != nil {
		t.Errorf("--write with --allow-low-fill: %v", err)
	}
	code, out, _ = runCmd(t, append(args, "--allow-low-fill", "--json")...)
	var rep balanceReport
	if code != exitOK || json.Unmarshal([]byte(out), &rep) != nil || !strings.Contains(rep.Warning, "under the 10%") {
		t.Fatalf("balance --allow-low-fill --json: exit %d, want its warning:\n%s", code, out)
	}
}
