package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"go/token"
	"go/types"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"golang.org/x/exp/apidiff"
	"golang.org/x/mod/modfile"
	"golang.org/x/mod/semver"
	"golang.org/x/tools/go/gcexportdata"
	"golang.org/x/tools/go/packages"
)

// The files of the module root apicheck reads and writes.
const (
	apiDir      = "api"              // api/vX.Y.Z/<package>.x, one directory per release
	listFile    = "api/packages.txt" // the packages checked
	changelog   = "CHANGELOG.md"
	exportExt   = ".x"
	breakingSec = "Breaking" // the subsection of Unreleased that acknowledges a break
)

// Write records the API of the listed packages of the module at root as
// version: api/<version>/<package>.x, each the package's import path on
// a line, then its export data (golang.org/x/exp/cmd/apidiff -w's
// format). CHANGELOG.md must have the version's heading already: the API
// is recorded from the commit that releases it.
func Write(root, version string, out io.Writer) error {
	if !semver.IsValid(version) || semver.Canonical(version) != version {
		return fmt.Errorf("version %q: want vMAJOR.MINOR.PATCH", version)
	}
	log, err := os.ReadFile(filepath.Join(root, changelog))
	if err != nil {
		return err
	}
	if !hasHeading(log, version) {
		return fmt.Errorf("%s has no heading for %s (## [%s] - DATE): write it first, then record the API", changelog, version, version[1:])
	}
	mod, list, err := packageList(root)
	if err != nil {
		return err
	}
	pkgs, err := load(root, token.NewFileSet(), mod, list)
	if err != nil {
		return err
	}
	dir := filepath.Join(root, apiDir, version)
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	for _, rel := range list {
		file := filepath.Join(dir, filepath.FromSlash(rel)+exportExt)
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			return err
		}
		var b bytes.Buffer
		fmt.Fprintln(&b, pkgs[rel].Path())
		// A file set of its own, which holds none of the package's files:
		// the export data then records no position, so that it holds no
		// path of this machine and changes only with the API.
		if err := gcexportdata.Write(&b, token.NewFileSet(), pkgs[rel]); err != nil {
			return fmt.Errorf("%s: %v", rel, err)
		}
		if err := os.WriteFile(file, b.Bytes(), 0o644); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "apicheck: recorded the API of %d packages in %s\n", len(list), filepath.ToSlash(filepath.Join(apiDir, version)))
	return nil
}

// Check compares the listed packages of the module at root with the API
// of the latest version recorded. It prints every change, and reports
// false if an incompatible one is not acknowledged in CHANGELOG.md.
func Check(root string, out io.Writer) (bool, error) {
	version, err := latest(filepath.Join(root, apiDir))
	if err != nil {
		return false, err
	}
	mod, list, err := packageList(root)
	if err != nil {
		return false, err
	}
	log, err := os.ReadFile(filepath.Join(root, changelog))
	if err != nil {
		return false, err
	}
	acks := acknowledgements(log)
	fset := token.NewFileSet()
	recorded, err := readRecorded(fset, filepath.Join(root, apiDir, version))
	if err != nil {
		return false, err
	}
	current, err := load(root, fset, mod, list)
	if err != nil {
		return false, err
	}

	var changes []change
	for _, rel := range slices.Sorted(maps.Keys(recorded)) {
		if current[rel] == nil {
			changes = append(changes, change{pkg: rel, msg: "package removed (no longer in " + listFile + ")"})
			continue
		}
		for _, c := range apidiff.Changes(recorded[rel], current[rel]).Changes {
			obj, msg, _ := strings.Cut(c.Message, ": ")
			changes = append(changes, change{pkg: rel, obj: obj, msg: msg, compatible: c.Compatible})
		}
	}
	for _, rel := range list {
		if recorded[rel] == nil {
			changes = append(changes, change{pkg: rel, msg: "package added", compatible: true})
		}
	}

	fmt.Fprintf(out, "apicheck: %d packages against the API of %s (%s)\n", len(list), version, filepath.ToSlash(filepath.Join(apiDir, version)))
	used := map[string]bool{}
	var unacked []change
	for _, c := range changes {
		by := c.acknowledgedBy(acks)
		for _, a := range by {
			used[a] = true
		}
		switch {
		case c.compatible:
			fmt.Fprintf(out, "apicheck: info: %s\n", c)
		case len(by) > 0:
			fmt.Fprintf(out, "apicheck: breaking, acknowledged by `%s`: %s\n", by[0], c)
		default:
			unacked = append(unacked, c)
			fmt.Fprintf(out, "apicheck: BREAKING, not acknowledged: %s\n", c)
		}
	}
	for _, a := range acks {
		if !used[a] && ownPackage(a, list, recorded) {
			fmt.Fprintf(out, "apicheck: info: `%s` under %q in %s names no change\n", a, "### "+breakingSec, changelog)
		}
	}
	if len(unacked) > 0 {
		fmt.Fprintf(out, "apicheck: FAIL: %d incompatible change(s) since %s. If the break is meant, say so in %s: under\n"+
			"  ## [Unreleased]\n  ### %s\na line naming each in backquotes, as `%s`, and why; else restore the API.\n",
			len(unacked), version, changelog, breakingSec, unacked[0].key())
		return false, nil
	}
	fmt.Fprintf(out, "apicheck: ok: no incompatible change since %s that %s does not acknowledge\n", version, changelog)
	return true, nil
}

// change is one change of one package's API.
type change struct {
	pkg        string // relative to the module
	obj        string // as apidiff names it: Foo, (*T).M, T.Field; "" for the package itself
	msg        string
	compatible bool
}

func (c change) String() string {
	if c.obj == "" {
		return c.pkg + ": " + c.msg
	}
	return c.pkg + "." + c.obj + ": " + c.msg
}

// key is the name that acknowledges the change: the package, the
// identifier, and the method or field if any, without pointers and type
// parameters: (*Cache[K, V]).Get in client is client.Cache.Get.
func (c change) key() string {
	if c.obj == "" {
		return c.pkg
	}
	return c.pkg + "." + normalize(c.obj)
}

var typeParams = regexp.MustCompile(`\[[^\]]*\]`)

func normalize(name string) string {
	return strings.NewReplacer("(", "", ")", "", "*", "").Replace(typeParams.ReplaceAllString(name, ""))
}

// acknowledgedBy returns the acknowledgements that name c, longest
// first: the package alone, or c's key or a prefix of it at a dot
// (client.Client acknowledges every change of client.Client.Get,
// client.Client.Set, ...).
func (c change) acknowledgedBy(acks []string) []string {
	var by []string
	key := c.key()
	for _, a := range acks {
		if a == c.pkg || key == a || strings.HasPrefix(key, a+".") {
			by = append(by, a)
		}
	}
	slices.SortStableFunc(by, func(a, b string) int { return len(b) - len(a) })
	return by
}

// ownPackage reports whether the acknowledgement a names one of the
// packages checked (so that a typo in it can be pointed out).
func ownPackage(a string, list []string, recorded map[string]*types.Package) bool {
	for _, p := range slices.AppendSeq(slices.Clone(list), maps.Keys(recorded)) {
		if a == p || strings.HasPrefix(a, p+".") {
			return true
		}
	}
	return false
}

var backquoted = regexp.MustCompile("`([^`]+)`")

// acknowledgements returns the normalized backquoted names of the lines
// of log's Unreleased section under its "### Breaking" heading.
func acknowledgements(log []byte) []string {
	var acks []string
	unreleased, breaking := false, false
	sc := bufio.NewScanner(bytes.NewReader(log))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "## "):
			unreleased, breaking = strings.Contains(strings.ToLower(line), "unreleased"), false
		case strings.HasPrefix(line, "### "):
			breaking = unreleased && strings.TrimSpace(line[4:]) == breakingSec
		case breaking:
			for _, m := range backquoted.FindAllStringSubmatch(line, -1) {
				acks = append(acks, normalize(strings.TrimSpace(m[1])))
			}
		}
	}
	return acks
}

// hasHeading reports whether log has a "## " heading for version: [0.3.0]
// as Keep a Changelog writes it, or v0.3.0.
func hasHeading(log []byte, version string) bool {
	for line := range strings.SplitSeq(string(log), "\n") {
		if strings.HasPrefix(line, "## ") && (strings.Contains(line, "["+version[1:]+"]") || strings.Contains(line, version+" ")) {
			return true
		}
	}
	return false
}

// packageList returns the module's path and the packages api/packages.txt
// lists, relative to it.
func packageList(root string) (mod string, list []string, err error) {
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return "", nil, err
	}
	mod = modfile.ModulePath(gomod)
	text, err := os.ReadFile(filepath.Join(root, listFile))
	if err != nil {
		return "", nil, err
	}
	for line := range strings.SplitSeq(string(text), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			list = append(list, line)
		}
	}
	if len(list) == 0 {
		return "", nil, fmt.Errorf("%s lists no package", listFile)
	}
	return mod, list, nil
}

// load type-checks the packages list of module mod at root.
func load(root string, fset *token.FileSet, mod string, list []string) (map[string]*types.Package, error) {
	paths := make([]string, len(list))
	for i, rel := range list {
		paths[i] = mod + "/" + rel
	}
	cfg := &packages.Config{Dir: root, Fset: fset, Mode: packages.NeedName | packages.NeedTypes}
	loaded, err := packages.Load(cfg, paths...)
	if err != nil {
		return nil, err
	}
	out := map[string]*types.Package{}
	var errs []error
	for _, p := range loaded {
		for _, e := range p.Errors {
			errs = append(errs, fmt.Errorf("%s: %v", p.PkgPath, e))
		}
		if rel, ok := strings.CutPrefix(p.PkgPath, mod+"/"); ok && len(p.Errors) == 0 {
			out[rel] = p.Types
		}
	}
	for _, rel := range list {
		if out[rel] == nil && len(errs) == 0 {
			errs = append(errs, fmt.Errorf("%s: listed in %s, not found in %s", rel, listFile, mod))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// readRecorded reads the export data of every package in dir, by path
// relative to the module.
func readRecorded(fset *token.FileSet, dir string) (map[string]*types.Package, error) {
	out := map[string]*types.Package{}
	err := filepath.WalkDir(dir, func(file string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(file, exportExt) {
			return err
		}
		rel, _ := filepath.Rel(dir, file)
		rel = filepath.ToSlash(strings.TrimSuffix(rel, exportExt))
		f, err := os.Open(file)
		if err != nil {
			return err
		}
		defer f.Close()
		r := bufio.NewReader(f)
		path, err := r.ReadString('\n')
		if err != nil {
			return fmt.Errorf("%s: %v", file, err)
		}
		pkg, err := gcexportdata.Read(r, fset, map[string]*types.Package{}, strings.TrimSuffix(path, "\n"))
		if err != nil {
			return fmt.Errorf("%s: %v", file, err)
		}
		out[rel] = pkg
		return nil
	})
	if len(out) == 0 && err == nil {
		err = fmt.Errorf("%s: no API recorded", dir)
	}
	return out, err
}

// latest returns the highest version recorded in dir (vX.Y.Z
// subdirectories).
func latest(dir string) (string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	best := ""
	for _, e := range entries {
		if v := e.Name(); e.IsDir() && semver.IsValid(v) && (best == "" || semver.Compare(v, best) > 0) {
			best = v
		}
	}
	if best == "" {
		return "", fmt.Errorf("%s: no version recorded (make api VERSION=vX.Y.Z)", dir)
	}
	return best, nil
}
