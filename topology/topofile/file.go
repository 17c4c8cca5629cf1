package topofile

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/shardcache/shardcache/topology"
)

// RetryWatch is the pause before Source tries again to watch a directory
// it could not watch.
const RetryWatch = time.Second

// watchDir returns a watcher of dir.
func watchDir(dir string) (*fsnotify.Watcher, error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("shardcache/topofile: watch %s: %w", dir, err)
	}
	if err := w.Add(dir); err != nil {
		w.Close()
		return nil, fmt.Errorf("shardcache/topofile: watch %s: %w", dir, err)
	}
	return w, nil
}

// send delivers u on ch unless ctx ends first, and reports whether it did.
func send(ctx context.Context, ch chan<- topology.Update, u topology.Update) bool {
	select {
	case ch <- u:
		return true
	case <-ctx.Done():
		return false
	}
}

// DefaultDebounce is how long Source waits after the last change in the
// file's directory before it reads the file: long enough for an editor's
// write, rename and chmod, or a ConfigMap's symlink swap, to settle.
const DefaultDebounce = 100 * time.Millisecond

// Source is a topology.Source reading a topology file (JSON, or YAML by its name, see
// Parse), for configuration management and Kubernetes ConfigMaps.
//
// It watches the file's directory, not the file, so that it follows an
// editor that writes a new file and renames it over the old one, and a
// ConfigMap volume, whose files are symlinks through a "..data" link that
// the kubelet swaps at each update. A file that cannot be read or parsed,
// or that fails topology.Check, is an Update with an error and changes nothing: the
// next good content is sent as it comes. A directory that cannot be
// watched (not created yet) is an error too, tried again each RetryWatch.
// A topology without a "version" gets its Digest as Version.
type Source struct {
	// Path is the file to read.
	Path string
	// Debounce is the quiet time after a change before reading; 0 means
	// DefaultDebounce.
	Debounce time.Duration
}

// Watch implements topology.Source.
func (f *Source) Watch(ctx context.Context) <-chan topology.Update {
	ch := make(chan topology.Update)
	go f.watch(ctx, ch)
	return ch
}

func (f *Source) watch(ctx context.Context, ch chan<- topology.Update) {
	defer close(ch)
	debounce := f.Debounce
	if debounce <= 0 {
		debounce = DefaultDebounce
	}
	// Watching before the first read misses no change in between. A
	// directory that cannot be watched (not there yet) is an error, and
	// tried again each RetryWatch.
	var w *fsnotify.Watcher
	for {
		var err error
		if w, err = watchDir(filepath.Dir(f.Path)); err == nil {
			break
		}
		if !send(ctx, ch, topology.Update{Err: err}) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(RetryWatch):
		}
	}
	defer w.Close()

	var good, bad []byte // the last content sent as a topology, and as an error
	read := func() bool {
		data, err := os.ReadFile(f.Path)
		switch {
		case err == nil && good != nil && bytes.Equal(data, good):
			return true
		case err == nil && bad != nil && bytes.Equal(data, bad):
			return true // reported already
		case err != nil:
			bad = nil
			return send(ctx, ch, topology.Update{Err: err})
		}
		t, err := Parse(data, FormatOf(f.Path))
		if err != nil {
			bad = data
			return send(ctx, ch, topology.Update{Err: fmt.Errorf("%s: %w", f.Path, err)})
		}
		good, bad = data, nil
		if t.Version == 0 {
			t.Version = t.Digest()
		}
		return send(ctx, ch, topology.Update{Topology: t})
	}
	if !read() {
		return
	}
	timer := time.NewTimer(debounce)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-w.Events:
			if !ok {
				return
			}
			// Any change in the directory may be the file's: its own
			// name, a temporary file renamed over it, or "..data".
			timer.Reset(debounce)
		case err, ok := <-w.Errors:
			if !ok {
				return
			}
			if !send(ctx, ch, topology.Update{Err: fmt.Errorf("shardcache/topofile: watch %s: %w", f.Path, err)}) {
				return
			}
			timer.Reset(debounce) // an overflow may have hidden a change
		case <-timer.C:
			if !read() {
				return
			}
		}
	}
}
