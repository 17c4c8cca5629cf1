// Package node is the seam between the client's policy and the wire: the
// interface every cache node's client implements, the optional
// capabilities beside it, and the Observer a node tells the outcome of
// each call.
//
// A Node is one cache server, reduced to what package client needs: single
// and multi-key reads and writes, each one round trip unless its doc says
// otherwise. It decides nothing: no routing, no retries on another node, no
// health. It reports every call to its Observer, which the client gives it
// (the breaker and the statistics live there), and returns the package's
// sentinel errors for what the caller acts on (ErrCacheMiss, ErrNotStored,
// ...), wrapping the others as they came from the network.
//
// Two packages implement it: internal/node/redisnode over go-redis, and
// internal/node/mcnode over internal/wire/memcache.
//
//	n := mcnode.New(mcnode.Config{Addr: "10.0.0.1:11211", PoolSize: 8, Observer: obs})
//	defer n.Close()
//	err := n.Set(ctx, "user:42", []byte("Ada"), time.Hour)
//	v, err := n.Get(ctx, "user:42") // node.ErrCacheMiss on a miss
package node

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/shardcache/shardcache/internal/wire"
)

// Errors a node returns. Package client exports each under the same name:
// compare them with errors.Is.
var (
	// ErrCacheMiss means the key is not on the node.
	ErrCacheMiss = errors.New("shardcache: cache miss")
	// ErrNotStored means a conditional write's condition failed: Add found
	// the key present, Replace found it absent.
	ErrNotStored = errors.New("shardcache: item not stored")
	// ErrCASConflict means a compare-and-swap found the key changed since
	// the read that returned its CAS id.
	ErrCASConflict = errors.New("shardcache: compare-and-swap conflict")
	// ErrUnsupported means the backend cannot do what was asked, such as
	// item flags or compare-and-swap on Redis.
	ErrUnsupported = errors.New("shardcache: not supported by this backend")
	// ErrClosed means the node's client was closed.
	ErrClosed = errors.New("shardcache: client closed")
	// ErrAuth means the node refused the client's credentials, or a TLS
	// handshake failed on what the certificates say.
	ErrAuth = errors.New("shardcache: authentication failed")
	// ErrNoPerm means a Redis ACL user may not run that command or touch
	// that key.
	ErrNoPerm = errors.New("shardcache: no permission")
	// ErrValueTooLarge means a value the node cannot store: longer than its
	// item limit, checked before any I/O where the limit is known, or
	// refused by the server.
	ErrValueTooLarge = errors.New("shardcache: value too large")
	// ErrNodeDown means the client holds the node down (its breaker): the
	// call failed at once, without touching the network.
	ErrNodeDown = errors.New("shardcache: node down")
	// ErrUnknownNode means a placement located a key on a node it does not
	// list, so the client has no connection for it.
	ErrUnknownNode = errors.New("shardcache: placement returned a node it does not list")
	// ErrSweepUnsupported means the server cannot list its keys for a
	// sweep (Memcached older than 1.4.31, or a proxy).
	ErrSweepUnsupported = errors.New("shardcache: node cannot be swept")
	// ErrSweepBusy means the server could not list its keys for now, and
	// did not within the node's bounds: another listing runs, or its hash
	// table is expanding (Memcached). A later sweep may succeed.
	ErrSweepBusy = errors.New("shardcache: node busy, cannot list its keys now")
	// ErrSpool means a sweep could not write a node's key listing to its
	// spool file, or read it back (ScanOptions.SpoolDir): a failure of the
	// local file, not of the node.
	ErrSpool = errors.New("shardcache: spooling a node's key listing")
	// ErrPoolTimeout means every connection to the node stayed busy while
	// the call waited for one: it says nothing about the node itself.
	ErrPoolTimeout = wire.ErrPoolTimeout
)

// Item is a key with its value and metadata, going to or coming from a
// node.
type Item struct {
	Key   string
	Value []byte
	// Found is set by reads: the key was present.
	Found bool
	// TTL is a write's expiry, 0 for none; a read sets it (with TTLKnown)
	// where it asked for the remaining TTL and the server told it.
	TTL      time.Duration
	TTLKnown bool
	// Flags are Memcached's client flags, kept by copies; Redis has none.
	Flags uint32
	// CAS is Memcached's CAS id, from reads; a StoreCAS sends it.
	CAS uint64
	// OverWritten lets a copy (AddMulti, Sweeper.Restore) replace a
	// tombstone of kind TombWritten: the copy read the old owner after the
	// write that left it (see Tombstones).
	OverWritten bool
}

// Answer is one key's answer to a multi-get: what an Item has of a read,
// in a third of its size and with one pointer where an Item has two, for
// the garbage collector to scan. It is the wire's own type, so that a
// node hands its answers up without copying them.
type Answer = wire.Answer

// AnswerItem returns a as the Item of key.
func AnswerItem(key string, a *Answer) Item {
	return Item{Key: key, Value: a.Value, Found: a.Found, Flags: a.Flags, CAS: a.CAS}
}

// Node is one cache server's client.
type Node interface {
	// Get returns key's value, or ErrCacheMiss.
	Get(ctx context.Context, key string) ([]byte, error)
	// GetMulti returns one Item per key, in order, in one round trip. With
	// withTTL it also reads each hit's remaining TTL where the backend can
	// (Item.TTLKnown), and its flags.
	GetMulti(ctx context.Context, keys []string, withTTL bool) ([]Item, error)
	// Send sends a multi-get of keys and returns at once, before the
	// answer: a client that sends to every node first and then reads the
	// answers in turn has the servers work in parallel without a goroutine
	// per node. Every Pending must be received, exactly once.
	Send(ctx context.Context, keys []string) Pending
	// Set stores value under key for ttl (0: no expiry).
	Set(ctx context.Context, key string, value []byte, ttl time.Duration) error
	// SetMulti stores every item with its own TTL and flags, in one round
	// trip where the protocol pipelines.
	SetMulti(ctx context.Context, items []Item) error
	// Add stores value only if key is absent, else ErrNotStored.
	Add(ctx context.Context, key string, value []byte, ttl time.Duration) error
	// AddMulti adds each item if absent, with its own TTL and flags, and
	// reports which were stored. On a failure it may return both what was
	// stored before or beside the failure, and the failure.
	AddMulti(ctx context.Context, items []Item) (stored []bool, err error)
	// Delete removes key; nil whether or not it was there.
	Delete(ctx context.Context, key string) error
	// DeleteMulti removes every key.
	DeleteMulti(ctx context.Context, keys []string) error
	// Bury removes every key and leaves a tombstone of kind in its place
	// for ttl (see Tombstones), in one round trip, and reports which keys
	// held a value.
	Bury(ctx context.Context, keys []string, ttl time.Duration, kind TombKind) (found []bool, err error)
	// Incr adds delta to the integer under key and returns the result; a
	// missing key is created with the value delta (on Memcached, whose
	// counters are unsigned, a decrement stops at 0 and a missing key
	// decremented is created at 0) and no expiry.
	Incr(ctx context.Context, key string, delta int64) (int64, error)
	// Touch sets key's TTL (0: no expiry), or returns ErrCacheMiss.
	Touch(ctx context.Context, key string, ttl time.Duration) error
	// Ping asks the server for its cheapest answer (Redis PING, Memcached
	// version): the probe of a node held down.
	Ping(ctx context.Context) error
	// Close closes the node's connections, those of calls in flight
	// included, which then fail.
	Close() error
}

// Pending is a multi-get sent by Node.Send, its answer not yet read.
type Pending interface {
	// Recv reads the answer into out, one Answer per key of the Send in
	// order (len(out) == len(keys)), and ends the call. The values of one
	// answer may share a buffer.
	Recv(out []Answer) error
}

// StoreOp is the condition of Items.Store: Memcached's storage commands.
type StoreOp int

// Store operations.
const (
	StoreSet     StoreOp = iota // unconditional
	StoreAdd                    // only if absent, else ErrNotStored
	StoreReplace                // only if present, else ErrNotStored
	StoreAppend                 // Value after the present value, else ErrNotStored
	StorePrepend                // Value before the present value, else ErrNotStored
	StoreCAS                    // only if unchanged since the read of Item.CAS: ErrCASConflict, or ErrCacheMiss if gone
)

var storeOpNames = [...]string{"set", "add", "replace", "append", "prepend", "cas"}

// String returns the operation's Memcached command name.
func (op StoreOp) String() string {
	if op >= 0 && int(op) < len(storeOpNames) {
		return storeOpNames[op]
	}
	return "StoreOp(" + strconv.Itoa(int(op)) + ")"
}

// Items is the capability of the item operations, Memcached's vocabulary:
// flags, CAS ids, conditional stores, unsigned counters. Both backends
// have it; Redis answers ErrUnsupported where it has no equivalent.
type Items interface {
	// GetItem reads key with its flags and CAS id, or ErrCacheMiss.
	GetItem(ctx context.Context, key string) (Item, error)
	// Store runs op with it's key, value, flags, TTL and (StoreCAS) CAS.
	Store(ctx context.Context, op StoreOp, it Item) error
	// GetAndTouch reads key and sets its TTL in one command.
	GetAndTouch(ctx context.Context, key string, ttl time.Duration) (Item, error)
	// IncrDecr adds (or with decr subtracts, stopping at 0) delta to an
	// existing unsigned counter: ErrCacheMiss if the key is absent.
	IncrDecr(ctx context.Context, key string, delta uint64, decr bool) (uint64, error)
	// DeleteFound deletes key and reports whether it was present.
	DeleteFound(ctx context.Context, key string) (bool, error)
	// Flush deletes every key (Memcached flush_all, Redis FLUSHDB).
	Flush(ctx context.Context) error
}

// Refuser is the capability of a node that stands in for others (a node
// held down or unknown, a gutter, a replica set): Refuse returns the error
// a command beyond the node interface (a Redis command through the
// client's RedisDo) gets from it, as no single server takes it.
type Refuser interface {
	Refuse() error
}

// Sweeper is what a sweep needs of a node: list its keys, and copy them
// whole, any type, with their remaining TTL.
type Sweeper interface {
	// Scan lists the node's keys that start with o.Prefix, a page of about
	// o.Page at a time, calling fn with each page until the listing ends or
	// fn fails. A page's items have their key and, where the listing tells
	// it, their TTL (TTLKnown). Its memory does not grow with the node.
	Scan(ctx context.Context, o ScanOptions, fn func(page []Item) error) error
	// Dump reads the keys' values with their type, flags and remaining
	// TTL, in one round trip; a key gone meanwhile is not Found. The
	// values are the node's own serialization (Redis DUMP), for Restore.
	Dump(ctx context.Context, keys []Item) ([]Item, error)
	// Restore writes each dumped item if its key is absent, keeping its
	// type and TTL, in one round trip, and reports which were stored; with
	// a failure beside stores, both.
	Restore(ctx context.Context, items []Item) (stored []bool, err error)
	// Exists reports which keys the node holds, whatever their type.
	Exists(ctx context.Context, keys []string) ([]bool, error)
	// Size estimates how many keys the node holds.
	Size(ctx context.Context) (int64, error)
}

// DefaultPage is a Scan's page when ScanOptions.Page is not positive.
const DefaultPage = 100

// ScanOptions shape a Sweeper's Scan.
type ScanOptions struct {
	// Prefix limits the listing to the keys that start with it.
	Prefix string
	// Page is about how many keys each page has; 0 or less: DefaultPage.
	Page int
	// SpoolDir is where a node that spools its listing before paging it
	// (Memcached's, see mcnode.Node.Scan) writes it; "": os.TempDir().
	SpoolDir string
	// Limit, above 0, ends the listing once about that many keys are
	// listed: what tells that a node holds keys, without the time of
	// listing them all (a spooling node stops its spool there).
	Limit int
}

// PageSize is o.Page, or DefaultPage when it is not positive.
func (o ScanOptions) PageSize() int {
	if o.Page <= 0 {
		return DefaultPage
	}
	return o.Page
}

// Leaser is what leases need of a node beside Add, which takes them.
type Leaser interface {
	// StoreLeased stores each item if its lease key, lkeys[i], still holds
	// token, and deletes that lease key; it reports which were stored.
	StoreLeased(ctx context.Context, items []Item, lkeys []string, token string) ([]bool, error)
	// ReleaseLeases deletes each lease key that holds token.
	ReleaseLeases(ctx context.Context, lkeys []string, token string) error
}

// IdleCloser is a node whose idle connections the client closes when it
// marks the node down: after a restart of the server they are all dead,
// and each would fail one call once the node is back. A node whose client
// checks its connections itself (go-redis does, on taking one from its
// pool) need not have it.
type IdleCloser interface {
	CloseIdle()
}

// Sender is a node that can send a multi-get without waiting for a
// connection another call holds. A client sending to several nodes sends
// first on idle connections, then to the other nodes at once (so that
// their dials overlap), and only once it has read those answers, holding
// no connection, to the nodes whose every connection was busy: waiting
// for one node's connection while holding another's would let two
// callers, each holding what the other waits for, deadlock until their
// pools time out.
type Sender interface {
	// SendIdle is Send on an idle connection; false, and nothing sent,
	// when there is none. It never dials.
	SendIdle(ctx context.Context, keys []string) (Pending, bool)
	// TrySend is Send on an idle connection or a new one in a free place,
	// which it may dial; false, and nothing sent, when Send would wait
	// for another call's connection.
	TrySend(ctx context.Context, keys []string) (Pending, bool)
}
