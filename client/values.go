package client

import (
	"fmt"
	"slices"

	"github.com/shardcache/shardcache/internal/node"
)

// ErrValueTooLarge means a value longer than Options.MaxValueSize, rejected
// before any I/O, or one the server refused as too large (Memcached's
// "SERVER_ERROR object too large for cache": its item limit counts the key
// and about 60 bytes of header too).
var ErrValueTooLarge = node.ErrValueTooLarge

// Default value limits, the servers' own defaults.
const (
	// DefaultMaxValueSizeMemcached is Memcached's default item size limit
	// (-I 1m).
	DefaultMaxValueSizeMemcached = 1 << 20
	// DefaultMaxValueSizeRedis is Redis's proto-max-bulk-len.
	DefaultMaxValueSizeRedis = 512 << 20
)

// checkValue rejects a value the backend cannot store.
func (c *Client) checkValue(key string, value []byte) error {
	if len(value) > c.opts.MaxValueSize {
		return fmt.Errorf("%w: %q: %d bytes, more than %d", ErrValueTooLarge, truncKey(key), len(value), c.opts.MaxValueSize)
	}
	return nil
}

// storable returns the items a loader returned that a write would take,
// and the keys of those over MaxValueSize, counted as cache errors: their
// values are handed to the callers but not stored.
func (c *Client) storable(items []item) (fit []item, over []string) {
	for _, it := range items {
		if c.checkValue(it.Key, it.Value) != nil {
			over = append(over, it.Key)
		}
	}
	if over == nil {
		return items, nil
	}
	c.loads.cacheErrors.Add(int64(len(over)))
	fit = slices.DeleteFunc(slices.Clone(items), func(it item) bool { return c.checkValue(it.Key, it.Value) != nil })
	return fit, over
}

// truncKey shortens a key for an error message.
func truncKey(key string) string {
	if len(key) > 64 {
		return key[:61] + "..."
	}
	return key
}
