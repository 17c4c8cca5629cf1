package main

import (
	"flag"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"strings"
)

// helpWidth is the width the flags' descriptions are wrapped to.
const helpWidth = 80

// nbsp joins words that wrap must not break apart (strings.Fields, which
// wrap splits with, would split at U+00A0).
const nbsp = "\x00"

// printFlags writes fs's flags as the README spells them, --name, each with
// its argument's name, its description wrapped under it and its default
// when it is not the zero value: flag.PrintDefaults writes -name.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		arg, usage := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if arg != "" {
			line += " " + arg
		}
		fmt.Fprintln(w, line)
		if !isZeroValue(f) {
			def := fmt.Sprintf("(default %v)", f.DefValue)
			if reflect.TypeOf(f.Value).Elem().Kind() == reflect.String {
				def = fmt.Sprintf("(default %q)", f.DefValue)
			}
			usage += " " + strings.ReplaceAll(def, " ", nbsp) // on one line
		}
		for _, l := range wrap(usage, helpWidth-6) {
			fmt.Fprintf(w, "      %s\n", strings.ReplaceAll(l, nbsp, " "))
		}
	})
}

// isZeroValue reports whether f's default is its type's zero value, as the
// flag package decides when to print "(default ...)".
func isZeroValue(f *flag.Flag) bool {
	t := reflect.TypeOf(f.Value)
	if t.Kind() != reflect.Pointer {
		return f.DefValue == ""
	}
	zero, ok := reflect.New(t.Elem()).Interface().(flag.Value)
	return ok && f.DefValue == zero.String()
}

// wrap breaks s into lines of at most width bytes at spaces; a longer word
// keeps a line of its own.
func wrap(s string, width int) []string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(s) {
		switch {
		case line == "":
			line = word
		case len(line)+1+len(word) > width:
			lines = append(lines, line)
			line = word
		default:
			line += " " + word
		}
	}
	return append(lines, line)
}

// flagNameRE finds a flag's name as the flag package's errors write it,
// "-name", after "flag " or ": " (or at the start).
var flagNameRE = regexp.MustCompile(`(^|flag |: )-([A-Za-z0-9])`)

// flagError rewrites an error of the flag package with --name, the
// spelling of the help and the README.
func flagError(err error) string {
	return flagNameRE.ReplaceAllString(err.Error(), "$1--$2")
}

// shortUsage writes the line a bad command line ends with: the synopsis
// and where the flags are explained, instead of all of them.
func shortUsage(w io.Writer, cmd string) {
	fmt.Fprintf(w, "Usage: shardcache %s [flags]; \"shardcache help %s\" explains them.\n", cmd, cmd)
}

// prefixRE finds the package prefixes of the library's errors, "shardcache: "
// and "shardcache/ring: ", at the start of a line or of a wrapped cause.
var prefixRE = regexp.MustCompile(`(?m)(^|: )shardcache(/[a-z]+)?: `)

// errText is err's message with the library's prefixes taken out: printed
// after "shardcache COMMAND: ", they would say the program's name again at
// every layer of wrapping ("shardcache sweep: shardcache: sweep on node b
// (...): shardcache: node cannot be swept").
func errText(err error) string {
	return cleanText(err.Error())
}

// nodeRE finds a node as the client's errors name it, "node NAME (ADDR)".
var nodeRE = regexp.MustCompile(`node (\S+) \(([^()\s]+)\)`)

// cleanText is errText of a message already formatted. A node named by its
// address, as a node list without names gives it, is said once: "node
// h:1", not "node h:1 (h:1)".
func cleanText(msg string) string {
	msg = prefixRE.ReplaceAllString(strings.TrimSpace(msg), "$1")
	return nodeRE.ReplaceAllStringFunc(msg, func(m string) string {
		if sub := nodeRE.FindStringSubmatch(m); sub[1] == sub[2] {
			return "node " + sub[1]
		}
		return m
	})
}

// refused reports a request the command understood and refused (a change
// the topology's checks refuse, a migration not over yet) and returns
// exitFail. No usage line follows: the command line was not at fault, and
// the reason says what to do.
func refused(stderr io.Writer, cmd string, format string, args ...any) int {
	fmt.Fprintf(stderr, "shardcache %s: %s\n", cmd, cleanText(fmt.Sprintf(format, args...)))
	return exitFail
}

// failed reports an error that stopped a command and returns exitFail.
func failed(stderr io.Writer, cmd string, err error) int {
	fmt.Fprintf(stderr, "shardcache %s: %s\n", cmd, errText(err))
	return exitFail
}

// count writes n and the noun, in the plural unless n is 1: "1 node",
// "2 nodes". plural is the noun's plural, or "" to add an s.
func count[N int | int64](n N, noun, plural string) string {
	if n == 1 {
		return "1 " + noun
	}
	if plural == "" {
		plural = noun + "s"
	}
	return fmt.Sprintf("%d %s", n, plural)
}

// nodeCount is count(n, "node", ""): "1 node", "3 nodes".
func nodeCount(n int) string { return count(n, "node", "") }
