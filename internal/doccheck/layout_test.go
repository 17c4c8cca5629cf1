package doccheck

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// testTools are the packages at the end of docs/layout.md's table that may
// use anything above them: they test it.
var testTools = []string{"internal/chaos", "internal/testserver", "internal/doccheck"}

// TestLayoutTable keeps docs/layout.md true: every package of the module
// (bench's module aside) falls under a row of its table, and imports flow
// down the table: a package imports only packages of rows below its own,
// of its own row, or its own parent's, the test tools aside.
func TestLayoutTable(t *testing.T) {
	md, err := os.ReadFile("../../docs/layout.md")
	if err != nil {
		t.Fatal(err)
	}
	var rows []string
	for _, line := range strings.Split(string(md), "\n") {
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
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "./...")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
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
