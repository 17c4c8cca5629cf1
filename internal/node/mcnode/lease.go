package mcnode

import (
	"context"

	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/internal/wire/memcache"
)

// Leases on Memcached's classic commands: the text protocol has no store
// conditional on another key, nor a compare-and-delete. StoreLeased sets
// each value, then reads its lease, then deletes the value again if the
// lease was lost (a reader can see it for that one round trip), or else
// the lease; ReleaseLeases reads each lease and deletes those that hold
// the token. Each step is one pipelined round trip for all the items, in
// the order the client's lease policy needs per item (set before the
// check, the check before the delete). Issue #24 replaces them with the
// meta commands' leases (mg N, ms C) where the server has them.

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
	set := make([]node.Item, len(items))
	for i, it := range items {
		set[i] = node.Item{Key: it.Key, Value: it.Value, TTL: it.TTL}
	}
	stored, serr, _ := n.storeItems(ctx, memcache.Set, set)
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
