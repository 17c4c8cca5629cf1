package gutter

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/shardcache/shardcache/internal/node"
)

// A Log is a home node's hints kept on its gutter node, where every
// process that shares the gutter finds them: the hints of a process are
// its own (Hints), so without a Log a process whose breaker flipped the
// node up first, or any process after the writer died, reads at home the
// value a write through the gutter replaced. Each write through the
// gutter appends its keys to the log before it is sent (Publish: the
// log's counter, then one entry a thousand keys); every process deletes at
// home the keys of the entries it has not applied before it marks the
// node up, and at each tick while it holds the node up (Apply). The
// entries applied are deleted and their end recorded (done), which a
// process started later begins from.
//
// What the log cannot vouch for, it makes safe by flushing home (as Hints
// do past MaxHints): an entry counted but still absent after grace (its
// writer died between its count and its entry, or the gutter evicted it),
// an entry that does not decode, and a log lost (the gutter restarted, or
// evicted its counter: the log's epoch or counter went back).
type Log struct {
	prefix string
	grace  time.Duration

	mu    sync.Mutex
	epoch string // the log's epoch as this process last read it; "" before
	next  int64  // the first entry this process has not applied; 0 before
	// absent is when each entry this process waits for was first found
	// missing: a writer between its count and its entry, which it writes
	// within grace/2 or does not send its write (Publish).
	absent map[int64]time.Time
}

const (
	// entryKeys is how many keys one entry holds at most.
	entryKeys = 1000
	// readEntries is how many entries one multi-get reads.
	readEntries = 100
	// entryLife is the TTL of an entry: a node down longer comes back to
	// a log missing entries, and is flushed.
	entryLife = time.Hour
)

// ErrSlowPublish is a Publish whose entry took longer than half its
// grace to land: a process may have skipped it meanwhile, so the write it
// announced must not be sent.
var ErrSlowPublish = errors.New("shardcache: gutter log entry written too late")

// errBadEntry is a log entry that does not decode.
var errBadEntry = errors.New("malformed entry")

// NewLog returns the log of the home node named home (its ring name,
// which every process of a fleet gives it, whatever address each reaches
// it at). grace bounds a writer's count-to-entry time (Publish refuses to
// go on past half of it); a process waits that long for an absent entry
// before it flushes home.
func NewLog(home string, grace time.Duration) *Log {
	// A Memcached key holds no space or control byte, and at most 250.
	name := url.PathEscape(home)
	if len(name) > 150 {
		sum := sha256.Sum256([]byte(home))
		name = hex.EncodeToString(sum[:])
	}
	return &Log{prefix: "shardcache:gutter:" + name + ":", grace: grace, absent: map[int64]time.Time{}}
}

// SeqKey is the key of the log's counter on the gutter.
func (l *Log) SeqKey() string   { return l.prefix + "seq" }
func (l *Log) doneKey() string  { return l.prefix + "done" }
func (l *Log) epochKey() string { return l.prefix + "epoch" }
func (l *Log) entryKey(i int64) string {
	return l.prefix + "h:" + strconv.FormatInt(i, 10)
}

// Publish appends keys to the log on to, before they are written there:
// an error means the write must not be sent.
func (l *Log) Publish(ctx context.Context, to node.Node, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	start := time.Now()
	chunks := slices.Collect(slices.Chunk(keys, entryKeys))
	last, err := to.Incr(ctx, l.SeqKey(), int64(len(chunks)))
	if err != nil {
		return err
	}
	items := make([]node.Item, len(chunks))
	for i, c := range chunks {
		items[i] = node.Item{Key: l.entryKey(last - int64(len(chunks)) + 1 + int64(i)), Value: encodeKeys(c), TTL: entryLife}
	}
	if err := to.SetMulti(ctx, items); err != nil {
		return err
	}
	if time.Since(start) > l.grace/2 {
		return ErrSlowPublish
	}
	return nil
}

// Pending reports whether the counter read at a tick (nil if absent)
// counts entries this process has not applied.
func (l *Log) Pending(seq []byte) bool {
	n, err := strconv.ParseInt(string(seq), 10, 64)
	l.mu.Lock()
	defer l.mu.Unlock()
	return err == nil && n >= max(l.next, 1)
}

// head is the log's state on the gutter: its epoch, counter and end
// applied.
type head struct {
	epoch     string
	seq, done int64
}

// readHead reads the log's head on to, creating its epoch if absent.
func (l *Log) readHead(ctx context.Context, to node.Node) (head, error) {
	var h head
	for range 2 {
		its, err := to.GetMulti(ctx, []string{l.epochKey(), l.SeqKey(), l.doneKey()}, false)
		if err != nil {
			return h, err
		}
		for _, it := range its {
			if !it.Found {
				continue
			}
			switch it.Key {
			case l.epochKey():
				h.epoch = string(it.Value)
			case l.SeqKey():
				h.seq, _ = strconv.ParseInt(string(it.Value), 10, 64)
			case l.doneKey():
				h.done, _ = strconv.ParseInt(string(it.Value), 10, 64)
			}
		}
		if h.epoch != "" {
			return h, nil
		}
		err = to.Add(ctx, l.epochKey(), []byte(rand.Text()), 0)
		if err != nil && !errors.Is(err, node.ErrNotStored) {
			return h, err
		}
	}
	return h, fmt.Errorf("gutter log: %w", errBadEntry)
}

// Apply deletes at home the keys of the entries on to that this process
// has not applied, then records them applied and deletes them on to. An
// entry still absent within its grace is waited for at the next Apply
// (its write is not sent before it lands); what the log cannot vouch for
// flushes home. An error leaves entries unapplied: home must not serve
// until an Apply succeeds.
func (l *Log) Apply(ctx context.Context, to, home node.Node) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	h, err := l.readHead(ctx, to)
	if err != nil {
		return err
	}
	flush := false
	if (l.epoch != "" && h.epoch != l.epoch) || h.seq < h.done || (l.next > 1 && h.seq < l.next-1) {
		// The log was lost (restarted, or its counter evicted): what it
		// held is unknown, and it starts again from 1.
		flush, l.next = true, 1
		clear(l.absent)
		if h.seq < h.done {
			if err := to.Set(ctx, l.doneKey(), []byte("0"), 0); err != nil {
				return err
			}
			h.done = 0
		}
	}
	l.epoch = h.epoch
	from := max(l.next, h.done+1, 1)
	hold := int64(0) // the first entry waited for
	var expired []int64
	now := time.Now()
	for lo := from; lo <= h.seq; lo += readEntries {
		hi := min(h.seq, lo+readEntries-1)
		keys := make([]string, 0, hi-lo+1)
		for i := lo; i <= hi; i++ {
			keys = append(keys, l.entryKey(i))
		}
		got, err := to.GetMulti(ctx, keys, false)
		if err != nil {
			return err
		}
		found := make(map[string][]byte, len(got))
		for _, it := range got {
			if it.Found {
				found[it.Key] = it.Value
			}
		}
		var hinted []string
		for i := lo; i <= hi; i++ {
			v, ok := found[l.entryKey(i)]
			if !ok {
				first, seen := l.absent[i]
				if !seen {
					l.absent[i], first = now, now
				}
				if now.Sub(first) < l.grace {
					if hold == 0 {
						hold = i
					}
				} else {
					expired = append(expired, i)
				}
				continue
			}
			ks, err := decodeKeys(v)
			if err != nil {
				flush = true
				continue
			}
			hinted = append(hinted, ks...)
		}
		for c := range slices.Chunk(hinted, hintChunk) {
			if err := home.DeleteMulti(ctx, c); err != nil {
				return err
			}
		}
		if hold == 0 && !flush && len(expired) == 0 {
			l.next = hi + 1 // progress kept, should a later chunk fail
		}
	}
	if len(expired) > 0 || hold != 0 {
		// Another process may have applied and deleted them: done says.
		again, err := l.readHead(ctx, to)
		if err != nil {
			return err
		}
		if again.epoch == h.epoch {
			h.done = max(h.done, again.done)
		}
		for _, i := range expired {
			delete(l.absent, i)
			flush = flush || i > h.done
		}
		if hold <= h.done {
			hold = 0
		}
	}
	if flush {
		if err := node.ItemsOf(home).Flush(ctx); err != nil {
			return err
		}
	}
	l.next = max(from, h.seq+1, h.done+1)
	if hold != 0 {
		l.next = max(hold, h.done+1)
	}
	for i := range l.absent {
		if i < l.next {
			delete(l.absent, i)
		}
	}
	if upto := l.next - 1; upto > h.done {
		// Another process may record a lower end after this one: it only
		// makes a later process apply some entries twice.
		if err := to.Set(ctx, l.doneKey(), []byte(strconv.FormatInt(upto, 10)), 0); err != nil {
			return nil // applied here; a later process applies them again
		}
		var applied []string
		for i := max(h.done+1, 1); i <= upto; i++ {
			applied = append(applied, l.entryKey(i))
		}
		for c := range slices.Chunk(applied, hintChunk) {
			_ = to.DeleteMulti(ctx, c) // else they expire (entryLife)
		}
	}
	return nil
}

// encodeKeys writes keys as "len:key" one after the other: a Redis key
// may hold any byte.
func encodeKeys(keys []string) []byte {
	var b []byte
	for _, k := range keys {
		b = strconv.AppendInt(b, int64(len(k)), 10)
		b = append(b, ':')
		b = append(b, k...)
	}
	return b
}

// decodeKeys reads what encodeKeys wrote.
func decodeKeys(b []byte) ([]string, error) {
	var keys []string
	for len(b) > 0 {
		i := slices.Index(b, ':')
		if i <= 0 {
			return nil, errBadEntry
		}
		n, err := strconv.Atoi(string(b[:i]))
		if err != nil || n < 0 || n > len(b)-i-1 {
			return nil, errBadEntry
		}
		keys = append(keys, string(b[i+1:i+1+n]))
		b = b[i+1+n:]
	}
	return keys, nil
}
