// Package doccheck finds the Go code of the project's Markdown pages and turns
// each block into a Go source file, so that a test can build them all: a page
// whose snippet no longer compiles fails `make test`, as an Example would.
//
// A block fenced as ```go is either a whole file (its first line of code
// starts with "package") or a fragment: statements, compiled as the body of
// a function whose parameters are the names a page may use without declaring
// them, ctx (a context.Context), c (a *client.Client) and nodes (a
// []ring.Node), in a file that imports the packages of Fragment's header. A
// block fenced as ```diff whose two sides are whole files is compiled on both
// sides: the program before the change and after it. Every file starts with a
// //line directive, so that the compiler names the page and its line.
//
// The package's test also checks that every relative link of a page names a
// file, and that every test, example or benchmark a page names in a code
// span (its evidence) exists.
package doccheck

import (
	"bufio"
	"bytes"
	"fmt"
	"regexp"
	"strings"
)

// A Block is one fenced code block of a page.
type Block struct {
	Page string // the page's name, as the compiler's errors will say it
	Line int    // the line of the block's first line of code, from 1
	Lang string // the fence's info string: "go", "diff", "sh", ...
	Code string // the lines between the fences
}

// Blocks returns the fenced code blocks of a Markdown page, in order.
func Blocks(page string, md []byte) []Block {
	var (
		out   []Block
		cur   *Block
		fence string
		code  strings.Builder
	)
	sc := bufio.NewScanner(bytes.NewReader(md))
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimLeft(line, " ")
		switch {
		case cur == nil && strings.HasPrefix(trimmed, "```"):
			fence = trimmed[:len(trimmed)-len(strings.TrimLeft(trimmed, "`"))]
			cur = &Block{Page: page, Line: n + 1, Lang: strings.TrimSpace(trimmed[len(fence):])}
			code.Reset()
		case cur != nil && strings.HasPrefix(trimmed, fence) && strings.TrimSpace(trimmed[len(fence):]) == "":
			cur.Code = code.String()
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			code.WriteString(line)
			code.WriteByte('\n')
		}
	}
	return out
}

// A Source is one Go file a block stands for.
type Source struct {
	Code string
	// Shared is true for a file of package snippet (a fragment, an import
	// block): such files may be compiled together, as one package, since
	// each declares a function of its own name. The others are packages of
	// their own.
	Shared bool
}

// Sources returns the Go files b stands for: one for a go block, two (before
// and after) for a diff of whole files, none for any other block.
func (b Block) Sources() []Source {
	switch b.Lang {
	case "go":
		if first := firstCode(b.Code); strings.HasPrefix(first, "import") {
			return []Source{{Code: b.imports(), Shared: true}}
		}
		if isFile(b.Code) {
			return []Source{{Code: lineDirective(b.Page, b.Line) + b.Code}}
		}
		return []Source{{Code: b.fragment(), Shared: true}}
	case "diff":
		before, after := sides(b.Code)
		if !isFile(before) || !isFile(after) {
			return nil
		}
		return []Source{{Code: lineDirective(b.Page, b.Line) + before}, {Code: lineDirective(b.Page, b.Line) + after}}
	}
	return nil
}

// firstCode is code's first line that is neither blank nor a comment.
func firstCode(code string) string {
	for _, l := range strings.Split(code, "\n") {
		l = strings.TrimSpace(l)
		if l != "" && !strings.HasPrefix(l, "//") {
			return l
		}
	}
	return ""
}

// isFile reports whether code is a whole Go file: it starts with a package
// clause.
func isFile(code string) bool {
	return strings.HasPrefix(firstCode(code), "package ")
}

// importPathRE finds the quoted paths of an import block.
var importPathRE = regexp.MustCompile(`"([^"]+)"`)

// imports is an import block's file: the same paths imported for their
// side effects only (the block names them, it uses none), so that the build
// checks each exists.
func (b Block) imports() string {
	var f strings.Builder
	f.WriteString("package snippet\n\n")
	f.WriteString(lineDirective(b.Page, b.Line))
	for _, line := range strings.SplitAfter(b.Code, "\n") {
		f.WriteString(importPathRE.ReplaceAllString(line, `_ "$1"`))
	}
	return f.String()
}

// sides splits a unified diff's lines into the file before (context and "-"
// lines) and the file after (context and "+" lines). Lines are kept, blank,
// where the other side has them, so that a compiler's line numbers stay
// those of the page.
func sides(diff string) (before, after string) {
	var b, a strings.Builder
	for _, l := range strings.SplitAfter(diff, "\n") {
		if l == "" {
			continue
		}
		switch l[0] {
		case '-':
			b.WriteString(l[1:])
			a.WriteString("\n")
		case '+':
			a.WriteString(l[1:])
			b.WriteString("\n")
		case ' ':
			b.WriteString(l[1:])
			a.WriteString(l[1:])
		default: // an empty context line, written without its space
			b.WriteString(l)
			a.WriteString(l)
		}
	}
	return b.String(), a.String()
}

func lineDirective(page string, line int) string {
	return fmt.Sprintf("//line %s:%d\n", page, line)
}

// Fragment is the file a fragment is compiled in: its package clause and
// imports, a use of each import (a fragment need not use them all), and the
// function whose body the fragment becomes (its name, then the line
// directive and the fragment).
const Fragment = `package snippet

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/extra/redisotel/v9"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/shardcache/shardcache/client"
	"github.com/shardcache/shardcache/compat/gomemcache"
	"github.com/shardcache/shardcache/compat/goredis"
	"github.com/shardcache/shardcache/promstats"
	"github.com/shardcache/shardcache/ring"
	"github.com/shardcache/shardcache/topology"
	"github.com/shardcache/shardcache/topology/etcdsource"
	"github.com/shardcache/shardcache/topology/topofile"
)

var (
	_ = context.Background
	_ tls.Config
	_ = x509.NewCertPool
	_ = errors.Is
	_ = fmt.Sprint
	_ = log.Print
	_ = slog.Default
	_ = http.Handle
	_ = os.Getenv
	_ = time.Second
	_ = memcache.New
	_ = prometheus.NewRegistry
	_ = promhttp.HandlerFor
	_ = redisotel.InstrumentTracing
	_ = redis.NewClient
	_ = clientv3.New
	_ = client.New
	_ = gomemcache.New
	_ = goredis.New
	_ = promstats.New
	_ = ring.New
	_ = topology.Validate
	_ etcdsource.Source
	_ topofile.Source
)

func %s(ctx context.Context, c *client.Client, nodes []ring.Node) error {
	{
%s
	}
	return nil
}
`

// fragment wraps a fragment in Fragment.
func (b Block) fragment() string {
	return fmt.Sprintf(Fragment, b.funcName(), lineDirective(b.Page, b.Line)+strings.TrimRight(b.Code, "\n"))
}

// nonIdent finds the runs of a page's name that cannot be in an identifier.
var nonIdent = regexp.MustCompile(`[^A-Za-z0-9]+`)

// funcName names b's function after its page and line, so that the
// fragments of every page can share a package.
func (b Block) funcName() string {
	return fmt.Sprintf("snippet_%s_%d", nonIdent.ReplaceAllString(b.Page, "_"), b.Line)
}
