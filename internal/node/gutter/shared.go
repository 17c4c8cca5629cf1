package gutter

import (
	"context"
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
// node up first, or any process after the writer was killed, reads at
// home the value a write through the gutter replaced. Each write through
// the gutter appends its keys to the log before it is sent (Publish: the
// log's counter, then one entry); every process deletes at home the keys
// of the entries it has not applied before it marks the node up, and at
// each tick while it holds the node up (Apply), so that a home read is at
// most one tick behind a write through the gutter. The entries applied
// are deleted and their end recorded (done), which a process started
// later begins from.
//
// Marking the node up also records the time on the gutter (MarkUp): a
// process still holding the node down reads it at its tick and probes at
// once (Observe), rather than serving the gutter's copies, which the
// writes now going home no longer replace, until its probe's backoff
// ends.
//
// A gutter node lost while its home is down loses the log with the
// copies; the process's own Hints still replay its writes.
type Log struct {
	prefix string
	grace  time.Duration

	mu   sync.Mutex
	next int64 // the first entry this process has not applied
	// absent is when each entry below the counter was first found
	// missing: a writer between its count and its entry, or one that died
	// there (its value was never sent), skipped after grace.
	absent map[int64]time.Time
}

// entryKeys is how many keys one entry holds at most.
const entryKeys = 1000

// NewLog returns the log of the home node named home (its ring name,
// which every process of a fleet gives it, whatever address each reaches
// it at). An entry counted
// but still absent after grace is skipped: its writer sends it within
// its own call's bound, or died before sending the write it announced.
func NewLog(home string, grace time.Duration) *Log {
	// Escaped: a Memcached key holds no space or control byte.
	return &Log{prefix: "shardcache:gutter:" + url.PathEscape(home) + ":", grace: grace, absent: map[int64]time.Time{}}
}

// SeqKey is the key of the log's counter on the gutter.
func (l *Log) SeqKey() string { return l.prefix + "seq" }

// UpKey is the key of the time the home node was last marked up.
func (l *Log) UpKey() string   { return l.prefix + "up" }
func (l *Log) doneKey() string { return l.prefix + "done" }
func (l *Log) entryKey(i int64) string {
	return l.prefix + "h:" + strconv.FormatInt(i, 10)
}

// Publish appends keys to the log on to, before they are written there:
// an error means the write must not be sent.
func (l *Log) Publish(ctx context.Context, to node.Node, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	chunks := slices.Collect(slices.Chunk(keys, entryKeys))
	last, err := to.Incr(ctx, l.SeqKey(), int64(len(chunks)))
	if err != nil {
		return err
	}
	items := make([]node.Item, len(chunks))
	for i, c := range chunks {
		items[i] = node.Item{Key: l.entryKey(last - int64(len(chunks)) + 1 + int64(i)), Value: encodeKeys(c)}
	}
	return to.SetMulti(ctx, items)
}

// Pending reports whether the counter read at a tick (nil if absent)
// counts entries this process has not applied.
func (l *Log) Pending(seq []byte) bool {
	n, err := strconv.ParseInt(string(seq), 10, 64)
	l.mu.Lock()
	defer l.mu.Unlock()
	return err == nil && n >= max(l.next, 1)
}

// MarkedUp returns the time of an up mark read at a tick (nil if
// absent; the zero time then): a process that held the node down since
// before it probes at once.
func MarkedUp(up []byte) time.Time {
	n, err := strconv.ParseInt(string(up), 10, 64)
	if err != nil || n <= 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// Apply deletes at home the keys of the entries on to that this process
// has not applied, then records them applied and deletes them on to. It
// returns an error when an entry could not be read or its keys deleted:
// home must not serve until an Apply succeeds.
func (l *Log) Apply(ctx context.Context, to, home node.Node) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	its, err := to.GetMulti(ctx, []string{l.SeqKey(), l.doneKey()}, false)
	if err != nil {
		return err
	}
	var seq, done int64
	for _, it := range its {
		if !it.Found {
			continue
		}
		v, _ := strconv.ParseInt(string(it.Value), 10, 64)
		switch it.Key {
		case l.SeqKey():
			seq = v
		case l.doneKey():
			done = v
		}
	}
	if seq < l.next-1 { // the gutter lost its log (restarted): start over
		l.next, done = 0, 0
	}
	from := max(l.next, done+1, 1)
	if from > seq {
		return nil
	}
	upto := from - 1
	now := time.Now()
	for lo := from; lo <= seq; lo += entryKeys {
		hi := min(seq, lo+entryKeys-1)
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
		stop := false
		for i := lo; i <= hi && !stop; i++ {
			v, ok := found[l.entryKey(i)]
			if !ok {
				first, seen := l.absent[i]
				if !seen {
					l.absent[i] = now
					first = now
				}
				if now.Sub(first) < l.grace {
					stop = true // its writer is between its count and its entry
					break
				}
			} else {
				ks, err := decodeKeys(v)
				if err != nil {
					return fmt.Errorf("gutter log entry %d: %w", i, err)
				}
				hinted = append(hinted, ks...)
			}
			delete(l.absent, i)
			upto = i
		}
		for c := range slices.Chunk(hinted, hintChunk) {
			if err := home.DeleteMulti(ctx, c); err != nil {
				return err
			}
		}
		if stop {
			break
		}
	}
	if upto < from {
		return nil
	}
	l.next = upto + 1
	if upto > done {
		// Another process may record a lower end after this one: it only
		// makes a later process apply some entries twice.
		if err := to.Set(ctx, l.doneKey(), []byte(strconv.FormatInt(upto, 10)), 0); err != nil {
			return nil // applied here; a later process applies them again
		}
		var applied []string
		for i := from; i <= upto; i++ {
			applied = append(applied, l.entryKey(i))
		}
		for c := range slices.Chunk(applied, hintChunk) {
			_ = to.DeleteMulti(ctx, c) // garbage; each process skips them by done
		}
	}
	return nil
}

// MarkUp records on to that home was just marked up, for the processes
// that still hold it down (Observe).
func (l *Log) MarkUp(ctx context.Context, to node.Node) error {
	return to.Set(ctx, l.UpKey(), []byte(strconv.FormatInt(time.Now().UnixNano(), 10)), 0)
}

// errBadEntry is a log entry that does not decode.
var errBadEntry = errors.New("malformed entry")

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
