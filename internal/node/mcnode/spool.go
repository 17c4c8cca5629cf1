package mcnode

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"os"

	"github.com/shardcache/shardcache/internal/node"
)

// A spool holds a node's listing while the sweep works through it, so that
// the listing is read as fast as the server sends it, whatever the sweep
// does per page. A listing left unread holds memcached's crawler, and its
// hash table's growth; before 1.6.39 the crawler waits holding an item
// lock, and every command to that lock's keys, from any client, waits with
// it (a sweep's own reads of the old node among them).
//
// The keys go to a temporary file in the sweep's spool directory (default
// os.TempDir()), a uvarint length, the key and a varint expiry each: about
// len(key)+6 bytes per key on disk, and a fixed 64 KiB of buffers in
// memory, whatever the node's size. On Unix the file is unlinked as soon
// as it is made, so that nothing is left behind even by a crash; where an
// open file cannot be removed (Windows) it is removed when the Scan ends.
// A directory on tmpfs (a memory-backed /tmp, a Kubernetes emptyDir with
// medium Memory) holds the spool in memory after all.
type spool struct {
	f    *os.File
	name string // set while the file still has a name to remove
	w    *bufio.Writer
	tmp  [2 * binary.MaxVarintLen64]byte
}

// newSpool makes a spool in dir; "": os.TempDir().
func newSpool(dir string) (*spool, error) {
	f, err := os.CreateTemp(dir, "shardcache-listing-*")
	if err != nil {
		return nil, fmt.Errorf("%w: %w", node.ErrSpool, err)
	}
	s := &spool{f: f, w: bufio.NewWriterSize(f, 32<<10)}
	if os.Remove(f.Name()) != nil {
		s.name = f.Name() // open files cannot be removed everywhere (Windows)
	}
	return s, nil
}

// add appends a key and its expiry.
func (s *spool) add(key []byte, exp int64) error {
	n := binary.PutUvarint(s.tmp[:], uint64(len(key)))
	s.w.Write(s.tmp[:n])
	s.w.Write(key)
	n = binary.PutVarint(s.tmp[:], exp)
	if _, err := s.w.Write(s.tmp[:n]); err != nil {
		return fmt.Errorf("%w: %w", node.ErrSpool, err)
	}
	return nil
}

// each calls fn with every key added, in order; the key is valid only
// during the call. fn's error ends it and is returned.
func (s *spool) each(fn func(key []byte, exp int64) error) error {
	if err := s.w.Flush(); err != nil {
		return fmt.Errorf("%w: %w", node.ErrSpool, err)
	}
	if _, err := s.f.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("%w: %w", node.ErrSpool, err)
	}
	r := bufio.NewReaderSize(s.f, 32<<10)
	var key []byte
	for {
		n, err := binary.ReadUvarint(r)
		if err == io.EOF {
			return nil
		}
		if err == nil && n > 1<<20 {
			err = fmt.Errorf("a key of %d bytes", n)
		}
		if err == nil {
			if uint64(cap(key)) < n {
				key = make([]byte, n)
			}
			key = key[:n]
			_, err = io.ReadFull(r, key)
		}
		var exp int64
		if err == nil {
			exp, err = binary.ReadVarint(r)
		}
		if err != nil {
			return fmt.Errorf("%w: reading it back: %w", node.ErrSpool, err)
		}
		if err := fn(key, exp); err != nil {
			return err
		}
	}
}

// close removes the spool's file.
func (s *spool) close() {
	s.f.Close()
	if s.name != "" {
		os.Remove(s.name)
	}
}
