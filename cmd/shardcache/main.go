// Command shardcache shows what adding, removing or re-weighting cache nodes
// will do, before anyone touches production.
//
//	shardcache plan [flags]       exact shares, keys moved and flows of a change
//	shardcache simulate [flags]   a workload through the change, in three modes
//	shardcache sweep [flags]      copy the keys a change moves to their new owners
//	shardcache balance [flags]    how the data sits on the nodes; weights to even it
//	shardcache topology COMMAND   publish, show, status, watch a fleet's topology
//	shardcache version            the version, from the module's build information
//
// plan computes from the ring itself: each node's share of the keys before
// and after, the fraction of keys that move and where they go, and the hit
// rate right after the switch with and without a dual-ring migration.
//
// simulate runs a read-heavy cache-aside workload through the change, on
// embedded servers by default or on real Redis or Memcached servers, with
// mod-N placement, the ring, and the ring with a dual-ring migration side by
// side, and reports the hit rate and the database load step by step, as a
// table and an SVG chart.
//
// sweep copies, during a migration's window, every key whose owner changes
// to its new owner, with its type and remaining TTL, showing its progress
// and a summary.
//
// balance reads what every node's server holds (items, memory, its limit,
// evictions), prints it beside the ring's shares, and proposes weights that
// even out memory use, with the plan of that change; --write writes the
// node list with them.
//
// topology publishes a change of nodes to a fleet through etcd, with a start
// and a window every process shares (printing the plan first), shows the
// topology at etcd, in a file or in DNS, says how many processes run each
// version, and watches it change.
//
// Run "shardcache help COMMAND" for a command's flags, spelled --name (a
// single dash works too). Bad input exits with status 2 and a short usage
// line, a failure while running with status 1, and so does a request the
// command understood and refused (a change topology publish's checks
// refuse, nodes too empty to balance), with its reason alone.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"text/tabwriter"
)

// Exit statuses.
const (
	exitOK    = 0
	exitFail  = 1 // the command could not do its job
	exitUsage = 2 // bad command line or input
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// command is a subcommand.
type command struct {
	name, summary string
	run           func(ctx context.Context, args []string, stdout, stderr io.Writer) int
}

var commands = []command{
	{"plan", "exact shares, keys moved and flows of a change of nodes", runPlan},
	{"simulate", "a workload through mod-N, ring, dual-ring and dual-ring + sweep", runSimulate},
	{"sweep", "copy the keys a change moves to their new owners, during the window", runSweep},
	{"balance", "how the data sits on the nodes; weights that even out memory use", runBalance},
	{"topology", "publish, show, watch a fleet's topology (etcd, a file, DNS); status", runTopology},
	{"version", "the version of this build", runVersion},
}

// run runs the command line args (without the program name) and returns the
// exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	name, rest := args[0], args[1:]
	switch name {
	case "help", "-h", "-help", "--help":
		if len(rest) == 0 {
			usage(stdout)
			return exitOK
		}
		// "help topology publish": the subcommand's help, as a bad flag of
		// it says to run.
		name, rest = rest[0], append(rest[1:len(rest):len(rest)], "-h")
	case "-version", "--version":
		name = "version"
	}
	for _, c := range commands {
		if c.name == name {
			return c.run(ctx, rest, stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "shardcache: unknown command %q\n\n", name)
	usage(stderr)
	return exitUsage
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "Usage: shardcache COMMAND [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "See what adding, removing or re-weighting cache nodes will do, before doing it.")
	fmt.Fprintln(w)
	for _, c := range commands {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, `Run "shardcache help COMMAND" for its flags.`)
}

// newFlagSet returns a flag set for a command whose help starts with what
// it does (synopsis, then the lines of about) and ends with the flags and
// the node-list grammar. The flag package prints nothing itself:
// parseFlags says what went wrong.
func newFlagSet(name, synopsis, about string) *flagSet {
	fs := &flagSet{FlagSet: flag.NewFlagSet(name, flag.ContinueOnError)}
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.help = func(w io.Writer) {
		fmt.Fprintf(w, "Usage: shardcache %s [flags]\n\n%s\n\n%s\n\nFlags:\n", name, synopsis, about)
		printFlags(w, fs.FlagSet)
		fmt.Fprintf(w, "\n%s\n", nodesHelp)
	}
	return fs
}

// flagSet is a command's flags and its full help, printed on -h.
type flagSet struct {
	*flag.FlagSet
	help func(io.Writer)
}

// parseFlags parses args, and reports how the command should end when it
// should: on -h with exitOK, the help on stdout; on a bad flag or a stray
// argument with exitUsage, the error and a short usage line on stderr.
func parseFlags(fs *flagSet, args []string, stdout, stderr io.Writer) (code int, done bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.help(stdout)
			return exitOK, true
		}
		fmt.Fprintf(stderr, "shardcache %s: %s\n", fs.Name(), flagError(err))
		shortUsage(stderr, fs.Name())
		return exitUsage, true
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "shardcache %s: unexpected argument %q (flags come as --name value)\n", fs.Name(), fs.Arg(0))
		shortUsage(stderr, fs.Name())
		return exitUsage, true
	}
	return 0, false
}

// badInput reports a bad value and returns exitUsage.
func badInput(stderr io.Writer, cmd string, format string, args ...any) int {
	fmt.Fprintf(stderr, "shardcache %s: %s\n", cmd, cleanText(fmt.Sprintf(format, args...)))
	shortUsage(stderr, cmd)
	return exitUsage
}

// newTable returns a tabwriter for w with two spaces between columns, whose
// lines reach w without trailing spaces.
func newTable(w io.Writer, flags uint) *tabwriter.Writer {
	return tabwriter.NewWriter(&trimWriter{w: w}, 0, 0, 2, ' ', flags)
}

// trimWriter writes whole lines to w, without their trailing spaces.
type trimWriter struct {
	w    io.Writer
	line []byte
}

func (t *trimWriter) Write(p []byte) (int, error) {
	for _, b := range p {
		if b != '\n' {
			t.line = append(t.line, b)
			continue
		}
		t.line = append(bytes.TrimRight(t.line, " "), '\n')
		if _, err := t.w.Write(t.line); err != nil {
			return 0, err
		}
		t.line = t.line[:0]
	}
	return len(p), nil
}
