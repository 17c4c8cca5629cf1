package client

import (
	"context"
	"time"

	"github.com/shardcache/shardcache/ring"
)

// node is one cache server's client, reduced to what the façade needs. The
// Redis and Memcached backends implement it. Every method is one round trip
// unless its doc says otherwise.
type node interface {
	get(ctx context.Context, key string) ([]byte, error)
	// getMulti returns one item per key, in order. With withTTL it also
	// reads each hit's remaining TTL where the backend can.
	getMulti(ctx context.Context, keys []string, withTTL bool) ([]item, error)
	set(ctx context.Context, key string, value []byte, ttl time.Duration) error
	setMulti(ctx context.Context, items []item) error
	add(ctx context.Context, key string, value []byte, ttl time.Duration) error
	// addMulti adds each item if absent, with its own TTL, and reports
	// which were stored. On a failure it may return both: what was stored
	// before, or beside, the failure, and the failure.
	addMulti(ctx context.Context, items []item) (stored []bool, err error)
	delete(ctx context.Context, key string) error
	deleteMulti(ctx context.Context, keys []string) error
	incr(ctx context.Context, key string, delta int64) (int64, error)
	touch(ctx context.Context, key string, ttl time.Duration) error
	Close() error
}

// item is a key with its value and TTL, going to or coming from a node.
type item struct {
	key      string
	value    []byte
	found    bool          // getMulti: the key was present
	ttl      time.Duration // 0: no expiry
	ttlKnown bool          // getMulti withTTL: ttl was read from the server
	flags    uint32        // Memcached: the item's client flags, kept by copies
	oldCopy  bool          // a migration's copy to the old owner, not the caller's write
	src      ring.Node     // a copy's source: the old owner it was read from
	cas      uint64        // Memcached's CAS id, from reads (Item.CasID)
}

// unknownNode stands for a node the client has no connection to.
type unknownNode struct{}

func (unknownNode) get(context.Context, string) ([]byte, error) { return nil, ErrUnknownNode }
func (unknownNode) getMulti(context.Context, []string, bool) ([]item, error) {
	return nil, ErrUnknownNode
}
func (unknownNode) set(context.Context, string, []byte, time.Duration) error { return ErrUnknownNode }
func (unknownNode) setMulti(context.Context, []item) error                   { return ErrUnknownNode }
func (unknownNode) add(context.Context, string, []byte, time.Duration) error { return ErrUnknownNode }
func (unknownNode) addMulti(context.Context, []item) ([]bool, error)         { return nil, ErrUnknownNode }
func (unknownNode) delete(context.Context, string) error                     { return ErrUnknownNode }
func (unknownNode) deleteMulti(context.Context, []string) error              { return ErrUnknownNode }
func (unknownNode) incr(context.Context, string, int64) (int64, error)       { return 0, ErrUnknownNode }
func (unknownNode) touch(context.Context, string, time.Duration) error       { return ErrUnknownNode }
func (unknownNode) Close() error                                             { return nil }
