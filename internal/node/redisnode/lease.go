package redisnode

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/shardcache/shardcache/internal/node"
)

// Leases on Redis: one script stores under leases, another releases them;
// each runs atomically on the server, for all the keys of a node at once.
var (
	// KEYS: key 1, lease key 1, key 2, lease key 2, ... ARGV: the token,
	// then value i and its TTL in milliseconds (0: no expiry) for each key.
	// It returns 1 for each key stored, 0 for each whose lease was lost.
	storeLeasedScript = redis.NewScript(`
local stored = {}
for i = 1, #KEYS / 2 do
	local key, lease = KEYS[2*i-1], KEYS[2*i]
	local value, ttl = ARGV[2*i], tonumber(ARGV[2*i+1])
	if redis.call('GET', lease) == ARGV[1] then
		redis.call('DEL', lease)
		if ttl > 0 then
			redis.call('SET', key, value, 'PX', ttl)
		else
			redis.call('SET', key, value)
		end
		stored[i] = 1
	else
		stored[i] = 0
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

func (n *Node) StoreLeased(ctx context.Context, items []node.Item, lkeys []string, token string) ([]bool, error) {
	keys := make([]string, 0, 2*len(items))
	args := make([]any, 0, 1+2*len(items))
	args = append(args, token)
	for i, it := range items {
		keys = append(keys, it.Key, lkeys[i])
		args = append(args, it.Value, ttl(it.TTL).Milliseconds())
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

func (n *Node) ReleaseLeases(ctx context.Context, lkeys []string, token string) error {
	return mapErr(ctx, releaseLeasesScript.Run(live(ctx), n.rdb, lkeys, token).Err())
}
