package redisnode

import (
	"context"
	"crypto/sha1"
	"encoding/hex"

	"github.com/redis/go-redis/v9"

	"github.com/shardcache/shardcache/internal/node"
)

// Leases on Redis: one script stores under leases, another releases them;
// each runs atomically on the server, for all the keys of a node at once.
// A value is stored only if the key is as the lease found it: absent, for
// the lease of a miss (a Set or a write's tombstone since means a newer
// value the load must not replace), or holding the value read, for the
// refresh of a value in its window (compared by SHA-1).
var (
	// KEYS: key 1, lease key 1, key 2, lease key 2, ... ARGV: the token,
	// then for each key value i, its TTL in milliseconds (0: no expiry),
	// and the condition: "" for absent, else the SHA-1 (hex) of the value
	// it must hold. It returns 1 for each key stored, 0 for each whose
	// lease was lost or whose key changed since.
	storeLeasedScript = redis.NewScript(`
local stored = {}
for i = 1, #KEYS / 2 do
	local key, lease = KEYS[2*i-1], KEYS[2*i]
	local value, ttl, cond = ARGV[3*i-1], tonumber(ARGV[3*i]), ARGV[3*i+1]
	stored[i] = 0
	if redis.call('GET', lease) == ARGV[1] then
		redis.call('DEL', lease)
		local as = false
		if cond == '' then
			as = redis.call('EXISTS', key) == 0
		elseif redis.call('TYPE', key).ok == 'string' then
			local cur = redis.call('GET', key)
			as = cur and redis.sha1hex(cur) == cond
		end
		if as then
			if ttl > 0 then
				redis.call('SET', key, value, 'PX', ttl)
			else
				redis.call('SET', key, value)
			end
			stored[i] = 1
		end
	end
end
return stored`)
	// KEYS: the lease keys. ARGV: the token.
	releaseLeasesScript = redis.NewScript(`
for _, lease in ipairs(KEYS) do
	if redis.call('GET', lease) == ARGV[1] then redis.call('DEL', lease) end
end
return 0`)
)

// StoreLeased stores each item, the load of a miss, if its lease key
// still holds token and the key is still absent, and deletes the lease
// key.
func (n *Node) StoreLeased(ctx context.Context, items []node.Item, lkeys []string, token string) ([]bool, error) {
	return n.storeLeased(ctx, items, lkeys, token, nil)
}

// storeLeased is StoreLeased with, for each item, the value its key must
// hold (held[i] non-nil: a refresh's), or nil for absent.
func (n *Node) storeLeased(ctx context.Context, items []node.Item, lkeys []string, token string, held [][]byte) ([]bool, error) {
	keys := make([]string, 0, 2*len(items))
	args := make([]any, 0, 1+3*len(items))
	args = append(args, token)
	for i, it := range items {
		keys = append(keys, it.Key, lkeys[i])
		cond := ""
		if held != nil && held[i] != nil {
			sum := sha1.Sum(held[i])
			cond = hex.EncodeToString(sum[:])
		}
		args = append(args, it.Value, ttl(it.TTL).Milliseconds(), cond)
	}
	res, err := storeLeasedScript.Run(live(ctx), n.rdb, keys, args...).Int64Slice()
	if err != nil {
		return nil, mapErr(ctx, err)
	}
	stored := make([]bool, len(items))
	for i := range stored {
		stored[i] = i < len(res) && res[i] == 1
	}
	return stored, nil
}

// ReleaseLeases deletes each lease key of lkeys that still holds token,
// in one script; a lease taken since by another token is left alone.
func (n *Node) ReleaseLeases(ctx context.Context, lkeys []string, token string) error {
	return mapErr(ctx, releaseLeasesScript.Run(live(ctx), n.rdb, lkeys, token).Err())
}
