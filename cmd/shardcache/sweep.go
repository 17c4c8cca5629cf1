package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/shardcache/shardcache/client"
	"github.com/shardcache/shardcache/ring"
)

const sweepAbout = `Copies every key whose owner changes from the nodes of --from to those of
--to: each old node is walked (Redis SCAN; Memcached lru_crawler metadump)
and each moved key copied to its new owner with its value, its type and its
remaining TTL (Redis DUMP, PTTL and RESTORE; Memcached mg and add), never
over a value the new owner already has. Run it while the migration's window
is open in the application: after the new node list reaches every process,
before the window ends. It is safe to interrupt and run again, and to run
from several machines at once: what is already copied is skipped. First it
asks each server which protocol it speaks ("version"), and stops if that is
not --backend's. On Memcached each old node's listing is first written whole
to a file in --spool-dir (about the key's length plus 6 bytes a key), so that
the server's crawler is never held while keys are copied. --rate limits the
keys handled per second on each old node, so that the nodes keep serving
their traffic: 0 is the default, 10,000, as the library's SweepOptions.Rate
(v0.1.0's --rate 0 meant no limit); -1 lifts the limit. The summary says the
limit the sweep ran under.`

// sweepTimeout is the sweep command's default read and write timeout.
const sweepTimeout = 5 * time.Second

// sweepWindow is the sweep command's own migration window: the process
// serves no traffic, so its window only has to outlast the sweep.
const sweepWindow = 7 * 24 * time.Hour

func runSweep(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("sweep", "Copy the keys a change of nodes moves to their new owners.", sweepAbout)
	backend := fs.String("backend", "redis", "the servers' protocol: redis or memcached")
	from := fs.String("from", "", "the nodes before the change: a node `list` (see below)")
	to := fs.String("to", "", "the nodes after the change: a node `list`")
	rate := fs.Int("rate", client.DefaultSweepRate, fmt.Sprintf("the most listed keys handled per second on each old node; 0 is the default, %d, as in client.SweepOptions.Rate; -1 for no limit", client.DefaultSweepRate))
	spoolDir := fs.String("spool-dir", "", "Memcached: the `directory` each old node's key listing is written to before it is copied (default the system's temporary directory)")
	concurrency := fs.Int("concurrency", 0, "old nodes swept at once; 0 for all")
	vnodes := fs.Int("vnodes", ring.DefaultVnodes, "ring points per unit of weight, as the client's Options.Vnodes")
	equalize := addEqualizeFlag(fs.FlagSet)
	quiet := fs.Bool("quiet", false, "no progress bar on stderr")
	timeout := fs.Duration("timeout", sweepTimeout, "each read's and write's timeout")
	connFlags := addConnFlags(fs.FlagSet)
	if code, done := parseFlags(fs, args, stdout, stderr); done {
		return code
	}
	var b client.Backend
	switch *backend {
	case "redis":
		b = client.Redis
	case "memcached":
		b = client.Memcached
	default:
		return badInput(stderr, "sweep", "--backend %q: want redis or memcached", *backend)
	}
	if *from == "" || *to == "" {
		return badInput(stderr, "sweep", "give both --from and --to")
	}
	if *concurrency < 0 {
		return badInput(stderr, "sweep", "--concurrency %d: want 0 or more", *concurrency)
	}
	if *timeout <= 0 {
		return badInput(stderr, "sweep", "--timeout %v: want a positive duration", *timeout)
	}
	if err := checkEqualize(*equalize); err != nil {
		return badInput(stderr, "sweep", "%v", err)
	}
	fromNodes, err := parseNodes(*from)
	if err != nil {
		return badInput(stderr, "sweep", "--from: %v", err)
	}
	toNodes, err := parseNodes(*to)
	if err != nil {
		return badInput(stderr, "sweep", "--to: %v", err)
	}
	conn, err := connFlags.resolve(os.Getenv, stderr)
	if err != nil {
		return badInput(stderr, "sweep", "%v", err)
	}
	if err := checkBackend(ctx, b, nodeServers(fromNodes, toNodes), conn.tls,
		func(got client.Backend) string { return "--backend " + got.String() }); err != nil {
		return badInput(stderr, "sweep", "--backend %v: %v", b, err)
	}
	// A batch job, not a request's path: timeouts of seconds by default,
	// not the client's half second. Its migration is not the fleet's (its start is
	// now): its copies never replace a write's tombstone (client.MigrateFrom.Announced).
	opts := client.Options{
		Backend: b, Nodes: toNodes, Vnodes: *vnodes, Equalize: *equalize,
		MigrateFrom:  &client.MigrateFrom{Nodes: fromNodes, Start: time.Now(), Window: sweepWindow},
		ReadTimeout:  *timeout,
		WriteTimeout: *timeout,
	}
	conn.apply(&opts)
	c, err := client.New(opts)
	if err != nil {
		return badInput(stderr, "sweep", "%v", err)
	}
	defer c.Close()
	// A new node down would fail every key moved to it, one at a time:
	// refuse to start until every one answers.
	if down := downNodes(ctx, c, toNodes, *timeout); len(down) > 0 {
		return failed(stderr, "sweep", fmt.Errorf("a --to node does not answer (%s): sweep once every new node answers", strings.Join(down, "; ")))
	}

	// --rate means what SweepOptions.Rate means: 0 the default, negative
	// no limit.
	sweep := client.SweepOptions{Rate: *rate, Concurrency: *concurrency, SpoolDir: *spoolDir}
	var bar *progressbar.ProgressBar
	if !*quiet {
		sweep.Progress = func(s client.SweepStatus) {
			if bar == nil {
				bar = newBar(stderr, max(s.Keys, 1), "sweep", "keys")
			}
			if s.Scanned > s.Keys { // copies land on old nodes still being listed
				s.Keys = s.Scanned
				bar.ChangeMax64(s.Keys)
			}
			bar.Set64(s.Scanned)
		}
	}
	start := time.Now()
	s, err := c.Sweep(ctx, sweep)
	elapsed := time.Since(start)
	if bar != nil && err == nil {
		bar.Finish()
	}
	writeSweep(stdout, s, elapsed)
	switch {
	case ctx.Err() != nil:
		fmt.Fprintln(stderr, "shardcache sweep: interrupted: run it again to copy the rest")
		return exitFail
	case err != nil:
		failed(stderr, "sweep", err)
		if errors.Is(err, client.ErrSweepUnsupported) {
			fmt.Fprintln(stderr, "(Memcached needs lru_crawler metadump: version 1.4.31 or later, the LRU crawler on)")
		}
		return exitFail
	}
	return exitOK
}

// nodeServers returns the distinct servers of the lists, named as nodes.
func nodeServers(lists ...[]ring.Node) []server {
	var out []server
	seen := map[string]bool{}
	for _, nodes := range lists {
		for _, n := range nodes {
			if seen[n.Addr] {
				continue
			}
			seen[n.Addr] = true
			name := n.Addr
			if n.Name != "" && n.Name != n.Addr {
				name = fmt.Sprintf("node %s (%s)", n.Name, n.Addr)
			}
			out = append(out, server{addr: n.Addr, name: name})
		}
	}
	return out
}

// writeSweep prints a sweep's summary.
func writeSweep(w io.Writer, s client.SweepStatus, elapsed time.Duration) {
	rate := float64(s.Scanned) / max(elapsed.Seconds(), 1e-9)
	limit := "" // unknown: a sweep that did not start
	switch {
	case s.Rate > 0:
		limit = fmt.Sprintf(", limited to %d keys/s per node", s.Rate)
	case s.Rate < 0:
		limit = ", no rate limit"
	}
	fmt.Fprintf(w, "Swept %d of %s in %v: %s listed, %.0f keys/s (%.0f per node%s)\n",
		s.NodesDone, count(s.Nodes, "old node", ""), elapsed.Round(time.Millisecond), count(s.Scanned, "key", ""), rate, rate/float64(max(s.Nodes, 1)), limit)
	tw := newTable(w, 0)
	fmt.Fprintf(tw, "  copied to their new owner\t%d\n", s.Copied)
	fmt.Fprintf(tw, "  already copied (the same value on the new owner)\t%d\n", s.AlreadyCopied)
	fmt.Fprintf(tw, "  newer on the new owner (written or deleted since)\t%d\n", s.SkippedNewer)
	fmt.Fprintf(tw, "  not moved\t%d\n", s.SkippedUnmoved)
	fmt.Fprintf(tw, "  gone before they were read\t%d\n", s.Gone)
	fmt.Fprintf(tw, "  failed\t%d\n", s.Failed)
	tw.Flush()
}

// downNodes pings every node of c and returns the errors of those of
// nodes that did not answer within timeout, as the command prints errors.
func downNodes(ctx context.Context, c *client.Client, nodes []ring.Node, timeout time.Duration) []string {
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := c.Ping(pctx)
	if err == nil {
		return nil
	}
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	var down []string
	for _, e := range errs {
		var ne *client.NodeError
		if errors.As(e, &ne) && slices.ContainsFunc(nodes, func(n ring.Node) bool { return n.Addr == ne.Node.Addr }) {
			down = append(down, errText(ne))
		}
	}
	return down
}
