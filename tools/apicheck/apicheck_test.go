package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// module writes a module example.com/m at a temporary directory: files by
// path relative to it.
func module(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	files["go.mod"] = "module example.com/m\n\ngo 1.26.0\n"
	for name, text := range files {
		edit(t, root, name, text)
	}
	return root
}

func edit(t *testing.T, root, name, text string) {
	t.Helper()
	file := filepath.Join(root, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// check runs Check and returns its verdict and output.
func check(t *testing.T, root string) (bool, string) {
	t.Helper()
	var out strings.Builder
	ok, err := Check(root, &out)
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	return ok, out.String()
}

const changelog0 = "# Changelog\n\n## [Unreleased]\n\n## [0.1.0] - 2026-01-01\n\n### Added\n\n- `p`.\n"

// TestCheck records a module's API, then changes it: a removal fails the
// check until the CHANGELOG's Unreleased section acknowledges it under
// "### Breaking", an addition passes with an information line.
func TestCheck(t *testing.T) {
	root := module(t, map[string]string{
		"api/packages.txt": "# the packages\np\nq/r\n",
		"p/p.go":           "package p\n\nfunc A() {}\n\nfunc B() {}\n\ntype T struct{ X int }\n\nfunc (*T) M() {}\n",
		"q/r/r.go":         "package r\n\nconst N = 1\n",
		"internal/i/i.go":  "package i\n\nfunc Hidden() {}\n",
		"CHANGELOG.md":     changelog0,
	})
	var out strings.Builder
	if err := Write(root, "v0.2.0", &out); err == nil || !strings.Contains(err.Error(), "no heading for v0.2.0") {
		t.Fatalf("Write of a version the CHANGELOG does not head: %v; want a refusal", err)
	}
	if err := Write(root, "v0.1.0", &out); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"api/v0.1.0/p.x", "api/v0.1.0/q/r.x"} {
		if _, err := os.Stat(filepath.Join(root, f)); err != nil {
			t.Fatal(err)
		}
	}
	if ok, out := check(t, root); !ok || strings.Contains(out, "info:") || strings.Contains(out, "BREAKING") {
		t.Fatalf("unchanged module: ok %v\n%s", ok, out)
	}

	// B removed: fails, naming it.
	edit(t, root, "p/p.go", "package p\n\nfunc A() {}\n\ntype T struct{ X int }\n\nfunc (*T) M() {}\n")
	ok, got := check(t, root)
	if ok || !strings.Contains(got, "BREAKING, not acknowledged: p.B: removed") || !strings.Contains(got, "`p.B`") {
		t.Fatalf("B removed: ok %v\n%s", ok, got)
	}

	// Acknowledged in an earlier release's section: still fails.
	edit(t, root, "CHANGELOG.md", strings.Replace(changelog0, "### Added", "### Breaking\n\n- `p.B` removed.\n\n### Added", 1))
	if ok, got := check(t, root); ok {
		t.Fatalf("B removed, acknowledged under 0.1.0 only: ok\n%s", got)
	}

	// Acknowledged under Unreleased: passes. C added: an information line.
	edit(t, root, "CHANGELOG.md", strings.Replace(changelog0, "## [Unreleased]\n",
		"## [Unreleased]\n\n### Breaking\n\n- `p.B` is removed: nothing called it.\n- `p.Typo` matches nothing.\n", 1))
	edit(t, root, "p/p.go", "package p\n\nfunc A() {}\n\nfunc C() {}\n\ntype T struct{ X int }\n\nfunc (*T) M() {}\n")
	ok, got = check(t, root)
	for _, want := range []string{"breaking, acknowledged by `p.B`: p.B: removed", "info: p.C: added", "`p.Typo`", "names no change"} {
		if !ok || !strings.Contains(got, want) {
			t.Fatalf("B removed and acknowledged, C added: ok %v, want %q in\n%s", ok, want, got)
		}
	}

	// A method removed and a field's type changed: their type's name
	// acknowledges both; the package's name acknowledges everything in it.
	edit(t, root, "p/p.go", "package p\n\nfunc A() {}\n\nfunc C() {}\n\ntype T struct{ X string }\n")
	if ok, got := check(t, root); ok || !strings.Contains(got, "p.(*T).M: removed") || !strings.Contains(got, "p.T.X: changed") {
		t.Fatalf("T.M removed, T.X changed, unacknowledged: ok %v\n%s", ok, got)
	}
	for _, ack := range []string{"`p.T` and `p.B`", "`p`"} {
		edit(t, root, "CHANGELOG.md", strings.Replace(changelog0, "## [Unreleased]\n", "## [Unreleased]\n\n### Breaking\n\n- "+ack+".\n", 1))
		if ok, got := check(t, root); !ok {
			t.Fatalf("acknowledged by %s: fails\n%s", ack, got)
		}
	}

	// A package dropped from the list: a break, acknowledged by its path.
	edit(t, root, "api/packages.txt", "p\n")
	if ok, got := check(t, root); ok || !strings.Contains(got, "q/r: package removed") {
		t.Fatalf("q/r dropped: ok %v\n%s", ok, got)
	}
	edit(t, root, "CHANGELOG.md", strings.Replace(changelog0, "## [Unreleased]\n", "## [Unreleased]\n\n### Breaking\n\n- `p`, and `q/r` is gone.\n", 1))
	if ok, got := check(t, root); !ok {
		t.Fatalf("q/r dropped, acknowledged: fails\n%s", got)
	}

	// A package added to the list: information.
	edit(t, root, "api/packages.txt", "p\nq/r\nnewpkg\n")
	edit(t, root, "newpkg/n.go", "package newpkg\n\nfunc New() {}\n")
	if ok, got := check(t, root); !ok || !strings.Contains(got, "info: newpkg: package added") {
		t.Fatalf("newpkg added: ok %v\n%s", ok, got)
	}

	// The latest version recorded is the reference.
	edit(t, root, "CHANGELOG.md", "## [Unreleased]\n\n## [0.10.0] - 2026-02-01\n\n"+changelog0)
	if err := Write(root, "v0.10.0", &out); err != nil {
		t.Fatal(err)
	}
	edit(t, root, "CHANGELOG.md", "## [Unreleased]\n\n## [0.10.0] - 2026-02-01\n")
	if ok, got := check(t, root); !ok || !strings.Contains(got, "API of v0.10.0") || strings.Contains(got, "info:") {
		t.Fatalf("against v0.10.0, unchanged since: ok %v\n%s", ok, got)
	}
}

// TestCheckListedPackageMissing: a package listed that the module does
// not have is an error, not a pass.
func TestCheckListedPackageMissing(t *testing.T) {
	root := module(t, map[string]string{
		"api/packages.txt": "p\n",
		"p/p.go":           "package p\n\nfunc A() {}\n",
		"CHANGELOG.md":     changelog0,
	})
	if err := Write(root, "v0.1.0", new(strings.Builder)); err != nil {
		t.Fatal(err)
	}
	edit(t, root, "api/packages.txt", "p\ngone\n")
	if _, err := Check(root, new(strings.Builder)); err == nil {
		t.Fatal("a listed package missing: no error")
	}
}

func TestAcknowledgements(t *testing.T) {
	log := "# Changelog\n\n`x.Before`\n\n## [Unreleased]\n\n### Changed\n\n- `client.Changed` is not a break.\n\n" +
		"### Breaking\n\n- `client.Options` and `(*client.Client).Get`, also\n  `ring.Ring[K]` on a continued line.\n\n" +
		"### Fixed\n\n- `client.Fixed`\n\n## [0.2.0] - 2026-12-08\n\n### Breaking\n\n- `client.Old`\n"
	got := acknowledgements([]byte(log))
	if want := []string{"client.Options", "client.Client.Get", "ring.Ring"}; !slices.Equal(got, want) {
		t.Fatalf("acknowledgements: %q, want %q", got, want)
	}
}

// TestRepositoryAPI is the check make test runs, on this repository.
func TestRepositoryAPI(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the module's packages")
	}
	if ok, out := check(t, "../.."); !ok {
		t.Fatalf("the repository's API:\n%s", out)
	} else {
		t.Log(out)
	}
}
