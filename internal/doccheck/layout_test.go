package doccheck

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// testTools are the packages at the end of docs/layout.md's table that may
// use anything above them: they test or measure it.
var testTools = []string{"internal/chaos", "internal/testserver", "internal/integration", "internal/doccheck", "bench"}

// modules returns the directories of the repository's modules, relative to
// its root ("." for the root module), in order: every directory, testdata
// aside, that holds a go.mod.
func modules(t *testing.T) []string {
	t.Helper()
	var dirs []string
	err := filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && d.Name() == "go.mod" {
			rel, err := filepath.Rel("../..", filepath.Dir(path))
			if err != nil {
				return err
			}
			dirs = append(dirs, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(dirs)
	return dirs
}

// TestModules: docs/layout.md lists every module of the repository (the
// Makefile finds them itself), and the root module is one.
func TestModules(t *testing.T) {
	mods := modules(t)
	if len(mods) < 2 || mods[0] != "." {
		t.Fatalf("modules %v: want the root module and more", mods)
	}
	md, err := os.ReadFile("../../docs/layout.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mods[1:] {
		if !strings.Contains(string(md), "`"+m+"/`") {
			t.Errorf("docs/layout.md does not list the module %s/ (as `%s/`)", m, m)
		}
	}
	t.Logf("modules: %v", mods)
}

// TestLayoutTable keeps docs/layout.md true: every package of every module
// of the repository falls under a row of its table, and imports flow down
// the table: a package imports only packages of rows below its own, of its
// own row, or its own parent's, the test tools aside.
func TestLayoutTable(t *testing.T) {
	md, err := os.ReadFile("../../docs/layout.md")
	if err != nil {
		t.Fatal(err)
	}
	var rows []string
	// The packages' table is the page's first; the modules' comes after.
	for _, line := range strings.Split(string(md), "\n") {
		if !strings.HasPrefix(line, "|") && len(rows) > 0 {
			break
		}
		if cells := strings.Split(line, "|"); len(cells) > 2 && strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			rows = append(rows, strings.TrimSuffix(strings.Trim(strings.TrimSpace(cells[1]), "`"), "/"))
		}
	}
	if len(rows) < 10 {
		t.Fatalf("docs/layout.md: %d rows found in its table", len(rows))
	}
	// row returns the row of package p: the longest row that is p or a
	// parent of it; -1 for none.
	row := func(p string) int {
		best := -1
		for i, r := range rows {
			if (p == r || strings.HasPrefix(p, r+"/")) && (best < 0 || len(r) > len(rows[best])) {
				best = i
			}
		}
		return best
	}
	const mod = "github.com/shardcache/shardcache/"
	var lines []string
	for _, m := range modules(t) {
		cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "./...")
		cmd.Dir = filepath.Join("../..", m)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list in the module %s: %v", m, err)
		}
		lines = append(lines, strings.Split(strings.TrimSpace(string(out)), "\n")...)
	}
	t.Logf("%d packages", len(lines))
	for _, line := range lines {
		fields := strings.Fields(line)
		p := strings.TrimPrefix(fields[0], mod)
		rp := row(p)
		if rp < 0 {
			t.Errorf("package %s has no row in docs/layout.md", p)
			continue
		}
		tool := false
		for _, tt := range testTools {
			tool = tool || p == tt || strings.HasPrefix(p, tt+"/")
		}
		for _, imp := range fields[1:] {
			x, ours := strings.CutPrefix(imp, mod)
			if !ours || tool || strings.HasPrefix(p, x+"/") {
				continue
			}
			if rx := row(x); rx < rp {
				t.Errorf("docs/layout.md: %s (row %d) imports %s (row %d), above it", p, rp+1, x, rx+1)
			}
		}
	}
}
