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
// How a node keeps one is its own: Redis beside the key (a key of its own
// that scripts consult, the key itself deleted), Memcached in the key's
// place (an empty value with TombstoneFlags), since memcached has no
// scripts and only the key itself makes its add refuse.

// TombstoneFlags are the client flags of a Memcached tombstone: an item of
// an empty value with these flags reads as a miss. Another client
// (gomemcache, an older process) reads it as an empty value.
const TombstoneFlags uint32 = 0x5C7DDEAD

// TombstoneWatcher is a node that looks for tombstones only while they may
// exist, since its writes that depend on a present value (Memcached's
// replace, append, prepend and touch) cost another round trip when it
// does. The client tells it when a migration, its own or another
// process's, may leave tombstones: until the window's end and a margin.
type TombstoneWatcher interface {
	ExpectTombstones(until time.Time)
}
