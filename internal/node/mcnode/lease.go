package mcnode

import (
	"context"
	"errors"

	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/internal/wire/memcache"
)

// Leases on Memcached: the protocol has no store conditional on another
// key. StoreLeased adds each value (never over a value written meanwhile,
// nor over the tombstone of a migration's Delete), then reads its lease,
// then withdraws the value if the lease was lost (a reader can see it for
// that one round trip), or else deletes the lease. Where the server has
// the meta commands the add returns the value's CAS id and the withdrawal
// is a delete conditional on it (md C), so that it removes that value
// alone, never a tombstone or a value another client wrote in between
// (which a plain delete would, and a copy could then bring back a deleted
// key); on the classic commands it is a plain delete. ReleaseLeases reads
// each lease and deletes those that hold the token. Each step is one
// pipelined round trip for all the items.

// StoreLeased stores each item if its lease key, lkeys[i], still holds
// token, and deletes that lease key; it reports which were stored. One
// OpLease.
func (n *Node) StoreLeased(ctx context.Context, items []node.Item, lkeys []string, token string) ([]bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	start := n.obs.Begin()
	stored, err := n.storeLeased(ctx, items, lkeys, token)
	err = nodeErr(err)
	n.obs.Done(ctx, node.OpLease, start, err)
	return stored, err
}

func (n *Node) storeLeased(ctx context.Context, items []node.Item, lkeys []string, token string) ([]bool, error) {
	reqs := make([]memcache.Meta, len(items))
	for i, it := range items {
		reqs[i] = memcache.Meta{Cmd: memcache.MetaSet, Key: it.Key, Value: it.Value, Flags: memcache.FlagsOf("TMc"),
			TTL: memcache.Expiration(it.TTL), Mode: 'E'}
	}
	out := make([]memcache.MetaResult, len(items))
	switch err := n.mc.Meta(ctx, reqs, out); {
	case err == nil:
		return n.checkLeased(ctx, items, lkeys, token, out)
	case !errors.Is(err, memcache.ErrNoMeta):
		return make([]bool, len(items)), err
	}
	add := make([]node.Item, len(items))
	for i, it := range items {
		add[i] = node.Item{Key: it.Key, Value: it.Value, TTL: it.TTL}
	}
	stored, serr, _ := n.storeItems(ctx, memcache.Add, add)
	if serr != nil && !anyTrue(stored) {
		return make([]bool, len(items)), serr
	}
	var check []string // the leases of the values set
	var idx []int
	for i := range items {
		if stored[i] {
			check = append(check, lkeys[i])
			idx = append(idx, i)
		}
	}
	leases := make([]node.Answer, len(check))
	if _, err := n.mc.GetMulti(ctx, check, leases); err != nil {
		// The values are set, their leases unknown: withdraw them.
		n.mc.DeleteMulti(ctx, keysOf(items, idx), nil)
		return make([]bool, len(items)), err
	}
	del := make([]string, len(check))
	for j, i := range idx {
		if leases[j].Found && string(leases[j].Value) == token {
			del[j] = lkeys[i] // ours: the value stays, the lease goes
		} else {
			del[j] = items[i].Key // lost: the value is withdrawn
			stored[i] = false
		}
	}
	if err := n.mc.DeleteMulti(ctx, del, nil); err != nil {
		return stored, err
	}
	return stored, serr
}

// checkLeased is storeLeased's check of the leases after a meta add: out
// holds each add's answer and the stored value's CAS id.
func (n *Node) checkLeased(ctx context.Context, items []node.Item, lkeys []string, token string, out []memcache.MetaResult) ([]bool, error) {
	stored := make([]bool, len(items))
	var check []string // the leases of the values added
	var idx []int
	var first error
	for i := range out {
		switch r := &out[i]; {
		case r.Err != nil:
			if first == nil {
				first = r.Err
			}
		case r.Status == memcache.HD:
			stored[i] = true
			check = append(check, lkeys[i])
			idx = append(idx, i)
		}
	}
	if len(check) == 0 {
		return stored, first
	}
	leases := make([]node.Answer, len(check))
	if _, err := n.mc.GetMulti(ctx, check, leases); err != nil {
		// The values are added, their leases unknown: withdraw them.
		n.withdraw(ctx, items, idx, out)
		return make([]bool, len(items)), err
	}
	var del []memcache.Meta
	var lost []int
	for j, i := range idx {
		if leases[j].Found && string(leases[j].Value) == token {
			del = append(del, memcache.Meta{Cmd: memcache.MetaDelete, Key: lkeys[i]}) // ours: the value stays, the lease goes
		} else {
			lost, stored[i] = append(lost, i), false
		}
	}
	err := n.withdraw(ctx, items, lost, out, del...)
	if first == nil {
		first = err
	}
	return stored, first
}

// withdraw deletes the values items[i] for i in idx, each only if it still
// holds the CAS id its add returned (out[i].CAS), with more requests in
// the same round trip.
func (n *Node) withdraw(ctx context.Context, items []node.Item, idx []int, out []memcache.MetaResult, more ...memcache.Meta) error {
	reqs := more
	for _, i := range idx {
		reqs = append(reqs, memcache.Meta{Cmd: memcache.MetaDelete, Key: items[i].Key, Flags: memcache.FlagsOf("C"), CompareCAS: out[i].CAS})
	}
	if len(reqs) == 0 {
		return nil
	}
	res := make([]memcache.MetaResult, len(reqs))
	return n.mc.Meta(ctx, reqs, res) // EX or NF: changed or gone meanwhile, nothing to withdraw
}

func keysOf(items []node.Item, idx []int) []string {
	keys := make([]string, len(idx))
	for j, i := range idx {
		keys[j] = items[i].Key
	}
	return keys
}

// ReleaseLeases deletes each lease key that holds token: one multi-get,
// then one pipelined delete of those. A lease that expired and was taken
// by another process between the two can be deleted (at worst, one more
// load). One OpLease.
func (n *Node) ReleaseLeases(ctx context.Context, lkeys []string, token string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	start := n.obs.Begin()
	err := nodeErr(n.releaseLeases(ctx, lkeys, token))
	n.obs.Done(ctx, node.OpLease, start, err)
	return err
}

func (n *Node) releaseLeases(ctx context.Context, lkeys []string, token string) error {
	leases := make([]node.Answer, len(lkeys))
	if _, err := n.mc.GetMulti(ctx, lkeys, leases); err != nil {
		return err
	}
	var ours []string
	for i := range lkeys {
		if leases[i].Found && string(leases[i].Value) == token {
			ours = append(ours, lkeys[i])
		}
	}
	return n.mc.DeleteMulti(ctx, ours, nil)
}
