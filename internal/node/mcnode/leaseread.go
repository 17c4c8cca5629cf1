package mcnode

import (
	"context"
	"errors"

	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/internal/wire/memcache"
)

// Leases in the item (node.LeaseReader), with the meta commands. A read
// that takes a miss's lease pipelines, per key, an add of a placeholder
// and the mg that reads the key:
//
//	ms <key> 0 ME F<PlaceholderFlags> T<lease> c
//	mg <key> v f c t s [R<refresh>]
//
// The add stores for one client alone, which holds the lease: the CAS id
// its add returns. The others' mg reads the placeholder (Held), or the
// value. mg's own N would create the placeholder with flags 0, which a
// classic read ("gets", ours or another client's) cannot tell from an
// empty value; the add marks it from birth, in the same round trip. R and
// the stale flag X of a value invalidated by md I are memcached's: W for
// the one client that refreshes, Z for the others.
//
// The load is stored with "ms <key> <n> C<cas> T<ttl>": a Delete (gone,
// NF), a Set or a tombstone (changed, EX) in between makes it fail, so a
// load that began before them does not land. A lease given up deletes the
// placeholder if it is still the one added (md C<cas>); a refresh's lease
// (W on a value) is the server's and lasts until the value is replaced or
// expires.

// LeaseGet reads keys and takes their leases as rd says, in one round trip
// of pipelined meta commands (observed as one OpGetMulti, or OpGet for one
// key); node.ErrUnsupported, not observed, when the server has no meta
// commands. A tombstone is neither found nor leased.
func (n *Node) LeaseGet(ctx context.Context, keys []string, rd node.LeaseRead) ([]node.LeaseAnswer, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return nil, nil
	}
	per := 1
	if rd.Vivify {
		per = 2
	}
	reqs := make([]memcache.Meta, 0, per*len(keys))
	get := memcache.Meta{Cmd: memcache.MetaGet, Flags: memcache.FlagsOf("vfcts")}
	if rd.Refresh > 0 {
		get.Flags |= memcache.FlagsOf("R")
		get.Recache = memcache.Expiration(rd.Refresh)
	}
	for _, k := range keys {
		if rd.Vivify {
			reqs = append(reqs, memcache.Meta{Cmd: memcache.MetaSet, Key: k, Value: []byte{}, Flags: memcache.FlagsOf("cFMT"),
				Mode: 'E', ClientFlags: node.PlaceholderFlags, TTL: memcache.Expiration(rd.Lease)})
		}
		get.Key = k
		reqs = append(reqs, get)
	}
	op := node.OpGet
	if len(keys) > 1 {
		op = node.OpGetMulti
	}
	out := make([]memcache.MetaResult, len(reqs))
	start := n.obs.Begin()
	err := n.mc.Meta(ctx, reqs, out)
	if errors.Is(err, memcache.ErrNoMeta) {
		return nil, node.ErrUnsupported
	}
	err = nodeErr(err)
	n.obs.Done(ctx, op, start, err)
	if err != nil {
		return nil, err
	}
	ans := make([]node.LeaseAnswer, len(keys))
	found := 0
	for i := range keys {
		g := &out[per*i+per-1]
		if g.Err != nil {
			return nil, nodeErr(g.Err)
		}
		a := &ans[i]
		if rd.Vivify {
			if s := &out[per*i]; s.Err == nil && s.Status == memcache.HD {
				a.Won, a.CAS = true, s.CAS // ours, whatever the mg saw since
				continue
			}
		}
		switch {
		case g.Status != memcache.VA:
			// A miss after an add refused: gone meanwhile; the next read
			// takes the lease.
			a.Held = rd.Vivify
		case len(g.Value) == 0 && g.ClientFlags == node.PlaceholderFlags:
			a.Held = true
		case isTomb(g.Value, g.ClientFlags):
			// Neither a value nor a lease: loaded without one.
		default:
			found++
			a.Value, a.Found, a.CAS = g.Value, true, g.CAS
			a.Stale = g.Stale() || g.Won() || g.WinnerSent()
			a.Won = g.Won()
			a.Held = g.WinnerSent()
		}
	}
	n.obs.Keys(op, found, len(keys)-found)
	return ans, nil
}

// LeaseStore stores each item whose lease is won with "ms C<cas>", in one
// round trip, and reports which were stored: those whose item was not
// changed or removed since the lease's read. One OpLease.
func (n *Node) LeaseStore(ctx context.Context, items []node.Item, leases []node.LeaseAnswer, rd node.LeaseRead) ([]bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	stored := make([]bool, len(items))
	reqs := make([]memcache.Meta, 0, len(items))
	var idx []int
	for i, it := range items {
		if !leases[i].Won {
			continue
		}
		reqs = append(reqs, memcache.Meta{Cmd: memcache.MetaSet, Key: it.Key, Value: it.Value, Flags: memcache.FlagsOf("CFT"),
			CompareCAS: leases[i].CAS, ClientFlags: it.Flags, TTL: memcache.Expiration(it.TTL)})
		idx = append(idx, i)
	}
	if len(reqs) == 0 {
		return stored, nil
	}
	out := make([]memcache.MetaResult, len(reqs))
	start := n.obs.Begin()
	err := nodeErr(n.mc.Meta(ctx, reqs, out))
	var first error
	for j, i := range idx {
		switch r := &out[j]; {
		case r.Err != nil:
			if first == nil {
				first = nodeErr(r.Err)
			}
		case r.Status == memcache.HD:
			stored[i] = true
		}
	}
	if err == nil {
		err = first
	}
	n.obs.Done(ctx, node.OpLease, start, err)
	return stored, err
}

// LeaseRelease deletes the placeholders of the leases won on a miss, each
// only if it is still the one added (md C<cas>), in one round trip. One
// OpLease.
func (n *Node) LeaseRelease(ctx context.Context, keys []string, leases []node.LeaseAnswer, rd node.LeaseRead) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	var reqs []memcache.Meta
	for i, k := range keys {
		if leases[i].Won && !leases[i].Found {
			reqs = append(reqs, memcache.Meta{Cmd: memcache.MetaDelete, Key: k, Flags: memcache.FlagsOf("C"), CompareCAS: leases[i].CAS})
		}
	}
	if len(reqs) == 0 {
		return nil
	}
	out := make([]memcache.MetaResult, len(reqs))
	start := n.obs.Begin()
	err := nodeErr(n.mc.Meta(ctx, reqs, out)) // EX or NF: replaced or gone, nothing to give up
	n.obs.Done(ctx, node.OpLease, start, err)
	return err
}
