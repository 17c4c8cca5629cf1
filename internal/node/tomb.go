package node

import "time"

// Tombstones: during a migration a Delete of a moved key buries it on its
// new owner (Node.Bury) rather than only deleting it, so that a copy from
// the old owner made by a reader who read the value before the Delete
// cannot bring it back after: the tombstone lasts the migration's window,
// and while it lasts
//
//   - a copy does not store over it (AddMulti, Sweeper.Restore);
//   - a read of the key reports a miss (Get, GetMulti, Send, Items'
//     reads, Sweeper.Dump and Exists);
//   - a write of a value replaces it (Set, SetMulti, Items.Store's set,
//     and Add, Replace, Append, Prepend, CAS, Incr, IncrDecr, Touch and
//     GetAndTouch as on a missing key).
//
// A tombstone is of one of two kinds (TombKind). TombDeleted is a
// Delete's: no copy ever stores over it. TombWritten is left by a write
// that went to the old owner alone while the new owner must hold no value
// yet (before a migration's start): the value is current on the old
// owner, and a copy that read it after that write may replace the
// tombstone (Item.OverWritten), which is how such a key, a counter
// included, moves to its new owner.
//
// How a node keeps one is its own: Redis beside the key (a key of its own
// that scripts consult, the key itself deleted), Memcached in the key's
// place (an empty value with TombstoneFlags), since memcached has no
// scripts and only the key itself makes its add refuse.

// TombstoneFlags are the client flags of a Memcached tombstone: an item of
// an empty value with these flags reads as a miss. Another client
// (gomemcache, an older process) reads it as an empty value.
const TombstoneFlags uint32 = 0x5C7DDEAD

// WrittenTombstoneFlags are the client flags of a Memcached tombstone of
// kind TombWritten.
const WrittenTombstoneFlags uint32 = 0x5C7DDEAE

// IsTombstoneFlags reports whether a Memcached item's flags are those of
// a tombstone of either kind.
func IsTombstoneFlags(f uint32) bool { return f == TombstoneFlags || f == WrittenTombstoneFlags }

// TombKind is what a tombstone stands for; see Tombstones.
type TombKind int

// Tombstone kinds.
const (
	// TombDeleted: the key was deleted. No copy stores over it.
	TombDeleted TombKind = iota
	// TombWritten: the key was written on its old owner alone; a copy
	// with Item.OverWritten replaces it.
	TombWritten
)

// TombstoneWatcher is a node that looks for tombstones only while they may
// exist, since its writes that depend on a present value (Memcached's
// replace, append, prepend and touch) cost another round trip when it
// does. The client tells it when a migration, its own or another
// process's, may leave tombstones: until the window's end and a margin.
type TombstoneWatcher interface {
	ExpectTombstones(until time.Time)
}
