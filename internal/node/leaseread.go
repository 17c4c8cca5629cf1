package node

import (
	"context"
	"time"
)

// Leases taken by the read itself (LeaseReader), in one round trip: the
// lease is decided by the server, atomically with the read, where Leaser's
// take an add of a lease key after a miss and then a read.
//
// On Memcached (≥ 1.6, the meta commands) the lease lives in the key's
// own item: a miss adds a placeholder, an empty value with
// PlaceholderFlags, pipelined with the mg that reads the key, and the one
// client whose add stored it holds the lease; its CAS id is the lease, and
// the value is stored with a set conditional on it (ms C), which a Delete,
// a Set or a migration's tombstone in between makes fail. A hit whose
// remaining TTL is under the refresh window, or which another client
// invalidated (md I), gives its refresh to one client: memcached's own W
// flag (R), the others see Z. On Redis a script reads the key, its PTTL,
// and takes the lease key with SET NX PX in one call: the same lease keys
// and tokens as Leaser's, so that the two kinds of client agree.

// PlaceholderFlags are the client flags of a Memcached lease placeholder:
// an empty value with these flags reads as a miss to every read of a node.
// Another client (gomemcache, an older process) reads it as an empty value,
// for as long as a load takes (at most the lease).
const PlaceholderFlags uint32 = 0x5C7D1EA5

// LeaseRead asks a LeaseReader what to take beside the read.
type LeaseRead struct {
	// Vivify takes the lease of a missing key, for Lease.
	Vivify bool
	// Lease is how long a lease lasts if its holder never stores.
	Lease time.Duration
	// Refresh, when positive, makes a hit whose remaining TTL is under it
	// Stale, and gives its refresh lease to one caller.
	Refresh time.Duration
	// LeaseKeys are the keys' lease keys and Token the value a lease key
	// takes, where the backend keeps leases in keys of their own (Redis).
	LeaseKeys []string
	Token     string
}

// LeaseAnswer is one key's answer to LeaseGet.
type LeaseAnswer struct {
	// Value and Found are the read's: a placeholder is not Found.
	Value []byte
	Found bool
	// Stale: the value is within the refresh window, or invalidated.
	Stale bool
	// Won: this caller holds the key's lease (a miss's, or a Stale
	// value's refresh): it loads, then stores with LeaseStore.
	Won bool
	// Held: another client holds it.
	Held bool
	// CAS is the condition of LeaseStore where the lease is the item
	// itself (Memcached).
	CAS uint64
}

// LeaseReader reads keys and takes their leases in the same round trip.
// A node without the means (Memcached without the meta commands) returns
// ErrUnsupported, and the client takes its leases with Leaser.
type LeaseReader interface {
	// LeaseGet reads keys, one answer per key in order, taking their
	// leases as rd says, in one round trip. A key with neither a value,
	// nor a lease won or held (a migration's tombstone on Memcached) is to
	// be loaded without a lease.
	LeaseGet(ctx context.Context, keys []string, rd LeaseRead) ([]LeaseAnswer, error)
	// LeaseStore stores each item whose lease, leases[i] won by LeaseGet
	// with rd, still holds, and ends that lease; it reports which were
	// stored.
	LeaseStore(ctx context.Context, items []Item, leases []LeaseAnswer, rd LeaseRead) ([]bool, error)
	// LeaseRelease gives up leases won and not stored.
	LeaseRelease(ctx context.Context, keys []string, leases []LeaseAnswer, rd LeaseRead) error
}
