package gutter

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
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
// value a write through the gutter replaced.
//
// Each write through the gutter appends its keys to the log before it is
// sent (Publish: the log's counter, then one entry a thousand keys, which
// expires after LogLife). Every process deletes at home the keys of the
// entries it has not applied yet: before it marks the node up, and at each
// tick while it holds the node up (Apply). Nothing else is written to the
// log, so that an entry is absent only while its writer is between its
// count and its entry, or when it is lost; a process that starts applies
// the entries still there.
//
// What the log cannot vouch for, it makes safe by flushing home, as Hints
// do past MaxHints: an entry still absent after grace (its writer died
// between its count and its entry, or it expired or was evicted), an entry
// that does not decode, more than MaxHints entries behind, and a log lost
// (a counter created anew starts a new epoch: the gutter restarted, or
// evicted it).
type Log struct {
	prefix string
	grace  time.Duration

	mu    sync.Mutex
	epoch string // the epoch this process applies; "" before the first Apply
	next  int64  // the first entry this process has not applied
	// absent is when each entry this process waits for was first found
	// missing.
	absent map[int64]time.Time
}

const (
	// entryKeys is how many keys one entry holds at most.
	entryKeys = 1000
	// readEntries is how many entries one multi-get reads.
	readEntries = 100
)

// LogLife is how long a log entry lives: a process that holds its node
// down longer finds entries gone when it is back, and flushes the node.
const LogLife = time.Hour

// ErrSlowPublish is a Publish whose entry took longer than half its
// grace to land: a process may have given up on it meanwhile, so the
// write it announced must not be sent.
var ErrSlowPublish = errors.New("shardcache: gutter log entry written too late")

// errBadEntry is a log entry that does not decode.
var errBadEntry = errors.New("malformed entry")

// NewLog returns the log of the home node named home (its ring name,
// which every process of a fleet gives it, whatever address each reaches
// it at). grace bounds a writer's count-to-entry time (Publish gives up
// past half of it); a process waits that long for an absent entry before
// it flushes home.
func NewLog(home string, grace time.Duration) *Log {
	// A Memcached key holds no space or control byte, and at most 250.
	name := url.PathEscape(home)
	if len(name) > 150 {
		sum := sha256.Sum256([]byte(home))
		name = hex.EncodeToString(sum[:])
	}
	return &Log{prefix: "shardcache:gutter:" + name + ":", grace: grace, next: 1, absent: map[int64]time.Time{}}
}

// SeqKey is the key of the log's counter on the gutter, and EpochKey that
// of its epoch: a tick reads both (Pending).
func (l *Log) SeqKey() string { return l.prefix + "seq" }

// EpochKey is the key of the log's epoch on the gutter.
func (l *Log) EpochKey() string { return l.prefix + "epoch" }

func (l *Log) entryKey(i int64) string {
	return l.prefix + "h:" + strconv.FormatInt(i, 10)
}

// Publish appends keys to the log on to, before they are written there:
// an error means the write must not be sent. It runs to its end whatever
// ctx does (an entry counted and never written would flush home), bounded
// by half the grace.
func (l *Log) Publish(ctx context.Context, to node.Node, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.grace/2)
	defer cancel()
	chunks := slices.Collect(slices.Chunk(keys, entryKeys))
	last, err := to.Incr(ctx, l.SeqKey(), int64(len(chunks)))
	if err != nil {
		return err
	}
	first := last - int64(len(chunks)) + 1
	if first == 1 {
		// A counter created anew: the gutter lost the log, or this is
		// its first entry. A new epoch tells every process.
		if err := to.Set(ctx, l.EpochKey(), []byte(rand.Text()), 0); err != nil {
			return err
		}
	}
	items := make([]node.Item, len(chunks))
	for i, c := range chunks {
		items[i] = node.Item{Key: l.entryKey(first + int64(i)), Value: encodeKeys(c), TTL: LogLife}
	}
	if err = to.SetMulti(ctx, items); err != nil && ctx.Err() == nil {
		err = to.SetMulti(ctx, items) // once more: a process gives up on it only after grace
	}
	if err != nil {
		return err
	}
	if ctx.Err() != nil {
		return ErrSlowPublish
	}
	return nil
}

// Pending reports whether the log's head read at a tick (seq and epoch;
// nil if absent) holds entries this process has not applied, or another
// epoch than the one it applies.
func (l *Log) Pending(seq, epoch []byte) bool {
	n, err := strconv.ParseInt(string(seq), 10, 64)
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.epoch != "" && string(epoch) != l.epoch:
		return true // a lost log, or a new one
	case err != nil:
		return false // none yet
	default:
		return n >= l.next || l.epoch == ""
	}
}

// readHead reads the log's epoch and counter on to, in that order: a
// counter created anew has its epoch set before its entries. No epoch:
// nothing published yet, or the log lost (or its first writer died
// before setting it).
func (l *Log) readHead(ctx context.Context, to node.Node) (epoch string, seq int64, err error) {
	its, err := to.GetMulti(ctx, []string{l.EpochKey(), l.SeqKey()}, false)
	if err != nil {
		return "", 0, err
	}
	for _, it := range its {
		switch {
		case !it.Found:
		case it.Key == l.EpochKey():
			epoch = string(it.Value)
		case it.Key == l.SeqKey():
			seq, _ = strconv.ParseInt(string(it.Value), 10, 64)
		}
	}
	return epoch, seq, nil
}

// Apply deletes at home the keys of the entries on to that this process
// has not applied. An entry absent within its grace is waited for at the
// next Apply (its write is sent only once it lands); what the log cannot
// vouch for flushes home. An error leaves entries unapplied: home must
// not serve until an Apply succeeds.
func (l *Log) Apply(ctx context.Context, to, home node.Node) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	epoch, seq, err := l.readHead(ctx, to)
	if err != nil {
		return err
	}
	flush := false
	if (l.epoch != "" && epoch != l.epoch) || seq < l.next-1 {
		// The log was lost or started again: what it held is unknown.
		flush, l.next = true, 1
		clear(l.absent)
	}
	l.epoch = epoch
	if seq-l.next+1 > MaxHints { // too far behind to replay one by one
		flush, l.next = true, seq+1
		clear(l.absent)
	}
	hold := int64(0) // the first entry waited for
	now := time.Now()
	for lo := l.next; lo <= seq; lo += readEntries {
		hi := min(seq, lo+readEntries-1)
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
				switch {
				case now.Sub(first) >= l.grace:
					flush = true // lost: its writer died, or it expired
					delete(l.absent, i)
				case hold == 0:
					hold = i
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
		if hold == 0 && !flush {
			l.next = hi + 1 // progress kept, should a later read fail
		}
	}
	if flush {
		if err := node.ItemsOf(home).Flush(ctx); err != nil {
			return err
		}
	}
	l.next = seq + 1
	if hold != 0 {
		l.next = hold
	}
	for i := range l.absent {
		if i < l.next {
			delete(l.absent, i)
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
