package topofile

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/shardcache/shardcache/topology"
)

// receive returns the next update within 10 s, failing the test otherwise.
func receive(t *testing.T, ch <-chan topology.Update) topology.Update {
	t.Helper()
	select {
	case u, ok := <-ch:
		if !ok {
			t.Fatal("the stream closed")
		}
		return u
	case <-time.After(10 * time.Second):
		t.Fatal("no update within 10 s")
	}
	return topology.Update{}
}

// wantNodes receives the next update and checks that it is a topology of
// n nodes.
func wantNodes(t *testing.T, ch <-chan topology.Update, n int) *topology.Topology {
	t.Helper()
	u := receive(t, ch)
	if u.Err != nil || u.Topology == nil || len(u.Topology.Nodes) != n {
		t.Fatalf("update %+v (error %v), want a topology of %d nodes", u.Topology, u.Err, n)
	}
	return u.Topology
}

// nodeList returns a JSON list of n nodes.
func nodeList(n int) string {
	s := "["
	for i := range n {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf(`{"name": "c%d", "addr": "10.0.0.%d:11211"}`, i, i+1)
	}
	return s + "]"
}

// watchFile starts a File source on path and stops it at the test's end.
func watchFile(t *testing.T, path string) <-chan topology.Update {
	ctx, cancel := context.WithCancel(context.Background())
	ch := (&Source{Path: path, Debounce: 20 * time.Millisecond}).Watch(ctx)
	t.Cleanup(func() {
		cancel()
		for range ch { // closed once the watcher has stopped
		}
	})
	return ch
}

func write(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestFileRewrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "topology.json")
	write(t, path, nodeList(4))
	ch := watchFile(t, path)
	first := wantNodes(t, ch, 4)
	if first.Version != first.Digest() {
		t.Errorf("version %d, want the digest %d of a file without one", first.Version, first.Digest())
	}
	write(t, path, nodeList(5))
	wantNodes(t, ch, 5)
	// A version written in the file is kept.
	write(t, path, `{"version": 42, "nodes": `+nodeList(6)+`}`)
	if got := wantNodes(t, ch, 6); got.Version != 42 {
		t.Errorf("version %d, want 42", got.Version)
	}
}

func TestFileRenameReplace(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "topology.yaml")
	write(t, path, "- addr: h:1\n")
	ch := watchFile(t, path)
	wantNodes(t, ch, 1)
	// As editors and config management write: a new file, renamed over.
	tmp := filepath.Join(dir, ".topology.yaml.swp")
	write(t, tmp, "- addr: h:1\n- addr: h:2\n")
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	wantNodes(t, ch, 2)
	// Removed, then written anew.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if u := receive(t, ch); !errors.Is(u.Err, os.ErrNotExist) || u.Topology != nil {
		t.Fatalf("update after the file was removed: %+v, want os.ErrNotExist", u)
	}
	write(t, path, "- addr: h:1\n- addr: h:2\n- addr: h:3\n")
	wantNodes(t, ch, 3)
}

// TestFileConfigMapSwap updates a file as the kubelet updates a ConfigMap
// volume: the file is a symlink through "..data" to a timestamped
// directory, and an update swaps "..data" by renaming a new symlink over it.
func TestFileConfigMapSwap(t *testing.T) {
	dir := t.TempDir()
	version := func(name, text string) {
		t.Helper()
		if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(dir, name, "topology.json"), text)
	}
	version("..2026_05_01_10_00_00.1", nodeList(4))
	if err := os.Symlink("..2026_05_01_10_00_00.1", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "topology.json")
	if err := os.Symlink("..data/topology.json", path); err != nil {
		t.Fatal(err)
	}
	ch := watchFile(t, path)
	wantNodes(t, ch, 4)

	version("..2026_05_01_11_00_00.2", nodeList(5))
	if err := os.Symlink("..2026_05_01_11_00_00.2", filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, "..2026_05_01_10_00_00.1")); err != nil {
		t.Fatal(err)
	}
	wantNodes(t, ch, 5)
}

// TestFileBadKeepsLastGood checks that a broken or invalid file is an
// error and sends no topology, and that the next good one comes through.
func TestFileBadKeepsLastGood(t *testing.T) {
	path := filepath.Join(t.TempDir(), "topology.json")
	write(t, path, nodeList(4))
	ch := watchFile(t, path)
	wantNodes(t, ch, 4)
	for _, bad := range []struct {
		text string
		want error
	}{
		{`[{"addr": "10.0.0.1:11211", "wieght": 2}]`, ErrParse},
		{`[]`, topology.ErrNoNodes},
		{`[{"addr": "10.0.0.1:11211"}, {"addr": "10.0.0.1:11211"}]`, topology.ErrDuplicateAddr},
		{`[{"addr": "10.0.0.1:11211 "}]`, topology.ErrBadAddr},
	} {
		write(t, path, bad.text)
		if u := receive(t, ch); !errors.Is(u.Err, bad.want) || u.Topology != nil {
			t.Fatalf("update for %s: %+v, want %v and no topology", bad.text, u, bad.want)
		}
	}
	write(t, path, nodeList(3))
	wantNodes(t, ch, 3)
}

func TestFileMissingAtStart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "topology.json")
	ch := watchFile(t, path)
	if u := receive(t, ch); !errors.Is(u.Err, os.ErrNotExist) {
		t.Fatalf("first update of a missing file: %+v, want os.ErrNotExist", u)
	}
	write(t, path, nodeList(2))
	wantNodes(t, ch, 2)
}

// TestFileDirectoryLater checks that a directory missing at the start is
// an error, watched once it exists.
func TestFileDirectoryLater(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "config")
	path := filepath.Join(dir, "topology.json")
	ch := watchFile(t, path)
	if u := receive(t, ch); !errors.Is(u.Err, os.ErrNotExist) || u.Topology != nil {
		t.Fatalf("first update without the directory: %+v, want os.ErrNotExist", u)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, path, nodeList(2))
	for {
		u := receive(t, ch)
		if u.Err != nil {
			continue // retried before the directory was there
		}
		if len(u.Topology.Nodes) != 2 {
			t.Fatalf("update %+v, want 2 nodes", u.Topology)
		}
		break
	}
}
