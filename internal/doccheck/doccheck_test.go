package doccheck

import (
	"encoding/json"
	"fmt"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// pages are the Markdown pages whose code must compile, relative to this
// package's directory.
func pages(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{"../../README.md"}, docs...)
}

// build compiles the shared sources as one package and every other source
// as a package of its own, under this package's directory, through an
// overlay (nothing is written into the source tree), and returns the go
// command's output and whether it succeeded.
func build(t *testing.T, sources []Source) (string, bool) {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command, to build the pages' code: %v", err)
	}
	here, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	overlay := map[string]map[string]string{"Replace": {}}
	var pkgs []string
	shared := false
	for i, src := range sources {
		file := filepath.Join(tmp, fmt.Sprintf("b%d.go", i))
		if err := os.WriteFile(file, []byte(src.Code), 0o644); err != nil {
			t.Fatal(err)
		}
		dir := fmt.Sprintf("gen/b%d", i)
		if src.Shared {
			dir = "gen/shared"
			if !shared {
				pkgs = append(pkgs, "./"+dir)
			}
			shared = true
		} else {
			pkgs = append(pkgs, "./"+dir)
		}
		overlay["Replace"][filepath.Join(here, dir, fmt.Sprintf("b%d.go", i))] = file
	}
	js, err := json.Marshal(overlay)
	if err != nil {
		t.Fatal(err)
	}
	ov := filepath.Join(tmp, "overlay.json")
	if err := os.WriteFile(ov, js, 0o644); err != nil {
		t.Fatal(err)
	}
	// Building several packages discards the results: nothing is linked.
	cmd := exec.Command(gobin, append([]string{"build", "-overlay", ov}, pkgs...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err == nil
}

// TestPagesCompile builds every Go block of README.md and docs/*.md, and
// both sides of every diff of whole files.
func TestPagesCompile(t *testing.T) {
	var sources []Source
	for _, p := range pages(t) {
		md, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimPrefix(p, "../../")
		n := 0
		for _, b := range Blocks(name, md) {
			if b.Lang == "diff" && len(b.Sources()) == 0 && strings.Contains(b.Code, "package ") {
				t.Errorf("%s:%d: a diff with a package clause whose sides are not whole files", name, b.Line)
			}
			src := b.Sources()
			n += len(src)
			sources = append(sources, src...)
		}
		t.Logf("%s: %d Go sources", name, n)
	}
	if len(sources) == 0 {
		t.Fatal("no Go code found in the pages")
	}
	if out, ok := build(t, sources); !ok {
		t.Fatalf("the pages' code does not compile:\n%s", out)
	}
}

// TestBrokenSnippetFails: a block that does not compile fails the build, and
// the error names the page and the block's line.
func TestBrokenSnippetFails(t *testing.T) {
	md := "# Page\n\ntext\n\n```go\nv, err := c.Get(ctx, \"k\")\n_ = v\nreturn errr\n```\n"
	blocks := Blocks("page.md", []byte(md))
	if len(blocks) != 1 {
		t.Fatalf("%d blocks, want 1", len(blocks))
	}
	out, ok := build(t, blocks[0].Sources())
	if ok || !strings.Contains(out, "page.md:8") || !strings.Contains(out, "errr") {
		t.Fatalf("build of a broken fragment: ok %v, output:\n%s", ok, out)
	}
}

// TestDiffSides: a diff of whole files compiles as the file before and the
// file after, line for line.
func TestDiffSides(t *testing.T) {
	diff := " package p\n\n-var x = 1\n+var x = \"one\"\n func f() {}\n"
	before, after := sides(diff)
	if before != "package p\n\nvar x = 1\n\nfunc f() {}\n" || after != "package p\n\n\nvar x = \"one\"\nfunc f() {}\n" {
		t.Fatalf("sides:\n%q\n%q", before, after)
	}
	if src := (Block{Lang: "diff", Code: "-a := 1\n+a := 2\n"}).Sources(); src != nil {
		t.Fatalf("a diff of statements gave %d sources, want none", len(src))
	}
}

// linkRE finds a Markdown link's or image's target.
var linkRE = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// TestLinks: every relative link of the pages names a file of the
// repository (an anchor is not checked).
func TestLinks(t *testing.T) {
	for _, p := range pages(t) {
		md, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range linkRE.FindAllStringSubmatch(string(md), -1) {
			target, _, _ := strings.Cut(m[1], "#")
			if target == "" || strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(p), target)); err != nil {
				t.Errorf("%s: a link to %s: %v", strings.TrimPrefix(p, "../../"), m[1], err)
			}
		}
	}
}

// testNameRE finds the tests, examples and benchmarks a page names in code
// spans: `TestSweepResume`, `BenchmarkHealth`, `TestNearCache*` (a prefix).
var testNameRE = regexp.MustCompile("`((?:Test|Example|Benchmark)[A-Za-z0-9_]*)(\\*?)`")

// TestNamedTestsExist: a test a page cites as its evidence exists, so that
// a page cannot point at a test that was renamed or removed.
func TestNamedTestsExist(t *testing.T) {
	funcs := map[string]bool{}
	funcRE := regexp.MustCompile(`(?m)^func ((?:Test|Example|Benchmark)[A-Za-z0-9_]*)\(`)
	err := filepath.WalkDir("../..", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range funcRE.FindAllStringSubmatch(string(src), -1) {
			funcs[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	named := 0
	for _, p := range pages(t) {
		md, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range testNameRE.FindAllStringSubmatch(string(md), -1) {
			named++
			found := funcs[m[1]]
			if m[2] == "*" {
				for f := range funcs {
					found = found || strings.HasPrefix(f, m[1])
				}
			}
			if !found {
				t.Errorf("%s names %s%s: no such test, example or benchmark", strings.TrimPrefix(p, "../../"), m[1], m[2])
			}
		}
	}
	t.Logf("the pages name %d tests, examples and benchmarks", named)
	if named == 0 {
		t.Fatal("the pages name no test")
	}
}

// TestDepsCoverFragment: every package Fragment imports outside the
// standard library is named in deps.go, which keeps its module in this
// module's go.mod.
func TestDepsCoverFragment(t *testing.T) {
	fset := token.NewFileSet()
	deps, err := parser.ParseFile(fset, "deps.go", nil, parser.ImportsOnly)
	if err != nil {
		t.Fatal(err)
	}
	frag, err := parser.ParseFile(fset, "fragment.go", fmt.Sprintf(Fragment, "f", ""), parser.ImportsOnly)
	if err != nil {
		t.Fatal(err)
	}
	named := map[string]bool{}
	for _, im := range deps.Imports {
		named[strings.Trim(im.Path.Value, `"`)] = true
	}
	for _, im := range frag.Imports {
		p := strings.Trim(im.Path.Value, `"`)
		if first, _, _ := strings.Cut(p, "/"); strings.Contains(first, ".") && !named[p] {
			t.Errorf("Fragment imports %s, which deps.go does not name", p)
		}
	}
}
