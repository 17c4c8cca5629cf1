package redisnode

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/shardcache/shardcache/internal/node"
)

// Leases taken by the read (node.LeaseReader): one script reads each key
// and, on a miss (with vivify) or a hit whose PTTL is under the refresh
// window, takes its lease key with SET NX PX, as Leaser's leases are
// taken: the same keys and tokens, so that clients of either kind agree,
// and the stores and releases are Leaser's scripts. The refresh window is
// read from the key's own TTL: nothing is kept beside the value, and a
// plain GET of the key, by any client, reads it unchanged.
var leaseGetScript = redis.NewScript(`
local out = {}
local lease, refresh, vivify = tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4] == '1'
for i = 1, #KEYS / 2 do
	local key, lkey = KEYS[2*i-1], KEYS[2*i]
	local v = redis.call('GET', key)
	local st = 0
	if v then
		st = 1
		if refresh > 0 then
			local pttl = redis.call('PTTL', key)
			if pttl >= 0 and pttl < refresh then
				if redis.call('SET', lkey, ARGV[1], 'NX', 'PX', lease) then st = 2 else st = 3 end
			end
		end
	elseif vivify then
		if redis.call('SET', lkey, ARGV[1], 'NX', 'PX', lease) then st = 4 else st = 5 end
		v = false
	end
	out[2*i-1], out[2*i] = st, v
end
return out`)

// LeaseGet reads keys and takes their leases, in one script.
func (n *Node) LeaseGet(ctx context.Context, keys []string, rd node.LeaseRead) ([]node.LeaseAnswer, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	if len(rd.LeaseKeys) != len(keys) {
		return nil, fmt.Errorf("shardcache/redisnode: %d lease keys for %d keys", len(rd.LeaseKeys), len(keys))
	}
	ks := make([]string, 0, 2*len(keys))
	for i, k := range keys {
		ks = append(ks, k, rd.LeaseKeys[i])
	}
	vivify := "0"
	if rd.Vivify {
		vivify = "1"
	}
	res, err := leaseGetScript.Run(live(ctx), n.rdb, ks, rd.Token, max(ttl(rd.Lease).Milliseconds(), 1),
		ttl(rd.Refresh).Milliseconds(), vivify).Slice()
	if err != nil {
		return nil, mapErr(ctx, err)
	}
	if len(res) != 2*len(keys) {
		return nil, fmt.Errorf("shardcache/redisnode: lease read: %d answers for %d keys", len(res)/2, len(keys))
	}
	ans := make([]node.LeaseAnswer, len(keys))
	for i := range ans {
		st, _ := res[2*i].(int64)
		a := &ans[i]
		if s, ok := res[2*i+1].(string); ok {
			a.Value, a.Found = []byte(s), true
		}
		switch st {
		case 2:
			a.Stale, a.Won = true, true
		case 3:
			a.Stale, a.Held = true, true
		case 4:
			a.Won = true
		case 5:
			a.Held = true
		}
	}
	return ans, nil
}

// LeaseStore stores each item whose lease is won if its lease key still
// holds the token and the key is as the lease found it: absent for a
// miss's, the value read for a refresh's (StoreLeased's script).
func (n *Node) LeaseStore(ctx context.Context, items []node.Item, leases []node.LeaseAnswer, rd node.LeaseRead) ([]bool, error) {
	var its []node.Item
	var lkeys []string
	var held [][]byte
	var idx []int
	for i := range items {
		if leases[i].Won {
			its, lkeys, idx = append(its, items[i]), append(lkeys, rd.LeaseKeys[i]), append(idx, i)
			var v []byte
			if leases[i].Found {
				v = leases[i].Value
				if v == nil {
					v = []byte{}
				}
			}
			held = append(held, v)
		}
	}
	stored := make([]bool, len(items))
	if len(its) == 0 {
		return stored, nil
	}
	got, err := n.storeLeased(ctx, its, lkeys, rd.Token, held)
	for j, s := range got {
		stored[idx[j]] = s
	}
	return stored, err
}

// LeaseRelease deletes the lease keys of the leases won that hold the
// token.
func (n *Node) LeaseRelease(ctx context.Context, keys []string, leases []node.LeaseAnswer, rd node.LeaseRead) error {
	var lkeys []string
	for i := range keys {
		if leases[i].Won {
			lkeys = append(lkeys, rd.LeaseKeys[i])
		}
	}
	if len(lkeys) == 0 {
		return nil
	}
	return n.ReleaseLeases(ctx, lkeys, rd.Token)
}
